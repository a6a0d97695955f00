"""What a rebuilt Office paragraph says anew (nmt.translation.documents.ooxml_marks): translated runs name the target
language (w:lang, a:rPr/@lang), kept runs keep theirs; copies of revision marks (w:ins around words of two sentences,
a w:rPrChange in the properties of several runs) never share an id with each other or anything in the part. Built
as Word and PowerPoint write them, translated by the fake translator of tests.helpers.documents."""

from __future__ import annotations

import inspect
import zipfile
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
from lxml import etree

from nmt.translation import documents
from nmt.translation.documents import docx as docx_format
from nmt.translation.documents import pptx as pptx_format
from tests.helpers.documents import W, docx_with, reverse_upper, word_run

docx = pytest.importorskip("docx")
pptx = pytest.importorskip("pptx")

A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
REV = 'w:author="Ann" w:date="2024-05-01T10:00:00Z"'
MC_FALLBACK = "{http://schemas.openxmlformats.org/markup-compatibility/2006}Fallback"


def document(src: Path, languages: tuple[str, str] | None = ("en", "de")) -> etree._Element:
    out = src.with_name("out.docx")
    docx_format.translate(src, out, reverse_upper, languages=languages)
    docx.Document(out)  # opens in python-docx
    with zipfile.ZipFile(out) as z:
        return etree.fromstring(z.read("word/document.xml"))


def langs(root: etree._Element) -> dict[str, dict[str, str]]:
    """Each run's text (an atom's: its element's name) -> its w:lang attributes (short names)."""
    out = {}
    for r in root.iter(W + "r"):
        lang = r.find(f"{W}rPr/{W}lang")
        shown = "".join(t.text or "" for t in r.iter(W + "t", W + "delText")) or etree.QName(r[-1]).localname
        out[shown.strip()] = {etree.QName(k).localname: v for k, v in lang.attrib.items()} if lang is not None else {}
    return out


def test_translated_runs_name_the_target_language_and_kept_runs_keep_theirs(tmp_path: Path) -> None:
    mixed = '<w:lang w:val="en-US" w:eastAsia="ja-JP" w:bidi="en-GB"/>'
    src = docx_with(tmp_path / "in.docx",
                    '<w:pPr><w:rPr><w:lang w:val="en-US"/></w:rPr></w:pPr>'
                    + word_run("The red car ", '<w:lang w:val="en-US"/>') + word_run("is", f"<w:b/>{mixed}")
                    + '<w:r><w:rPr><w:lang w:val="en-US"/></w:rPr><w:drawing/></w:r>'
                    + word_run(" fast.", '<w:lang w:val="en-US"/>'),
                    word_run("Servus and good day.", '<w:lang w:val="de-AT"/>')
                    + f'<w:del w:id="1" {REV}><w:r><w:rPr><w:lang w:val="en-US"/></w:rPr>'
                      '<w:delText>old</w:delText></w:r></w:del>')
    root = document(src)
    got = langs(root)
    assert root.find(f".//{W}pPr/{W}rPr/{W}lang").get(W + "val") == "de-DE"  # the paragraph mark's too
    assert got["FAST."] == {"val": "de-DE"} and got["CAR RED THE"] == {"val": "de-DE"}
    # eastAsia named another script's language: kept; bidi named the source language: the target
    assert got["IS"] == {"val": "de-DE", "eastAsia": "ja-JP", "bidi": "de-DE"}
    assert got["drawing"] == {"val": "en-US"} and got["old"] == {"val": "en-US"}  # an atom, a deletion: kept
    assert got["DAY. GOOD AND SERVUS"] == {"val": "de-AT"}  # it named the target's language already
    unknown = langs(document(src, ("src", "tgt")))  # no language codes: every mark as it was
    assert unknown["FAST."] == {"val": "en-US"} and unknown["IS"]["bidi"] == "en-GB"


