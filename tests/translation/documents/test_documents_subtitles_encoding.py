""".srt and .vtt files as subtitle editors save them (issue 46): UTF-16 with a BOM (Subtitle Edit's "Unicode",
Windows Notepad), UTF-16 without one, and Windows-1252 ("ANSI"): read by the stated rule (a BOM names the encoding;
else UTF-16 when NULs fill every other byte; else UTF-8 if it decodes; else Windows-1252) and written back in the
same encoding, BOM and CRLFs kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from nmt.errors import NmtError
from nmt.translation.documents import subtitles
from nmt.translation.documents.inline import Paragraph, Piece
from nmt.translation.documents.txt import detect_encoding
from tests.helpers.documents import reverse_upper

SRT = ("1\r\n00:00:01,000 --> 00:00:02,500\r\nLe café noir\r\n\r\n"
       "2\r\n00:00:03,000 --> 00:00:04,000\r\n<i>Déjà vu</i>\r\n")


def round_trip(tmp_path: Path, data: bytes, name: str = "in.srt") -> bytes:
    src = tmp_path / name
    src.write_bytes(data)
    subtitles.translate(src, tmp_path / f"out{src.suffix}", reverse_upper)
    return (tmp_path / f"out{src.suffix}").read_bytes()


@pytest.mark.parametrize(("encoding", "bom"), [("utf-16-le", b"\xff\xfe"), ("utf-16-be", b"\xfe\xff"),
                                               ("utf-32-le", b"\xff\xfe\x00\x00"), ("utf-8", b"\xef\xbb\xbf")])
def test_a_bom_names_the_encoding_and_is_written_back(tmp_path: Path, encoding: str, bom: bytes) -> None:
    out = round_trip(tmp_path, bom + SRT.encode(encoding))
    assert out.startswith(bom) and not out.startswith(bom + bom)
    text = out[len(bom):].decode(encoding)
    assert text == SRT.replace("Le café noir", "NOIR CAFÉ LE").replace("Déjà vu", "VU DÉJÀ")


def test_windows_1252_comes_back_in_windows_1252(tmp_path: Path) -> None:
    data = SRT.replace("noir", "noir – « ok »").encode("cp1252")
    assert b"\xe9" in data and b"\x96" in data  # é and the en dash of cp1252, not UTF-8
    out = round_trip(tmp_path, data)
    assert "CAFÉ LE" in out.decode("cp1252") and "–" in out.decode("cp1252")
    with pytest.raises(UnicodeDecodeError):
        out.decode("utf-8")  # still Windows-1252
    assert out.count(b"\r\n") == data.count(b"\r\n")


def test_utf16_without_bom_and_a_webvtt_file(tmp_path: Path) -> None:
    out = round_trip(tmp_path, SRT.encode("utf-16-le"))
    assert not out.startswith(b"\xff\xfe") and "NOIR CAFÉ LE" in out.decode("utf-16-le")
    vtt = "WEBVTT\n\n00:01.000 --> 00:02.000\nLe café\n"
    assert round_trip(tmp_path, b"\xff\xfe" + vtt.encode("utf-16-le"), "in.vtt").decode("utf-16") == \
        vtt.replace("Le café", "CAFÉ LE")


def test_the_detection_rule(tmp_path: Path) -> None:
    path = tmp_path / "x.srt"
    assert detect_encoding(path, "café".encode()) == "utf-8"  # UTF-8 first: it decodes
    assert detect_encoding(path, "café".encode("cp1252")) == "cp1252"
    assert detect_encoding(path, "1\n".encode("utf-16-be")) == "utf-16-be"
    with pytest.raises(NmtError, match="byte 0x00 at offset 5"):  # a zip named .srt: NULs, not every other byte
        detect_encoding(path, b"PK\x03\x04\x14\x00\x00\x00\x08\x00\x9c\x8a")


def test_a_translation_the_encoding_cannot_hold_is_written_as_utf8_with_a_bom(tmp_path: Path, capsys) -> None:
    def hungarian(paragraphs: list[Paragraph]) -> list[list[Piece]]:
        return [p.render(["gyönyörű kő" for _ in p.texts]) for p in paragraphs]

    src = tmp_path / "in.srt"
    src.write_bytes(SRT.encode("cp1252"))
    subtitles.translate(src, tmp_path / "out.srt", hungarian)
    data = (tmp_path / "out.srt").read_bytes()
    assert data.startswith(b"\xef\xbb\xbf") and "gyönyörű kő" in data.decode("utf-8")
    assert "written as UTF-8 with a BOM" in capsys.readouterr().err.replace("\n", " ")
