"""Translated Office documents open in LibreOffice (Debian's libreoffice-writer-nogui and -impress-nogui; skipped
without `soffice`): the demo model translates the golden inputs (docx, pptx, odt), LibreOffice converts each
output headless, and its text of a docx or odt holds the translation nmt wrote."""

from __future__ import annotations

import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.helpers.cli import run_cli
from tests.helpers.paths import DEMO_MODEL, FIXTURES

SOFFICE = shutil.which("soffice") or shutil.which("libreoffice")
pytestmark = pytest.mark.skipif(SOFFICE is None, reason="LibreOffice (soffice) is not installed")
INPUTS = FIXTURES / "golden" / "documents"


def convert(files: list[Path], to: str, out: Path) -> None:
    """LibreOffice's headless conversion of `files` into `out`, with a profile of its own (no user's settings)."""
    subprocess.run([SOFFICE, f"-env:UserInstallation={(out / 'profile').as_uri()}", "--headless", "--convert-to", to,
                    "--outdir", str(out), *map(str, files)], check=True, capture_output=True, timeout=180)


def text_of(document: Path) -> str:
    """The text of a docx or odt's main XML part, markup removed: what nmt wrote, paragraphs run together."""
    part = {"docx": "word/document.xml", "odt": "content.xml"}[document.suffix[1:]]
    return re.sub(r"<[^>]+>", "", zipfile.ZipFile(document).read(part).decode("utf-8"))


def test_translated_office_documents_open_in_libreoffice(tmp_path: Path) -> None:
    outputs = []
    for suffix in ("docx", "odt", "pptx"):
        out = tmp_path / f"out-{suffix}.{suffix}"
        result = run_cli("translate", "--checkpoint", DEMO_MODEL, "-i", INPUTS / f"doc.{suffix}", "-o", out)
        assert result.exit_code == 0, result.stderr
        outputs.append(out)
    convert(outputs, "pdf", tmp_path)
    for out in outputs:
        pdf = out.with_suffix(".pdf")
        assert pdf.read_bytes()[:5] == b"%PDF-" and pdf.stat().st_size > 2000, out.name
    convert(outputs[:2], "txt:Text", tmp_path)  # what LibreOffice reads in them, as plain text
    for out in outputs[:2]:
        lines = [line.strip() for line in out.with_suffix(".txt").read_text(encoding="utf-8-sig").splitlines()]
        read = [line for line in lines if len(line) > 10][:3]  # its first paragraphs with words
        assert len(read) >= 2 and "Ich sehe" in " ".join(read), out.name  # German, as the demo model writes it
        assert all(line in text_of(out) for line in read), out.name  # LibreOffice reads what nmt wrote
