"""What bench/real_documents.py checks on one source and its translation: each format's paragraphs as read (atoms as
one mark), whether the output opens in its own library, what changed in a zip container, and why an Office run is
still marked with the source language. The Office counts are bench/office_fixtures.py's, imported, not copied."""

from __future__ import annotations

import copy
import re
import subprocess
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

from lxml import etree
from office_fixtures import FALLBACK, MARK, PARTS, SEEN, A, W, _code, _odt_shown, shown

OFFICE = ("docx", "pptx", "odt")
SUBTITLES = ("srt", "vtt")
# The parts nmt writes text into (docs/documents.md); every other zip member must come back byte for byte.
TEXT_PARTS = {
    "docx": r"word/(document\d*|header\d*|footer\d*|footnotes|endnotes|comments|diagrams/(data|drawing)\d*"
            r"|charts/chart\d*)\.xml",
    "pptx": r"ppt/(slides/slide|notesSlides/notesSlide|comments/\w*?[Cc]omment|diagrams/(data|drawing)"
            r"|charts/chart)\d*\.xml",
    "odt": r"(content|styles)\.xml",
    "epub": r"(?i).*\.(xhtml|html|htm|ncx|opf)",
}
HTML_ATOMS = {"code", "kbd", "var", "samp", "math", "svg"}  # nmt keeps these as written (docs/documents.md)
HTML_SKIP = {"script", "style", "pre", "template", "rt", "rp", "rtc", "head"}  # not prose; <title> is read apart
# YAML/TOML front matter, kept by nmt (the pattern of nmt.translation.documents.md, whose name is private)
FRONT_MATTER = re.compile(r"(?:---|\+\+\+)\n(?:.*\n)*?(?:---|\.\.\.|\+\+\+)[ \t]*(?:\n|$)")
WORD = re.compile(r"[^\W\d_]{2,}")  # a "letter word": two or more letters and nothing else, once punctuation is off
XML = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=True)


def prose(text: str) -> str:
    """A paragraph's translatable text: atoms (marks) out, whitespace collapsed."""
    return " ".join(text.replace(MARK, " ").split())


def words(text: str) -> int:
    """Letter words: whitespace-separated tokens that, stripped of surrounding punctuation, are letters only
    (a path, URL, number, option or identifier is none)."""
    return sum(1 for token in prose(text).split() if WORD.fullmatch(token.strip(".,;:!?()[]{}\"'«»“”‘’-–—")))


def glued_atoms(source: str, output: str) -> list[str]:
    """Atom sides glued in `output` beyond what `source` had: an output side touching a letter, digit or another
    atom counts, less the source's sides touching anything but whitespace or the paragraph's edge (an atom written
    against a word or a "." may follow its target word so; atoms may move, so sides are counted, not paired). Each
    excess side as "source -> output" (the paragraphs' starts)."""
    def sides(text: str, touching: Callable[[str], bool]) -> int:
        return sum(touching(_at(text, k + side)) for k, c in enumerate(text) if c == MARK for side in (-1, 1))

    extra = sides(output, lambda c: c.isalnum() or c == MARK) - sides(source, lambda c: not c.isspace())
    return [f"{_around(source, 0, 80)!r} -> {_around(output, 0, 100)!r}"] * max(0, extra)


def _at(text: str, k: int) -> str:
    return text[k] if 0 <= k < len(text) else " "


def _around(text: str, k: int, width: int = 25) -> str:
    return text[max(0, k - width):k + width].replace(MARK, "[*]")


# --------------------------------------------------------------------------- paragraphs, per format


def paragraphs(path: Path, kind: str) -> list[str]:
    """The paragraphs (cues) of a document as read, in document order, atoms as MARK."""
    if kind in ("docx", "pptx"):
        return [text for _, _, text in _office_paragraphs(path)]
    if kind == "odt":
        return list(_odt_paragraphs(path))
    if kind == "html":
        return _html_paragraphs(etree.HTML(path.read_bytes()))
    if kind == "epub":
        out: list[str] = []
        with zipfile.ZipFile(path) as z:
            for name in z.namelist():
                if re.fullmatch(r"(?i).*\.x?html?", name):
                    out += _html_paragraphs(_xhtml(z.read(name)))
        return out
    if kind == "md":
        return _md_paragraphs(path.read_text("utf-8", errors="replace"))
    return _cues(path)


