"""A document that cannot be read is refused before the model loads (issue 46: POI's truncated62886.docx was
reported only after loading): the checkpoint given here does not exist, so a refusal naming the document shows the
document was checked first, and a readable document gets as far as the checkpoint."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from tests.helpers.cli import assert_one_line_error, run_cli


def docx_bytes() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", "<Types/>")
        z.writestr("word/document.xml", '<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/'
                                        '2006/main"><w:body><w:p><w:r><w:t>the red car</w:t></w:r></w:p></w:body>'
                                        "</w:document>" + " " * 4000)
    return buffer.getvalue()


@pytest.mark.parametrize(("name", "data", "message"), [
    ("truncated.docx", docx_bytes()[:300], "corrupt docx file"),  # cut as a failed download cuts it
    ("nodoc.pptx", docx_bytes(), "not a pptx file: no ppt/presentation.xml"),
    ("text.odt", b"just text", "not a zip container"),
    ("latin.md", "caf\xe9".encode("latin-1"), "not UTF-8 text"),
    ("binary.srt", b"PK\x03\x04\x14\x00\x00\x00", "not UTF-8, UTF-16 or Windows-1252 text"),
])
def test_an_unreadable_document_is_refused_before_the_model_loads(tmp_path: Path, name: str, data: bytes,
                                                                   message: str) -> None:
    (tmp_path / name).write_bytes(data)
    result = run_cli("translate", "--checkpoint", tmp_path / "missing.pt", "-i", tmp_path / name,
                     "-o", tmp_path / f"out-{name}")
    assert_one_line_error(result, message)
    assert "loading" not in result.stdout + result.stderr and not (tmp_path / f"out-{name}").exists()


def test_a_readable_document_gets_to_the_model(tmp_path: Path) -> None:
    (tmp_path / "fine.docx").write_bytes(docx_bytes())
    result = run_cli("translate", "--checkpoint", tmp_path / "missing.pt", "-i", tmp_path / "fine.docx",
                     "-o", tmp_path / "out.docx")
    assert_one_line_error(result, "checkpoint not found")
