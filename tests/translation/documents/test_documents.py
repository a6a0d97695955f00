"""nmt.translation.documents: text, Markdown, HTML and subtitle documents translated with the committed demo model, the
output parsed again with the same parser: every text translated, formatting on the aligned words, everything outside the
text (markup, code, link targets, front matter, timings) as it was; bad input refused in one line, nothing left."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from nmt.translation import documents
from nmt.translation.documents import translate_document
from nmt.translation.documents.md import parser
from tests.helpers.cli import assert_one_line_error, run_cli
from tests.helpers.paths import DEMO_MODEL

CHECKPOINT = DEMO_MODEL


def roundtrip(translator, tmp_path: Path, name: str, data: str | bytes, fmt: str | None = None) -> str:
    src, dst = tmp_path / name, tmp_path / f"out-{name}"
    src.write_bytes(data.encode() if isinstance(data, str) else data)
    report = translate_document(translator, src, dst, fmt)
    assert report.paragraphs > 0 and report.sentences >= report.paragraphs
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([src.name, dst.name])  # no temp file left
    return dst.read_bytes().decode("utf-8")


# ---- txt

TXT = "\ufeffthe red car\r\n\r\n  three red cars\r\n  the red car\r\n\r\n- the twenty-sixth of December\r\n- 42\r\n"


def test_txt_paragraphs_between_blank_lines_keep_bom_crlf_and_list_markers(translator, tmp_path):
    out = roundtrip(translator, tmp_path, "notes.txt", TXT, "txt")
    assert out.startswith("\ufeff") and "\n" not in out.replace("\r\n", "")  # BOM and CRLF line ends kept
    lines = out.removeprefix("\ufeff").split("\r\n")
    assert lines[0] == "das rote Auto" and lines[1] == "" and lines[-1] == ""
    assert lines[2].startswith("  ") and "red" not in out  # a paragraph's lines translated together, indent kept
    assert lines[-3].startswith("- ") and "Dezember" in lines[-3] and lines[-2] == "- 42"  # items apart; no words


# ---- md

MD = """---
title: the red car
tags: [three red cars]
---

# three **red** cars

the **red** car

**three** red cars

