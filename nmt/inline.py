"""Translating a paragraph ACROSS its inline formatting: each sentence is translated once, as plain text, and each
formatting span is put back on the target words aligned to its source words.

The data model is format-free, so that HTML and documents (nmt.documents) share it. A paragraph is a sequence of
`Run`s: text with a `path`, the formatting containers it sits in, outermost first (opaque handles: an HTML element,
a docx run's properties; equal handles in consecutive runs are the same container, so a handle must cover
consecutive runs), or an `atom`: something kept as it is and never sent to the model (code, a mention, an image).

    runs -> sentences (split over the joined text; a run cut at a sentence boundary) -> each sentence's text,
    translated once -> `Aligned` (the translation, word scores and links [target words, source words], from
    nmt.inline_align) -> `Paragraph.render` -> output `Piece`s in target order; the caller writes the markup.

Words are whitespace-separated tokens on both sides; a source word belongs to the run holding most of its
characters. Placement, top-down over the tree of containers of a sentence:
- A container takes the largest contiguous block of the target words aligned to its source words (Aligned.links,
  nmt.inline_align's symmetrized alignment: a target word may align to none; without links, each target word to
  its best-scoring source word). Non-contiguous aligned words: the largest block, not the covering range (a
  covering range swallows every word between, e.g. a whole verb bracket; splitting would duplicate the tag, two
  links for one). Ties: the first block. Children are placed within their parent's block.
- A container continued from (into) the neighbouring sentence reaches the start (end) of its sentence, so that
  it stays one element across the sentences.
- A container with source words but no aligned target word left takes the free target word that attends most to
  its words (the alignment's other direction): a link never vanishes. With no free word left (or none attending
  to it at all) it is kept as written (source text), at its place.
- Atoms and containers without words (whitespace, an image) are anchored after the target words of the unit
  before them (or before those of the unit after them), with the whitespace they had around them.
- Punctuation glued to a word stays outside a container whose source text did not have it ("<b>seven</b>!").
A sentence whose translation equals its text is written from its source, unchanged."""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np

from nmt.inline_split import sentence_spans

Path = tuple[Hashable, ...]
_WORD = re.compile(r"\S+")
_SPACES = re.compile(r"[ \t\n\r\f]+")  # collapsed for the model; U+00A0 is meant and kept


@dataclass(frozen=True)
class Run:
    """Text with the formatting containers it is in (outermost first), or an atom kept as it is."""

    text: str
    path: Path = ()
    atom: bool = False


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
class _Item:
    """A sentence's slice [start, end) of run `run` (a whole atom), at offset `at` of the joined text."""

    run: int
    start: int
    end: int
    path: Path
    atom: bool
    at: int


@dataclass(eq=False)
class _Node:
    """A formatting container within one sentence (the root: the sentence); `units` in source order: ("word", i),
    ("atom", item index) and ("node", child)."""

    path: Path
    units: list[tuple[str, object]] = field(default_factory=list)
    children: list[_Node] = field(default_factory=list)
    items: list[int] = field(default_factory=list)
    words: set[int] = field(default_factory=set)
    open_start: bool = False
    open_end: bool = False
    peel_start: bool = False
    peel_end: bool = False
    space_before: bool = False
    space_after: bool = False


@dataclass
class _Sentence:
    text: str
    items: list[_Item]
    words: int
    root: _Node
    nodes: dict[Path, _Node]
    around: dict[int, tuple[bool, bool]]  # atoms' items: whitespace before, after


