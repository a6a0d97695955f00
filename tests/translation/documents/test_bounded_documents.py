"""Bounded work for documents (issue 43, items 2, 3 and 8): the document attacks refused in one line or bounded in
CPU and memory; parsed XML charged to the work budget; parts read, translated and written one at a time; a deadline
or a cancel stopping the work inside the loops; and the document crashes (an XML comment in an ODT paragraph, a
non-UTF-8 part, duplicate zip members, the OLE message). The fake translator is the office tests'
(tests.helpers.documents)."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
import warnings
import zipfile
from pathlib import Path

import pytest
from lxml import etree

from nmt import workbudget
from nmt.errors import NmtError
from nmt.translation.documents import docx as docx_format
from nmt.translation.documents import odt as odt_format
from nmt.translation.documents import office_ooxml, safezip
from nmt.workbudget import OverBudget, WorkBudget
from tests.helpers.documents import cpu, reverse_upper
from tests.helpers.paths import ROOT

W_NS = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
W = f'xmlns:w="{W_NS}"'
CT = b'<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"/>'
WORDS = ["red", "car", "house", "two", "green", "bike", "the", "a", "is", "blue"]


def body(inner: str, encoding: str = "UTF-8") -> str:
    return f'<?xml version="1.0" encoding="{encoding}"?><w:document {W}><w:body>{inner}</w:body></w:document>'


def make_docx(path: Path, document: str | bytes, extra: dict[str, bytes] | None = None) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        z.writestr("[Content_Types].xml", CT)
        z.writestr("word/document.xml", document)
        for name, data in (extra or {}).items():
            z.writestr(name, data)
    return path


def header(size: int, seed: int, repeated: bool) -> bytes:
    """A header part of about `size` bytes of paragraphs: one repeated (compresses ~330-fold) or random words."""
    rng, parts, total = random.Random(seed), [], 0
    while total < size:
        text = "red car" if repeated else " ".join(rng.choice(WORDS) for _ in range(6))
        parts.append(f"<w:p><w:r><w:t>{text}</w:t></w:r></w:p>")
        total += len(parts[-1])
    return f'<w:hdr {W}>{"".join(parts)}</w:hdr>'.encode()


def refused(src: Path, tmp_path: Path, pattern: str, module=docx_format) -> NmtError:
    out = tmp_path / f"refused{src.suffix}"
    with pytest.raises(NmtError, match=pattern) as e:
        with workbudget.bounded(WorkBudget(src.name)):
            module.translate(src, out, reverse_upper)
    assert "\n" not in str(e.value) and not out.exists()
    return e.value


# --- the attacks of items 2 and 3 -------------------------------------------------------------------------------

def test_one_run_of_40000_sentences_is_bounded(tmp_path: Path) -> None:
    """Issue: a 436-byte docx of one run "1? " * 40,000 took 161 s. Now <= 2 s of CPU (or a one-line refusal)."""
    src = make_docx(tmp_path / "qmarks.docx", body("<w:p><w:r><w:t>" + "1? " * 40_000 + "</w:t></w:r></w:p>"))
    assert src.stat().st_size < 1000

    def work() -> None:
        try:
            with workbudget.bounded(WorkBudget(src.name)):
                docx_format.translate(src, tmp_path / "out.docx", reverse_upper)
        except OverBudget as e:
            assert "\n" not in str(e)

    assert cpu(work)[1] <= 2.0


def test_twenty_headers_that_inflate_330_fold_are_refused(tmp_path: Path) -> None:
    """Issue: a 64 KiB docx of 20 headers of 1 MiB (each just under the old 1 MiB floor of the ratio check) took
    1.7 GB. Scaled to 20 x 256 KiB (the same ~330-fold ratio): refused as a bomb, before anything is parsed."""
    extra = {f"word/header{k}.xml": header(2**18, k, repeated=True) for k in range(1, 21)}
    src = make_docx(tmp_path / "headers.docx", body("<w:p><w:r><w:t>hello</w:t></w:r></w:p>"), extra)
    assert src.stat().st_size < 64 * 2**10
    assert cpu(lambda: refused(src, tmp_path, r"header\d+\.xml inflates \d+-fold: refused"))[1] < 2.0


def test_every_member_is_held_to_the_ratio_and_tiny_members_pass(tmp_path: Path) -> None:
    small = make_docx(tmp_path / "small.docx", body("<w:p><w:r><w:t>a red car</w:t></w:r></w:p>"),
                      {"word/media/zeros.bin": bytes(900 * 2**10)})  # under the old floor, ~900-fold
    refused(small, tmp_path, "zeros.bin inflates")
    ok = make_docx(tmp_path / "ok.docx", body("<w:p><w:r><w:t>a red car</w:t></w:r></w:p>"),
                   {"word/media/zeros.bin": bytes(60 * 2**10)})  # within the slack: a tiny member passes
    docx_format.translate(ok, tmp_path / "ok-out.docx", reverse_upper)


def test_parsed_xml_is_charged_to_the_budget(tmp_path: Path) -> None:
    extra = {f"word/header{k}.xml": header(20_000, k, repeated=False) for k in range(1, 4)}
    src = make_docx(tmp_path / "h.docx", body("<w:p><w:r><w:t>hello</w:t></w:r></w:p>"), extra)
    budget = WorkBudget.within(src.name, xml_bytes=50_000)
    with pytest.raises(OverBudget, match=r"h\.docx: over 50,000 bytes of XML") as e, workbudget.bounded(budget):
        docx_format.translate(src, tmp_path / "out.docx", reverse_upper)
    assert "\n" not in str(e.value) and not (tmp_path / "out.docx").exists()
    with workbudget.bounded(budget := WorkBudget(src.name)):
        docx_format.translate(src, tmp_path / "out.docx", reverse_upper)
    assert budget.used["xml_bytes"] > 60_000


def test_parts_are_translated_one_at_a_time_in_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Memory follows one part and one chunk of its paragraphs: part k is written before part k+1 is parsed, and
    no call gets more than CHUNK paragraphs."""
    extra = {f"word/header{k}.xml": header(30_000, k, repeated=False) for k in range(1, 4)}
    src = make_docx(tmp_path / "h.docx", body("<w:p><w:r><w:t>hello</w:t></w:r></w:p>"), extra)
    events: list[str] = []
    part, serialize = safezip.SafeZip.part, safezip.XmlPart.serialize
    text_part = docx_format.PARTS.fullmatch  # (the package's relationships and content types are read first)
    monkeypatch.setattr(safezip.SafeZip, "part",
                        lambda self, name: (text_part(name) and events.append("parse")) or part(self, name))
    monkeypatch.setattr(safezip.XmlPart, "serialize", lambda self: events.append("write") or serialize(self))
    sizes: list[int] = []

    def counting(paragraphs):
        sizes.append(len(paragraphs))
        return reverse_upper(paragraphs)

    assert docx_format.translate(src, tmp_path / "out.docx", counting) > 3 * office_ooxml.CHUNK
    assert events == ["parse", "write"] * 4
    assert max(sizes) == office_ooxml.CHUNK and len(sizes) > 4


