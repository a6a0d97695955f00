"""Before/after pictures of `nmt translate` on each document format, for the README.

    source .venv/bin/activate
    python docs/document_pictures.py                          # every format, with runs/tiny/averaged.pt
    python docs/document_pictures.py --only docx,srt --checkpoint tests/fixtures/demo-model.pt

For each format `nmt translate` handles as a document (md, html, srt and vtt, docx, pptx, odt, epub) it
1. builds a small English sample document with the format's own library (python-docx, python-pptx, odfpy, ebooklib;
   md, html, srt and vtt as text): sentences in the demo model's domain, with bold, italic, underline, links or
   styled spans on some of their words, a second paragraph, a table (docx), speaker notes (pptx), cues (srt, vtt);
2. translates it with the real CLI, `python -m nmt translate --checkpoint CKPT -i report.docx -o bericht.docx`;
3. reads both files back with their own libraries (markdown-it-py renders the md, the html's body is shown as it is,
   subtitles as their text with timings in a monospace block, python-docx's paragraphs, runs, hyperlinks and table
   cells, python-pptx's text frames and notes, odfpy's paragraphs with their span styles, ebooklib's XHTML bodies)
   and renders the two side by side, each pane labelled, with headless Chromium into docs/documents/<format>.png
   (subtitles.png for srt and vtt; 900 px wide, cropped to the content).

The sample documents (docs/document_samples.py) and their translations are written to a temp dir; only the
pictures are kept. Everything is deterministic apart from the model's output: the pictures show whatever the
checkpoint writes, tags wherever it puts them.
"""

from __future__ import annotations

import argparse
import html
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from document_samples import HTML, MD, SRT, VTT, make_docx, make_epub, make_odt, make_pptx, write_text

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "documents"
CHECKPOINTS = (ROOT / "runs" / "tiny" / "averaged.pt", ROOT / "tests" / "fixtures" / "demo-model.pt")
WIDTH, HEIGHT = 900, 1600  # the window; the screenshot is cropped to the content's height
esc = html.escape


# --- reading the files back with their own libraries, as HTML ---------------------------------------------------

def wrap(text: str, bold=None, italic=None, underline=None, link: str | None = None, css: str = "") -> str:
    out = esc(text)
    for on, tag in ((underline, "u"), (italic, "i"), (bold, "b")):
        if on:
            out = f"<{tag}>{out}</{tag}>"
    if css:
        out = f'<span style="{esc(css)}">{out}</span>'
    return f'<a href="{esc(link)}">{out}</a>' if link else out


def md_html(path: Path) -> str:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").render(path.read_text(encoding="utf-8"))


def html_html(path: Path) -> str:
    import lxml.html

    doc = lxml.html.fromstring(path.read_bytes())
    body = doc.body
    inner = esc(body.text or "") + "".join(lxml.html.tostring(child, encoding="unicode") for child in body)
    return f'<div class="meta">&lt;title&gt; {esc(doc.findtext(".//title") or "")}</div>{inner}'


def subtitles_html(path: Path) -> str:
    """The file's lines in a monospace block: timings grey, tags shown (dim) and their b/i/u applied."""
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if "-->" in line:
            lines.append(f'<span class="timing">{esc(line)}</span>')
            continue
        out = ""
        for token in re.split(r"(<[^>]*>)", line):
            opening, closing = re.fullmatch(r"<([biu])(?:\.[^>]*)?>", token), re.fullmatch(r"</([biu])>", token)
            if closing:
                out += f"</{closing[1]}>"
            if token.startswith("<"):
                out += f'<span class="tag">{esc(token)}</span>'
            else:
                out += esc(token)
            if opening:
                out += f"<{opening[1]}>"
        lines.append(out)
    return '<pre class="subtitles">' + "\n".join(lines) + "</pre>"


def docx_html(path: Path) -> str:
    import docx
    from docx.table import Table
    from docx.text.hyperlink import Hyperlink

    def paragraph(p) -> str:
        inner = ""
        for item in p.iter_inner_content():
            if isinstance(item, Hyperlink):
                inner += f'<a href="{esc(item.address)}">{"".join(run(r) for r in item.runs)}</a>'
            else:
                inner += run(item)
        tag = "h2" if p.style.name.startswith(("Heading", "Title")) else "p"
        return f"<{tag}>{inner}</{tag}>"

    def run(r) -> str:
        return wrap(r.text, r.bold, r.italic, r.underline)

    out = []
    for block in docx.Document(str(path)).iter_inner_content():
        if isinstance(block, Table):
            rows = ("<tr>" + "".join(f"<td>{''.join(map(paragraph, cell.paragraphs))}</td>" for cell in row.cells)
                    + "</tr>" for row in block.rows)
            out.append(f'<table>{"".join(rows)}</table>')
        else:
            out.append(paragraph(block))
    return "".join(out)


