"""Opening the zip containers of documents (docx, pptx, odt, epub) defensively, and writing them back.

Every refusal is one NmtError line naming the file: not a zip by its magic bytes (a wrong extension, or an encrypted
Office file, which is an OLE compound file), a corrupt or truncated zip, an encrypted member, a zip bomb (too many
members, too much declared or actually inflated data, a member that inflates too much). Sizes are checked as the
data is read, not only as declared: a zip's headers can lie. XML is parsed without entities, DTD loading or network
(no billion laughs, no XXE). Writing: every member in its order, with its own name, date, attributes and compression
(mimetype first and stored in an epub stays so); a failed write leaves no file behind."""

from __future__ import annotations

import contextlib
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from lxml import etree

from nmt.errors import NmtError

MAX_MEMBERS = 10_000
MAX_TOTAL = 512 * 2**20  # inflated bytes in all
MAX_RATIO = 200  # inflated / compressed, for a member over RATIO_FLOOR inflated bytes
RATIO_FLOOR = 2**20
_ZIP = b"PK\x03\x04"
_OLE = bytes.fromhex("d0cf11e0a1b11ae1")  # an encrypted docx/pptx (or a legacy .doc/.ppt)
_PARSER_OPTIONS = {"resolve_entities": False, "no_network": True, "load_dtd": False, "huge_tree": False,
                   "remove_blank_text": False}


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
        if sum(info.file_size for info in infos) > MAX_TOTAL:
            raise self.error(f"inflates to over {MAX_TOTAL >> 20} MiB: refused as a zip bomb")
        for info in infos:
            if info.file_size > RATIO_FLOOR and info.file_size > MAX_RATIO * max(info.compress_size, 1):
                raise self.error(f"member {info.filename} inflates {info.file_size // max(info.compress_size, 1)}"
                                 f"-fold: refused as a zip bomb")

    def names(self) -> list[str]:
        return self.zip.namelist()

    def read(self, name: str) -> bytes:
        """A member's bytes, at most its declared size and the total budget left (a lying header is a bomb)."""
        try:
            info = self.zip.getinfo(name)
            with self.zip.open(info) as f:
                data = f.read(min(info.file_size, MAX_TOTAL - self._inflated) + 1)
        except KeyError:
            raise self.error(f"not {_a(self.kind)} file: no {name}") from None
        except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as e:
            raise self.error(f"corrupt {self.kind} file ({e})") from None
        self._inflated += len(data)
        if len(data) > info.file_size or self._inflated > MAX_TOTAL:
            raise self.error(f"member {name} inflates past its declared size: refused as a zip bomb")
        return data

    def xml(self, name: str) -> etree._ElementTree:
        """A member parsed as XML, safely."""
        try:
            return etree.ElementTree(etree.fromstring(self.read(name), etree.XMLParser(**_PARSER_OPTIONS)))
        except etree.XMLSyntaxError as e:
            raise self.error(f"corrupt {self.kind} file: {name}: {e}") from None

    def write(self, dst: Path, replaced: Mapping[str, bytes]) -> None:
        """`dst`: every member as it is, in order, those in `replaced` with new bytes."""
        with removed_on_error(dst), zipfile.ZipFile(dst, "w") as out:
            for info in self.zip.infolist():
                data = replaced[info.filename] if info.filename in replaced else self.read(info.filename)
                out.writestr(info, data, compress_type=info.compress_type)

    def close(self) -> None:
        self.zip.close()


@contextlib.contextmanager
def open_zip(src: Path, kind: str, required: str) -> Iterator[SafeZip]:
    """`src` checked as a zip container of `kind` (magic bytes first) holding the member `required`."""
    src = Path(src)
    try:
        with open(src, "rb") as f:
            magic = f.read(8)
    except OSError as e:
        raise NmtError(f"{src.name}: cannot read ({e.strerror or e})") from None
    if magic.startswith(_OLE):
        raise NmtError(f"{src.name}: an encrypted (password-protected) or legacy binary Office file, not {kind}: "
                       "remove the password or save it as .{kind} first")
    if not magic.startswith(_ZIP):
        what = "empty" if not magic else "not a zip container"
        raise NmtError(f"{src.name}: {what}, so not {_a(kind)} file (wrong extension?)")
    box = SafeZip(src, kind)
    try:
        if required not in box.names():
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


def serialize(tree: etree._ElementTree, original: bytes) -> bytes:
    """The XML with the source's own declaration and prolog bytes (lxml would rewrite their quoting)."""
    root = tree.getroot()
    body = etree.tostring(root, encoding="UTF-8", xml_declaration=False)
    name = f"{root.prefix}:{etree.QName(root).localname}" if root.prefix else etree.QName(root).localname
    start = original.find(b"<" + name.encode())
    return (original[:start] if start > 0 else b"") + body


def _a(kind: str) -> str:
    """The article and the name: "a docx", "an EPUB", "an odt"."""
    return f"{'an' if kind[:1].lower() in 'aeio' else 'a'} {kind}"