MEASURE = """
import resource, sys
from pathlib import Path
from nmt.translation.documents import docx
from tests.helpers.documents import reverse_upper
idle = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
docx.translate(Path(sys.argv[1]), Path(sys.argv[2]), reverse_upper)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - idle) * 1024)
"""


def test_many_large_parts_stay_within_a_memory_bound(tmp_path: Path) -> None:
    """20 headers of 16 KiB of ordinary (random word) paragraphs, which the ratio lets by (the issue's 20 x 1 MiB
    scaled by 1/64 to keep the test fast): peak RSS grows by less than holding them all would take."""
    extra = {f"word/header{k}.xml": header(2**14, k, repeated=False) for k in range(1, 21)}
    src = make_docx(tmp_path / "h.docx", body("<w:p><w:r><w:t>hello</w:t></w:r></w:p>"), extra)
    out = subprocess.run([sys.executable, "-c", MEASURE, str(src), str(tmp_path / "out.docx")], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.split()[-1]) < 60 * 2**20  # one part's tree and a chunk (measured ~20 MB)


def test_a_passed_deadline_or_a_cancel_stops_the_work(tmp_path: Path) -> None:
    paragraphs = "".join("<w:p><w:r><w:t>a red car</w:t></w:r></w:p>" for _ in range(3 * office_ooxml.CHUNK))
    src = make_docx(tmp_path / "long.docx", body(paragraphs))
    calls = []

    def slow(ps):
        calls.append(len(ps))
        budget.deadline = time.monotonic() - 1  # the deadline passes during the first chunk
        return reverse_upper(ps)

    budget = WorkBudget.within(src.name, seconds=60)
    with pytest.raises(workbudget.TimedOut), workbudget.bounded(budget):
        docx_format.translate(src, tmp_path / "out.docx", slow)
    assert calls == [office_ooxml.CHUNK] and not (tmp_path / "out.docx").exists()
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(workbudget.Cancelled), workbudget.bounded(WorkBudget.within(src.name, cancel=cancel)):
        docx_format.translate(src, tmp_path / "out.docx", reverse_upper)


