"""The separators of atoms (issue 46): what a paragraph keeps as written (code, a formula, a mention, an image) takes
with it the punctuation written against it, and atoms with only spaces and punctuation between them become one
atom. The model never sees them, so nothing it does can glue "<code>a</code>, <code>b</code>" into "ab" or move the
comma of "`Applications`, then" away from its code span: those bytes are layout, written back as they were.

Shared by the HTML path (nmt.translation.documents.html_inline: tokens) and Markdown (nmt.translation.documents.md:
runs), each giving its pieces as `Bit`s: only a "text" bit next to an "atom" bit of the same `group` (an HTML
paragraph's tags are bits of their own kind; a Markdown run's group is its formatting path) is glued. Office and ODT
paragraphs (whose atoms are elements among text runs: a footnote reference, a drawing, a slide number, an ODT field)
give their runs and groups to nmt.translation.documents.inline.Paragraph, which glues them with `glue_runs`: an atom
with its separators is one atom there, written back as the source slices it is made of. A sentence end
(".", "!", "?"... then a space) is never taken: it still cuts the sentences, and the model still sees it."""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from nmt.translation.documents.parts import Run

Slices = list[tuple[int, int, int]]  # (run, start, end) of the runs given

# An opening bracket or quote written against the atom's start (after a space or at the text's start); a closing
# one, a comma, colon or semicolon against its end (up to a space, a sentence end or the text's end).
_OPENING = re.compile(r"(?:^|(?<=\s))[(\[{«“‘„'\"]+$")
_CLOSING = re.compile(r"^[)\]}»”’'\",;:]+(?=\s|$|[.!?…])")
_ENDS = re.compile(r"[.!?…؟।][\"'”’»)\]]*\s|[。！？]")  # a sentence end, as nmt.translation.documents.sentences has it


@dataclass(frozen=True)
class Bit:
    """A piece of a paragraph's source: `kind` "atom", "text" or another (a tag: never glued across); `raw` its
    source bytes, `text` what they read as (entities decoded, escapes removed)."""

    kind: str
    raw: str
    text: str
    group: Hashable = None


@dataclass
class _Atom:
    """An atom being glued: the bits it is made of, joined once at the end (so that a long chain of atoms and
    separators costs its length, not its length squared)."""

    group: Hashable
    parts: list[Bit]
    kind = "atom"


def glue_separators(bits: list[Bit]) -> list[Bit]:
    """`bits` with each atom's separators made part of it (see the module docstring); the raw text is unchanged
    when joined."""
    out: list[Bit | _Atom] = []
    for k, bit in enumerate(bits):
        previous = out[-1] if out and out[-1].group == bit.group else None
        following = bits[k + 1] if k + 1 < len(bits) and bits[k + 1].group == bit.group else None
        if isinstance(previous, _Atom) and (bit.kind == "atom" or bit.kind == "text" and following is not None
                                            and following.kind == "atom" and _separator(bit.text)):
            previous.parts.append(bit)
            continue
        if bit.kind == "atom":
            out.append(_leading(out, previous, bit))
            continue
        if bit.kind == "text" and isinstance(previous, _Atom):
            tail = _CLOSING.match(bit.text)
            if tail and bit.raw.startswith(tail.group()):
                n = len(tail.group())
                previous.parts.append(Bit("text", bit.raw[:n], bit.text[:n], bit.group))
                if n == len(bit.text):
                    continue
                bit = Bit("text", bit.raw[n:], bit.text[n:], bit.group)
        out.append(bit)
    return [Bit("atom", "".join(b.raw for b in e.parts), "".join(b.text for b in e.parts), e.group)
            if isinstance(e, _Atom) else e for e in out]


def _leading(out: list[Bit | _Atom], previous: Bit | _Atom | None, bit: Bit) -> _Atom:
    """An atom starting, with the opening bracket or quote written against it taken from the text before it (the
    end of `out`)."""
    atom = _Atom(bit.group, [bit])
    if not isinstance(previous, Bit) or previous.kind != "text":
        return atom
    lead = _OPENING.search(previous.text)
    if lead and previous.raw.endswith(lead.group()):
        n = len(lead.group())
        out[-1:] = [Bit("text", previous.raw[:-n], previous.text[:-n], bit.group)] if n < len(previous.text) else []
        atom.parts.insert(0, Bit("text", lead.group(), lead.group(), bit.group))
    return atom


def _separator(text: str) -> bool:
    """Whether text between two atoms is only spaces and punctuation that ends no sentence (a sentence ends with
    its punctuation then a space, as nmt.translation.documents.sentences splits: "`$`...`$`" is one atom)."""
    return not any(c.isalnum() for c in text) and not _ENDS.search(text)


def glue_runs(runs: Sequence[Run], groups: Sequence[Hashable]) -> tuple[list[Run], list[Slices]]:
    """`runs` with each atom's separators made part of it (the module's rule), for formats whose runs are elements:
    `groups[k]` is run k's group (text and an atom glue only within one: a format's containers other than formatting,
    a link, an insertion), None for an atom that takes no separators (one a reader does not see, a tab). Returns the
    new runs and, for each, the slices of `runs` it is made of (an atom with its separators: several)."""
    pieces: list[tuple[str, list[str], Hashable]] = []  # consecutive text runs of a group: one bit, joined once
    for run, group in zip(runs, groups, strict=True):
        kind = "text" if not run.atom else "atom" if group is not None else "other"
        if kind == "text" and pieces and pieces[-1][0] == "text" and pieces[-1][2] == group:
            pieces[-1][1].append(run.text)
        else:
            pieces.append((kind, [run.text], group if kind != "other" else object()))
    bits = [Bit(kind, "".join(texts), "".join(texts), group) for kind, texts, group in pieces]
    ends, at = [], 0  # each run's end in the joined raw text
    for run in runs:
        at += len(run.text)
        ends.append(at)
    out: list[Run] = []
    slices: list[Slices] = []
    k, at = 0, 0  # the run holding offset `at`
    for bit in glue_separators(bits):
        parts: Slices = []
        stop = at + len(bit.raw)
        while at < stop:
            while ends[k] <= at:
                k += 1
            start = at - (ends[k] - len(runs[k].text))
            end = min(stop, ends[k]) - (ends[k] - len(runs[k].text))
            parts.append((k, start, end))
            at += end - start
        if bit.kind == "text":
            out += [Run(runs[r].text[a:b], runs[r].path) for r, a, b in parts]
            slices += [[part] for part in parts]
        else:
            atom = next(r for r, _, _ in parts if runs[r].atom)
            out.append(Run("".join(runs[r].text[a:b] for r, a, b in parts), runs[atom].path, True, runs[atom].space))
            slices.append(parts)
    return out, slices