def _office_paragraphs(path: Path) -> Iterator[tuple[str, etree._Element, str]]:
    """(part, w:p or a:p, its text as read) of a docx/pptx; a move's origin (w:moveFrom) is kept by nmt's rule, so
    left out of the text, as deleted text is (w:delText)."""
    with zipfile.ZipFile(path) as z:
        for name in z.namelist():
            if PARTS.fullmatch(name):
                root = etree.fromstring(z.read(name), XML)
                for p in root.iter(W + "p", A + "p"):
                    if not any(a.tag == FALLBACK for a in p.iterancestors()):
                        yield name, p, shown(_without(p, W + "moveFrom"))


def _without(p: etree._Element, tag: str) -> etree._Element:
    if next(p.iter(tag), None) is None:
        return p
    p = copy.deepcopy(p)
    for el in list(p.iter(tag)):
        el.getparent().remove(el)
    return p


def _odt_paragraphs(path: Path) -> Iterator[str]:
    from nmt.translation.documents.odt import TEXT, OdfParagraph
    from nmt.translation.documents.odt_styles import StyleTable

    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        named = StyleTable.read(etree.fromstring(z.read("styles.xml"), XML), False) if "styles.xml" in names \
            else StyleTable()
        for name in ("content.xml", "styles.xml"):
            if name in names:
                root = etree.fromstring(z.read(name), XML)
                code = named.merged(StyleTable.read(root)).code()
                for p in root.iter(f"{{{TEXT}}}p", f"{{{TEXT}}}h"):
                    yield _odt_shown(p, set(OdfParagraph(p, code=code).code_spans()))


def _xhtml(data: bytes) -> etree._Element:
    try:
        return etree.fromstring(data, XML)
    except etree.XMLSyntaxError:
        return etree.HTML(data)


def _html_paragraphs(root: etree._Element | None) -> list[str]:
    """Text between block boundaries (nmt's own rule of inline elements), kept elements as one mark each."""
    from nmt.translation.documents.html_inline import inline

    out: list[str] = []
    buf: list[str] = []

    def flush() -> None:  # empty ones too: source and output then pair by index, whatever the model wrote
        out.append("".join(buf))
        buf.clear()

    def walk(el: etree._Element) -> None:
        name = etree.QName(el).localname.lower() if isinstance(el.tag, str) else ""
        if name == "title":
            flush(), buf.append(el.text or ""), flush()
        elif not name or name in HTML_SKIP:
            flush()
        elif name in HTML_ATOMS or el.get("translate") == "no" or "notranslate" in (el.get("class") or "").split():
            buf.append(MARK)
        else:
            block = not inline(name)
            if block:
                flush()
            buf.append(el.text or "")
            for child in el:
                walk(child)
            if block:
                flush()
        buf.append(el.tail or "")

    for title in ([] if root is None else root.iter("{*}title", "title")):
        if etree.QName(title.getparent()).localname.lower() == "head":  # an SVG's <title> is in its atom
            walk(title)
    if root is not None:
        walk(root)
    flush()
    return out


def _md_paragraphs(text: str) -> list[str]:
    """Each inline block (paragraph, heading, table cell) of markdown-it's parse: inline code, images, autolinks
    and inline HTML as marks (nmt keeps them; a tag like <b> is markup, shown as nothing)."""
    from nmt.translation.documents.md import parser

    out = []
    front = FRONT_MATTER.match(text)  # kept as written by nmt's rule: blank lines here
    for token in parser().parse("\n" * text[:front.end()].count("\n") + text[front.end():] if front else text):
        if token.type != "inline":
            continue
        parts, autolink = [], False
        for child in token.children or []:
            if child.type == "link_open" and child.markup == "autolink":
                parts.append(MARK)
                autolink = True
            elif child.type == "link_close":
                autolink = False
            elif autolink:
                continue
            elif child.type in ("code_inline", "image") or child.type == "html_inline" and not re.fullmatch(
                    r"</?[A-Za-z][^<>]*>", child.content):
                parts.append(MARK)
            elif child.type in ("softbreak", "hardbreak"):
                parts.append(" ")
            elif child.type == "text":
                parts.append(child.content)
        out.append("".join(parts))
    return out