def pptx_html(path: Path) -> str:
    import pptx
    from pptx.enum.shapes import PP_PLACEHOLDER

    def text_frame(frame) -> Iterable[str]:
        for p in frame.paragraphs:
            yield "".join(wrap(r.text, r.font.bold, r.font.italic, r.font.underline, r.hyperlink.address)
                          for r in p.runs)

    out = []
    for slide in pptx.Presentation(str(path)).slides:
        parts = []
        for shape in slide.shapes:
            if not shape.has_text_frame:
                continue
            title = shape.is_placeholder and shape.placeholder_format.type in (PP_PLACEHOLDER.TITLE,
                                                                                PP_PLACEHOLDER.CENTER_TITLE)
            lines = list(text_frame(shape.text_frame))
            if title:
                parts.append(f'<div class="title">{"".join(lines)}</div>')
            else:
                parts.append("<ul>" + "".join(f"<li>{line}</li>" for line in lines) + "</ul>")
        out.append(f'<div class="slide">{"".join(parts)}</div>')
        if slide.has_notes_slide:
            notes = "<br>".join(text_frame(slide.notes_slide.notes_text_frame))
            out.append(f'<div class="notes"><span class="meta">notes</span> {notes}</div>')
    return "".join(out)


def odt_html(path: Path) -> str:
    from odf.opendocument import load

    doc = load(str(path))
    css = {}  # text style name -> CSS from its text-properties
    for style in doc.automaticstyles.childNodes + doc.styles.childNodes:
        name = style.attributes.get(("urn:oasis:names:tc:opendocument:xmlns:style:1.0", "name"))
        for props in style.childNodes:
            if props.qname[1] == "text-properties":
                rules = {k[1]: v for k, v in props.attributes.items()
                         if k[1] in ("font-weight", "font-style", "color", "background-color")}
                css[name] = ";".join(f"{k}:{v}" for k, v in rules.items())

    def inline(node) -> str:
        if node.nodeType == node.TEXT_NODE:
            return esc(str(node.data))
        name = node.qname[1]
        inner = "".join(inline(child) for child in node.childNodes)
        if name == "span":
            style = node.getAttribute("stylename")
            return f'<span style="{esc(css.get(style, ""))}" title="{esc(style)}">{inner}</span>'
        if name == "a":
            return f'<a href="{esc(node.getAttribute("href"))}">{inner}</a>'
        return {"s": " ", "tab": "\t", "line-break": "<br>"}.get(name, inner)

    out = []
    for node in doc.text.childNodes:
        if node.qname[1] in ("h", "p"):
            tag = "h2" if node.qname[1] == "h" else "p"
            out.append(f"<{tag}>{''.join(inline(child) for child in node.childNodes)}</{tag}>")
    return "".join(out)


def epub_html(path: Path) -> str:
    from ebooklib import epub

    book = epub.read_epub(str(path), {"ignore_ncx": True})
    out = [f'<div class="meta">dc:title {esc(book.get_metadata("DC", "title")[0][0])}</div>']
    for idref, _ in book.spine:
        item = book.get_item_with_id(idref)
        body = item.get_body_content().decode("utf-8")
        out.append(f'<div class="chapter"><span class="meta">{esc(item.file_name)}</span>{body}</div>')
    return "".join(out)


# (format, picture, [(source, translation, build, read)])
FORMATS = [
    ("md", "md.png", [("notes.md", "notizen.md", write_text(MD), md_html)]),
    ("html", "html.png", [("page.html", "seite.html", write_text(HTML), html_html)]),
    ("srt", "subtitles.png", [("talk.srt", "talk.de.srt", write_text(SRT), subtitles_html),
                              ("talk.vtt", "talk.de.vtt", write_text(VTT), subtitles_html)]),
    ("docx", "docx.png", [("report.docx", "bericht.docx", make_docx, docx_html)]),
    ("pptx", "pptx.png", [("slides.pptx", "folien.pptx", make_pptx, pptx_html)]),
    ("odt", "odt.png", [("letter.odt", "brief.odt", make_odt, odt_html)]),
    ("epub", "epub.png", [("book.epub", "buch.epub", make_epub, epub_html)]),
]