def test_a_text_of_a_million_tiny_paragraphs_is_refused_while_read(tmp_path: Path) -> None:
    """A 19 MiB .txt of "a\\n\\n" took 1.5 GB and 16 s to cut into blocks before any limit was looked at; now the
    paragraph limit is met while reading. Scaled: 30,000 blocks against a limit of 1,000."""
    from nmt.translation.documents import txt

    src = tmp_path / "blocks.txt"
    src.write_text("a\n\n" * 30_000, encoding="utf-8")
    budget = WorkBudget.within(src.name, paragraphs=1000)
    with pytest.raises(OverBudget, match=r"blocks\.txt: over 1,000 paragraphs") as e, workbudget.bounded(budget):
        txt.translate(src, tmp_path / "out.txt", reverse_upper)
    assert "\n" not in str(e.value) and budget.used.get("paragraphs", 0) == 0  # refused before any was built


def test_text_paragraphs_go_to_the_translator_in_chunks(tmp_path: Path) -> None:
    from nmt.translation.documents import txt

    src = tmp_path / "many.txt"
    src.write_text("".join(f"{k} red cars\n\n- item {k}\n\n" for k in range(300)), encoding="utf-8")
    sizes: list[int] = []
    assert txt.translate(src, tmp_path / "out.txt", lambda ps: sizes.append(len(ps)) or reverse_upper(ps)) == 600
    assert sizes == [256, 256, 88]
    out = (tmp_path / "out.txt").read_text(encoding="utf-8")
    assert out.startswith("CARS RED 0\n\n- 0 ITEM\n\n") and out.endswith("CARS RED 299\n\n- 299 ITEM\n\n")


# --- the crashes of item 8 --------------------------------------------------------------------------------------

TEXT_NS = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
OFFICE_NS = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"


def make_odt(path: Path, paragraph: str) -> Path:
    content = (f'<?xml version="1.0" encoding="UTF-8"?><!DOCTYPE x [<!ENTITY e "zz">]><office:document-content '
               f'xmlns:office="{OFFICE_NS}" xmlns:text="{TEXT_NS}"><office:body><office:text>{paragraph}'
               '</office:text></office:body></office:document-content>')
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("mimetype", "application/vnd.oasis.opendocument.text")
        z.writestr("content.xml", content)
    return path


def test_odt_comment_pi_and_entity_in_a_paragraph_are_kept(tmp_path: Path) -> None:
    src = make_odt(tmp_path / "c.odt", "<text:p>two red <!-- a note --><?pi x?>&e; cars "
                                       "<text:span>go</text:span></text:p>")
    assert odt_format.translate(src, tmp_path / "out.odt", reverse_upper) == 1
    with zipfile.ZipFile(tmp_path / "out.odt") as z:
        content = z.read("content.xml")
    assert b"<!-- a note -->" in content and b"<?pi x?>" in content and b"&e;" in content
    assert b"RED" in content and b"CARS" in content


def test_an_iso_8859_1_part_comes_back_in_its_encoding(tmp_path: Path) -> None:
    document = body("<w:p><w:r><w:t>un caf\xe9 cr\xe8me</w:t></w:r></w:p>", "ISO-8859-1").encode("latin-1")
    src = make_docx(tmp_path / "latin.docx", document)
    docx_format.translate(src, tmp_path / "out.docx", reverse_upper)
    with zipfile.ZipFile(tmp_path / "out.docx") as z:
        data = z.read("word/document.xml")
    assert data.startswith(b'<?xml version="1.0" encoding="ISO-8859-1"?>')
    assert "CRÈME CAFÉ UN".encode("latin-1") in data  # not UTF-8 bytes under a Latin-1 declaration
    assert "".join(etree.fromstring(data).itertext()) == "CRÈME CAFÉ UN"


def test_duplicate_member_names_are_refused(tmp_path: Path) -> None:
    src = make_docx(tmp_path / "dup.docx", body("<w:p><w:r><w:t>red car</w:t></w:r></w:p>"))
    with warnings.catch_warnings(), zipfile.ZipFile(src, "a") as z:
        warnings.simplefilter("ignore")  # zipfile warns of the duplicate it writes
        z.writestr("word/document.xml", body("<w:p><w:r><w:t>other text</w:t></w:r></w:p>"))
    refused(src, tmp_path, r"dup\.docx: corrupt docx file: member word/document\.xml is in the zip 2 times")


def test_the_ole_message_names_the_extension(tmp_path: Path) -> None:
    ole = tmp_path / "secret.docx"
    ole.write_bytes(bytes.fromhex("d0cf11e0a1b11ae1") + bytes(504))
    error = refused(ole, tmp_path, r"save it as \.docx first")
    assert "{" not in str(error)
