"""The data of nmt.translation.documents.inline: a paragraph's runs, the output pieces, an aligned translation, and the
per-sentence tree of formatting containers that nmt.translation.documents.inline builds and
nmt.translation.documents.place walks (one
owner for the types both use)."""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np

Path = tuple[Hashable, ...]
WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class Run:
    """Text with the formatting containers it is in (outermost first), or an atom kept as it is."""

    text: str
    path: Path = ()
    atom: bool = False
    space: bool = False  # an atom a reader sees as whitespace (a line break, a tab): the words around it are two words


@dataclass(frozen=True)
class Piece:
    """A piece of the output: text in the containers `path`; `source` = (run, start, end) when it is that slice of
    the source run, copied as it was (for byte-exact markup the caller writes the source's own bytes)."""

    text: str
    path: Path
    source: tuple[int, int, int] | None = None


@dataclass
class Aligned:
    """A translation, its word scores [target words, source words] (None: monotone), its hard alignment `links`
    (bool, same shape; None: each target word to its best-scoring source word)."""

    text: str
    scores: np.ndarray | None = None
    links: np.ndarray | None = None

    @classmethod
    def from_pairs(cls, text: str, n_source: int, pairs: Sequence[tuple[int, int]]) -> Aligned:
        """Hard alignment pairs (source word i, target word j), as Pharaoh's "i-j"."""
        scores = np.zeros((len(text.split()), n_source))
        for i, j in pairs:
            scores[j, i] = 1.0
        return cls(text, scores, scores > 0)


@dataclass
class Item:
    """A sentence's slice [start, end) of run `run` (a whole atom), at offset `at` of the joined text."""

    run: int
    start: int
    end: int
    path: Path
    atom: bool
    at: int


@dataclass(eq=False)
class Node:
    """A formatting container within one sentence (the root: the sentence); `units` in source order: ("word", i),
    ("atom", item index) and ("node", child). Its items and words are consecutive: ranges, not lists (a deep
    container holds the same items as each of its ancestors)."""

    path: Path
    parent: Node | None = None
    units: list[tuple[str, object]] = field(default_factory=list)
    children: list[Node] = field(default_factory=list)
    items: range = range(0)
    words: range = range(0)
    open_start: bool = False
    open_end: bool = False
    peel_start: bool = False
    peel_end: bool = False
    space_before: bool = False
    space_after: bool = False
    fragment: bool = False  # no word of its own but text: a piece of a word, or punctuation glued to one


@dataclass
class Sentence:
    text: str
    items: list[Item]
    words: int
    root: Node
    nodes: dict[Path, Node]
    around: dict[int, tuple[bool, bool]]  # atoms' items: whitespace before, after
    # atoms' items: a letter or digit just after it in the source ("`div`s"): only then may a target word touch it
    glued_after: frozenset[int] = frozenset()
    spaces: frozenset[int] = frozenset()  # atoms' items seen as whitespace (a break, a tab): the space between words
