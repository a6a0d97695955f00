"""Placing one sentence's translation across its formatting (nmt.translation.documents.inline's rules, see its
docstring): target word intervals for the containers, gaps for what is anchored, then the output pieces. Vectorised over
target words and walked with explicit stacks, not recursion: a container's work is linear in the target words, and a
paragraph nested MAX_NESTING (nmt.workbudget) deep cannot overflow the stack."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nmt import workbudget
from nmt.translation.documents.parts import WORD, Aligned, Item, Node, Path, Piece, Sentence


class Placement:
    """One sentence's translation placed: target word intervals for the containers, gaps for what is anchored.
    `copy`: an item as the source pieces it is."""

    def __init__(self, s: Sentence, t: Aligned, copy: Callable[[Item], list[Piece]]):
        self.s, self.copy = s, copy
        spans = [(m.start(), m.end()) for m in WORD.finditer(t.text)]
        self.words = [t.text[a:b] for a, b in spans]
        self.seps = [""] + [t.text[spans[j - 1][1]:spans[j][0]] for j in range(1, len(spans))]
        m, n = len(self.words), s.words
        self.scores = scores = t.scores if t.scores is not None and t.scores.shape == (m, n) else _monotone(m, n)
        links = t.links if t.links is not None and t.links.shape == (m, n) and t.scores is scores else None
        self.links = links if links is not None else np.eye(n, dtype=bool)[scores.argmax(axis=1)] if n else scores > 0
        self.span: dict[Node, tuple[int, int]] = {s.root: (0, m)}
        self._source_place: np.ndarray | None = None
        self.anchors: dict[Node, dict[int, list[tuple[str, object]]]] = {}
        todo = [s.root]
        while todo:  # a container's children are placed within its block, then each child's, in any order
            node = todo.pop()
            workbudget.current().tick()
            todo += self._place(node)
            self._anchor(node)

    def _rows(self, node: Node) -> np.ndarray:
        """Whether each target word is aligned to one of the node's source words."""
        return self.links[:, node.words.start:node.words.stop].any(axis=1)

    def _place(self, node: Node) -> list[Node]:
        """The blocks of the node's children (within its own); the children placed."""
        lo, hi = self.span[node]
        taken = np.zeros(hi - lo, dtype=bool)
        rows = {c: self._rows(c)[lo:hi] for c in node.children if c.words}
        order = sorted(rows, key=lambda c: (not (c.open_start or c.open_end), not rows[c].any()))
        placed = []
        for child in order:
            block = self._block(child, rows[child], lo, hi, taken) or self._nearest(child, lo, hi, taken)
            if block:
                self.span[child] = block
                taken[block[0] - lo:block[1] - lo] = True
                placed.append(child)
        return placed

    def _block(self, node: Node, rows: np.ndarray, lo: int, hi: int, taken: np.ndarray) -> tuple[int, int] | None:
        """The largest run of consecutive free target words aligned to the node's words (to the sentence's edge on
        a side where the node continues)."""
        best = _largest(np.flatnonzero(rows & ~taken))
        if best is None:
            return None
        a, b = best[0] + lo, best[1] + lo
        while node.open_start and a > lo and not taken[a - 1 - lo]:
            a -= 1
        while node.open_end and b < hi and not taken[b - lo]:
            b += 1
        return a, b

    def _nearest(self, node: Node, lo: int, hi: int, taken: np.ndarray) -> tuple[int, int] | None:
        """The free target word that attends most to the node's source words (source -> target direction); with no
        attention to them at all, the free word aligned nearest to them in the source. None: no free word."""
        if taken.all():
            return None
        sums = self.scores[lo:hi, node.words.start:node.words.stop].sum(axis=1)
        j = int(np.argmax(np.where(taken, -np.inf, sums)))  # the first of equals
        if sums[j] > 0:
            return j + lo, j + lo + 1
        where = self._where()[lo:hi]
        first, last = node.words.start, node.words.stop - 1
        distance = np.maximum(np.maximum(first - where, where - last), 0)
        j = int(np.argmin(np.where(taken, np.inf, distance)))
        return j + lo, j + lo + 1

    def _where(self) -> np.ndarray:
        """Each target word's place in the source: its first linked source word, else its best-scoring one, else
        its relative position (computed once per sentence)."""
        if self._source_place is None:
            links, scores = self.links, self.scores
            m, n = len(self.words), self.s.words
            fallback = (np.arange(m) + 0.5) * n / max(m, 1)
            best = scores.argmax(axis=1) if n else np.zeros(m, dtype=int)
            self._source_place = np.where(links.any(axis=1), links.argmax(axis=1) if n else 0,
                                          np.where(scores.max(axis=1, initial=0) > 0, best, fallback))
        return self._source_place

    def _anchor(self, node: Node) -> None:
        """Where each atom and unplaced container goes: after the unit before it, else before the next, in no child."""
        lo, hi = self.span[node]
        units = node.units
        in_child = np.zeros(hi - lo, dtype=bool)
        pushed: dict[int, int] = {}  # a gap inside a placed child moves to the child's end
        for child in node.children:
            if child in self.span:
                a, b = self.span[child]
                in_child[a - lo:b - lo] = True
                pushed.update((g, b) for g in range(a + 1, b))
        edges = [self._edges(node, unit, in_child) for unit in units]
        before: list[int | None] = []  # the end of the last unit with target words before each unit
        last = None
        for edge in edges:
            before.append(last)
            last = edge[1] if edge is not None else last
        after, following = [None] * len(units), None
        for k in range(len(units) - 1, -1, -1):
            after[k] = following
            following = edges[k][0] if edges[k] is not None else following
        gaps: dict[int, list[tuple[str, object]]] = {}
        for k, unit in enumerate(units):
            if unit[0] == "word" or (unit[0] == "node" and unit[1] in self.span):
                continue
            gap = before[k] if before[k] is not None else after[k] if after[k] is not None else lo
            gap = pushed.get(gap, gap)
            gaps.setdefault(min(max(gap, lo), hi), []).append(unit)
        self.anchors[node] = gaps

    def _edges(self, node: Node, unit: tuple[str, object], in_child: np.ndarray) -> tuple[int, int] | None:
        """Where a unit's target words start and end: a placed child's span, or the largest block aligned to a
        word outside the placed children; None: none."""
        if unit[0] == "node":
            return self.span.get(unit[1])  # type: ignore[arg-type]
        if unit[0] != "word":
            return None
        lo, hi = self.span[node]
        best = _largest(np.flatnonzero(self.links[lo:hi, unit[1]] & ~in_child))
        return None if best is None else (best[0] + lo, best[1] + lo)

    def pieces(self) -> list[Piece]:
        return _peel(self._emit(), self.s.nodes)

    def _emit(self) -> list[Piece]:
        """The pieces in target order: each container's words, separators and anchored units, its placed children
        written where their blocks start (a stack of containers being written, not recursion)."""
        out: list[Piece] = []
        frames = [self._frame(self.s.root)]
        while frames:
            frame = frames[-1]
            node, lo, hi, starts, j = frame
            workbudget.current().tick()
            units = self.anchors[node].get(j, [])
            glued = lo < j < hi and units and not self._around(units[0])[0]  # "car¹ is": the mark before the space
            if lo < j < hi and not glued:
                out.append(Piece(self.seps[j], node.path))
            previous = None
            for k, unit in enumerate(units):  # units adjacent in the source stay so; others stay apart
                alone = (k == 0 or self._apart(units[k - 1], unit),
                         k + 1 == len(units) or self._apart(unit, units[k + 1]))
                kept = self._kept(node, unit, after_word=(glued or j == hi > lo) and alone[0],
                                  before_word=j < hi and not glued and alone[1],
                                  word_after=j < hi and self.words[j][:1].isalnum())
                if kept and previous is not None and self._apart(previous, unit) and not out[-1].text[-1:].isspace():
                    out.append(Piece(" ", node.path))
                out += kept
                previous = unit if kept else previous
            if glued and not (units[-1][0] == "atom" and units[-1][1] in self.s.spaces):  # a break is the space
                out.append(Piece(self.seps[j], node.path))
            if j >= hi:
                frames.pop()
            elif j in starts:
                frame[4] = self.span[starts[j]][1]
                frames.append(self._frame(starts[j]))
            else:
                out.append(Piece(self.words[j], node.path))
                frame[4] = j + 1
        return out

    def _frame(self, node: Node) -> list:
        lo, hi = self.span[node]
        return [node, lo, hi, {self.span[c][0]: c for c in node.children if c in self.span}, lo]

    def _kept(self, node: Node, unit: tuple[str, object], after_word: bool, before_word: bool,
              word_after: bool = False) -> list[Piece]:
        """An anchored atom or container, copied from the source, with the whitespace it had on the word's side. A
        container's text is in the translation already (a fragment of a word another one holds) or has no target
        word left for it (every one taken): only its atoms are copied, never its text in the source language."""
        space_before, space_after = self._around(unit)
        item_indices = [unit[1]] if unit[0] == "atom" else unit[1].items  # type: ignore[union-attr]
        if unit[0] == "node" and (unit[1].words or unit[1].fragment):  # type: ignore[union-attr]
            item_indices = [i for i in item_indices if self.s.items[i].atom]  # type: ignore[index]
            if not item_indices:
                return []
        body = [piece for i in item_indices for piece in self.copy(self.s.items[i])]  # type: ignore[index]
        lead = [Piece(" ", node.path)] if after_word and space_before else []
        # a word after an atom that no word touched in the source ("<code>x</code>." -> "<code>x</code> der") is apart
        apart = space_after or (word_after and self._ends_in_atom(unit))
        tail = [Piece(" ", node.path)] if before_word and apart else []
        return lead + body + tail

    def _ends_in_atom(self, unit: tuple[str, object]) -> bool:
        """Whether the unit is an atom, or a container of atoms only, whose last atom no word touched on its right
        in the source: a target word after it is a word apart."""
        if unit[0] == "node":
            node = unit[1]
            if node.words or not node.items or not all(self.s.items[i].atom for i in node.items):  # type: ignore
                return False
            unit = ("atom", node.items[-1])  # type: ignore[union-attr]
        return unit[1] not in self.s.glued_after

    def _apart(self, first: tuple[str, object], second: tuple[str, object]) -> bool:
        """Whether two units anchored together had source text or whitespace between them (not adjacent)."""
        end = first[1] + 1 if first[0] == "atom" else first[1].items.stop  # type: ignore[union-attr, operator]
        start = second[1] if second[0] == "atom" else second[1].items.start  # type: ignore[union-attr]
        return start != end  # a text item (words, whitespace) was between them

    def _around(self, unit: tuple[str, object]) -> tuple[bool, bool]:
        """Whether an anchored atom or container had whitespace before and after it in the source."""
        return self.s.around[unit[1]] if unit[0] == "atom" else (unit[1].space_before, unit[1].space_after)  # type: ignore


def _largest(indices: np.ndarray) -> tuple[int, int] | None:
    """The largest run of consecutive indices (the first of equals) as [start, end); None when there are none."""
    if not len(indices):
        return None
    breaks = np.flatnonzero(np.diff(indices) != 1) + 1
    starts = np.concatenate(([0], breaks))
    ends = np.concatenate((breaks, [len(indices)]))
    k = int(np.argmax(ends - starts))
    return int(indices[starts[k]]), int(indices[ends[k] - 1]) + 1


def _monotone(m: int, n: int) -> np.ndarray:
    """Scores without attention: highest on source word j * n / m, falling with distance (nearest words first)."""
    if not m or not n:
        return np.zeros((m, n))
    centres = (np.arange(m) + 0.5) * n / m - 0.5
    return np.exp(-np.abs(centres[:, None] - np.arange(n)[None, :]))


def _peel(pieces: list[Piece], nodes: dict[Path, Node]) -> list[Piece]:
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


def _outside(path: Path, neighbour: Path, nodes: dict[Path, Node], start: bool) -> Path:
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
