"""The separators of atoms in Office and ODT paragraphs (issue 46), the rule nmt.translation.documents.atoms has for
HTML: what is kept as written (a footnote reference, inline math, a drawing, an empty field, a slide number, an ODT
field) keeps the punctuation written against it, and atoms with only spaces and punctuation between them stay apart,
in their order. Paragraphs built as Word, PowerPoint and LibreOffice write them, translated by the fake translators of
tests.helpers.documents (words reversed and uppercased: an atom must move with its punctuation; or in order)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from lxml import etree

from nmt.translation.documents import docx as docx_format
from nmt.translation.documents.inline import Paragraph, Piece
from nmt.translation.documents.odt import OdfParagraph
from tests.helpers.documents import W, docx_with, reverse_upper, upper, word_run

docx = pytest.importorskip("docx")

M = "{http://schemas.openxmlformats.org/officeDocument/2006/math}"
SHOWN = {W + "footnoteReference": "¹", W + "drawing": "[D]", M + "oMath": "[M]", W + "fldSimple": "[F]"}
NOTE = '<w:r><w:rPr><w:rStyle w:val="FootnoteReference"/></w:rPr><w:footnoteReference w:id="1"/></w:r>'
MATH = '<m:oMath><m:r><m:t>x</m:t></m:r></m:oMath>'
DRAWING = '<w:r><w:drawing/></w:r>'


def shown(p: etree._Element) -> str:
    """The paragraph as a reader sees it: its text, each atom as a mark (an empty field: [F])."""
    out = []
    for el in p.iter(W + "t", *SHOWN):
        if el.tag == W + "t" and not any(a.tag in (M + "oMath",) for a in el.iterancestors()):
            out.append(el.text or "")
        elif el.tag in SHOWN and (el.tag != W + "fldSimple" or not len(el)):
            out.append(SHOWN[el.tag])
    return "".join(out)


def translated(tmp_path: Path, *bodies: str, translate=reverse_upper) -> tuple[list[str], list[etree._Element]]:
    """What the model was sent, and the output's paragraphs after the plain one (the output opens in python-docx)."""
    src, out, sent = docx_with(tmp_path / "in.docx", *bodies), tmp_path / "out.docx", []

    def spy(paragraphs: list[Paragraph]) -> list[list[Piece]]:
        sent.extend(t for p in paragraphs for t in p.texts)
        return translate(paragraphs)

    docx_format.translate(src, out, spy)
    docx.Document(out)
    with zipfile.ZipFile(out) as z:
        root = etree.fromstring(z.read("word/document.xml"))
    return sent[1:], [p for p in root.iter(W + "p") if p.getparent().tag == W + "body"][1:]


def test_punctuation_written_against_a_kept_atom_moves_with_it(tmp_path: Path) -> None:
    sent, (note, math, field) = translated(
        tmp_path, word_run("The red car") + NOTE + word_run(", the house is big."),
        word_run("Let (") + MATH + word_run(") be the value."),
        word_run("Turn to (page ") + '<w:fldSimple w:instr=" PAGE "/>' + word_run(") now."))
    # the separators against an atom are never sent ("(page" keeps its bracket: it is against a word)
    assert sent == ["The red car the house is big.", "Let be the value.", "Turn to (page now."]
    assert shown(note) == "BIG. IS HOUSE THE CAR¹, RED THE"  # the comma stays with the footnote reference
    assert "([M])" in shown(math) and shown(math).count("(") == shown(math).count(")") == 1
    assert "[F])" in shown(field) and shown(field).count(")") == shown(field).count("(") == 1


def test_adjacent_atoms_keep_their_separators_and_never_touch(tmp_path: Path) -> None:
    sent, (comma, space, bare) = translated(
        tmp_path, word_run("Icons ") + DRAWING + word_run(", ") + DRAWING + word_run(" are shown here."),
        word_run("Formulas ") + MATH + word_run(" ") + MATH + word_run(" follow here."),
        word_run("Both ") + DRAWING + DRAWING + word_run(" stay together."))
    assert sent == ["Icons are shown here.", "Formulas follow here.", "Both stay together."]
    assert "[D], [D]" in shown(comma) and shown(comma).count(",") == 1
    assert "[M] [M]" in shown(space)
    assert "[D][D]" in shown(bare)  # adjacent in the source: adjacent still


def test_a_field_result_keeps_the_parentheses_around_it_once(tmp_path: Path) -> None:
    # "(see Figure 3)" with "Figure 3" a REF field's result: the result is text (translated inside its field), the
    # parentheses stay outside it, each written once, in a simple and in a complex field as Word writes them.
    complex_field = ('<w:r><w:fldChar w:fldCharType="begin"/></w:r><w:r><w:instrText xml:space="preserve"> REF _Ref3'
                     ' \\h </w:instrText></w:r><w:r><w:fldChar w:fldCharType="separate"/></w:r>'
                     + word_run("Figure 3") + '<w:r><w:fldChar w:fldCharType="end"/></w:r>')
    sent, (simple, compound) = translated(
        tmp_path, word_run("A cat (see ") + f'<w:fldSimple w:instr=" REF _Ref3 \\h ">{word_run("Figure 3")}'
        '</w:fldSimple>' + word_run(") sleeps."),
        word_run("A cat (see ") + complex_field + word_run(") sleeps."), translate=upper)
    assert sent == ["A cat (see Figure 3) sleeps."] * 2
    (field,) = simple.iter(W + "fldSimple")
    assert shown(simple) == "A CAT (SEE FIGURE 3) SLEEPS." and "".join(field.itertext()) == "FIGURE 3"
    assert shown(compound) == "A CAT (SEE FIGURE 3) SLEEPS."
    texts = [t.text for t in compound.iter(W + "t")]
    assert "FIGURE 3" in texts  # the result's run: no parenthesis inside the field