CSS = """
body { margin: 0; padding: 10px; width: 880px; background: #fff; color: #222;
       font: 15px/1.45 "DejaVu Sans", sans-serif; }
.row { display: flex; gap: 12px; margin-bottom: 12px; }
.pane { flex: 1 1 0; min-width: 0; border: 1px solid #c8c8c8; border-radius: 6px; overflow: hidden; }
.label { background: #eef1f4; border-bottom: 1px solid #c8c8c8; padding: 4px 10px; font-size: 13px; color: #333; }
.label code { font: bold 13px "DejaVu Sans Mono", monospace; }
.after .label { background: #e6f2e6; }
.doc { padding: 4px 12px 8px; }
.doc h1, .doc h2 { font-size: 19px; margin: 8px 0 6px; }
.doc p, .doc ul { margin: 6px 0; }
.doc ul { padding-left: 22px; }
.doc pre { background: #f4f4f4; padding: 4px 8px; margin: 6px 0; font-size: 13px; }
.doc a { color: #1a5fb4; }
.doc mark { background: #ffe066; }
.meta { color: #888; font-size: 12px; font-family: "DejaVu Sans Mono", monospace; margin-right: 6px; }
div.meta { margin: 6px 0 2px; }
.docx, .odt, .epub { font-family: "Liberation Serif", "DejaVu Serif", serif; font-size: 16px; }
.docx table { border-collapse: collapse; margin: 6px 0; width: 100%; }
.docx td { border: 1px solid #888; padding: 0 6px; vertical-align: top; width: 50%; }
.docx td p { margin: 3px 0; }
.slide { border: 1px solid #bbb; box-shadow: 1px 1px 4px #ccc; margin: 8px 0; padding: 8px 14px; min-height: 190px;
         font-family: "Liberation Sans", sans-serif; font-size: 15px; }
.slide .title { font-size: 24px; text-align: center; margin: 12px 0 16px; }
.slide li { margin: 6px 0; }
.notes { font-family: "Liberation Sans", sans-serif; border-top: 1px dashed #bbb; padding-top: 4px; }
.chapter { border-top: 1px dashed #bbb; margin-top: 6px; padding-top: 4px; }
.chapter h1 { margin-top: 2px; }
.chapter nav ol { margin: 4px 0; padding-left: 22px; }
pre.subtitles { font: 13.5px/1.45 "DejaVu Sans Mono", monospace; background: none; padding: 2px 0;
                white-space: pre-wrap; }
.timing { color: #777; }
.tag { color: #b06000; opacity: 0.75; }
"""


def pane(name: str, body: str, fmt: str, after: bool) -> str:
    label = f"<code>{esc(name)}</code> — " + ("after (nmt translate)" if after else "before")
    return (f'<section class="pane{" after" if after else ""}"><div class="label">{label}</div>'
            f'<div class="doc {fmt}">{body}</div></section>')


def translate(checkpoint: Path, src: Path, dst: Path) -> None:
    cmd = [sys.executable, "-m", "nmt", "translate", "--checkpoint", str(checkpoint), "-i", str(src), "-o", str(dst)]
    print("$", " ".join(str(Path(c).relative_to(ROOT)) if c.startswith(str(ROOT)) else c for c in cmd[1:]))
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}  # a small model: one thread
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if result.returncode:
        sys.exit(f"nmt translate failed ({result.returncode}):\n{result.stdout}{result.stderr}")
    print("  " + (result.stderr.strip().splitlines() or [""])[-1])


def screenshot(chromium: str, page: Path, png: Path, tmp: Path) -> None:
    """`page` rendered by headless Chromium, cropped to its content, written to `png` as an optimized PNG."""
    from PIL import Image, ImageChops

    raw = tmp / "raw.png"
    cmd = [chromium, "--headless", "--disable-gpu", "--hide-scrollbars", "--no-first-run", "--mute-audio",
           "--force-device-scale-factor=1", f"--user-data-dir={tmp / 'profile'}", f"--window-size={WIDTH},{HEIGHT}",
           f"--screenshot={raw}", page.as_uri()]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.insert(1, "--no-sandbox")
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    with Image.open(raw) as im:
        im = im.convert("RGB")
    box = ImageChops.difference(im, Image.new("RGB", im.size, "white")).getbbox()
    if box is None or box[3] >= HEIGHT - 2:
        sys.exit(f"{page.name}: the content does not fit {WIDTH}x{HEIGHT}")
    im = im.crop((0, 0, WIDTH, box[3] + 10))
    im.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(png, optimize=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default = next((c for c in CHECKPOINTS if c.exists()), CHECKPOINTS[-1])
    parser.add_argument("--checkpoint", type=Path, default=default,
                        help="model to translate with "
                             "(default: runs/tiny/averaged.pt, else tests/fixtures/demo-model.pt)")
    parser.add_argument("--only", default="", help="comma-separated formats (md,html,srt,docx,pptx,odt,epub)")
    parser.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser"),
                        help="the Chromium binary (default: chromium on PATH)")
    args = parser.parse_args()
    if not args.chromium:
        sys.exit("no chromium on PATH (Debian: apt-get install chromium), or pass --chromium")
    only = {f.strip() for f in args.only.split(",") if f.strip()}
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        for fmt, picture, documents in FORMATS:
            if only and fmt not in only:
                continue
            rows = []
            for source, translation, build, read in documents:
                src, dst = tmp / source, tmp / translation
                build(src)
                translate(args.checkpoint.resolve(), src, dst)
                rows.append('<div class="row">' + pane(source, read(src), fmt, False)
                            + pane(translation, read(dst), fmt, True) + "</div>")
            page = tmp / f"{fmt}.html"
            page.write_text(f'<!DOCTYPE html><html><head><meta charset="utf-8"><style>{CSS}</style></head>'
                            f'<body>{"".join(rows)}</body></html>', encoding="utf-8")
            screenshot(args.chromium, page, OUT / picture, tmp)
            print(f"  -> {(OUT / picture).relative_to(ROOT)} ({(OUT / picture).stat().st_size / 1024:.1f} KiB)")


if __name__ == "__main__":
    main()