def md_blocks(path: Path) -> list[str]:
    """The block structure markdown-it reads (types, tags, levels): a translation must not change it."""
    from nmt.translation.documents.md import parser

    return [f"{t.type}:{t.tag}:{t.level}" for t in parser().parse(path.read_text("utf-8", errors="replace"))]


def _cues(path: Path) -> list[str]:
    """Each subtitle cue's text (the lines after its timing line), decoded by nmt's stated encoding rule."""
    from nmt.translation.documents.txt import read_text

    text = read_text(path, legacy=True)[0]
    out = []
    for block in re.split(r"\n[ \t]*\n+", text):
        lines = block.split("\n")
        at = next((k for k, line in enumerate(lines) if "-->" in line), None)
        if at is not None and not block.lstrip().startswith(("NOTE", "STYLE", "REGION")):
            out.append(re.sub(r"<[^<>\n]*>", "", "\n".join(lines[at + 1:])))
    return out


# --------------------------------------------------------------------------- opening, containers, LibreOffice


def opens(path: Path, kind: str) -> str | None:
    """None if the file opens in its own library, else why not (one line)."""
    try:
        if kind in OFFICE:
            from office_fixtures import opens as office_opens

            return None if office_opens(path) else f"{kind} library refused it"
        if kind == "epub":
            from ebooklib import epub

            epub.read_epub(str(path), {"ignore_ncx": False})
        elif kind == "html":
            from lxml import html

            html.document_fromstring(path.read_bytes())
        elif kind == "md":
            md_blocks(path)
        elif kind == "srt":
            import pysrt

            from nmt.translation.documents.txt import read_text

            pysrt.from_string(read_text(path, legacy=True)[0], error_handling=pysrt.ERROR_RAISE)
        else:
            import webvtt

            from nmt.translation.documents.txt import read_text

            webvtt.from_buffer(_Buffer(read_text(path, legacy=True)[0]))
        return None
    except Exception as e:  # any library's refusal
        return f"{type(e).__name__}: {str(e)[:120]}"


class _Buffer:
    """A text buffer as webvtt-py's from_buffer reads one (its `name` and `readlines`)."""

    name = "cues.vtt"

    def __init__(self, text: str):
        self.text = text

    def readlines(self) -> list[str]:
        return self.text.splitlines(keepends=True)


def structure(path: Path, kind: str) -> list[str]:
    """What a translation must keep of a text format: HTML's tags in order, markdown-it's blocks, cue timings."""
    if kind == "html":  # the blocks; inline elements go with their aligned words (counted by inline_tags)
        return [tag for tag, block in _tags(etree.HTML(path.read_bytes())) if block]
    if kind == "md":
        return md_blocks(path)
    from nmt.translation.documents.txt import read_text

    return re.findall(r"^.*-->.*$", read_text(path, legacy=True)[0], re.M)


def inline_tags(path: Path, kind: str) -> Counter[str]:
    """The inline elements of an HTML file or of an EPUB's XHTML members, by tag."""
    if kind == "html":
        return Counter(tag for tag, block in _tags(etree.HTML(path.read_bytes())) if not block)
    with zipfile.ZipFile(path) as z:
        return Counter(tag for name in z.namelist() if re.fullmatch(r"(?i).*\.x?html?", name)
                       for tag, block in _tags(_xhtml(z.read(name))) if not block)


def _tags(root: etree._Element | None) -> Iterator[tuple[str, bool]]:
    from nmt.translation.documents.html_inline import inline

    for el in [] if root is None else root.iter():
        if isinstance(el.tag, str):
            tag = etree.QName(el).localname.lower()
            yield tag, not inline(tag)


