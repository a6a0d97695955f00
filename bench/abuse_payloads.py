"""Attack bodies for bench/serve_abuse.py's `payloads` scenario (issue 43): small inputs that used to hold a core
for minutes or grow memory by gigabytes. Each is one request: LibreTranslate's /translate with format=html, a
document for /translate_file (built here with zipfile), or /v1/translate with a glossary."""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass

W = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
R = 'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"'
PACKAGE = "http://schemas.openxmlformats.org/package/2006"
OFFICE = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
MAIN = "application/vnd.openxmlformats-officedocument.wordprocessingml"


@dataclass
class Payload:
    name: str
    path: str  # /translate, /translate_file, /v1/translate
    json: dict | None = None
    file: tuple[str, bytes] | None = None  # (file name, content) for /translate_file

    def size(self) -> int:
        return len(json.dumps(self.json).encode()) if self.json is not None else len(self.file[1])  # type: ignore


def html(q: str) -> dict:
    return {"q": q, "source": "en", "target": "de", "format": "html"}


def docx(body: str, headers: list[str] = ()) -> bytes:  # type: ignore[assignment]
    """A minimal .docx: `body` is the XML inside <w:body>, each of `headers` the XML inside a <w:hdr>."""
    types = "".join(f'<Override PartName="/word/header{k}.xml" ContentType="{MAIN}.header+xml"/>'
                    for k in range(len(headers)))
    rels = "".join(f'<Relationship Id="rH{k}" Type="{OFFICE}/header" Target="header{k}.xml"/>'
                   for k in range(len(headers)))
    refs = "".join(f'<w:headerReference w:type="default" r:id="rH{k}"/>' for k in range(len(headers)))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", f'<?xml version="1.0"?><Types xmlns="{PACKAGE}/content-types">'
                   '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
                   '<Default Extension="xml" ContentType="application/xml"/>'
                   f'<Override PartName="/word/document.xml" ContentType="{MAIN}.document.main+xml"/>{types}</Types>')
        z.writestr("_rels/.rels", f'<?xml version="1.0"?><Relationships xmlns="{PACKAGE}/relationships">'
                   f'<Relationship Id="rId1" Type="{OFFICE}/officeDocument" Target="word/document.xml"/>'
                   '</Relationships>')
        z.writestr("word/_rels/document.xml.rels",
                   f'<?xml version="1.0"?><Relationships xmlns="{PACKAGE}/relationships">{rels}</Relationships>')
        z.writestr("word/document.xml", f'<?xml version="1.0"?><w:document {W} {R}><w:body>{body}'
                   f'<w:sectPr>{refs}</w:sectPr></w:body></w:document>')
        for k, header in enumerate(headers):
            z.writestr(f"word/header{k}.xml", f'<?xml version="1.0"?><w:hdr {W}>{header}</w:hdr>')
    return out.getvalue()


def run(text: str, bold: bool = False) -> str:
    return f'<w:r>{"<w:rPr><w:b/></w:rPr>" if bold else ""}<w:t xml:space="preserve">{text}</w:t></w:r>'


def payloads() -> list[Payload]:
    """The issue's reproductions at full size."""
    big_header = "<w:p>" + run("Hello there. ") * 30000 + "</w:p>"  # about 1 MiB of XML, deflated to a few KiB
    return [
        Payload("html: <p>1? x10000", "/translate", html("<p>" + "1? " * 10000 + "</p>")),
        Payload("html: <div>x20000 </i>x20000", "/translate", html("<div>" * 20000 + "</i>" * 20000)),
        Payload("html: <b>x16000 nested", "/translate", html("<b>" * 16000 + "Hello world." + "</b>" * 16000)),
        Payload("html: 'a <' x10000", "/translate", html("a <" * 10000)),
        Payload("html: 'a <' x80000 (240 KB)", "/translate", html("a <" * 80000)),
        Payload("docx: one w:t of '1? ' x40000", "/translate_file",
                file=("t.docx", docx("<w:p>" + run("1? " * 40000) + "</w:p>"))),
        Payload("md: 60 KB of '1? '", "/translate_file", file=("t.md", ("1? " * 20000).encode())),
        Payload("srt: one 2,000-line cue", "/translate_file", file=("t.srt", (
            "1\n00:00:01,000 --> 00:00:02,000\n" + "\n".join(f"line {k} is here" for k in range(2000)) + "\n"
        ).encode())),
        Payload("docx: 5,000 alternating bold runs", "/translate_file",
                file=("b.docx", docx("<w:p>" + "".join(run(f"w{k} ", k % 2 == 1) for k in range(5000)) + "</w:p>"))),
        Payload("docx: 20 headers of 1 MiB", "/translate_file",
                file=("h.docx", docx("<w:p>" + run("Hello.") + "</w:p>", [big_header] * 20))),
        Payload("glossary: dog x500, one term", "/v1/translate",
                {"sentences": [" ".join(["dog"] * 500)], "glossary": {"dog": "zzqx"}}),
    ]