class Paragraph:
    """A paragraph's runs cut into sentences: `texts` are what to translate; `render` puts translations back."""

    def __init__(self, runs: Sequence[Run], translatable: Callable[[str], bool] = lambda text: True,
                 split: Callable[[str], list[tuple[int, int]]] = sentence_spans):
        self.runs = list(runs)
        joined, starts = "", []
        for run in self.runs:
            starts.append(len(joined))
            joined += "" if run.atom else run.text
        spans = split(joined)
        items = _items(self.runs, starts, sorted({c for span in spans for c in span}))
        self._groups: list[tuple[int, list[_Item]]] = []  # (sentence index or -1, its items), in order
        self._sentences: list[_Sentence] = []
        done = 0  # items before this one are in a group
        for a, b in spans:
            inside = [k for k, it in enumerate(items) if a <= it.at < b and (not it.atom or it.at > a)]
            text = _SPACES.sub(" ", joined[a:b])
            if not inside or not translatable(text):
                continue
            first, last = inside[0], inside[-1]
            around = items[first - 1] if first else None, items[last + 1] if last + 1 < len(items) else None
            self._sentences.append(_sentence(text, items[first:last + 1], joined, (a, b), *around, self.runs))
            self._groups += [(-1, items[done:first]), (len(self._sentences) - 1, items[first:last + 1])]
            done = last + 1
        self._groups.append((-1, items[done:]))
        self.texts = [s.text for s in self._sentences]

    def slices(self) -> list[tuple[int, int, int]]:
        """(run, start, end) of every source slice a rendering may copy."""
        return [(it.run, it.start, it.end) for _, group in self._groups for it in group]

    def render(self, translations: Sequence[Aligned | str]) -> list[Piece]:
        """The paragraph with texts[i] translated as translations[i] (a plain string: a monotone alignment)."""
        if len(translations) != len(self.texts):
            raise ValueError(f"{len(translations)} translations for {len(self.texts)} texts")
        out: list[Piece] = []
        for index, group in self._groups:
            t = translations[index] if index >= 0 else None
            t = Aligned(t) if isinstance(t, str) else t
            if t is None or t.text == self._sentences[index].text:
                out += [self._copy(it) for it in group]
            else:
                out += _Placement(self._sentences[index], t, self._copy).pieces()
        return out

    def _copy(self, it: _Item) -> Piece:
        return Piece(self.runs[it.run].text[it.start:it.end], it.path, (it.run, it.start, it.end))


def _items(runs: list[Run], starts: list[int], cuts: list[int]) -> list[_Item]:
    """The runs as items, text runs cut at every sentence boundary."""
    items = []
    for k, (run, start) in enumerate(zip(runs, starts)):
        if run.atom:
            items.append(_Item(k, 0, len(run.text), run.path, True, start))
            continue
        bounds = [0] + [c - start for c in cuts if start < c < start + len(run.text)] + [len(run.text)]
        items += [_Item(k, a, b, run.path, False, start + a) for a, b in zip(bounds, bounds[1:]) if b > a]
    return items


def _sentence(text: str, items: list[_Item], joined: str, span: tuple[int, int], before: _Item | None,
              after: _Item | None, runs: list[Run]) -> _Sentence:
    """A sentence's tree of containers, its words given to the items holding most of their characters."""
    words = [(m.start(), m.end()) for m in _WORD.finditer(joined, span[0], span[1])]
    owned: dict[int, list[int]] = {}
    for i, (a, b) in enumerate(words):
        overlap = [min(b, it.at + it.end - it.start) - max(a, it.at) if not it.atom else 0 for it in items]
        owned.setdefault(int(np.argmax(overlap)), []).append(i)
    root = _Node(())
    nodes, stack = {(): root}, [root]
    for index, it in enumerate(items):
        while len(stack) > 1 and it.path[:len(stack[-1].path)] != stack[-1].path:
            stack.pop()
        while len(stack[-1].path) < len(it.path):
            child = _Node(it.path[:len(stack[-1].path) + 1])
            stack[-1].children.append(child)
            stack[-1].units.append(("node", child))
            nodes[child.path] = child
            stack.append(child)
        for node in stack:
            node.items.append(index)
            node.words.update(owned.get(index, []))
        stack[-1].units += [("atom", index)] if it.atom else [("word", i) for i in owned.get(index, [])]
    for node in nodes.values():
        _edges(node, items, joined, before, after, runs)
    around = {i: _spaced(joined, it.at, it.at) for i, it in enumerate(items) if it.atom}
    return _Sentence(text, items, len(words), root, nodes, around)


def _spaced(joined: str, start: int, end: int) -> tuple[bool, bool]:
    """Whether whitespace was just before `start` and just after `end` in the joined text."""
    return start > 0 and joined[start - 1].isspace(), end < len(joined) and joined[end].isspace()


def _edges(node: _Node, items: list[_Item], joined: str, before: _Item | None, after: _Item | None,
           runs: list[Run]) -> None:
    """Whether a container continues beyond the sentence, whether its text starts/ends with a word character
    (then glued punctuation is left outside), and whether whitespace was around it."""
    d = len(node.path)
    node.open_start = bool(d) and before is not None and before.path[:d] == node.path
    node.open_end = bool(d) and after is not None and after.path[:d] == node.path
    text = "".join(runs[items[i].run].text[items[i].start:items[i].end] for i in node.items if not items[i].atom)
    stripped = text.strip()
    node.peel_start = bool(stripped) and stripped[0].isalnum() and not node.open_start
    node.peel_end = bool(stripped) and stripped[-1].isalnum() and not node.open_end
    first, last = items[node.items[0]], items[node.items[-1]]
    end = last.at + (0 if last.atom else last.end - last.start)
    node.space_before, node.space_after = _spaced(joined, first.at, end)


