"""Real Word, PowerPoint and OpenDocument files through `nmt translate`, checked for what issue 46 is about: does the
output open (python-docx / python-pptx / odfpy), how many atoms (a footnote reference, a drawing, math, an empty
field, a slide number, inline code) touch a letter or another atom where they did not in the source, doubled
punctuation, revision ids shared within a part, runs still marked with the source language, and how many inline
code runs (ODT: spans, by nmt's rule of code styles and fonts) come back as written.

    python bench/office_fixtures.py --checkpoint tests/fixtures/demo-model.pt a.docx b.pptx c.odt ...

Each count is the output's beside the source's (a source may have them already); "opens" is python-docx's,
python-pptx's or odfpy's verdict. Real files: pandoc's test/docx and test/odt/odt, Apache POI's test-data/document
(delins.docx) and slideshow, e.g. `git --git-dir=<pandoc mirror> show HEAD:test/docx/inline_code.docx >
inline_code.docx`."""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import zipfile
from collections import Counter
from pathlib import Path

from lxml import etree

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
M = "{http://schemas.openxmlformats.org/officeDocument/2006/math}"
FALLBACK = "{http://schemas.openxmlformats.org/markup-compatibility/2006}Fallback"
# word/document2.xml: a main part _rels/.rels names otherwise (pandoc's alternate_document_path.docx)
PARTS = re.compile(r"word/(document\d*|header\d*|footer\d*|footnotes|endnotes|comments)\.xml|ppt/(slides/slide|"
                   r"notesSlides/notesSlide)\d+\.xml")
MARK = "\ufffc"
SEEN = {W + "footnoteReference", W + "endnoteReference", W + "drawing", W + "pict", W + "object", M + "oMath",
        W + "sym", A + "fld"}
BREAKS = {W + "tab", W + "br", W + "cr", A + "br"}
REVISIONS = ("ins", "del", "moveTo", "moveFrom", "rPrChange", "pPrChange")
_SAFE = etree.XMLParser(resolve_entities=False, no_network=True)
DOUBLED = re.compile(r"([,;:!?(])\1|\)\)|(?<!\.)\.\.(?!\.)")


def shown(p: etree._Element) -> str:
    """A paragraph as read: its text, each atom a reader sees as one mark (an empty w:fldSimple too), a tab or
    break as a space."""
    out: list[str] = []
    skip: etree._Element | None = None
    for el in p.iter():
        if skip is not None and any(a is skip for a in el.iterancestors()):
            continue
        if el.tag in SEEN or el.tag == W + "fldSimple" and not len(el):
            out.append(MARK)
            skip = el
        elif el.tag == W + "t" and _code(el):
            out.append(MARK)
        elif el.tag in (W + "t", A + "t") and (el.text or ""):
            out.append(el.text)
        elif el.tag in BREAKS and el.getparent().tag in (W + "r", A + "p"):  # a reader sees a space or new line
            out.append(" ")
    return "".join(out)


def _code(t: etree._Element) -> bool:
    """Whether a w:t is in a run of a character style of code (nmt.translation.documents.docx.CODE_STYLES)."""
    from nmt.translation.documents.docx import CODE_STYLES

    style = t.getparent().find(f"{W}rPr/{W}rStyle")
    return style is not None and (style.get(W + "val") or "").lower() in CODE_STYLES


def glued(text: str) -> int:
    """Marks touching a letter or digit, or another mark."""
    return sum(1 for k, c in enumerate(text) if c == MARK and (
        (k and (text[k - 1].isalnum() or text[k - 1] == MARK)) or (k + 1 < len(text) and text[k + 1].isalnum())))


def measure_odt(path: Path) -> Counter[str]:
    """An .odt's paragraphs (content.xml, styles.xml's headers and footers): inline code spans as nmt keeps them
    (shown as marks), glued and doubled punctuation."""
    from nmt.translation.documents.odt import TEXT, OdfParagraph
    from nmt.translation.documents.odt_styles import StyleTable

    counts: Counter[str] = Counter()
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        parser = etree.XMLParser(resolve_entities=False, no_network=True)  # odfpy's nasty.odt names a file
        named = StyleTable.read(etree.fromstring(z.read("styles.xml"), parser), False) if "styles.xml" in names \
            else None
        for name in ("content.xml", "styles.xml"):
            if name not in names:
                continue
            root = etree.fromstring(z.read(name), parser)
            code = (named or StyleTable()).merged(StyleTable.read(root)).code()
            for p in root.iter(f"{{{TEXT}}}p", f"{{{TEXT}}}h"):
                spans = OdfParagraph(p, code=code).code_spans()
                texts = ["".join(span.itertext()) for span in spans]
                counts["code runs"] += len(texts)
                counts.update(f"code: {text}" for text in texts)
                shown = _odt_shown(p, set(spans))
                counts["glued atoms"] += glued(shown)
                counts["doubled punctuation"] += len(DOUBLED.findall(shown))
    return counts


