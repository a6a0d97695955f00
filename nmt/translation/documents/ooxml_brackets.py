"""Brackets among a paragraph's children (nmt.translation.documents.ooxml_paragraph): a complex field's begin,
separate and end runs around its result, and comment and bookmark ranges around what they hold, found as index
pairs. A module of its own: finding well-nested markers among siblings is a question apart from reading and writing
runs, and the paragraph module is at its size limit."""

from __future__ import annotations

from typing import Protocol

from lxml import etree


class Dialect(Protocol):
    """What is read of nmt.translation.documents.ooxml_paragraph.Dialect: whether it has complex fields, its tags."""

    @property
    def fields(self) -> bool: ...

    def tag(self, local: str) -> str: ...


def local(el: etree._Element) -> str:
    return etree.QName(el).localname if isinstance(el.tag, str) else ""


def brackets(children: list[etree._Element], d: Dialect) -> dict[int, tuple[int, int]]:
    """Well-nested brackets among siblings: complex fields with a result (begin..separate runs, the end run) and
    comment and bookmark ranges holding something: first start index -> (last start index, end index)."""
    found = {**_ranges(children, d), **(_fields(children, d) if d.fields else {})}
    kept: dict[int, tuple[int, int]] = {}
    stack: list[tuple[int, int]] = []
    for first in sorted(found):
        last, end = found[first]
        while stack and stack[-1][1] < first:
            stack.pop()
        if stack and (first <= stack[-1][0] or end > stack[-1][1]):
            continue  # inside a field's instruction, or crossing: left as atoms
        kept[first] = (last, end)
        stack.append((last, end))
    return kept


def _fields(children: list[etree._Element], d: Dialect) -> dict[int, tuple[int, int]]:
    """Complex fields whose begin, separate and end runs are all among `children` and whose result holds text:
    begin index -> (separate index, end index). A field nested in another's instruction is part of it."""
    out: dict[int, tuple[int, int]] = {}
    stack: list[list[int]] = []
    for k, el in enumerate(children):
        chars = el.findall(d.tag("fldChar")) if local(el) == "r" else []
        if len(chars) != 1 or el.find(d.tag("t")) is not None:
            continue
        kind = chars[0].get(d.tag("fldCharType"))
        if kind == "begin":
            stack.append([k, -1])
        elif kind == "separate" and stack:
            stack[-1][1] = k
        elif kind == "end" and stack:
            begin, separate = stack.pop()
            result = children[separate + 1:k] if separate >= 0 else []
            if not stack and any(r.find(".//" + d.tag("t")) is not None for r in result):
                out[begin] = (separate, k)
    return out


def _ranges(children: list[etree._Element], d: Dialect) -> dict[int, tuple[int, int]]:
    """Comment and bookmark ranges (start and end markers, by id) that are well nested and hold something:
    start index -> (start index, end index). Others stay atoms."""
    stack: list[tuple[str, str, int]] = []
    out: dict[int, tuple[int, int]] = {}
    for k, el in enumerate(children):
        name = local(el)
        kind = name[:-5] if name.endswith("Start") else name[:-3] if name.endswith("End") else ""
        if kind not in ("commentRange", "bookmark"):
            continue
        ident = el.get(d.tag("id"), "")
        if name.endswith("Start"):
            stack.append((kind, ident, k))
        elif stack and stack[-1][:2] == (kind, ident):
            start = stack.pop()[2]
            if k > start + 1:
                out[start] = (start, k)
        else:
            stack = []  # crossing ranges: those open stay atoms
    return out