def test_pptx_runs_name_the_target_language(tmp_path: Path) -> None:
    prs = pptx.Presentation()
    slide = prs.slides.add_slide(prs.slide_layouts[1])
    p = slide.placeholders[1].text_frame.paragraphs[0]
    for text, attrs in (("The red car ", {"lang": "en-US", "altLang": "en-US"}), ("is fast.", {"lang": "en-GB"})):
        r = p.add_run()
        r.text = text
        for name, value in attrs.items():
            r._r.get_or_add_rPr().set(name, value)
    fld = etree.SubElement(p._p, f"{A}fld", id="{B6F15528-21DE-4FAA-801E-634DDDAF4B2B}", type="slidenum")
    etree.SubElement(fld, f"{A}rPr", lang="en-US")
    etree.SubElement(fld, f"{A}t").text = "7"
    prs.save(tmp_path / "in.pptx")
    pptx_format.translate(tmp_path / "in.pptx", tmp_path / "out.pptx", reverse_upper, languages=("en", "fr"))
    pptx.Presentation(tmp_path / "out.pptx")
    with zipfile.ZipFile(tmp_path / "out.pptx") as z:
        root = etree.fromstring(z.read("ppt/slides/slide1.xml"))
    runs = {r.findtext(f"{A}t"): dict(r.find(f"{A}rPr").attrib) for r in root.iter(f"{A}r", f"{A}fld")}
    assert {runs[t]["lang"] for t in runs if t != "7"} == {"fr-FR"} and runs["7"]["lang"] == "en-US"
    assert [v.get("altLang") for v in runs.values() if "altLang" in v] == ["fr-FR"]


def test_the_model_languages_reach_the_office_formats() -> None:
    assert documents.languages(SimpleNamespace(langs=("en", "de"), tokenizer=None)) == ("en", "de")
    tokenizer = SimpleNamespace(src_lang="en", tgt_lang="fr")
    assert documents.languages(SimpleNamespace(langs=None, tokenizer=tokenizer)) == ("en", "fr")
    assert documents.languages(SimpleNamespace(tokenizer=None)) is None
    for module in (docx_format, pptx_format):  # translate_document gives them by this parameter's name
        assert "languages" in inspect.signature(module.translate).parameters


def revision_ids(root: etree._Element) -> list[str]:
    """The ids of revision marks and bookmarks (each start: its end shares its id), outside mc:Fallback copies."""
    names = ("ins", "del", "moveTo", "moveFrom", "rPrChange", "bookmarkStart")
    return [el.get(W + "id") for el in root.iter(*(W + n for n in names))
            if not any(a.tag == MC_FALLBACK for a in el.iterancestors())]


def test_copies_of_revision_marks_get_fresh_unique_ids(tmp_path: Path) -> None:
    change = f'<w:rPrChange w:id="{{}}" {REV}><w:rPr/></w:rPrChange>'
    src = docx_with(tmp_path / "in.docx",
                    f'<w:ins w:id="1" {REV}>' + word_run("The red car is fast. The blue one is slow.") + '</w:ins>',
                    word_run("The red car is ", f"<w:i/>{change.format(7)}") + word_run("very", "<w:b/>")
                    + word_run(" fast today.", f"<w:i/>{change.format(8)}"),
                    '<w:bookmarkStart w:id="2" w:name="here"/>' + word_run("Some text")
                    + '<w:bookmarkEnd w:id="2"/>' + f'<w:moveTo w:id="3" {REV}>' + word_run(" moved here.")
                    + '</w:moveTo>')
    root = document(src)
    ids = revision_ids(root)
    assert len(ids) == len(set(ids)), Counter(ids).most_common(3)
    assert [el.get(W + "id") for el in root.iter(W + "ins")] == ["1"]  # one copy: its id kept
    changes = [el.get(W + "id") for el in root.iter(W + "rPrChange")]
    assert len(changes) == 3 and changes.count("7") + changes.count("8") == 2  # the copy of one: a fresh id
    fresh = max(int(i) for i in changes)
    assert fresh > max(int(el.get(W + "id")) for el in root.iter() if el.get(W + "id") and el.tag != W + "rPrChange")
