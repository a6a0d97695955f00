"""Word documents as Word writes them, beyond plain runs: tracked changes (w:ins, w:del, w:moveTo, w:moveFrom), smart
tags, content controls, simple and complex fields, bookmarks inside a word, runs split on revision ids, language and
proofing marks, a text box written twice (mc:AlternateContent). Built by python-docx with those elements added as Word
writes them, translated by the fake translator of the office tests (tests.helpers.documents: words reversed and
uppercased, word i aligned to word n-1-i), read back by python-docx; once through `nmt translate` with the demo
model."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest
from lxml import etree

from nmt.translation.documents import docx as docx_format
from nmt.translation.documents.inline import Paragraph, Piece
from tests.helpers.cli import run_cli
from tests.helpers.documents import W, reverse_upper
from tests.helpers.paths import DEMO_MODEL

docx = pytest.importorskip("docx")

WNS = W[1:-1]
MC = "http://schemas.openxmlformats.org/markup-compatibility/2006"
NS = f'xmlns:w="{WNS}" xmlns:mc="{MC}" xmlns:v="urn:schemas-microsoft-com:vml"'
REV = 'w:id="{id}" w:author="Ann" w:date="2024-05-01T10:00:00Z"'


def r(text: str, rpr: str = "", rsid: str = "00A1B2C3") -> str:
    space = ' xml:space="preserve"' if text != text.strip() else ""
    return f'<w:r w:rsidR="{rsid}">{f"<w:rPr>{rpr}</w:rPr>" if rpr else ""}<w:t{space}>{text}</w:t></w:r>'


def build(tmp_path: Path, *bodies: str) -> Path:
    """A docx made by python-docx, with one paragraph per body (the paragraph's inner XML) added as Word writes
    them, and a plain paragraph after them."""
    from docx.oxml import parse_xml

    d = docx.Document()
    d.add_paragraph("a plain paragraph")
    body = d.element.body
    for inner in bodies:
        body.insert(len(body) - 1, parse_xml(f'<w:p {NS} w:rsidR="00A1B2C3">{inner}</w:p>'))
    path = tmp_path / "in.docx"
    d.save(path)
    return path


def translated(src: Path, translate=reverse_upper) -> list[etree._Element]:
    out = src.with_name("out.docx")
    docx_format.translate(src, out, translate)
    docx.Document(out)  # opens in python-docx
    with zipfile.ZipFile(out) as z:
        root = etree.fromstring(z.read("word/document.xml"))
    return [p for p in root.iter(W + "p") if p.getparent().tag == W + "body"][1:]


def text(el: etree._Element, tag: str = "t") -> str:
    return "".join(t.text or "" for t in el.iter(W + tag))


def sent(src: Path) -> list[str]:
    """The sentences the model is given."""
    seen: list[str] = []

    def spy(paragraphs: list[Paragraph]) -> list[list[Piece]]:
        seen.extend(t for p in paragraphs for t in p.texts)
        return reverse_upper(paragraphs)

    docx_format.translate(src, src.with_name("spy.docx"), spy)
    return seen


def test_an_insertion_is_translated_and_its_words_stay_an_insertion(tmp_path: Path) -> None:
    src = build(tmp_path, r("This is a text with ") + f'<w:ins {REV.format(id=1)}>{r("two exciting ")}</w:ins>'
                + r("insertions."))
    assert "This is a text with two exciting insertions." in sent(src)  # as it reads with the change accepted
    (p,) = translated(src)
    assert text(p) == "INSERTIONS. EXCITING TWO WITH TEXT A IS THIS"
    (ins,) = p.iter(W + "ins")
    assert text(ins).strip() == "EXCITING TWO" and ins.get(W + "author") == "Ann" and ins.get(W + "id") == "1"


def test_a_paragraph_inserted_whole_is_translated_inside_its_insertion(tmp_path: Path) -> None:
    # POI's delins.docx: whole paragraphs inside one w:ins each were left in English
    src = build(tmp_path, f'<w:ins {REV.format(id=2)}>{r("Apache Tika has been released.")}</w:ins>')
    (p,) = translated(src)
    (ins,) = p.iter(W + "ins")
    assert text(ins) == "RELEASED. BEEN HAS TIKA APACHE" and text(p) == text(ins)


def test_a_deletion_stays_as_it_was_and_is_never_sent(tmp_path: Path) -> None:
    deleted = f'<w:del {REV.format(id=3)}><w:r><w:delText xml:space="preserve">very old </w:delText></w:r></w:del>'
    src = build(tmp_path, r("The ") + deleted + r("red car is fast."))
    assert "The red car is fast." in sent(src) and not any("old" in s for s in sent(src))
    (p,) = translated(src)
    (d,) = p.iter(W + "del")
    assert text(d, "delText") == "very old " and d.get(W + "author") == "Ann" and not text(d)
    assert text(p).strip() == "FAST. IS CAR RED THE"


def test_a_move_translates_its_destination_and_keeps_its_source(tmp_path: Path) -> None:
    moved_from = (f'<w:moveFrom {REV.format(id=4)}><w:r><w:delText xml:space="preserve">quickly </w:delText></w:r>'
                  '</w:moveFrom>')
    src = build(tmp_path, r("He ran ") + moved_from + r("home ") + f'<w:moveTo {REV.format(id=5)}>{r("quickly")}'
                '</w:moveTo>' + r("."))
    (p,) = translated(src)
    (to,) = p.iter(W + "moveTo")
    assert text(to) == "QUICKLY" and text(next(p.iter(W + "moveFrom")), "delText") == "quickly "
    assert "quickly" not in text(p)


def test_smart_tags_content_controls_and_simple_fields_are_text_in_their_container(tmp_path: Path) -> None:
    tag = f'<w:smartTag w:uri="urn:schemas-microsoft-com:office:smarttags" w:element="country-region">' \
          f'<w:smartTagPr><w:attr w:name="x" w:val="y"/></w:smartTagPr>{r("Egypt")}</w:smartTag>'
    sdt = f'<w:sdt><w:sdtPr><w:alias w:val="Who"/><w:id w:val="7"/></w:sdtPr><w:sdtContent>{r("the children")}' \
          '</w:sdtContent></w:sdt>'
    field = f'<w:fldSimple w:instr=" REF _Ref1 \\h ">{r("Table one")}</w:fldSimple>'
    src = build(tmp_path, r("The king of ") + tag + r(" died and ") + sdt + r(" read ") + field + r(" aloud."))
    assert "The king of Egypt died and the children read Table one aloud." in sent(src)
    (p,) = translated(src)
    (smart,) = p.iter(W + "smartTag")
    assert text(smart) == "EGYPT" and smart.find(W + "smartTagPr") is not None
    (control,) = p.iter(W + "sdt")
    assert text(control) == "CHILDREN THE" and control.find(f"{W}sdtPr/{W}alias").get(W + "val") == "Who"
    (simple,) = p.iter(W + "fldSimple")
    assert text(simple) == "ONE TABLE" and simple.get(W + "instr") == " REF _Ref1 \\h "
    assert not re.search(r"[a-z]", text(p))  # nothing left in the source language


def test_bidi_embeddings_and_overrides_are_text_in_their_container(tmp_path: Path) -> None:
    # Word 2010 wraps right-to-left runs in w:dir (embedding) or w:bdo (override): POI's stress011.docx, in Arabic
    rtl = r("The king of Egypt", "<w:rtl/>")
    src = build(tmp_path, f'<w:dir w:val="rtl">{rtl}</w:dir>' + r(" died."),
                f'<w:bdo w:val="rtl">{r("The children read aloud.")}</w:bdo>')
    assert sent(src) == ["a plain paragraph", "The king of Egypt died.", "The children read aloud."]
    first, second = translated(src)
    (embedding,) = first.iter(W + "dir")
    assert embedding.get(W + "val") == "rtl" and text(embedding) == "EGYPT OF KING THE"
    (override,) = second.iter(W + "bdo")
    assert override.get(W + "val") == "rtl" and text(override) == "ALOUD. READ CHILDREN THE"
    assert not re.search(r"[a-z]", text(first) + text(second))  # nothing left in the source language


def test_a_complex_field_result_is_translated_and_its_instruction_kept(tmp_path: Path) -> None:
    field = ('<w:r><w:fldChar w:fldCharType="begin"/></w:r><w:r><w:instrText xml:space="preserve"> SAVEDATE \\@ '
             '"MMMM d" </w:instrText></w:r><w:r><w:fldChar w:fldCharType="separate"/></w:r>' + r("May first")
             + '<w:r><w:fldChar w:fldCharType="end"/></w:r>')
    src = build(tmp_path, r("Last update on ") + field + r(" here."))
    assert "Last update on May first here." in sent(src)
    (p,) = translated(src)
    order = [(etree.QName(el).localname, el.get(W + "fldCharType") or el.text) for el in p.iter(
        W + "fldChar", W + "instrText", W + "t")]
    begin, end = order.index(("fldChar", "begin")), order.index(("fldChar", "end"))
    assert order[begin + 1] == ("instrText", ' SAVEDATE \\@ "MMMM d" ') and order[begin + 2] == ("fldChar", "separate")
    assert "".join(t for _, t in order[begin + 3:end]).strip() == "FIRST MAY"
    assert text(p) == "HERE. FIRST MAY ON UPDATE LAST"


def test_a_bookmark_inside_a_word_leaves_no_fragment_and_lands_on_its_target_word(tmp_path: Path) -> None:
    ranged = '<w:bookmarkStart w:id="0" w:name="mark"/>' + r("U") + '<w:bookmarkEnd w:id="0"/>' + r("sing it now")
    point = r("U") + '<w:bookmarkStart w:id="1" w:name="point"/><w:bookmarkEnd w:id="1"/>' + r("sing it now")
    src = build(tmp_path, ranged, point)
    assert sent(src) == ["a plain paragraph", "Using it now", "Using it now"]
    first, second = translated(src)
    assert text(first) == "NOW IT USING" and text(second) == "NOW IT USING"
    inside = []
    for el in first:
        if el.tag == W + "bookmarkStart":
            inside = [el]
        elif inside and el.tag != W + "bookmarkEnd":
            inside.append(el)
        elif inside:
            break
    assert "".join(text(el) for el in inside[1:]) == "USING"  # the range holds the target word, no "U" left
    assert len(list(second.iter(W + "bookmarkStart"))) == 1


def test_runs_split_on_revision_ids_language_and_proofing_are_one_run_and_punctuation_is_written_once(
        tmp_path: Path) -> None:
    # pandoc's inline_formatting.docx: the final "." in a run of its own wrote "…hier.."
    underline, italic = '<w:u w:val="single"/>', '<w:i/><w:u w:val="single"/>'
    src = build(tmp_path, r("Some people use ") + r("single underlines for ", underline)
                + r("emphasis", italic) + r("."),
                r("The ") + '<w:proofErr w:type="spellStart"/>' + r("bold", "<w:b/>", "00111111")
                + '<w:proofErr w:type="spellEnd"/>' + r(" words", '<w:b/><w:lang w:val="en-GB"/>', "00222222")
                + r(" are here."))
    first, second = translated(src)
    assert text(first).count(".") == 1 and text(first) == "EMPHASIS. FOR UNDERLINES SINGLE USE PEOPLE SOME"
    bold = [x for x in second.iter(W + "r") if x.find(f"{W}rPr/{W}b") is not None]
    assert len(bold) == 1 and text(bold[0]) == "WORDS BOLD"  # one run: the split was not formatting
    assert not list(second.iter(W + "proofErr"))  # the proofing marks were about the source words


def test_a_text_box_written_twice_gets_one_translation(tmp_path: Path) -> None:
    choice = r("Using Microsoft Word ") + r("for", "<w:b/>") + r(" documents")
    fallback = r("Using Microsoft Word ", rsid="00F00F00") + '<w:proofErr w:type="spellStart"/>' \
        + r("for", "<w:b/><w:lang w:val=\"et-EE\"/>") + '<w:proofErr w:type="spellEnd"/>' + r(" documents")
    box = (f'<w:r><mc:AlternateContent><mc:Choice Requires="wps"><w:drawing><w:txbxContent><w:p>{choice}</w:p>'
           f'</w:txbxContent></w:drawing></mc:Choice><mc:Fallback><w:pict><v:shape><v:textbox><w:txbxContent>'
           f'<w:p>{fallback}</w:p></w:txbxContent></v:textbox></v:shape></w:pict></mc:Fallback>'
           '</mc:AlternateContent></w:r>')
    src = build(tmp_path, r("Title ") + box)
    assert sent(src).count("Using Microsoft Word for documents") == 1  # translated once
    (p,) = translated(src)
    ours = next(p.iter(f"{{{MC}}}Choice")).find(f".//{W}p")
    theirs = next(p.iter(f"{{{MC}}}Fallback")).find(f".//{W}p")
    assert text(ours) == "DOCUMENTS FOR WORD MICROSOFT USING"
    assert [etree.tostring(c) for c in ours] == [etree.tostring(c) for c in theirs]


def test_a_visible_atom_keeps_the_space_after_it(tmp_path: Path) -> None:
    # an object a reader sees (here a drawing) between words: the space after it is not dropped as a double space
    src = build(tmp_path, r("see the ") + '<w:r><w:drawing/></w:r>' + r(" picture now"))
    (p,) = translated(src)
    shown = "".join("[D]" if el.tag == W + "drawing" else el.text or "" for el in p.iter(W + "t", W + "drawing"))
    assert not re.search(r"\w\[D\]|\[D\]\w", shown), shown


def test_tracked_insertion_translated_by_the_cli_with_the_demo_model(tmp_path: Path) -> None:
    src = build(tmp_path, f'<w:ins {REV.format(id=9)}>{r("I see the red car.")}</w:ins>')
    out = tmp_path / "cli.docx"
    result = run_cli("translate", "--checkpoint", str(DEMO_MODEL), "-i", str(src), "-o", str(out))
    assert result.exit_code == 0, result.stderr
    with zipfile.ZipFile(out) as z:
        root = etree.fromstring(z.read("word/document.xml"))
    (ins,) = root.iter(W + "ins")
    assert text(ins).strip() and text(ins) != "I see the red car."


def test_a_field_spanning_paragraphs_keeps_its_instruction_and_translates_its_result(tmp_path: Path) -> None:
    # a bibliography (Zotero, Mendeley): begin, instruction and separate in the first entry's paragraph, end in the last
    first = ('<w:r><w:fldChar w:fldCharType="begin"/></w:r><w:r><w:instrText xml:space="preserve"> ADDIN ZOTERO_BIBL '
             '</w:instrText></w:r><w:r><w:fldChar w:fldCharType="separate"/></w:r>' + r("The first book."))
    last = r("The last book.") + '<w:r><w:fldChar w:fldCharType="end"/></w:r>'
    src = build(tmp_path, first, last)
    assert sent(src) == ["a plain paragraph", "The first book.", "The last book."]
    one, two = translated(src)
    assert text(one) == "BOOK. FIRST THE" and text(one, "instrText") == " ADDIN ZOTERO_BIBL "
    assert text(two) == "BOOK. LAST THE" and len(list(two.iter(W + "fldChar"))) == 1


def test_smartart_text_and_chart_titles_in_a_docx_are_translated(tmp_path: Path) -> None:
    a = "http://schemas.openxmlformats.org/drawingml/2006/main"
    c = "http://schemas.openxmlformats.org/drawingml/2006/chart"
    rel = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
    parts = {  # name: (content type, relationship type, XML), as Word writes them
        "word/diagrams/data1.xml": (
            "application/vnd.openxmlformats-officedocument.drawingml.diagramData+xml", f"{rel}/diagramData",
            f'<dgm:dataModel xmlns:dgm="http://schemas.openxmlformats.org/drawingml/2006/diagram" xmlns:a="{a}">'
            '<dgm:ptLst><dgm:pt modelId="{1}"><dgm:prSet/><dgm:spPr/><dgm:t><a:bodyPr/><a:p><a:r><a:rPr lang="en-US"/>'
            '<a:t>Plan the work</a:t></a:r></a:p></dgm:t></dgm:pt></dgm:ptLst><dgm:cxnLst/></dgm:dataModel>'),
        "word/charts/chart1.xml": (
            "application/vnd.openxmlformats-officedocument.drawingml.chart+xml", f"{rel}/chart",
            f'<c:chartSpace xmlns:c="{c}" xmlns:a="{a}"><c:chart><c:title><c:tx><c:rich><a:bodyPr/><a:p><a:r>'
            '<a:rPr lang="en-US"/><a:t>Yearly sales</a:t></a:r></a:p></c:rich></c:tx></c:title><c:plotArea><c:barChart>'
            '<c:ser><c:cat><c:strRef><c:f>Sheet1!$A$2</c:f><c:strCache><c:ptCount val="1"/><c:pt idx="0"><c:v>first'
            ' quarter</c:v></c:pt></c:strCache></c:strRef></c:cat></c:ser></c:barChart></c:plotArea></c:chart>'
            '</c:chartSpace>'),
    }
    plain = build(tmp_path, r("A chart below."))
    src = tmp_path / "parts.docx"
    with zipfile.ZipFile(plain) as z, zipfile.ZipFile(src, "w", zipfile.ZIP_DEFLATED) as w:
        for item in z.infolist():
            data = z.read(item)
            if item.filename == "[Content_Types].xml":
                data = data.replace(b"</Types>", "".join(f'<Override PartName="/{n}" ContentType="{k}"/>'
                                                         for n, (k, _, _) in parts.items()).encode() + b"</Types>")
            elif item.filename == "word/_rels/document.xml.rels":
                data = data.replace(b"</Relationships>", "".join(
                    f'<Relationship Id="rIdX{i}" Type="{t}" Target="{n[5:]}"/>'
                    for i, (n, (_, t, _)) in enumerate(parts.items())).encode() + b"</Relationships>")
            w.writestr(item, data)
        for name, (_, _, xml) in parts.items():
            w.writestr(name, xml)
    translated(src)
    with zipfile.ZipFile(src.with_name("out.docx")) as z:
        shown = {n: "".join(t.text for t in etree.fromstring(z.read(n)).iter(f"{{{a}}}t")) for n in parts}
        cached = etree.fromstring(z.read("word/charts/chart1.xml")).findtext(f".//{{{c}}}v")
    assert shown == {"word/diagrams/data1.xml": "WORK THE PLAN", "word/charts/chart1.xml": "SALES YEARLY"}
    assert cached == "first quarter"  # the embedded workbook's cached cell: kept


def test_an_empty_field_or_a_range_around_proofing_marks_only_is_kept(tmp_path: Path) -> None:
    empty = '<w:fldSimple w:instr=" PAGE "/>'
    marks = ('<w:bookmarkStart w:id="3" w:name="b"/><w:proofErr w:type="spellStart"/><w:proofErr w:type="spellEnd"/>'
             '<w:bookmarkEnd w:id="3"/>')
    src = build(tmp_path, r("Page ") + empty + r(" of the red car ") + marks + r("here."))
    (p,) = translated(src)
    assert [el.get(W + "instr") for el in p.iter(W + "fldSimple")] == [" PAGE "]
    assert len(list(p.iter(W + "bookmarkStart"))) == 1 and len(list(p.iter(W + "bookmarkEnd"))) == 1
    assert text(p).split() == "HERE. CAR RED THE OF PAGE".split()