class _Placement:
    """One sentence's translation placed: target word intervals for the containers, gaps for what is anchored."""

    def __init__(self, s: _Sentence, t: Aligned, copy: Callable[[_Item], Piece]):
        self.s, self.copy = s, copy
        spans = [(m.start(), m.end()) for m in _WORD.finditer(t.text)]
        self.words = [t.text[a:b] for a, b in spans]
        self.seps = [""] + [t.text[spans[j - 1][1]:spans[j][0]] for j in range(1, len(spans))]
        m, n = len(self.words), s.words
        self.scores = scores = t.scores if t.scores is not None and t.scores.shape == (m, n) else _monotone(m, n)
        links = t.links if t.links is not None and t.links.shape == (m, n) and t.scores is scores else None
        self.links = links if links is not None else np.eye(n, dtype=bool)[scores.argmax(axis=1)] if n else scores > 0
        self.span: dict[_Node, tuple[int, int]] = {s.root: (0, m)}
        self.anchors: dict[_Node, dict[int, list[tuple[str, object]]]] = {}
        self._place(s.root)

    def _place(self, node: _Node) -> None:
        lo, hi = self.span[node]
        taken = np.zeros(hi - lo, dtype=bool)
        order = sorted((c for c in node.children if c.words),
                       key=lambda c: (not (c.open_start or c.open_end), not self._aligned(c, lo, hi, taken)))
        for child in order:
            block = self._block(child, lo, hi, taken) or self._nearest(child, lo, hi, taken)
            if block:
                self.span[child] = block
                taken[block[0] - lo:block[1] - lo] = True
                self._place(child)
        self._anchor(node)

    def _aligned(self, node: _Node, lo: int, hi: int, taken: np.ndarray) -> list[int]:
        return [j for j in range(lo, hi) if not taken[j - lo] and self.links[j, sorted(node.words)].any()]

    def _block(self, node: _Node, lo: int, hi: int, taken: np.ndarray) -> tuple[int, int] | None:
        """The largest run of consecutive free target words aligned to the node's words (to the sentence's edge on
        a side where the node continues)."""
        aligned = self._aligned(node, lo, hi, taken)
        if not aligned:
            return None
        best = max(np.split(np.array(aligned), np.where(np.diff(aligned) != 1)[0] + 1), key=len)  # the first of equals
        a, b = int(best[0]), int(best[-1]) + 1
        while node.open_start and a > lo and not taken[a - 1 - lo]:
            a -= 1
        while node.open_end and b < hi and not taken[b - lo]:
            b += 1
        return a, b

    def _nearest(self, node: _Node, lo: int, hi: int, taken: np.ndarray) -> tuple[int, int] | None:
        """The free target word that attends most to the node's source words (source -> target direction)."""
        free = [j for j in range(lo, hi) if not taken[j - lo]]
        if not free:
            return None
        columns = sorted(node.words)
        j = max(free, key=lambda j: float(self.scores[j, columns].sum()))
        return (j, j + 1) if self.scores[j, columns].sum() > 0 else None  # no evidence at all: keep it as written

    def _anchor(self, node: _Node) -> None:
        """Where each atom and unplaced container goes: after the unit before it, else before the next, in no child."""
        lo, hi = self.span[node]
        units = node.units
        gaps: dict[int, list[tuple[str, object]]] = {}
        for k, unit in enumerate(units):
            if unit[0] == "word" or (unit[0] == "node" and unit[1] in self.span):
                continue
            gap = next((g for u in reversed(units[:k]) if (g := self._edge(node, u, end=True)) is not None), None)
            if gap is None:
                gap = next((g for u in units[k + 1:] if (g := self._edge(node, u, end=False)) is not None), lo)
            for child in node.children:
                a, b = self.span.get(child, (gap, gap))
                gap = b if a < gap < b else gap
            gaps.setdefault(min(max(gap, lo), hi), []).append(unit)
        self.anchors[node] = gaps

    def _edge(self, node: _Node, unit: tuple[str, object], end: bool) -> int | None:
        """Where a unit's target words end (start): a placed child's span, or the largest block aligned to a word."""
        if unit[0] == "node":
            span = self.span.get(unit[1])  # type: ignore[arg-type]
            return None if span is None else span[1] if end else span[0]
        if unit[0] != "word":
            return None
        lo, hi = self.span[node]
        inside = [j for j in range(lo, hi) if self.links[j, unit[1]] and not self._in_child(node, j)]
        if not inside:
            return None
        runs = np.split(np.array(inside), np.where(np.diff(inside) != 1)[0] + 1)
        best = max(runs, key=len)
        return int(best[-1]) + 1 if end else int(best[0])

    def _in_child(self, node: _Node, j: int) -> bool:
        return any(a <= j < b for c in node.children for a, b in [self.span.get(c, (0, 0))])

    def pieces(self) -> list[Piece]:
        return _peel(self._emit(self.s.root), self.s.nodes)

    def _emit(self, node: _Node) -> list[Piece]:
        lo, hi = self.span[node]
        starts = {self.span[c][0]: c for c in node.children if c in self.span}
        out: list[Piece] = []
        j = lo
        while True:
            units = self.anchors[node].get(j, [])
            glued = lo < j < hi and units and not self._around(units[0])[0]  # "car¹ is": the mark before the space
            if lo < j < hi and not glued:
                out.append(Piece(self.seps[j], node.path))
            for unit in units:
                out += self._kept(node, unit, after_word=glued or j == hi > lo, before_word=j < hi and not glued)
            if glued:
                out.append(Piece(self.seps[j], node.path))
            if j >= hi:
                return out
            if j in starts:
                out += self._emit(starts[j])
                j = self.span[starts[j]][1]
            else:
                out.append(Piece(self.words[j], node.path))
                j += 1

    def _kept(self, node: _Node, unit: tuple[str, object], after_word: bool, before_word: bool) -> list[Piece]:
        """An anchored atom or container, copied from the source, with the whitespace it had on the word's side."""
        space_before, space_after = self._around(unit)
        item_indices = [unit[1]] if unit[0] == "atom" else unit[1].items  # type: ignore[union-attr]
        body = [self.copy(self.s.items[i]) for i in item_indices]  # type: ignore[index]
        lead = [Piece(" ", node.path)] if after_word and space_before else []
        tail = [Piece(" ", node.path)] if before_word and space_after else []
        return lead + body + tail


    def _around(self, unit: tuple[str, object]) -> tuple[bool, bool]:
        """Whether an anchored atom or container had whitespace before and after it in the source."""
        return self.s.around[unit[1]] if unit[0] == "atom" else (unit[1].space_before, unit[1].space_after)  # type: ignore