def zip_changes(src: Path, dst: Path, kind: str) -> dict[str, list[str]]:
    """Members of `dst` unlike `src`'s: "order" (names or their order differ), "bytes" (a member that is not a text
    part changed), "info" (its date or compression changed), "text" (text parts rewritten: expected)."""
    with zipfile.ZipFile(src) as a, zipfile.ZipFile(dst) as b:
        left, right = a.infolist(), b.infolist()
        out: dict[str, list[str]] = {"order": [], "bytes": [], "info": [], "text": []}
        if [i.filename for i in left] != [i.filename for i in right]:
            out["order"] = sorted({i.filename for i in left} ^ {i.filename for i in right}) or ["(order)"]
        theirs = {i.filename: i for i in right}
        for info in left:
            other = theirs.get(info.filename)
            if other is None:
                continue
            if (info.date_time, info.compress_type) != (other.date_time, other.compress_type):
                out["info"].append(info.filename)
            if a.read(info) != b.read(other):
                text = re.fullmatch(TEXT_PARTS[kind], info.filename)
                out["text" if text else "bytes"].append(info.filename)
    return out


def libreoffice(path: Path, outdir: Path, profile: Path, timeout: float = 180) -> str | None:
    """None if `soffice --headless --convert-to pdf` writes a PDF of `path`, else why not."""
    outdir.mkdir(parents=True, exist_ok=True)
    pdf = outdir / (path.stem + ".pdf")
    pdf.unlink(missing_ok=True)
    try:
        run = subprocess.run(["soffice", f"-env:UserInstallation={profile.as_uri()}", "--headless",
                              "--convert-to", "pdf", "--outdir", str(outdir), str(path)],
                             capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout:.0f}s"
    if pdf.is_file() and pdf.read_bytes()[:5] == b"%PDF-":
        return None
    return f"no PDF (exit {run.returncode}): {(run.stderr or run.stdout).strip()[-120:]}"


# --------------------------------------------------------------------------- runs marked with the source language


def marked_runs(path: Path, source_lang: str,
                unchanged: frozenset[str] = frozenset()) -> Iterator[tuple[str, str, str]]:
    """(why, part, text) for each run office_fixtures counts as marked with the source language (w:lang/@w:val,
    a:rPr/@lang), with why it may be: "no letter" (spaces, digits: nothing nmt sends), "field instruction",
    "deletion" (w:del, w:moveFrom, and the old formatting a w:rPrChange records), "kept atom" (a note reference,
    drawing, math, code style, slide number field), "copied by the model" (its paragraph's text, `unchanged`, is its
    source's: the model gave it back, "C4", a name, so nmt wrote the source, marks and all, by its stated rule),
    "paragraph mark" (of a paragraph with no letter word), else "other" (text nmt should have translated)."""
    with zipfile.ZipFile(path) as z:
        for name in z.namelist():
            if not PARTS.fullmatch(name):
                continue
            root = etree.fromstring(z.read(name), XML)
            for el in root.iter(W + "lang", A + "rPr"):
                value = el.get(W + "val") if el.tag == W + "lang" else el.get("lang")
                if (value or "").lower().startswith(source_lang):
                    holder = el.getparent().getparent() if el.tag == W + "lang" else el.getparent()
                    yield _why(holder, unchanged), name, _text(holder)


def _why(holder: etree._Element, unchanged: frozenset[str] = frozenset()) -> str:
    tags = {etree.QName(a).localname for a in [holder, *holder.iterancestors()]}
    inside = {etree.QName(d).localname for d in holder.iter() if isinstance(d.tag, str)}
    if tags & {"del", "moveFrom", "rPrChange", "pPrChange"} or inside & {"delText", "delInstrText"}:
        return "deletion"
    if inside & {"instrText", "fldChar"}:
        return "field instruction"
    if "oMath" in tags or holder.tag == A + "fld" or any(d.tag in SEEN for d in holder.iter()) or any(
            _code(t) for t in holder.iter(W + "t")):
        return "kept atom"
    p = next((a for a in holder.iterancestors(W + "p", A + "p")), holder)
    if unchanged and prose(shown(p)) in unchanged:
        return "copied by the model"
    if holder.tag == W + "pPr":
        p = holder.getparent()
        return "paragraph mark" if not words(shown(p)) else "other"
    return "no letter" if not any(c.isalpha() for c in _text(holder)) else "other"


def _text(holder: etree._Element) -> str:
    if holder.tag == W + "pPr":
        return "(mark of) " + prose(shown(holder.getparent()))[:80]
    return "".join(t.text or "" for t in holder.iter(W + "t", A + "t"))
