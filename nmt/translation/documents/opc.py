"""Where an Office Open XML package (docx, pptx) keeps its parts: Word and PowerPoint find the main part through the
package's relationships (`_rels/.rels`, the officeDocument relationship), not by a fixed name, and the parts it uses
(headers, footers, notes, comments) through the main part's own relationships (`word/_rels/document.xml.rels`).
Most files use the names Word writes (`word/document.xml`), but not all: pandoc's `alternate_document_path.docx`
keeps its body in `word/document2.xml`. A package without `_rels/.rels` falls back to the usual name; a main part
whose content type is not the kind's (POI's `stress025.docx` is an Office theme renamed) is refused in one line."""

from __future__ import annotations

import contextlib
import posixpath
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

from nmt.translation.documents.safezip import SafeZip, open_zip

RELATIONSHIPS = "{http://schemas.openxmlformats.org/package/2006/relationships}Relationship"
CONTENT_TYPES = "{http://schemas.openxmlformats.org/package/2006/content-types}"
# The content types of a main part, per kind: documents, templates, macro-enabled ones (transitional and strict)
MAIN_TYPES = {
    "docx": (re.compile(r"application/vnd\.(openxmlformats-officedocument\.wordprocessingml|ms-word)\.[\w.]+\.main"
                        r"\+xml"), "a Word document"),
    "pptx": (re.compile(r"application/vnd\.(openxmlformats-officedocument\.presentationml|ms-powerpoint)\.[\w.]+"
                        r"\.main\+xml"), "a PowerPoint presentation"),
}


@contextlib.contextmanager
def open_package(src: Path, kind: str, default: str) -> Iterator[tuple[SafeZip, str]]:
    """`src` checked as a package of `kind` (nmt.translation.documents.safezip), with its main part's name: where
    `_rels/.rels` points (`default` without one). A main part missing, or not of the kind: NmtError."""
    with open_zip(src, kind, None) as box:
        main = _main_part(box, kind) or default
        if main not in box.names():
            where = "" if main == default else " (the main part _rels/.rels names)"
            raise box.error(f"not {'an' if kind[0] in 'aeio' else 'a'} {kind} file: no {main}{where}")
        declared = _content_type(box, main)
        pattern, what = MAIN_TYPES[kind]
        if declared is not None and not pattern.fullmatch(declared):
            raise box.error(f"not {'an' if kind[0] in 'aeio' else 'a'} {kind} file: its main part {main} is "
                            f"{declared}, not {what}")
        yield box, main


def related(box: SafeZip, part: str, types: frozenset[str]) -> set[str]:
    """The members `part`'s relationships point to whose type's last segment is in `types` (`header`, `footer`,
    `footnotes`...), wherever they are; external targets and absent members left out."""
    rels = posixpath.join(posixpath.dirname(part), "_rels", posixpath.basename(part) + ".rels")
    if not types or rels not in box.names():
        return set()
    found = set()
    for rel in box.xml(rels).getroot().iter(RELATIONSHIPS):
        if rel.get("Type", "").rsplit("/", 1)[-1] in types and rel.get("TargetMode") != "External":
            found.add(_member(box, posixpath.dirname(part), rel.get("Target", "")))
    return found & set(box.names())


def _main_part(box: SafeZip, kind: str) -> str | None:
    """The member `_rels/.rels`'s officeDocument relationship names (None: no such file or relationship)."""
    if "_rels/.rels" not in box.names():
        return None
    for rel in box.xml("_rels/.rels").getroot().iter(RELATIONSHIPS):
        if rel.get("Type", "").endswith("/officeDocument") and rel.get("TargetMode") != "External":
            return _member(box, "", rel.get("Target", ""))
    return None


def _member(box: SafeZip, base: str, target: str) -> str:
    """A relationship's target as a member name: relative to `base` unless it starts with "/", percent-decoded;
    OPC names are case-insensitive, so a member differing only in case is that member."""
    target = unquote(target)
    name = posixpath.normpath(target.lstrip("/") if target.startswith("/") else posixpath.join(base, target))
    if name not in box.names():
        name = next((n for n in box.names() if n.lower() == name.lower()), name)
    return name


def _content_type(box: SafeZip, part: str) -> str | None:
    """`part`'s content type by `[Content_Types].xml` (its Override, else its extension's Default; None: not
    declared, or no such file)."""
    if "[Content_Types].xml" not in box.names():
        return None
    root = box.xml("[Content_Types].xml").getroot()
    for override in root.iter(CONTENT_TYPES + "Override"):
        if override.get("PartName", "").lstrip("/").lower() == part.lower():
            return override.get("ContentType")
    extension = posixpath.splitext(part)[1].lstrip(".").lower()
    for default in root.iter(CONTENT_TYPES + "Default"):
        if default.get("Extension", "").lower() == extension:
            return None if default.get("ContentType") == "application/xml" else default.get("ContentType")
    return None
