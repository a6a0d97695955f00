"""Word footnotes and endnotes translated keeping their formatting. python-docx cannot write notes, so the document
is built by python-docx and the parts Word writes for notes are added by hand, as Word writes them: word/footnotes.xml
and word/endnotes.xml (the separator and continuationSeparator notes, ids -1 and 0, then one real note each), their
relationships and content types, and the w:footnoteReference / w:endnoteReference runs in the body. Translated by the
fake translator of the office tests (tests.helpers.documents: words reversed and uppercased), then once through
`nmt translate` with the committed English->German demo model."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from lxml import etree

from nmt.translation.documents import docx as docx_format
from tests.helpers.cli import run_cli
from tests.helpers.documents import DOCX_TEXT, W, assert_only_text_changed, members, reverse_upper
from tests.helpers.paths import DEMO_MODEL

docx = pytest.importorskip("docx")

CHECKPOINT = DEMO_MODEL
WNS = W[1:-1]
RNS = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
PKG_RELS = "http://schemas.openxmlformats.org/package/2006/relationships"
CONTENT_TYPES = "http://schemas.openxmlformats.org/package/2006/content-types"
XML_SPACE = "{http://www.w3.org/XML/1998/namespace}space"
KINDS = ("footnote", "endnote")
REF_RPR = f'<w:rPr xmlns:w="{WNS}"><w:rStyle w:val="{{style}}"/><w:vertAlign w:val="superscript"/></w:rPr>'


def rpr(style: str) -> str:
    return REF_RPR.format(style=style)


def t(text: str) -> str:
    space = ' xml:space="preserve"' if text != text.strip() else ""
    return f"<w:t{space}>{text}</w:t>"


def notes_part(kind: str, before: str, italic: str, after: str) -> bytes:
    """word/footnotes.xml or word/endnotes.xml as Word writes it: the two separator notes, then note 1, whose
    paragraph is the note mark (w:footnoteRef) then `before` <i>`italic`</i> `after`."""
    style = kind[0].upper() + kind[1:]  # FootnoteText, FootnoteReference / EndnoteText, EndnoteReference
    spacing = '<w:pPr><w:spacing w:after="0" w:line="240" w:lineRule="auto"/></w:pPr>'
    return (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\r\n'
        f'<w:{kind}s xmlns:w="{WNS}" xmlns:r="{RNS}">'
        f'<w:{kind} w:type="separator" w:id="-1"><w:p>{spacing}<w:r><w:separator/></w:r></w:p></w:{kind}>'
        f'<w:{kind} w:type="continuationSeparator" w:id="0"><w:p>{spacing}<w:r><w:continuationSeparator/></w:r>'
        f'</w:p></w:{kind}>'
        f'<w:{kind} w:id="1"><w:p><w:pPr><w:pStyle w:val="{style}Text"/></w:pPr>'
        f'<w:r><w:rPr><w:rStyle w:val="{style}Reference"/></w:rPr><w:{kind}Ref/></w:r>'
        f'<w:r>{t(before)}</w:r><w:r><w:rPr><w:i/><w:iCs/></w:rPr>{t(italic)}</w:r><w:r>{t(after)}</w:r>'
        f'</w:p></w:{kind}>'
        f'</w:{kind}s>'
    ).encode()


def reference_run(kind: str):
    from docx.oxml import parse_xml

    style = kind[0].upper() + kind[1:] + "Reference"
    return parse_xml(f'<w:r xmlns:w="{WNS}">{rpr(style)}<w:{kind}Reference w:id="1"/></w:r>')


def build(path: Path, body: list[tuple[str, bool]], notes: dict[str, tuple[str, str, str]]) -> Path:
    """A docx whose first paragraph is `body` ((text, bold) runs, then the footnote reference after the first
    three runs and the endnote reference at the end), with the notes `notes` (kind: before, italic, after)."""
    d = docx.Document()
    p = d.add_paragraph()
    for k, (text, bold) in enumerate(body):
        p.add_run(text).bold = bold or None
        if k == 2:
            p._p.append(reference_run("footnote"))
    p._p.append(reference_run("endnote"))
    d.add_paragraph("a second paragraph")
    plain = path.with_suffix(".plain.docx")
    d.save(plain)

    with zipfile.ZipFile(plain) as z:
        infos = z.infolist()
        parts = {info.filename: z.read(info.filename) for info in infos}
    rels = etree.fromstring(parts["word/_rels/document.xml.rels"])
    types = etree.fromstring(parts["[Content_Types].xml"])
    for n, kind in enumerate(KINDS):
        etree.SubElement(rels, f"{{{PKG_RELS}}}Relationship", Id=f"rIdNote{n}", Target=f"{kind}s.xml",
                         Type=f"{RNS}/{kind}s")
        etree.SubElement(types, f"{{{CONTENT_TYPES}}}Override", PartName=f"/word/{kind}s.xml",
                         ContentType=f"application/vnd.openxmlformats-officedocument.wordprocessingml.{kind}s+xml")
    parts["word/_rels/document.xml.rels"] = etree.tostring(rels, xml_declaration=True, encoding="UTF-8",
                                                           standalone=True)
    parts["[Content_Types].xml"] = etree.tostring(types, xml_declaration=True, encoding="UTF-8", standalone=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for info in infos:
            z.writestr(info, parts[info.filename])
        for kind in KINDS:
            z.writestr(f"word/{kind}s.xml", notes_part(kind, *notes[kind]))
    plain.unlink()
    return path


@pytest.fixture
def notes_docx(tmp_path: Path) -> Path:
    body = [("The ", False), ("red", True), (" car", False), (" is old.", False)]
    return build(tmp_path / "notes.docx", body, {"footnote": (" See the ", "blue", " house."),
                                                 "endnote": (" Ask the ", "small", " dog.")})


def note(data: bytes, kind: str, ident: str) -> etree._Element:
    root = etree.fromstring(data)
    found = [n for n in root.findall(f"{W}{kind}") if n.get(f"{W}id") == ident]
    assert len(found) == 1, (kind, ident)
    return found[0]


def italic_words(el: etree._Element) -> list[str]:
    """The text of every run whose own rPr is italic."""
    return ["".join(x.text or "" for x in r.findall(f"{W}t")) for r in el.iter(f"{W}r")
            if r.find(f"{W}rPr/{W}i") is not None]


def text(el: etree._Element) -> str:
    return "".join(x.text or "" for x in el.iter(f"{W}t"))


def without_text(data: bytes) -> bytes:
    """The part with every w:t emptied (and its xml:space, which follows the text's edges): what must not change."""
    root = etree.fromstring(data)
    for x in root.iter(f"{W}t"):
        x.text = None
        x.attrib.pop(XML_SPACE, None)
    return etree.tostring(root)


def reference(p: etree._Element, kind: str) -> etree._Element:
    runs = [r for r in p.iter(f"{W}r") if r.find(f"{W}{kind}Reference") is not None]
    assert len(runs) == 1, kind
    return runs[0]


def test_notes_fixture_is_what_word_reads(notes_docx: Path) -> None:
    """The hand-made parts are wired as Word wires them: related from the document, typed, referenced."""
    d = docx.Document(notes_docx)
    related = {rel.reltype: rel.target_part for rel in d.part.rels.values()}
    for kind in KINDS:
        part = related[f"{RNS}/{kind}s"]
        assert part.partname == f"/word/{kind}s.xml"
        assert part.content_type == f"application/vnd.openxmlformats-officedocument.wordprocessingml.{kind}s+xml"
        assert reference(d.paragraphs[0]._p, kind).find(f"{W}{kind}Reference").get(f"{W}id") == "1"
        assert text(note(part.blob, kind, "1")).strip() in ("See the blue house.", "Ask the small dog.")


def test_notes_translated_keeping_italic_and_separators(notes_docx: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.docx"
    assert docx_format.translate(notes_docx, out, reverse_upper) == 4  # body, second paragraph, two notes
    assert docx.Document(out).paragraphs[0].text == "OLD. IS CAR RED THE"  # opens in python-docx
    before, after = members(notes_docx), members(out)
    for kind, words, emphasis in (("footnote", "HOUSE. BLUE THE SEE", "BLUE"), ("endnote", "DOG. SMALL THE ASK",
                                                                                 "SMALL")):
        part = f"word/{kind}s.xml"
        translated = note(after[part], kind, "1")
        assert text(translated).split() == words.split()
        assert italic_words(translated) == [emphasis]  # the italic run holds its own word, translated
        italic = next(r for r in translated.iter(f"{W}r") if r.find(f"{W}rPr/{W}i") is not None)
        assert etree.tostring(italic.find(f"{W}rPr")) == etree.tostring(
            next(r for r in note(before[part], kind, "1").iter(f"{W}r")
                 if r.find(f"{W}rPr/{W}i") is not None).find(f"{W}rPr"))
        mark = translated.find(f"{W}p/{W}r")  # the note's own number mark still opens its paragraph
        assert mark is not None and mark.find(f"{W}{kind}Ref") is not None
        assert mark.find(f"{W}rPr/{W}rStyle").get(f"{W}val") == kind.capitalize() + "Reference"
        assert translated.find(f"{W}p/{W}pPr/{W}pStyle").get(f"{W}val") == kind.capitalize() + "Text"
        for ident in ("-1", "0"):  # the separators, as they were
            assert etree.tostring(note(after[part], kind, ident)) == etree.tostring(note(before[part], kind, ident))
        assert after[part] != before[part]


def test_note_references_stay_in_the_translated_paragraph(notes_docx: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.docx"
    docx_format.translate(notes_docx, out, reverse_upper)
    source = etree.fromstring(members(notes_docx)["word/document.xml"]).find(f"{W}body/{W}p")
    p = etree.fromstring(members(out)["word/document.xml"]).find(f"{W}body/{W}p")
    assert text(p).split() == "OLD. IS CAR RED THE".split()
    assert italic_words(p) == [] and [text(r) for r in p.iter(f"{W}r") if r.find(f"{W}rPr/{W}b") is not None] == [
        "RED"]
    for kind in KINDS:
        run = reference(p, kind)
        assert run.getparent() is p
        assert run.find(f"{W}{kind}Reference").get(f"{W}id") == "1"
        assert etree.tostring(run.find(f"{W}rPr")) == etree.tostring(reference(source, kind).find(f"{W}rPr"))
        assert run.find(f"{W}rPr/{W}rStyle").get(f"{W}val") == kind.capitalize() + "Reference"
        assert run.find(f"{W}rPr/{W}vertAlign").get(f"{W}val") == "superscript"
        assert run.find(f"{W}t") is None  # the reference is alone in its run: no translated word was put in it
    # the footnote mark follows "car", the word it followed in the source; the endnote mark stays last
    runs = list(p.iter(f"{W}r"))
    fn = runs.index(reference(p, "footnote"))
    assert text(runs[fn - 1]).split()[-1] == "CAR" and runs[-1] is reference(p, "endnote")


def test_only_the_note_text_changes(notes_docx: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.docx"
    docx_format.translate(notes_docx, out, reverse_upper)
    assert_only_text_changed(notes_docx, out, DOCX_TEXT, f"{W}p", (f"{W}pPr",))  # every other part byte-identical
    before, after = members(notes_docx), members(out)
    for kind in KINDS:
        part = f"word/{kind}s.xml"
        assert without_text(after[part]) == without_text(before[part]), part  # runs, rPr, separators: all kept
        assert after[part].startswith(before[part][:before[part].index(b"<w:")])  # Word's own XML declaration
    assert [n for n in before if before[n] != after[n]] == ["word/document.xml", "word/footnotes.xml",
                                                            "word/endnotes.xml"]


def test_notes_translated_by_the_cli_with_the_demo_model(tmp_path: Path) -> None:
    body = [("the ", False), ("red", True), (" car", False)]
    src = build(tmp_path / "cars.docx", body, {"footnote": (" ", "three", " red cars"),
                                               "endnote": (" the ", "red", " car")})
    dst = tmp_path / "autos.docx"
    result = run_cli("translate", "--checkpoint", CHECKPOINT, "-i", src, "-o", dst)
    assert result.exit_code == 0, result.stderr
    d = docx.Document(dst)
    assert d.paragraphs[0].text == "das rote Auto"
    assert [r.text for r in d.paragraphs[0].runs if r.bold] == ["rote"]
    after = members(dst)
    footnote, endnote = note(after["word/footnotes.xml"], "footnote", "1"), note(after["word/endnotes.xml"],
                                                                                    "endnote", "1")
    assert text(footnote).split() == ["drei", "rote", "Autos"] and italic_words(footnote) == ["drei"]
    assert text(endnote).split() == ["das", "rote", "Auto"] and italic_words(endnote) == ["rote"]
    p = etree.fromstring(after["word/document.xml"]).find(f"{W}body/{W}p")
    assert all(reference(p, kind).getparent() is p for kind in KINDS)
    assert_only_text_changed(src, dst, DOCX_TEXT, f"{W}p", (f"{W}pPr",))


def test_footnote_mark_stays_glued_to_its_word(notes_docx: Path, tmp_path: Path) -> None:
    """Source "The red car¹ is old.": the mark follows "car" with no space, so its translation "CAR" must be
    followed by the mark, then a space ("...CAR¹ RED THE"), not "...CAR ¹RED THE"."""
    out = tmp_path / "out.docx"
    docx_format.translate(notes_docx, out, reverse_upper)
    p = etree.fromstring(members(out)["word/document.xml"]).find(f"{W}body/{W}p")
    runs = list(p.iter(f"{W}r"))
    fn = runs.index(reference(p, "footnote"))
    assert text(runs[fn - 1]).endswith("CAR") and text(runs[fn + 1]).startswith(" ")
