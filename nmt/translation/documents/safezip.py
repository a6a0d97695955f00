"""Opening the zip containers of documents (docx, pptx, odt, epub) defensively, and writing them back.

Every refusal is one NmtError line naming the file: not a zip by its magic bytes (a wrong extension, or an encrypted
Office file, which is an OLE compound file), a corrupt or truncated zip, an encrypted member, two members of one
name, a zip bomb (too many members, too much declared or actually inflated data, any member that inflates more than
MAX_RATIO times its compressed size plus RATIO_SLACK). Sizes are checked as the data is read, not only as declared:
a zip's headers can lie. XML is parsed without entities, DTD loading or network (no billion laughs, no XXE), and
every parsed byte is charged to the work budget in force (nmt.workbudget, "xml_bytes"): memory follows the XML
parsed, so a document's parts are parsed one at a time and their total is bounded.

Writing: every member in its order, with its own name, date, attributes and compression (mimetype first and stored
in an epub stays so), a part to translate produced when its turn comes (so one part's tree is held at a time) and
every other member copied in slices (a large image is never held whole); a failed write leaves no file behind."""

from __future__ import annotations

import contextlib
import copy
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from lxml import etree

from nmt import workbudget
from nmt.errors import NmtError

MAX_MEMBERS = 10_000
MAX_TOTAL = 512 * 2**20  # inflated bytes in all
MAX_RATIO = 200  # inflated / compressed, for every member ...
RATIO_SLACK = 64 * 2**10  # ... plus this much, so that tiny members (a few bytes compressed) pass
SLICE = 2**20  # bytes of a copied member held at once
_ZIP = b"PK\x03\x04"
_OLE = bytes.fromhex("d0cf11e0a1b11ae1")  # an encrypted docx/pptx (or a legacy .doc/.ppt)
_PARSER_OPTIONS = {"resolve_entities": False, "no_network": True, "load_dtd": False, "huge_tree": False,
                   "remove_blank_text": False}


@dataclass
class XmlPart:
    """A parsed member and the source's bytes before its root element (declaration, comments, doctype)."""

    tree: etree._ElementTree
    prolog: bytes

    def serialize(self) -> bytes:
        """The XML in its declared encoding, after the source's own prolog bytes (lxml would rewrite their quoting);
        characters the encoding lacks become character references."""
        root = self.tree.getroot()
        encoding = self.tree.docinfo.encoding or "UTF-8"
        if not self.prolog and encoding.upper().startswith(("UTF-16", "UTF-32")):
            return etree.tostring(self.tree, encoding=encoding, xml_declaration=True)  # wide: no prolog bytes found
        return self.prolog + etree.tostring(root, encoding=encoding, xml_declaration=False)