def _monotone(m: int, n: int) -> np.ndarray:
    """Scores without attention: highest on source word j * n / m, falling with distance (nearest words first)."""
    if not m or not n:
        return np.zeros((m, n))
    centres = (np.arange(m) + 0.5) * n / m - 0.5
    return np.exp(-np.abs(centres[:, None] - np.arange(n)[None, :]))


def _peel(pieces: list[Piece], nodes: dict[Path, _Node]) -> list[Piece]:
    """Punctuation glued to a word at a container's edge goes outside it when the container's source had none."""
    out: list[Piece] = []
    for k, p in enumerate(pieces):
        core = p.text.strip("".join(c for c in p.text if not c.isalnum()))  # the word without glued punctuation
        if p.source is not None or not core or core == p.text:
            out.append(p)
            continue
        lead, tail = p.text[:p.text.index(core)], p.text[p.text.index(core) + len(core):]
        before = pieces[k - 1].path if k else ()
        after = pieces[k + 1].path if k + 1 < len(pieces) else ()
        out += [Piece(lead, _outside(p.path, before, nodes, start=True))] if lead else []
        out.append(Piece(core, p.path))
        out += [Piece(tail, _outside(p.path, after, nodes, start=False))] if tail else []
    return out


def _outside(path: Path, neighbour: Path, nodes: dict[Path, _Node], start: bool) -> Path:
    """The path of punctuation at a word's edge: out of the outermost container that opens (closes) at the word
    and that had no punctuation there in the source."""
    common = 0
    while common < min(len(path), len(neighbour)) and path[common] == neighbour[common]:
        common += 1
    for depth in range(common + 1, len(path) + 1):
        node = nodes.get(path[:depth])
        if node is not None and (node.peel_start if start else node.peel_end):
            return path[:depth - 1]
    return path