def test_odt_field_keeps_its_parenthesis_and_a_bookmark_takes_none() -> None:
    text = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
    p = etree.fromstring(f'<text:p xmlns:text="{text}">See page (<text:page-number>3</text:page-number>), then '
                         'go <text:bookmark text:name="b"/>(fast).</text:p>')
    odf = OdfParagraph(p)
    assert odf.paragraph.texts == ["See page then go (fast)."]  # the bookmark, unseen, takes no "("
    odf.write(reverse_upper([odf.paragraph])[0])
    written = etree.tostring(p, encoding="unicode")
    assert "(<text:page-number>3</text:page-number>)," in written and written.count("(") == 2


def test_a_comment_anchor_takes_no_punctuation(tmp_path: Path) -> None:
    # a comment's reference mark is shown in the margin, not in the text: ")," after it stays with the words
    anchor = ('<w:commentRangeEnd w:id="0"/><w:r><w:rPr><w:rStyle w:val="CommentReference"/></w:rPr>'
              '<w:commentReference w:id="0"/></w:r>')
    sent, (p,) = translated(tmp_path, word_run("A cat (see ") + '<w:commentRangeStart w:id="0"/>'
                            + word_run("the note") + anchor + word_run("), then go."))
    assert sent == ["A cat (see the note), then go."]
    assert len(list(p.iter(W + "commentReference"))) == 1


def test_inline_code_is_kept_with_its_separators(tmp_path: Path) -> None:
    # pandoc's inline_code.docx writes `inline   code` as a run in character style VerbatimChar; Word's HTML Code too
    code = '<w:rStyle w:val="VerbatimChar"/>'
    sent, (p, two) = translated(
        tmp_path, word_run("This is an example of ") + word_run("inline   code", code) + word_run(" with spaces."),
        word_run("Open ") + word_run("Applications", code) + word_run(", ") + word_run("Utilities", '<w:rStyle '
        'w:val="HTMLCode"/>') + word_run(" now."))
    assert sent == ["This is an example of with spaces.", "Open now."]  # the code is never sent
    assert "inline   code" in [t.text for t in p.iter(W + "t")]
    assert "Applications, Utilities" in shown(two)
    styles = [(r.findtext(f"{W}t"), r.find(f"{W}rPr/{W}rStyle").get(W + "val")) for r in two.iter(W + "r")
              if r.find(f"{W}rPr/{W}rStyle") is not None]
    assert styles == [("Applications", "VerbatimChar"), ("Utilities", "HTMLCode")]  # each with its own style


def test_odt_inline_code_is_kept_with_its_separators() -> None:
    text = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
    code = '<text:span text:style-name="Source_20_Text">{}</text:span>'
    p = etree.fromstring(f'<text:p xmlns:text="{text}">Open {code.format("ls -l")}, {code.format("cd")} now. The '
                         '<text:span text:style-name="T1">red</text:span> car.</text:p>')
    odf = OdfParagraph(p)
    assert odf.paragraph.texts == ["Open now.", "The red car."]  # the code never sent, the styled word is
    odf.write(reverse_upper([odf.paragraph])[0])
    written = etree.tostring(p, encoding="unicode")
    assert f'{code.format("ls -l")}, {code.format("cd")}' in written and ">RED<" in written


def test_a_tab_or_a_line_break_keeps_the_words_around_it_apart(tmp_path: Path) -> None:
    # "Chapter 1<tab>Introduction", a title and subtitle split by a manual line break: the model was sent
    # "Chapter 1Introduction" (Word, PowerPoint and ODT alike) and wrote one word for two
    sent, (p,) = translated(tmp_path, '<w:r><w:t>Chapter one</w:t><w:tab/><w:t>The red car</w:t><w:br/>'
                            '<w:t>is here.</w:t></w:r>', translate=upper)
    assert sent == ["Chapter one The red car is here."]
    assert [local.tag.split("}")[1] for r in p.iter(W + "r") for local in r if local.tag != W + "rPr"] == [
        "t", "tab", "t", "br", "t"]
    assert [t.text for t in p.iter(W + "t")] == ["CHAPTER ONE", "THE RED CAR", "IS HERE."]  # no space added


def test_a_pptx_or_odt_line_break_keeps_the_words_around_it_apart() -> None:
    from nmt.translation.documents.ooxml_paragraph import OoxmlParagraph
    from nmt.translation.documents.pptx import A

    a = "http://schemas.openxmlformats.org/drawingml/2006/main"
    slide = etree.fromstring(f'<a:p xmlns:a="{a}"><a:r><a:t>Annual meeting</a:t></a:r><a:br/><a:r><a:t>the red car'
                             '</a:t></a:r></a:p>')
    pptx_paragraph = OoxmlParagraph(slide, A)
    assert pptx_paragraph.paragraph.texts == ["Annual meeting the red car"]
    pptx_paragraph.write(upper([pptx_paragraph.paragraph])[0])
    assert [t.text for t in slide.iter(f"{{{a}}}t")] == ["ANNUAL MEETING", "THE RED CAR"]
    text = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
    p = etree.fromstring(f'<text:p xmlns:text="{text}">Annual meeting<text:line-break/>the red<text:tab/>car</text:p>')
    odf = OdfParagraph(p)
    assert odf.paragraph.texts == ["Annual meeting the red car"]
    odf.write(upper([odf.paragraph])[0])
    assert etree.tostring(p, encoding="unicode").endswith(">ANNUAL MEETING<text:line-break/>THE RED<text:tab/>CAR"
                                                           "</text:p>")