class SafeZip:
    """A zip opened after the checks above; `read` counts what is inflated against the limits."""

    def __init__(self, src: Path, kind: str):
        self.src, self.kind = src, kind
        self._inflated = 0
        try:
            self.zip = zipfile.ZipFile(src)
        except (zipfile.BadZipFile, OSError, ValueError) as e:
            raise self.error(f"corrupt {kind} file ({e})") from None
        self._check()

    def error(self, what: str) -> NmtError:
        return NmtError(f"{self.src.name}: {what}")

    def _check(self) -> None:
        infos = self.zip.infolist()
        if len(infos) > MAX_MEMBERS:
            raise self.error(f"{len(infos)} members in the zip (at most {MAX_MEMBERS}): refused as a zip bomb")
        if any(info.flag_bits & 0x1 for info in infos):
            raise self.error(f"encrypted {self.kind} file: decrypt it first")
        twice = [name for name, n in Counter(info.filename for info in infos).items() if n > 1]
        if twice:  # which one a reader sees differs by reader: the text checked and the text shown could differ
            raise self.error(f"corrupt {self.kind} file: member {twice[0]} is in the zip {len(twice) + 1} times")
        if sum(info.file_size for info in infos) > MAX_TOTAL:
            raise self.error(f"inflates to over {MAX_TOTAL >> 20} MiB: refused as a zip bomb")
        for info in infos:
            if info.file_size > _most(info):
                raise self.error(f"member {info.filename} inflates {info.file_size // max(info.compress_size, 1)}"
                                 f"-fold: refused as a zip bomb")

    def names(self) -> list[str]:
        return self.zip.namelist()

    def read(self, name: str) -> bytes:
        """A member's bytes, at most its declared size and the total budget left (a lying header is a bomb)."""
        return b"".join(self._slices(name))

    def _slices(self, name: str) -> Iterator[bytes]:
        """A member's bytes in slices of at most SLICE, checked against its declared size as they come."""
        try:
            info = self.zip.getinfo(name)
        except KeyError:
            raise self.error(f"not {_a(self.kind)} file: no {name}") from None
        budget, got = workbudget.current(), 0
        try:
            with self.zip.open(info) as f:
                while data := f.read(min(SLICE, info.file_size - got + 1)):
                    got += len(data)
                    self._inflated += len(data)
                    if got > info.file_size or self._inflated > MAX_TOTAL:
                        raise self.error(f"member {name} inflates past its declared size: refused as a zip bomb")
                    budget.check()
                    yield data
        except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as e:
            raise self.error(f"corrupt {self.kind} file ({e})") from None

    def part(self, name: str) -> XmlPart:
        """A member parsed as XML, safely, its declared size charged to the work budget first."""
        try:
            size = self.zip.getinfo(name).file_size
        except KeyError:
            raise self.error(f"not {_a(self.kind)} file: no {name}") from None
        workbudget.current().charge("xml_bytes", size)  # before inflating: a refusal costs nothing
        data = self.read(name)
        try:
            root = etree.fromstring(data, etree.XMLParser(**_PARSER_OPTIONS))
        except etree.XMLSyntaxError as e:
            raise self.error(f"corrupt {self.kind} file: {name}: {e}") from None
        if root is None:
            raise self.error(f"corrupt {self.kind} file: {name}: no XML element")
        tag = root.tag.encode("utf-8") if isinstance(root.tag, str) else b""
        local = tag.rsplit(b"}", 1)[-1]
        start = data.find(b"<" + (root.prefix.encode() + b":" if root.prefix else b"") + local)
        return XmlPart(root.getroottree(), data[:start] if start > 0 else b"")

    def xml(self, name: str) -> etree._ElementTree:
        """A member parsed as XML, safely."""
        return self.part(name).tree

    def write(self, dst: Path, replace: Callable[[str], bytes | None]) -> None:
        """`dst`: every member in order, `replace(name)`'s bytes for those it gives, the others copied as they are
        (in slices)."""
        with removed_on_error(dst), zipfile.ZipFile(dst, "w") as out:
            for info in self.zip.infolist():
                data = replace(info.filename)
                target = copy.copy(info)  # (writing fills in offsets and sizes)
                if data is not None:
                    out.writestr(target, data, compress_type=info.compress_type)
                    continue
                with out.open(target, "w", force_zip64=info.file_size > 2**31) as f:
                    for chunk in self._slices(info.filename):
                        f.write(chunk)

    def close(self) -> None:
        self.zip.close()


def _most(info: zipfile.ZipInfo) -> int:
    """The most bytes a member may inflate to."""
    return MAX_RATIO * info.compress_size + RATIO_SLACK


@contextlib.contextmanager
def open_zip(src: Path, kind: str, required: str | None) -> Iterator[SafeZip]:
    """`src` checked as a zip container of `kind` (magic bytes first) holding the member `required` (None: its
    caller finds the main part, nmt.translation.documents.opc)."""
    src = Path(src)
    try:
        with open(src, "rb") as f:
            magic = f.read(8)
    except OSError as e:
        raise NmtError(f"{src.name}: cannot read ({e.strerror or e})") from None
    if magic.startswith(_OLE):
        raise NmtError(f"{src.name}: an encrypted (password-protected) or legacy binary Office file, not {kind}: "
                       f"remove the password or save it as .{kind.lower()} first")
    if not magic.startswith(_ZIP):
        what = "empty" if not magic else "not a zip container"
        raise NmtError(f"{src.name}: {what}, so not {_a(kind)} file (wrong extension?)")
    box = SafeZip(src, kind)
    try:
        if required is not None and required not in box.names():
            raise box.error(f"not {_a(kind)} file: no {required}")
        yield box
    finally:
        box.close()


@contextlib.contextmanager
def removed_on_error(dst: Path) -> Iterator[None]:
    """Removes `dst` if the block fails, so that a refused or broken document leaves nothing on disk."""
    try:
        yield
    except BaseException:
        Path(dst).unlink(missing_ok=True)
        raise


def _a(kind: str) -> str:
    """The article and the name: "a docx", "an EPUB", "an odt"."""
    return f"{'an' if kind[:1].lower() in 'aeio' else 'a'} {kind}"
