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


# --- SmartArt, chart titles, comments ----------------------------------------------------------------------------

P = "http://schemas.openxmlformats.org/presentationml/2006/main"
DGM = "http://schemas.openxmlformats.org/drawingml/2006/diagram"
DSP = "http://schemas.microsoft.com/office/drawing/2008/diagram"
REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
PARTS = {  # name: (content type, relationship type from the slide, XML) as PowerPoint writes them
    "ppt/diagrams/data1.xml": (
        "application/vnd.openxmlformats-officedocument.drawingml.diagramData+xml", f"{REL}/diagramData",
        f'<dgm:dataModel xmlns:dgm="{DGM}" xmlns:a="{A[1:-1]}"><dgm:ptLst><dgm:pt modelId="{{0}}" type="doc">'
        '<dgm:prSet/><dgm:spPr/><dgm:t><a:bodyPr/><a:lstStyle/><a:p><a:endParaRPr lang="en-US"/></a:p></dgm:t>'
        '</dgm:pt><dgm:pt modelId="{1}"><dgm:prSet phldrT="[Text]"/><dgm:spPr/><dgm:t><a:bodyPr/><a:lstStyle/>'
        '<a:p><a:r><a:rPr lang="en-US" dirty="0"/><a:t>Plan the red car</a:t></a:r></a:p></dgm:t></dgm:pt>'
        '</dgm:ptLst><dgm:cxnLst/><dgm:bg/><dgm:whole/></dgm:dataModel>'),
    "ppt/diagrams/drawing1.xml": (
        "application/vnd.ms-office.drawingml.diagramDrawing+xml", "http://schemas.microsoft.com/office/2007/"
        "relationships/diagramDrawing",
        f'<dsp:drawing xmlns:dsp="{DSP}" xmlns:a="{A[1:-1]}"><dsp:spTree><dsp:nvGrpSpPr><dsp:cNvPr id="0" name=""/>'
        '<dsp:cNvGrpSpPr/></dsp:nvGrpSpPr><dsp:grpSpPr/><dsp:sp modelId="{2}"><dsp:txBody><a:bodyPr/><a:lstStyle/>'
        '<a:p><a:r><a:rPr lang="en-US"/><a:t>Plan the red car</a:t></a:r></a:p></dsp:txBody></dsp:sp></dsp:spTree>'
        '</dsp:drawing>'),
    "ppt/comments/comment1.xml": (
        "application/vnd.openxmlformats-officedocument.presentationml.comments+xml", f"{REL}/comments",
        f'<p:cmLst xmlns:p="{P}"><p:cm authorId="0" dt="2007-10-23T09:14:49.723" idx="1"><p:pos x="10" y="10"/>'
        '<p:text>Check the red car</p:text></p:cm></p:cmLst>'),
}


def with_parts(src: Path) -> Path:
    """The presentation with a SmartArt's data and drawing parts and a legacy comment added, as PowerPoint adds
    them: content types, the slide's relationships, the parts."""
    out = src.with_name("parts.pptx")
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as w:
        for item in z.infolist():
            data = z.read(item)
            if item.filename == "[Content_Types].xml":
                data = data.replace(b"</Types>", "".join(
                    f'<Override PartName="/{name}" ContentType="{kind}"/>' for name, (kind, _, _) in PARTS.items()
                ).encode() + b"</Types>")
            elif item.filename == "ppt/slides/_rels/slide1.xml.rels":
                data = data.replace(b"</Relationships>", "".join(
                    f'<Relationship Id="rIdX{k}" Type="{rel}" Target="../{name[4:]}"/>'
                    for k, (name, (_, rel, _)) in enumerate(PARTS.items())).encode() + b"</Relationships>")
            w.writestr(item, data)
        for name, (_, _, xml) in PARTS.items():
            w.writestr(name, '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\r\n' + xml)
    return out


def test_smartart_chart_titles_and_comments_are_translated_and_cached_cells_kept(tmp_path: Path) -> None:
    from pptx.chart.data import CategoryChartData
    from pptx.enum.chart import XL_CHART_TYPE
    from pptx.util import Inches

    prs = pptx.Presentation()
    slide = prs.slides.add_slide(prs.slide_layouts[5])
    slide.shapes.title.text = "Sales"
    data = CategoryChartData()
    data.categories = ["first quarter", "second quarter"]
    data.add_series("Sales", (1.0, 2.0))
    chart = slide.shapes.add_chart(XL_CHART_TYPE.BAR_CLUSTERED, Inches(1), Inches(1), Inches(4), Inches(3), data).chart
    chart.has_title = True
    chart.chart_title.text_frame.text = "Quarterly sales by region"
    prs.save(tmp_path / "plain.pptx")
    src = with_parts(tmp_path / "plain.pptx")
    out = tmp_path / "out.pptx"
    pptx_format.translate(src, out, reverse_upper)
    translated_chart = pptx.Presentation(out).slides[0].shapes[1].chart
    assert translated_chart.chart_title.text_frame.text == "REGION BY SALES QUARTERLY"
    assert list(translated_chart.plots[0].categories) == ["first quarter", "second quarter"]  # the workbook's cache
    with zipfile.ZipFile(out) as z:
        for name in ("ppt/diagrams/data1.xml", "ppt/diagrams/drawing1.xml"):
            assert "".join(t.text for t in etree.fromstring(z.read(name)).iter(f"{A}t")) == "CAR RED THE PLAN", name
        assert etree.fromstring(z.read("ppt/comments/comment1.xml")).findtext(f"{{{P}}}cm/{{{P}}}text") == \
            "CAR RED THE CHECK"
