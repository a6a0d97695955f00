"""Translating a paragraph ACROSS its inline formatting: each sentence is translated once, as plain text, and each
formatting span is put back on the target words aligned to its source words.

The data model is format-free, so that HTML and documents (nmt.translation.documents) share it. A paragraph is a
sequence of `Run`s: text with a `path`, the formatting containers it sits in, outermost first (opaque handles: an HTML
element, a docx run's properties; equal handles in consecutive runs are the same container, so a handle must cover
consecutive runs), or an `atom`: something kept as it is and never sent to the model (code, a mention, an image).

    runs -> sentences (split over the joined text; a run cut at a sentence boundary) -> each sentence's text,
    translated once -> `Aligned` (the translation, word scores and links [target words, source words], from
    nmt.translation.documents.paragraphs) -> `Paragraph.render` -> output `Piece`s in target order; the caller writes
    the markup.

Words are whitespace-separated tokens on both sides; a source word belongs to the run holding most of its
characters. Placement, top-down over the tree of containers of a sentence:
- A container takes the largest contiguous block of the target words aligned to its source words (Aligned.links,
  nmt.translation.documents.paragraphs's symmetrized alignment: a target word may align to none; without links, each
  target word to its best-scoring source word). Non-contiguous aligned words: the largest block, not the covering range
  (a covering range swallows every word between, e.g. a whole verb bracket; splitting would duplicate the tag, two
  links for one). Ties: the first block. Children are placed within their parent's block.
- A container continued from (into) the neighbouring sentence reaches the start (end) of its sentence, so that
  it stays one element across the sentences.
- A container with source words but no aligned target word left takes the free target word that attends most to
  its words (the alignment's other direction), or with no attention to them at all the free word aligned nearest to
  them: a link never vanishes. With no free word left only its atoms are kept, at its place: never its source text.
- A word split across containers ("U" of "Using" in a bookmark, <b>r</b>ed) is one word, owned by the innermost
  container holding a letter of it within the one holding most of it; a container left with no word (a fragment,
  a final "." in a run of its own) writes no text: its text is in the translation already.
- Atoms and containers without words (whitespace, an image) are anchored after the target words of the unit
  before them (or before those of the unit after them), with the whitespace they had around them; units anchored
  at one place that had text between them in the source are written apart, adjacent ones stay adjacent.
- An atom seen as whitespace (Run.space: a tab, a line break) is a space in the text sent, so the words around it
  stay two words; it is written in place of that space.
- Punctuation glued to a word stays outside a container whose source text did not have it ("<b>seven</b>!").
- Punctuation written against an atom is the atom's, and atoms with only separators between them are one
  (nmt.translation.documents.atoms: HTML and Markdown glue their tokens; Office and ODT give `groups`, and such an
  atom is written back as the source slices it is made of).
A sentence whose translation equals its text is written from its source, unchanged."""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from nmt import workbudget
from nmt.translation.documents.atoms import glue_runs
from nmt.translation.documents.parts import WORD, Aligned, Item, Node, Path, Piece, Run, Sentence  # noqa: F401  (Path: for the formats)
from nmt.translation.documents.place import Placement
from nmt.translation.documents.sentences import sentence_spans

_NON_SPACE = re.compile(r"\S")
_SPACES = re.compile(r"[ \t\n\r\f]+")  # collapsed for the model; U+00A0 is meant and kept


@dataclass
class _Source:
    """What a sentence's tree is built from, when its translation is placed (not before: a tree per sentence of a
    deeply nested paragraph is depth x depth path elements, too many to hold for every sentence at once)."""

    text: str
    items: list[Item]
    span: tuple[int, int]
    before: Item | None
    after: Item | None