[the *red* car](https://example.com/the-red-car "the red car")

> the twenty-sixth of *December*
> eighteen forty-three

- the red car `the red car`
- three red cars ![the red car](car.png)

| the red car | three red cars |
|---|---|
| the twenty-sixth of December | 42 |

```python
print("the red car")
```

<div class="note">the red car</div>

[three red cars][ref]

[ref]: https://example.com/cars "three red cars"
"""


def md_tokens(text: str) -> list:
    return parser().parse(text)


def outside_text(tokens: list) -> list:
    """Everything of a parse but the translated text: block tokens, code, HTML, link targets, images."""
    out = []
    for t in tokens:
        out.append((t.type, t.tag, t.markup, t.info, None if t.type == "inline" else t.content, t.attrs))
        for c in t.children or []:
            if c.type not in ("text", "softbreak"):
                out.append((c.type, c.markup, c.attrs, c.content if c.type != "text_special" else ""))
    return out


def test_md_translates_every_text_and_keeps_code_links_and_front_matter(translator, tmp_path):
    out = roundtrip(translator, tmp_path, "doc.md", MD)
    assert out.startswith(MD[:MD.index("---\n\n") + 4])  # front matter untouched
    before, after = md_tokens(MD.split("---\n", 2)[2]), md_tokens(out.split("---\n", 2)[2])
    assert outside_text(before) == outside_text(after)  # same blocks, emphasis, links, code, HTML
    texts = [(b.content, a.content) for b, a in zip(before, after) if b.type == "inline" and b.content != "42"]
    kept = re.compile(r"`[^`]*`|!\[[^]]*\]\([^)]*\)|\]\([^)]*\)")  # inline code, images, link targets
    assert texts and all(b != a and not re.search(r"\b(the|red|cars?)\b", kept.sub("", a)) for b, a in texts), texts
    for kept in ('print("the red car")', '<div class="note">the red car</div>', "`the red car`",
                 "![the red car](car.png)", "(https://example.com/the-red-car \"the red car\")",
                 '[ref]: https://example.com/cars "three red cars"'):
        assert kept in out


def test_md_formatting_sits_on_the_aligned_words(translator, tmp_path):
    out = roundtrip(translator, tmp_path, "doc.md", MD)
    assert "# drei **rote** Autos" in out
    assert "das **rote** Auto" in out
    assert "**drei** rote Autos" in out
    assert "*Dezember*" in out and '[das *rote* Auto](https://example.com/the-red-car "the red car")' in out


# ---- html

HTML = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>three red cars</title>
<script>var s = "the red car";</script><style>b { color: red }</style></head>
<body><h1>the <b>red</b> car</h1><p><i>three</i> red cars</p><p><a href="/the-red-car">the red car</a></p>
<pre>the red car</pre><!-- the red car --></body></html>
"""
TAG = re.compile(r"<[^>]*>")


def test_html_document_markup_byte_exact_and_tags_on_their_words(translator, tmp_path):
    out = roundtrip(translator, tmp_path, "page.html", HTML)
    assert TAG.findall(out) == TAG.findall(HTML)
    assert 'var s = "the red car";' in out and "<pre>the red car</pre>" in out and "<!-- the red car -->" in out
    assert "<title>drei rote Autos</title>" in out and "das <b>rote</b> Auto" in out
    assert "<i>drei</i> rote Autos" in out and '<a href="/the-red-car">das rote Auto</a>' in out
    texts = [t.strip() for t in TAG.split(out.split("<body>")[1].split("<pre>")[0]) if t.strip()]
    assert texts and not any(re.search(r"\b(the|red|cars?)\b", t) for t in texts), texts


# ---- subtitles

SRT = """1
00:00:01,000 --> 00:00:04,000
the <b>red</b> car

2
00:00:02,500 --> 00:00:05,000 X1:100 X2:200
<i>three</i> red cars
the red car

3
00:00:06,000 --> 00:00:07,000
42
"""

VTT = """WEBVTT - the red car

NOTE the red car

STYLE
::cue(b) { color: red }

intro
00:01.000 --> 00:04.000 align:start position:10%
<v Bob>the <b>red</b> car

00:02.500 --> 00:05.000
- three red cars
- <i>the</i> red car
"""


def blocks(text: str) -> list[list[str]]:
    return [block.split("\n") for block in text.strip("\n").split("\n\n")]


def test_srt_timings_numbering_and_overlapping_cues_kept_tags_on_their_words(translator, tmp_path):
    out = roundtrip(translator, tmp_path, "film.srt", SRT)
    before, after = blocks(SRT), blocks(out)
    assert [b[:2] for b in before] == [b[:2] for b in after]  # numbers, timings, coordinates
    assert [len(b) for b in before] == [len(b) for b in after]  # as many lines per cue
    assert after[0][2] == "das <b>rote</b> Auto" and after[1][2].startswith("<i>drei</i>") and after[2][2] == "42"
    assert not re.search(r"\b(the|red|cars?)\b", "\n".join(line for b in after for line in b[2:]))
    assert out.endswith("42\n")


def test_vtt_header_note_style_identifiers_and_settings_kept(translator, tmp_path):
    out = roundtrip(translator, tmp_path, "film.vtt", VTT)
    before, after = blocks(VTT), blocks(out)
    assert before[:3] == after[:3]  # WEBVTT header, NOTE, STYLE
    assert before[3][:2] == after[3][:2] and before[4][:1] == after[4][:1]
    assert after[3][2] == "<v Bob>das <b>rote</b> Auto"
    assert after[4][1].startswith("- ") and after[4][2].startswith("- ") and "rote Autos" in after[4][1]


def test_a_bare_webvtt_header_and_shared_file_modes(translator, tmp_path):
    out = roundtrip(translator, tmp_path, "bare.vtt", "WEBVTT\n\n00:01.000 --> 00:02.000\nthe red car\n")
    assert out == "WEBVTT\n\n00:01.000 --> 00:02.000\ndas rote Auto\n"
    umask = os.umask(0)
    os.umask(umask)
    assert [(p.stat().st_mode & 0o777) for p in tmp_path.iterdir()] == [0o666 & ~umask] * 2  # not mkstemp's 0600


# ---- the command line and bad input


def translate(*args: str | Path):
    return run_cli("translate", "--checkpoint", CHECKPOINT, *args)


def test_cli_picks_the_document_path_by_extension_and_txt_stays_line_by_line(tmp_path):
    (tmp_path / "a.md").write_text("the **red** car\n\nthree red cars\n")
    result = translate("-i", tmp_path / "a.md", "-o", tmp_path / "b.md")
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "b.md").read_text() == "das **rote** Auto\n\ndrei rote Autos\n"
    (tmp_path / "a.txt").write_text("the red car\nthree red cars\n")
    assert translate("-i", tmp_path / "a.txt").stdout == "das rote Auto\ndrei rote Autos\n"  # lines, as ever
    assert translate("-i", tmp_path / "a.md", "--format", "lines").stdout.count("\n") == 3
    assert translate("-i", tmp_path / "a.txt", "--format", "md").stdout.count("\n") == 1  # one paragraph


