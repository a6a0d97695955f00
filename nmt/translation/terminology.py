"""Glossary terms put in place: what `Translator.translate_chunk(glossary=...)` does with a line whose translation
misses a term (nmt.translation.glossary says which terms a line holds and when a translation obeys one).

A glossary matters most where the model would not write the target by itself: a brand name, a house term, a word
kept untranslated. Forcing such a term into a search the model was not trained for fails in a known way: the model
translates the source word its own way AND writes the term, then invents text to reach the end ("The small boat is
in the garden." with small -> winzig: "Das kleine Boot ist im Garten. winzig Euro ist im Garten."). So each such
line gets two candidates and a rule chooses:

- replaced: the line's translation with, for each missed term, the target words aligned to its source words (the
  largest block of them, nmt.translation.alignment) replaced by the term. Always in place, the rest of the sentence
  unchanged; the words around the term keep the form the model chose for its own word.
- constrained: lexically constrained beam search (nmt.search.constrained) over the line's distinct terms (at most
  MAX_CONSTRAINTS, within SEARCH_SECONDS): the model writes each term where it finds it most likely and may adapt
  the words around it.

A term the source repeats ("a man and a man") is held as often as the source holds it: a repeat is replaced only
where the model translated it like another occurrence of its term (a repeat the model dropped aligns to an unrelated
word, left alone), and a line whose terms are all there but for a repeat gets the replaced candidate alone. The
search writes a term's capitalised form (nmt.translation.glossary) only as the translation's first word.

A candidate is sane when it holds every term (as often as the replaced candidate does), has as many words as the
replaced one give or take LENGTH_TOLERANCE (a line under five words: exactly as many), and holds no more words
sharing a stem with the model's own words for the terms (the words of 4+ letters the replacement removed: "kleine"
for "winzig") than the replaced candidate does. The constrained candidate is taken when it is sane and the model
scores it at least as high as the replaced one (both as the search scores: length-normalized log-probability);
otherwise the replaced one. bench/glossary.py measures the rule on three kinds of terms (drawn from the
references, synonyms the model would not choose, words kept untranslated).

Work per line is bounded: one constraint per distinct term, at most MAX_CONSTRAINTS of them searched (a line with
more gets the replaced candidate alone) and SEARCH_SECONDS of search per line (a normal line takes a fraction of
that: outputs do not depend on the machine's speed). Where the work budget in force has a deadline (nmt.workbudget:
`nmt serve` gives each batch one), lines reached after it get the replaced candidate (one teacher-forced pass)
alone, so a batch of glossary lines cannot hold the model for long."""

from __future__ import annotations

import re
import time
from collections import Counter
from dataclasses import dataclass

import numpy as np
import torch

from nmt.search import Hypothesis, Terms, forced, run
from nmt.translation.alignment import aligned
from nmt.translation.glossary import Match, ends_word, held, obeyed, occurrences
from nmt.workbudget import current as work_budget

MAX_CONSTRAINTS = 8  # distinct terms one line's constrained search carries (its beam grows with each)
SEARCH_SECONDS = 2.0  # constrained search per line
LENGTH_TOLERANCE = 0.2
MIN_STEM = 4  # removed words shorter than this are not looked for again (see `sane`)
_WORD = re.compile(r"\S+")
_EDGE = re.compile(r"^(\W*)(.*?)(\W*)$", re.S)


@dataclass
class Edit:
    """Target words [first, last] of the translation replaced by `form`."""

    first: int
    last: int
    form: str


def distinct(matches: list[Match]) -> list[Match]:
    """One match per term (its first occurrence): a term is one constraint however often the line holds it."""
    seen, out = set(), []
    for m in matches:
        if m.term not in seen:
            seen.add(m.term)
            out.append(m)
    return out


def obey(translator, results: list, glossary, need_attention: bool, decode) -> None:
    """Each result (nmt.translation.translator.Translation) whose hypotheses miss a term gets its terms in place (see
    above); the others stay as they are."""
    deadline = work_budget().deadline
    for r in results:
        matches = glossary.find(r.source) if r.hypotheses else []
        need = needs(translator, r, matches)
        if need is None:
            continue
        kind, replaced = need
        search = kind == "terms" and (deadline is None or time.monotonic() < deadline)
        found = candidates(translator, r, matches, need_attention, decode, search=search, replaced=replaced)
        chosen = found.chosen(distinct(matches), decode.nbest)
        r.hypotheses, r.text = [h for h, _ in chosen], [text for _, text in chosen]


def needs(translator, r, matches: list[Match]) -> tuple[str, tuple[str, list[str]]] | None:
    """What the result `r` needs for its term `matches`, with its replaced candidate (`replace`, computed once):
    "terms" when its best translation misses a term (both candidates); "repeats" when every term is there but a
    repeated one fewer times than in the source, and the model translated a repeat like another occurrence (the
    replaced candidate alone); else None (left as it is)."""
    if not matches or all(held(text, matches) for text in r.text):
        return None
    replaced = replace(translator, r, matches)
    if not all(obeyed(r.text[0], m) for m in matches):
        return "terms", replaced
    return ("repeats", replaced) if replaced[0] != r.text[0] else None