class Paragraph:
    """A paragraph's runs cut into sentences: `texts` are what to translate; `render` puts translations back.
    Linear in runs, items and sentences; charges the work budget in force (nmt.workbudget): the paragraph, its runs,
    its sentences and its nesting depth."""

    def __init__(self, runs: Sequence[Run], translatable: Callable[[str], bool] = lambda text: True,
                 split: Callable[[str], list[tuple[int, int]]] = sentence_spans,
                 groups: Sequence[Hashable] | None = None):
        """`groups`: each run's group for nmt.translation.documents.atoms.glue_runs (the separators written against
        an atom kept with it); None: the runs as given (HTML and Markdown glue their own)."""
        budget = workbudget.current()
        self.runs = list(runs)
        budget.charge("paragraphs")
        budget.charge("runs", len(self.runs))
        budget.nest(max((len(run.path) for run in self.runs), default=0))
        work, self._slices = glue_runs(self.runs, groups) if groups is not None else (self.runs, None)
        starts, at = [], 0
        for run in work:
            starts.append(at)
            at += len(run.text) if not run.atom else int(run.space)
        # an atom seen as whitespace (a break, a tab) is a space between the words around it, so they stay two words
        self._joined = joined = "".join(run.text if not run.atom else " " * run.space for run in work)
        self._spaces = frozenset(start for run, start in zip(work, starts) if run.atom and run.space)
        spans = split(joined)
        items = _items(work, starts, sorted({c for span in spans for c in span}))
        ats = [it.at for it in items]
        self._groups: list[tuple[int, list[Item]]] = []  # (sentence index or -1, its items), in order
        self._sentences: list[_Source] = []
        done = 0  # items before this one are in a group
        for a, b in spans:
            budget.tick()
            first, last = bisect.bisect_left(ats, a), bisect.bisect_left(ats, b) - 1
            while first <= last and items[first].atom and items[first].at == a:  # an atom at the start is before it
                first += 1
            text = _SPACES.sub(" ", joined[a:b])
            if first > last or not translatable(text):
                continue
            budget.charge("sentences")
            around = items[first - 1] if first else None, items[last + 1] if last + 1 < len(items) else None
            self._sentences.append(_Source(text, items[first:last + 1], (a, b), *around))
            self._groups += [(-1, items[done:first]), (len(self._sentences) - 1, items[first:last + 1])]
            done = last + 1
        self._groups.append((-1, items[done:]))
        self.texts = [s.text for s in self._sentences]

    def slices(self) -> list[tuple[int, int, int]]:
        """(run, start, end) of every source slice a rendering may copy."""
        return [p.source for _, group in self._groups for it in group for p in self._copy(it)]  # type: ignore[misc]

    def render(self, translations: Sequence[Aligned | str]) -> list[Piece]:
        """The paragraph with texts[i] translated as translations[i] (a plain string: a monotone alignment)."""
        if len(translations) != len(self.texts):
            raise ValueError(f"{len(translations)} translations for {len(self.texts)} texts")
        budget = workbudget.current()
        out: list[Piece] = []
        for index, group in self._groups:
            budget.tick()
            t = translations[index] if index >= 0 else None
            t = Aligned(t) if isinstance(t, str) else t
            if t is None or t.text == self._sentences[index].text:
                out += [piece for it in group for piece in self._copy(it)]
            else:
                out += Placement(_sentence(self._sentences[index], self._joined, self._spaces), t,
                                 self._copy).pieces()
        return out

    def _copy(self, it: Item) -> list[Piece]:
        """An item as the source slices it is (an atom glued with its separators: several, each with its run's
        path)."""
        if self._slices is None:
            return [Piece(self.runs[it.run].text[it.start:it.end], it.path, (it.run, it.start, it.end))]
        parts = self._slices[it.run]
        if not it.atom:
            (k, offset, _), = parts
            parts = [(k, offset + it.start, offset + it.end)]
        return [Piece(self.runs[k].text[a:b], it.path if not it.atom else self.runs[k].path, (k, a, b))
                for k, a, b in parts]


def _items(runs: list[Run], starts: list[int], cuts: list[int]) -> list[Item]:
    """The runs as items, text runs cut at every sentence boundary (`cuts`, sorted)."""
    items = []
    for k, (run, start) in enumerate(zip(runs, starts)):
        if run.atom:
            items.append(Item(k, 0, len(run.text), run.path, True, start))
            continue
        inner = cuts[bisect.bisect_right(cuts, start):bisect.bisect_left(cuts, start + len(run.text))]
        bounds = [0] + [c - start for c in inner] + [len(run.text)]
        items += [Item(k, a, b, run.path, False, start + a) for a, b in zip(bounds, bounds[1:]) if b > a]
    return items


