"""PowerPoint runs as PowerPoint writes them: split on attributes that are not formatting (lang, altLang, smtClean,
err, dirty), a final "." in a run of its own, a slide number field between words. Built by python-pptx, the runs'
attributes set as PowerPoint sets them; translated by the fake translator of the office tests (tests.helpers.documents:
words reversed and uppercased, word i aligned to word n-1-i) and read back by python-pptx."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest
from lxml import etree

from nmt.translation.documents import pptx as pptx_format
from tests.helpers.documents import reverse_upper

pptx = pytest.importorskip("pptx")
A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"


def slide_with(tmp_path: Path, runs: list[tuple[str, dict[str, str]]], field: int | None = None) -> Path:
    """A slide whose body paragraph is `runs` (text, a:rPr attributes); a slide-number field before run `field`."""
    prs = pptx.Presentation()
    slide = prs.slides.add_slide(prs.slide_layouts[1])
    slide.shapes.title.text = "Title"
    p = slide.placeholders[1].text_frame.paragraphs[0]
    for k, (text, attrs) in enumerate(runs):
        if k == field:
            fld = etree.SubElement(p._p, f"{A}fld", id="{B6F15528-21DE-4FAA-801E-634DDDAF4B2B}", type="slidenum")
            etree.SubElement(fld, f"{A}rPr", lang="en-US")
            etree.SubElement(fld, f"{A}t").text = "7"
        r = p.add_run()
        r.text = text
        rpr = r._r.get_or_add_rPr()
        for name, value in attrs.items():
            rpr.set(name, value)
    path = tmp_path / "in.pptx"
    prs.save(path)
    return path


def body(out: Path) -> etree._Element:
    with zipfile.ZipFile(out) as z:
        root = etree.fromstring(z.read("ppt/slides/slide1.xml"))
    return list(root.iter(f"{A}p"))[1]


def translated(src: Path) -> etree._Element:
    out = src.with_name("out.pptx")
    pptx_format.translate(src, out, reverse_upper)
    pptx.Presentation(out)  # opens in python-pptx
    return body(out)


def test_runs_split_on_what_is_not_formatting_are_one_run_and_the_period_is_written_once(tmp_path: Path) -> None:
    # POI's aascu…cooper_.pptx: a final "." in a run of its own (smtClean) was written twice
    plain = {"lang": "en-US", "dirty": "0"}
    src = slide_with(tmp_path, [("The results ", plain), ("are", {**plain, "err": "1"}),
                                (" here", {"lang": "en-GB", "altLang": "en-US", "dirty": "0"}),
                                (".", {**plain, "smtClean": "0"})])
    p = translated(src)
    runs = p.findall(f"{A}r")
    assert "".join(r.findtext(f"{A}t") for r in runs) == "HERE. ARE RESULTS THE"
    assert len(runs) == 1  # one formatting: one run


def test_formatting_still_splits_runs_and_moves_with_its_word(tmp_path: Path) -> None:
    src = slide_with(tmp_path, [("The ", {"lang": "en-US"}), ("results", {"lang": "en-US", "b": "1", "err": "1"}),
                                (" are here", {"lang": "en-US", "smtClean": "0"}), (".", {"lang": "en-US"})])
    p = translated(src)
    bold = [r.findtext(f"{A}t") for r in p.findall(f"{A}r") if r.find(f"{A}rPr").get("b") == "1"]
    assert bold == ["RESULTS"] and "".join(t.text for t in p.iter(f"{A}t")).count(".") == 1


def test_a_slide_number_field_keeps_its_spaces(tmp_path: Path) -> None:
    src = slide_with(tmp_path, [("see slide ", {"lang": "en-US"}), (" for the details", {"lang": "en-US"})], field=1)
    p = translated(src)
    shown = "".join(el.text or "" for el in p.iter(f"{A}t"))
    assert "7" in shown and not re.search(r"\w7|7\w", shown), shown