@dataclass
class Candidates:
    """A line's two candidates: the replaced translation (its text, the words it removed, its scored hypothesis)
    and the constrained search's hypotheses with their texts (none when not searched)."""

    replaced_text: str
    removed: list[str]
    replaced: Hypothesis
    searched: list[Hypothesis]
    texts: list[str]

    def chosen(self, terms: list[Match], nbest: int) -> list[tuple[Hypothesis, str]]:
        """The rule above: the line's hypotheses and their texts, the choice first, then the other sane ones (the
        replaced text is kept as written: a term may hold characters the target vocabulary lacks)."""
        good = [(h, text) for h, text in zip(self.searched, self.texts)
                if sane(text, self.replaced_text, self.removed, terms)]
        replaced = (self.replaced, self.replaced_text)
        if good and good[0][0].score >= self.replaced.score:
            return sorted(good + [replaced], key=lambda pair: -pair[0].score)[:nbest]
        return ([replaced] + good)[:nbest]  # the rule's choice first, then by score


def candidates(translator, r, matches: list[Match], need_attention: bool, d, search: bool = True,
               replaced: tuple[str, list[str]] | None = None) -> Candidates:
    """Both candidates for the result `r` (a Translation) and its term `matches` (every occurrence); `search`: run
    the constrained search (else only the replaced candidate, as for a line with over MAX_CONSTRAINTS terms);
    `replaced`: `replace`'s result when `needs` computed it already."""
    src = torch.tensor([r.src_ids + [translator.special.eos]], device=translator.device)
    terms = distinct(matches)
    replaced_text, removed = replaced or replace(translator, r, matches)
    replaced = forced_text(translator, src, replaced_text, need_attention, d)
    searched: list[Hypothesis] = []
    if search and len(terms) <= MAX_CONSTRAINTS:
        searched = constrained(translator, src, terms, need_attention, d)
    texts = translator.tokenizer.decode_tgt([h.tokens for h in searched]) if searched else []
    return Candidates(replaced_text, removed, replaced, searched, texts)


def sane(text: str, replaced_text: str, removed: list[str], terms: list[Match]) -> bool:
    """The rule above: every term held, the replaced candidate's length give or take LENGTH_TOLERANCE, no more
    words that share a stem with a removed word than the replaced candidate has."""
    if not all(obeyed(text, m) and occurrences(text, m) >= occurrences(replaced_text, m) for m in terms):
        return False
    n, m = len(text.split()), len(replaced_text.split())
    if abs(n - m) > LENGTH_TOLERANCE * m:
        return False
    # words under MIN_STEM letters are left out: mostly function words ("bei", "auf") the alignment gave the term
    return all(_stem_count(text, w) <= _stem_count(replaced_text, w) for w in removed if len(w) >= MIN_STEM)


def _stem_count(text: str, word: str) -> int:
    """Words of `text` that share a stem with `word` (a common start of all but its last two letters, at least 3):
    "kleine" ~ "kleiner", "Boot" ~ "Boote"."""
    stem = word.lower()[:max(3, len(word) - 2)]
    return sum(_core(w).lower().startswith(stem) for w in text.split())


def replace(translator, r, matches: list[Match]) -> tuple[str, list[str]]:
    """The best translation with each missed term occurrence's aligned target words replaced by the term (see
    above), and the words it removed (punctuation stripped). An occurrence is missed while the translation holds
    its term fewer times than the source; one aligned to a form of its own term is in place already; a repeated
    one is replaced only where the model translated it like another occurrence of its term (a dropped word's
    alignment points elsewhere)."""
    text = r.text[0]
    need = Counter(m.term for m in matches)
    need.subtract({m.term: occurrences(text, m) for m in matches})
    missed = [m for m in matches if need[m.term] > 0]
    words = _WORD.findall(text)
    if not missed:
        return text, []
    if not words:
        return " ".join(m.forms[0] for m in distinct(missed)), []
    rows_of = _occurrence_rows(translator, r, missed)
    forms = {form for m in matches for form in m.forms}
    kept = {j for j, w in enumerate(words) if _core(w) in forms}  # a term already written stays
    edits, placed = [], Counter()
    for k, m in enumerate(missed):
        if need[m.term] <= 0 or any(_core(words[j]) in m.forms for j in rows_of[k]):
            continue
        rows = [j for j in rows_of[k] if j not in kept]
        others = [rows_of[i] for i, o in enumerate(missed) if o.term == m.term and i != k]
        repeat = placed[m.term] or occurrences(text, m)  # the term is written already: this is a repeat
        if repeat and not _alike([words[j] for j in rows], [words[j] for o in others for j in o]):
            continue
        need[m.term] -= 1
        placed[m.term] += 1
        if rows:
            block = _largest_block(rows)
            edits.append(Edit(block[0], block[-1], m.forms[0]))
        else:  # no alignment at all: at the end, before the final punctuation
            edits.append(Edit(len(words), len(words) - 1, m.forms[0]))
    return apply_edits(words, edits)