def _owners(items: list[Item], words: list[tuple[int, int]], joined: str) -> list[int]:
    """For each word, the item holding most of its characters (the first of equals), unless a letter of it is in a
    container within that item's ("U" of "Using" in a bookmark, <b>r</b>ed): then the deepest such item, so that the
    word is one word for translation and the inner container lands on its target word, never left as a fragment.
    One pass over both, as the items overlapping a word are consecutive and every word overlaps a text item."""
    owners, k = [], 0
    for a, b in words:
        while k < len(items) and (items[k].atom or items[k].at + items[k].end - items[k].start <= a):
            k += 1
        best, most, j, overlapping = k, 0, k, []
        while j < len(items) and items[j].at < b:
            it = items[j]
            start, end = max(a, it.at), min(b, it.at + it.end - it.start)
            overlap = 0 if it.atom else end - start
            if overlap > most:
                best, most = j, overlap
            if overlap > 0 and any(c.isalnum() for c in joined[start:end]):
                overlapping.append(j)
            j += 1
        outer = items[best].path
        inner = [i for i in overlapping if len(items[i].path) > len(outer) and items[i].path[:len(outer)] == outer]
        owners.append(max(inner, key=lambda i: len(items[i].path)) if inner else best)  # the first deepest
    return owners


def _sentence(source: _Source, joined: str, spaces: frozenset[int] = frozenset()) -> Sentence:
    """A sentence's tree of containers, its words given to the items holding most of their characters; `spaces`:
    where an atom seen as whitespace is in the joined text (its own space, not one around it)."""
    items, (a, b) = source.items, source.span
    words = [(m.start(), m.end()) for m in WORD.finditer(joined, a, b)]
    owners = _owners(items, words, joined)
    first_word = [0] * (len(items) + 1)  # the words of item k: first_word[k] up to first_word[k + 1]
    for owner in owners:
        first_word[owner + 1] += 1
    for k in range(len(items)):
        first_word[k + 1] += first_word[k]
    root = Node(())
    nodes, stack, starts = {(): root}, [root], [0]

    def close(end: int) -> None:
        node = stack.pop()
        begin = starts.pop()
        node.items, node.words = range(begin, end), range(first_word[begin], first_word[end])

    for index, it in enumerate(items):
        workbudget.current().tick()
        while len(stack) > 1 and it.path[:len(stack[-1].path)] != stack[-1].path:
            close(index)
        while len(stack[-1].path) < len(it.path):
            child = Node(it.path[:len(stack[-1].path) + 1], stack[-1])
            stack[-1].children.append(child)
            stack[-1].units.append(("node", child))
            nodes[child.path] = child
            stack.append(child)
            starts.append(index)
        owned = range(first_word[index], first_word[index + 1])
        stack[-1].units += [("atom", index)] if it.atom else [("word", i) for i in owned]
    while stack:
        close(len(items))
    for node in nodes.values():
        _edges(node, items, joined, source.before, source.after)
    around = {i: _spaced(joined, it.at, it.at + (it.at in spaces)) for i, it in enumerate(items) if it.atom}
    glued_after = frozenset(i for i, it in enumerate(items) if it.atom and joined[it.at:it.at + 1].isalnum())
    seen_as_space = frozenset(i for i, it in enumerate(items) if it.atom and it.at in spaces)
    return Sentence(source.text, items, len(words), root, nodes, around, glued_after, seen_as_space)


def _spaced(joined: str, start: int, end: int) -> tuple[bool, bool]:
    """Whether whitespace was just before `start` and just after `end` in the joined text."""
    return start > 0 and joined[start - 1].isspace(), end < len(joined) and joined[end].isspace()


def _edges(node: Node, items: list[Item], joined: str, before: Item | None, after: Item | None) -> None:
    """Whether a container continues beyond the sentence, whether its text starts/ends with a word character
    (then glued punctuation is left outside), and whether whitespace was around it. Its text is a slice of the
    joined text (atoms have none): its first and last non-space characters are found without copying it."""
    d = len(node.path)
    node.open_start = bool(d) and before is not None and before.path[:d] == node.path
    node.open_end = bool(d) and after is not None and after.path[:d] == node.path
    first, last = items[node.items[0]], items[node.items[-1]]
    end = last.at + (0 if last.atom else last.end - last.start)
    head = _NON_SPACE.search(joined, first.at, end)
    tail = end - 1
    while head is not None and joined[tail].isspace():
        tail -= 1
    node.peel_start = head is not None and head.group().isalnum() and not node.open_start
    node.peel_end = head is not None and joined[tail].isalnum() and not node.open_end
    node.space_before, node.space_after = _spaced(joined, first.at, end)
    node.fragment = not node.words and head is not None  # its text is part of a word another container holds
