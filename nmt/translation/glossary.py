"""Terminology: a glossary of fixed translations that the output obeys (`--glossary terms.tsv`).

The file: UTF-8, one term per line, `source<TAB>target`; an empty target means "do not translate": the source's own
words appear in the output as they are written in the source. Blank lines and lines starting with `#` are skipped.

Matching, the stated rules:
- a term matches whole words of the source, never inside a longer word, and case-insensitively ("Dog" at the start
  of a sentence matches "dog"); a space inside a term matches any run of whitespace. Where a term starts or ends in
  a script without spaces between words (Chinese, Japanese, Thai; Korean, whose particles join the word), that edge
  needs no word boundary: "车" matches in "红色的车";
- inflected forms are not guessed: list each form you need ("dog", "dogs"). A stemmer would force a singular target
  onto a plural source, and the model cannot inflect a word it is told to copy;
- overlapping matches: the longest term wins (then the first);
- the output holds the target as written, its first letter may be upper case (the start of a sentence). A term is
  obeyed when one of those forms appears as whole words in the translation.

What a glossary costs (nmt.translation.translator): a line without terms is translated exactly as without a glossary; a
line whose translation already has every target is kept as it is; the others are searched again by constrained beam
search (nmt.search.constrained), in which the model writes the targets where it finds them most likely."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from nmt.errors import NmtError
from nmt.io import read_lines
from nmt.langcodes import unspaced

MAX_TERM_CHARS = 200


@dataclass(frozen=True)
class Term:
    source: str
    target: str  # "" = do not translate


@dataclass(frozen=True)
class Match:
    """A term found in a source line: `surface` is the source text it matched, at [start, end); `forms` what the
    output may hold."""

    term: Term
    surface: str
    forms: tuple[str, ...]
    start: int = 0
    end: int = 0


@dataclass(frozen=True)
class Glossary:
    """Terms, hashable (a serve batch is keyed by it); `find` and `obeyed` are the matching rules above."""

    terms: tuple[Term, ...] = ()
    _pattern: re.Pattern[str] | None = field(default=None, compare=False, repr=False)
    _by_group: tuple[Term, ...] = field(default=(), compare=False, repr=False)  # the pattern's groups' terms

    def __post_init__(self) -> None:
        if self.terms:
            longest_first = tuple(sorted(self.terms, key=lambda t: -len(fold(t.source))))
            # one group per term, so a match names its term by position, never by a key its surface might not give
            # back ("İstanbul" matched by "istanbul", "STRASSE" by "straße")
            alternatives = "|".join(f"({_bounded(fold(t.source))})" for t in longest_first)
            object.__setattr__(self, "_pattern", re.compile(alternatives))
            object.__setattr__(self, "_by_group", longest_first)

    def __bool__(self) -> bool:
        return bool(self.terms)

    def find(self, text: str) -> list[Match]:
        """The terms in `text`, in source order, each once per occurrence."""
        if self._pattern is None:
            return []
        folded, where = folded_with_offsets(text)
        found = []
        for m in self._pattern.finditer(folded):
            term = self._by_group[m.lastindex - 1]
            start, end = where[m.start()], where[m.end() - 1] + 1
            surface = text[start:end]
            found.append(Match(term, surface, _forms(term.target or surface), start, end))
        return found

    def merged(self, other: Glossary | None) -> Glossary:
        """These terms with `other`'s on top (a request's glossary over the server's)."""
        if not other:
            return self
        mine = {_key(t.source): t for t in self.terms}
        mine.update({_key(t.source): t for t in other.terms})
        return Glossary(tuple(mine.values()))


def obeyed(text: str, match: Match) -> bool:
    """Whether the translation `text` holds one of the match's forms as whole words."""
    return any(re.search(_bounded(form), text) for form in match.forms)


def occurrences(text: str, match: Match) -> int:
    """How often the translation `text` holds the match's forms as whole words."""
    return sum(len(re.findall(_bounded(form), text)) for form in match.forms)