def _odt_shown(el: etree._Element, spans: set[etree._Element]) -> str:
    """A paragraph as read: its text, each code span one mark, text:s/tab/line-break as the space they are."""
    out = [el.text or ""]
    for child in el:
        if child in spans:
            out.append(MARK)
        elif isinstance(child.tag, str):
            name = etree.QName(child).localname
            out.append({"s": " ", "tab": "\t", "line-break": "\n"}.get(name) or _odt_shown(child, spans))
        out.append(child.tail or "")
    return "".join(out)


def measure(path: Path, source_lang: str) -> Counter[str]:
    if path.suffix == ".odt":
        return measure_odt(path)
    counts: Counter[str] = Counter()
    with zipfile.ZipFile(path) as z:
        for name in z.namelist():
            if not PARTS.fullmatch(name):
                continue
            root = etree.fromstring(z.read(name), _SAFE)  # POI's ExternalEntityInText.docx names an entity
            for p in root.iter(W + "p", A + "p"):
                if any(a.tag == FALLBACK for a in p.iterancestors()):
                    continue
                text = shown(p)
                counts["glued atoms"] += glued(text)
                counts["doubled punctuation"] += len(DOUBLED.findall(text))
            codes = [t.text or "" for t in root.iter(W + "t") if _code(t)]
            counts["code runs"] += len(codes)
            counts.update({f"code: {text}": 1 for text in codes})
            ids = [el.get(W + "id") for n in REVISIONS for el in root.iter(W + n)
                   if not any(a.tag == FALLBACK for a in el.iterancestors())]
            counts["shared revision ids"] += len(ids) - len(set(ids))
            marked = [el.get(W + "val") or "" for el in root.iter(W + "lang")] + [
                el.get("lang") or "" for el in root.iter(A + "rPr")]
            counts[f"runs marked {source_lang}"] += sum(v.lower().startswith(source_lang) for v in marked)
    return counts


def opens(path: Path) -> bool:
    try:
        if path.suffix == ".docx":
            import docx

            docx.Document(path)
        elif path.suffix == ".odt":
            from odf.opendocument import load

            load(str(path))
        else:
            import pptx

            pptx.Presentation(path)
        return True
    except Exception:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args()
    from nmt.errors import NmtError
    from nmt.translation.documents import translate_document
    from nmt.translation.translator import Translator

    translator = Translator.load(args.checkpoint)
    source_lang = (translator.langs or ("en", "de"))[0]
    total: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        for src in args.files:
            dst = Path(tmp) / src.name
            try:
                translate_document(translator, src, dst)
            except NmtError as e:  # refused (e.g. a main part elsewhere than word/document.xml)
                total["refused"] += 1
                print(f"{src.name}: refused: {e}")
                continue
            before, after = measure(src, source_lang), measure(dst, source_lang)
            ok = opens(dst)
            written = [k for k in before if k.startswith("code: ")]  # inline code as written in the source
            source, kept = sum(before[k] for k in written), sum(min(before[k], after[k]) for k in written)
            for counts in (before, after):
                for key in [k for k in counts if k.startswith("code")]:
                    del counts[key]
            before["code runs as written"], after["code runs as written"] = source, kept
            total["files"] += 1
            total["open"] += ok
            for key in sorted(set(before) | set(after)):
                total[f"{key} (source)"] += before[key]
                total[f"{key} (output)"] += after[key]
            changed = {k: f"{before[k]}->{after[k]}" for k in sorted(set(before) | set(after)) if before[k] or after[k]}
            print(f"{src.name}: opens={ok} {changed}")
    print("total:", dict(sorted(total.items())))


if __name__ == "__main__":
    main()