def _occurrence_rows(translator, r, missed: list[Match]) -> list[list[int]]:
    """The target words aligned to each occurrence's source words."""
    scores, links = _alignment(translator, r)
    starts = [w.start() for w in _WORD.finditer(r.source)]
    return [_aligned_rows(scores, links, [i for i, a in enumerate(starts) if m.start <= a < m.end]) for m in missed]


def _alike(block: list[str], others: list[str]) -> bool:
    """Whether a word of `block` shares a stem with a word of `others` (of MIN_STEM letters or more)."""
    return any(_stem_count(" ".join(others), _core(w)) for w in block if len(_core(w)) >= MIN_STEM)


def _alignment(translator, r) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Word scores and the hard word alignment of the best translation, from the search's own attention
    (Translator.translate_chunk searches with attention when it has a glossary)."""
    al = aligned(translator.tokenizer, r)
    return al.scores, al.links


def _aligned_rows(scores: np.ndarray | None, links: np.ndarray | None, columns: list[int]) -> list[int]:
    """The target words linked to the source words `columns`; with no link (the symmetrized alignment leaves some
    source words unlinked), the target word that attends most to them, among those linked to no other source word
    first."""
    if scores is None or links is None or not columns or max(columns) >= scores.shape[1]:
        return []
    rows = np.nonzero(links[:, columns].any(axis=1))[0].tolist()
    if rows:
        return rows
    weight = scores[:, columns].sum(axis=1)
    free = np.where(~links.any(axis=1), weight, -1.0)
    if free.max() > 0:
        return [int(free.argmax())]
    return [int(weight.argmax())] if weight.max() > 0 else []


def apply_edits(words: list[str], edits: list[Edit]) -> tuple[str, list[str]]:
    """`words` with the edits made; an edit whose block another term already took becomes an insertion after it,
    and one at the end goes before the final punctuation. Returns the text and the words removed."""
    words, removed, end = list(words), [], -1
    for e in sorted(edits, key=lambda e: (e.first, e.last)):
        if e.first <= e.last and e.first <= end:
            e.first, e.last = end + 1, end
        end = max(end, e.last)
    for e in sorted(edits, key=lambda e: (e.first, e.first <= e.last), reverse=True):
        if e.first > e.last:  # an insertion before word e.first
            if e.first == len(words) and (tail := _EDGE.match(words[-1]).group(3)):
                words[-1] = words[-1][:len(words[-1]) - len(tail)]
                words.append(e.form + tail)
            else:
                words.insert(e.first, e.form)
            continue
        lead, tail = _EDGE.match(words[e.first]).group(1), _EDGE.match(words[e.last]).group(3)
        old = words[e.first:e.last + 1]
        removed += [_core(w) for w in old if _core(w)]
        form = e.form[:1].upper() + e.form[1:] if e.first == 0 and _core(old[0])[:1].isupper() else e.form
        words[e.first:e.last + 1] = [lead + form + tail]
    return " ".join(words), removed


def _core(word: str) -> str:
    return _EDGE.match(word).group(2)


def _largest_block(rows: list[int]) -> list[int]:
    """The longest run of consecutive indices (the first of equals)."""
    blocks = np.split(np.array(rows), np.where(np.diff(rows) != 1)[0] + 1)
    return max(blocks, key=len).tolist()


def constrained(translator, src: torch.Tensor, terms: list[Match], need_attention: bool, d) -> list[Hypothesis]:
    """The constrained search's n-best for src [1, S] with each term (its forms as alternatives) a constraint."""
    sequences, ends, initial = [], [], set()
    for m in terms:  # forms: as written, then capitalised (nmt.translation.glossary): only a sentence's first word
        alternatives = [(seq, k > 0) for k, seq in enumerate(translator.tokenizer.encode_tgt(list(m.forms))) if seq]
        if alternatives:
            initial |= {(len(sequences), a) for a, (_, first) in enumerate(alternatives) if first}
            sequences.append([seq for seq, _ in alternatives])
            ends.append(ends_word(m.forms[0]))
    settings = translator.search_settings(d, beam=max(d.beam, d.nbest), need_attention=need_attention,
                                          deadline=time.monotonic() + SEARCH_SECONDS)
    constraints = Terms(sequences, translator.continues_word, ends, frozenset(initial))
    return run(translator.model, src, settings, translator.special, constraints=constraints)[0]


def forced_text(translator, src: torch.Tensor, text: str, need_attention: bool, d) -> Hypothesis:
    """`text` as the translation of src [1, S], scored (and its attention) as the searches would."""
    tokens = translator.tokenizer.encode_tgt([text])[0]
    limit = getattr(translator.model, "max_positions", None)
    tokens = tokens[:limit - 1] if limit else tokens
    ids = translator.special
    return forced(translator.model, src, tokens, translator.search_settings(d, need_attention=need_attention),
                  bos=ids.bos, eos=ids.eos)