def held(text: str, matches: list[Match]) -> bool:
    """Whether the translation `text` holds each term as often as the source line does (its `matches`)."""
    wanted = Counter(m.term for m in matches)
    return all(occurrences(text, m) >= wanted[m.term] for m in matches)


def ends_word(form: str) -> bool:
    """Whether the output must end a word where `form` ends ("Hund", not the "Hund" of "Hunde"): not in scripts
    without spaces."""
    return bool(form) and not unspaced(form[-1])


def from_pairs(pairs: Iterable[tuple[str, str]] | Mapping[str, str], where: str = "glossary term",
               numbers: list[int] | None = None) -> Glossary:
    """A glossary from (source, target) pairs; a one-line NmtError ("{where} {number}: ...", numbers: the pairs'
    line numbers, else 1, 2, ...) for an empty or over-long term or a source given twice with different targets."""
    items = list(pairs.items() if isinstance(pairs, Mapping) else pairs)
    terms: dict[str, Term] = {}
    for n, (source, target) in zip(numbers or range(1, len(items) + 1), items):
        source, target = " ".join(str(source).split()), " ".join(str(target).split())
        if not source:
            raise NmtError(f"{where} {n}: the source term is empty")
        if len(source) > MAX_TERM_CHARS or len(target) > MAX_TERM_CHARS:
            raise NmtError(f"{where} {n}: over {MAX_TERM_CHARS} characters")
        old = terms.get(_key(source))
        if old is not None and old.target != target:
            raise NmtError(f"{where} {n}: '{source}' is already given as '{old.target}'")
        terms[_key(source)] = Term(source, target)
    return Glossary(tuple(terms.values()))


def load(path: Path | str) -> Glossary:
    """A glossary file (see the module docstring); one-line errors name the file and line."""
    path = Path(path)
    try:
        lines = read_lines(path)
    except NmtError as e:
        raise NmtError(f"glossary {e}") from None
    pairs, numbers = [], []
    for n, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if "\t" not in line:
            raise NmtError(f"glossary {path} line {n}: no TAB between the source term and its target")
        source, target = line.split("\t", 1)
        if "\t" in target:
            raise NmtError(f"glossary {path} line {n}: more than one TAB (source<TAB>target)")
        pairs.append((source, target))
        numbers.append(n)
    return from_pairs(pairs, f"glossary {path} line", numbers)


def _key(text: str) -> str:
    return " ".join(fold(text).split())


def fold(text: str) -> str:
    """`text` for matching in any case, in every script: full case folding (German "ß" = "ss", Greek final "ς" =
    "σ"), and Turkish dotted "İ" and dotless "ı" both as "i" (casefold gives "i" + a combining dot, and keeps "ı")."""
    return folded_with_offsets(text)[0]


def folded_with_offsets(text: str) -> tuple[str, list[int]]:
    """fold(text) and, for each of its characters, the index of the character of `text` it comes from."""
    if text.isascii():
        return text.lower(), list(range(len(text)))
    out: list[str] = []
    where: list[int] = []
    for i, ch in enumerate(text):
        f = "i" if ch == "\u0131" else ch.casefold()
        if f.endswith("\u0307") and f[:1] == "i":
            f = "i"
        out.append(f)
        where.extend([i] * len(f))
    return "".join(out), where


def _bounded(text: str) -> str:
    """`text` as a regex of whole words (any whitespace between them), with a word boundary at each edge whose
    character is of a spaced script."""
    core = r"\s+".join(re.escape(w) for w in text.split())  # `text` is folded: the source is searched folded
    before = "" if unspaced(text[0]) else r"(?<!\w)"
    after = "" if unspaced(text[-1]) else r"(?!\w)"
    return f"(?:{before}{core}{after})"


def _forms(text: str) -> tuple[str, ...]:
    """The target as written and with an upper-case first letter (a sentence's start)."""
    capital = text[:1].upper() + text[1:]
    return (text,) if capital == text else (text, capital)