def assert_refused(result, tmp_path: Path, *fragments: str) -> None:
    assert_one_line_error(result, *fragments)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(("out", "."))]  # no output, no temp file


def test_bad_documents_are_refused_in_one_line_and_leave_nothing(tmp_path):
    out = tmp_path / "out.md"
    assert_refused(translate("-i", tmp_path / "missing.md", "-o", out), tmp_path, "not found")
    (tmp_path / "bad.md").write_bytes(b"the red car \xff\xfe\n")
    assert_refused(translate("-i", tmp_path / "bad.md", "-o", out), tmp_path, "not UTF-8", "offset 12")
    (tmp_path / "zip.srt").write_bytes(b"PK\x03\x04\x14\x00\x00\x00\x08\x00\x9c\x8a")
    assert_refused(translate("-i", tmp_path / "zip.srt", "-o", tmp_path / "out.srt"), tmp_path, "not UTF-8")
    (tmp_path / "notes.srt").write_text("# three red cars\n\nthe red car\n")
    assert_refused(translate("-i", tmp_path / "notes.srt", "-o", tmp_path / "out.srt"), tmp_path, "no subtitle cues")
    (tmp_path / "notes.vtt").write_text("1\n00:00:01,000 --> 00:00:02,000\nthe red car\n")
    assert_refused(translate("-i", tmp_path / "notes.vtt", "-o", tmp_path / "out.vtt"), tmp_path, "not a WebVTT")
    with open(tmp_path / "big.md", "wb") as f:
        f.truncate(50 * 2**20)
    assert_refused(translate("-i", tmp_path / "big.md", "-o", out), tmp_path, "50.0 MiB", "limit")
    assert_refused(translate("-i", tmp_path / "bad.md", "--format", "rtf"), tmp_path, "unknown format 'rtf'")
    (tmp_path / "scan.pdf").write_bytes(b"%PDF-1.4\n")
    assert_refused(translate("-i", tmp_path / "scan.pdf", "-o", tmp_path / "out.pdf"), tmp_path, "layout", ".docx")
    (tmp_path / "r.docx").write_bytes(b"PK")
    assert_refused(translate("-i", tmp_path / "r.docx"), tmp_path, "--output")


def test_a_missing_format_module_or_library_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(documents.MODULES, "docx", "no_such_module")
    (tmp_path / "r.docx").write_bytes(b"PK")
    assert_refused(translate("-i", tmp_path / "r.docx", "-o", tmp_path / "out.docx"), tmp_path, "nmt[documents]")


def test_an_error_while_translating_leaves_no_partial_output(translator, tmp_path, monkeypatch):
    from nmt.translation.documents import md

    (tmp_path / "a.md").write_text(MD)

    def failing(src, dst, translate_paragraphs):
        dst.write_text("half")
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(md, "translate", failing)
    with pytest.raises(RuntimeError):
        translate_document(translator, tmp_path / "a.md", tmp_path / "out.md")
    assert [p.name for p in tmp_path.iterdir()] == ["a.md"]
