"""An Office package's parts are where its relationships say (nmt.translation.documents.opc), not at fixed names:
pandoc's alternate_document_path.docx keeps its body in word/document2.xml, named by _rels/.rels; a header may be
named otherwise than Word names it. A package whose main part is not a Word document (POI's stress025.docx: an
Office theme renamed .docx) is refused in one line, before any model loads."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest

from nmt.errors import NmtError
from nmt.translation.documents import check_document
from nmt.translation.documents import docx as docx_format
from tests.helpers.cli import assert_one_line_error, run_cli
from tests.helpers.documents import reverse_upper

docx = pytest.importorskip("docx")


def renamed(src: Path, dst: Path, old: str, new: str) -> Path:
    """`src` with member `old` renamed `new` (and its .rels with it), every reference to it rewritten: the package
    as a tool that names its parts otherwise writes it."""
    old_rels, new_rels = (f"{n.rsplit('/', 1)[0]}/_rels/{n.rsplit('/', 1)[1]}.rels" for n in (old, new))
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as out:
        for info in z.infolist():
            data = z.read(info)
            if info.filename.endswith((".rels", ".xml")):  # [Content_Types].xml's PartName, the relationships
                data = data.replace(old.encode(), new.encode()).replace(old.rsplit("/", 1)[1].encode(),
                                                                        new.rsplit("/", 1)[1].encode())
            name = {old: new, old_rels: new_rels}.get(info.filename, info.filename)
            out.writestr(name, data)
    return dst


def made(tmp_path: Path) -> Path:
    d = docx.Document()
    d.add_paragraph("the body paragraph")
    d.sections[0].header.paragraphs[0].text = "the header line"
    path = tmp_path / "made.docx"
    d.save(path)
    return path


def texts(path: Path, part: str) -> list[str]:
    with zipfile.ZipFile(path) as z:
        return re.findall(r"<w:t(?: [^>]*)?>([^<]*)</w:t>", z.read(part).decode())


def test_the_main_part_is_where_the_package_relationships_say(tmp_path: Path) -> None:
    src = renamed(made(tmp_path), tmp_path / "alternate.docx", "word/document.xml", "word/document2.xml")
    with zipfile.ZipFile(src) as z:
        assert "word/document.xml" not in z.namelist() and "word/document2.xml" in z.read("_rels/.rels").decode()
    check_document(src, "docx")  # not refused
    out = tmp_path / "out.docx"
    docx_format.translate(src, out, reverse_upper)
    assert texts(out, "word/document2.xml") == ["PARAGRAPH BODY THE"]
    assert [p.text for p in docx.Document(out).paragraphs] == ["PARAGRAPH BODY THE"]  # python-docx finds it too
    with zipfile.ZipFile(src) as a, zipfile.ZipFile(out) as b:
        assert a.namelist() == b.namelist()


def test_a_header_is_found_by_the_main_parts_relationships_whatever_its_name(tmp_path: Path) -> None:
    src = renamed(made(tmp_path), tmp_path / "top.docx", "word/header1.xml", "word/top.xml")
    out = tmp_path / "out.docx"
    docx_format.translate(src, out, reverse_upper)
    assert texts(out, "word/top.xml") == ["LINE HEADER THE"]


def test_a_main_part_that_is_not_a_word_document_is_refused_before_the_model_loads(tmp_path: Path) -> None:
    theme = tmp_path / "theme.docx"  # an Office theme (.thmx) renamed, as POI's stress025.docx
    with zipfile.ZipFile(theme, "w") as z:
        z.writestr("[Content_Types].xml", '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
                   '<Override PartName="/theme/theme/themeManager.xml" ContentType="application/vnd.openxmlformats-'
                   'officedocument.themeManager+xml"/></Types>')
        z.writestr("_rels/.rels", '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
                   '<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
                   'officeDocument" Target="theme/theme/themeManager.xml"/></Relationships>')
        z.writestr("theme/theme/themeManager.xml", "<a:themeManager xmlns:a='urn:x'/>")
    with pytest.raises(NmtError, match="its main part theme/theme/themeManager.xml is .*themeManager.*, not a Word"):
        check_document(theme, "docx")
    result = run_cli("translate", "--checkpoint", tmp_path / "missing.pt", "-i", theme, "-o", tmp_path / "o.docx")
    assert_one_line_error(result, "not a Word document")
    assert not (tmp_path / "o.docx").exists()


def test_a_main_part_the_relationships_name_but_the_zip_lacks_is_refused(tmp_path: Path) -> None:
    src = renamed(made(tmp_path), tmp_path / "lost.docx", "word/document.xml", "word/document2.xml")
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(tmp_path / "gone.docx", "w") as out:
        for info in z.infolist():
            if info.filename != "word/document2.xml":
                out.writestr(info, z.read(info))
    with pytest.raises(NmtError, match=r"no word/document2.xml \(the main part _rels/.rels names\)"):
        docx_format.translate(tmp_path / "gone.docx", tmp_path / "out.docx", reverse_upper)
