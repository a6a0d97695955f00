"""TMX corpora (nmt.data.tmx through nmt.data.corpus.read_pairs): files as OmegaT (TMX 1.1, `lang=`), Trados (UTF-16,
empty inline codes) and OPUS write them, the language and inline-markup rules, .tmx.gz, one-line errors for a
malformed file, entity declarations refused, memory bounded on a long file, and `nmt prepare` / `nmt distill`'s
corpus reading a .tmx as they read the same pairs from prefix files."""

from __future__ import annotations

import gzip
import json
import tracemalloc
from pathlib import Path
from xml.sax.saxutils import escape

import pytest

from nmt.config.experiment import load_config
from nmt.data.corpus import read_pairs, resolve
from nmt.data.datadir import DataDir
from nmt.demo.files import write_demo
from nmt.distill.stages import corpus_pairs
from nmt.errors import NmtError
from tests.helpers.cli import assert_one_line_error, run_cli

OMEGAT = """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE tmx SYSTEM "tmx11.dtd">
<tmx version="1.1">
  <header creationtool="OmegaT" o-tmf="OmegaT TMX" adminlang="EN-US" datatype="plaintext"
          creationtoolversion="6.0.0" segtype="sentence" srclang="EN-US"/>
  <body>
<!-- Default translations -->
    <tu>
      <tuv lang="EN-US">
        <seg>The cat sleeps.</seg>
      </tuv>
      <tuv lang="DE-DE" changeid="anna" changedate="20240105T101500Z">
        <seg>Die Katze schläft.</seg>
      </tuv>
    </tu>
    <tu>
      <tuv lang="EN-US">
        <seg>Only English here.</seg>
      </tuv>
    </tu>
    <tu>
      <tuv lang="EN-US">
        <seg>A long
          segment &amp; more</seg>
      </tuv>
      <tuv lang="DE-DE">
        <seg>Ein langes
          Segment &amp; mehr</seg>
      </tuv>
    </tu>
  </body>
</tmx>
"""

TRADOS = """<?xml version="1.0" encoding="utf-16"?>
<tmx version="1.4">
  <header creationtool="SDL Language Platform" creationtoolversion="8.0" o-tmf="SDL TM8 Format" datatype="xml"
          segtype="sentence" adminlang="en-US" srclang="en-US" creationdate="20240101T120000Z" creationid="ANNA">
    <prop type="x-Recognizers">RecognizeAll</prop>
  </header>
  <body>
    <tu creationdate="20240101T120000Z" creationid="ANNA" changedate="20240101T120000Z" usagecount="1">
      <prop type="x-Context">0, 0</prop>
      <tuv xml:lang="en-US">
        <seg>Click <bpt i="1" type="1" x="1" />Save<ept i="1" /> to keep your <ph x="2" type="3" /> changes.</seg>
      </tuv>
      <tuv xml:lang="de-DE">
        <seg>Klicken Sie auf <bpt i="1" type="1" x="1" />Speichern<ept i="1" />, um Ihre Änderungen zu behalten.</seg>
      </tuv>
    </tu>
  </body>
</tmx>
"""

OPUS_HEAD = """<?xml version="1.0" encoding="utf-8"?>
<tmx version="1.4">
<header creationdate="Mon Jan  1 00:00:00 2024" srclang="de" adminlang="en" o-tmf="unknown" segtype="sentence"
        creationtool="Uplug" creationtoolversion="unknown" datatype="PlainText" />
  <body>
"""
OPUS_TAIL = "  </body>\n</tmx>\n"


def opus_unit(en: str, de: str, en_lang: str = "en", de_lang: str = "de") -> str:
    """A <tu> as OPUS writes it (German first here); the segments are inserted as markup, unescaped."""
    return (f'    <tu>\n      <tuv xml:lang="{de_lang}"><seg>{de}</seg></tuv>\n'
            f'      <tuv xml:lang="{en_lang}"><seg>{en}</seg></tuv>\n    </tu>\n')


def write(path: Path, text: str | bytes) -> str:
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return str(path)


def test_omegat_tmx11_lang_region_codes_and_skipped_unit(tmp_path, capsys):
    path = write(tmp_path / "project_save.tmx", OMEGAT)
    assert resolve(path, "en", "de").kind == "tmx"
    pairs = read_pairs(path, "en", "de")
    assert iter(pairs) is pairs  # a stream
    assert list(pairs) == [("The cat sleeps.", "Die Katze schläft."),
                           ("A long segment & more", "Ein langes Segment & mehr")]
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"{path}: skipped 1 of 3 translation units that lack en or de"]
    assert list(read_pairs(path, "de", "en"))[0] == ("Die Katze schläft.", "The cat sleeps.")


def test_trados_utf16_with_empty_inline_codes(tmp_path):
    path = write(tmp_path / "trados.tmx", TRADOS.encode("utf-16"))
    assert list(read_pairs(path, "EN", "de")) == [("Click Save to keep your changes.",
                                                    "Klicken Sie auf Speichern, um Ihre Änderungen zu behalten.")]


INLINE = [  # a segment's markup -> its text: native codes and sub-flows go, <hi> and the text between codes stay
    ('Press <bpt i="1">&lt;b&gt;</bpt>Save<ept i="1">&lt;/b&gt;</ept> now', "Press Save now"),
    ('Copied <ph x="1">{0}</ph> files', "Copied files"),
    ('<it pos="begin">&lt;i&gt;</it>Italic start', "Italic start"),
    ('A <hi type="bold">very</hi> good idea', "A very good idea"),
    ('See <ph>&lt;img alt="<sub>A cat on a mat</sub>"&gt;</ph>the picture', "See the picture"),
    ('Old <ut>&lt;br/&gt;</ut>style', "Old style"),
    ('<hi>nested <bpt i="1">&lt;u&gt;</bpt>code<ept i="1">&lt;/u&gt;</ept></hi> inside', "nested code inside"),
    ("Tabs\tstay,\u2028a\ufeffb", "Tabs\tstay, ab"),  # cleaned as every corpus line: U+2028 a space, BOM gone
    ("", ""),
]


def test_inline_markup_and_cleaning(tmp_path):
    units = "".join(opus_unit(markup, f"d{i}") for i, (markup, _) in enumerate(INLINE))
    path = write(tmp_path / "inline.tmx", OPUS_HEAD + units + OPUS_TAIL)
    assert list(read_pairs(path, "en", "de")) == [(text, f"d{i}") for i, (_, text) in enumerate(INLINE)]


def test_language_matching(tmp_path):
    unit = ('<tu><tuv xml:lang="en-GB"><seg>colour</seg></tuv><tuv xml:lang="EN"><seg>color</seg></tuv>'
            '<tuv xml:lang="de-AT"><seg>Farbe AT</seg></tuv><tuv xml:lang="de-DE"><seg>Farbe DE</seg></tuv>'
            '<tuv xml:lang="pt_BR"><seg>cor</seg></tuv></tu>\n')
    path = write(tmp_path / "langs.tmx", OPUS_HEAD + unit + OPUS_TAIL)
    assert list(read_pairs(path, "en", "de")) == [("color", "Farbe AT")]  # exact first, else the first regional
    assert list(read_pairs(path, "en-gb", "de-DE")) == [("colour", "Farbe DE")]
    assert list(read_pairs(path, "pt-BR", "en")) == [("cor", "color")]
    assert list(read_pairs(path, "en-GB", "en")) == [("colour", "color")]
    assert list(read_pairs(path, "en-US", "de")) == []  # en-US takes en-US only
    assert list(read_pairs(path, "pt", "pt-BR")) == []  # one <tuv> never serves both sides


def test_gzipped(tmp_path):
    text = OPUS_HEAD + opus_unit("Resumption of the session", "Wiederaufnahme der Sitzungsperiode") + OPUS_TAIL
    path = write(tmp_path / "Europarl.de-en.TMX.GZ", gzip.compress(text.encode("utf-8")))
    assert resolve(path, "en", "de").kind == "tmx"
    assert list(read_pairs(path, "en", "de")) == [("Resumption of the session", "Wiederaufnahme der Sitzungsperiode")]
    with pytest.raises(NmtError, match=r"not-gzip\.tmx\.gz: cannot read: Not a gzipped file"):
        list(read_pairs(write(tmp_path / "not-gzip.tmx.gz", text), "en", "de"))


MALFORMED = [  # (file text, line, what the message says)
    (OPUS_HEAD + opus_unit("a", "b") + opus_unit("c</hi>", "d") + OPUS_TAIL, 12, "mismatched tag"),
    (OPUS_HEAD + opus_unit("a", "b"), 10, "no element found"),  # truncated
    (OPUS_HEAD + opus_unit("a & b", "c") + OPUS_TAIL, 8, "not well-formed"),
]


@pytest.mark.parametrize("text, line, reason", MALFORMED)
def test_malformed_file_is_one_line_naming_file_and_line(tmp_path, text, line, reason):
    path = write(tmp_path / "bad.tmx", text)
    with pytest.raises(NmtError) as info:
        list(read_pairs(path, "en", "de"))
    message = str(info.value)
    assert message.startswith(f"{path}:{line}: not well-formed XML ({reason}") and "\n" not in message


def test_not_tmx_and_missing(tmp_path):
    path = write(tmp_path / "page.tmx", "<html><body><tu/></body></html>")
    with pytest.raises(NmtError, match=r"page\.tmx is not a TMX file: its root element is <html>"):
        list(read_pairs(path, "en", "de"))
    with pytest.raises(NmtError, match=r"missing file: .*nothere\.tmx$"):
        read_pairs(str(tmp_path / "nothere.tmx"), "en", "de")


def billion_laughs() -> str:
    """The billion laughs: &lol9; is 10**9 "lol"s, declared in a few hundred bytes."""
    entities = ['  <!ENTITY lol0 "lol">']
    for i in range(1, 10):
        entities.append(f'  <!ENTITY lol{i} "{(f"&lol{i - 1};") * 10}">')
    return ('<?xml version="1.0"?>\n<!DOCTYPE tmx [\n' + "\n".join(entities) + "\n]>\n"
            '<tmx version="1.4"><body><tu><tuv xml:lang="en"><seg>&lol9;</seg></tuv>'
            '<tuv xml:lang="de"><seg>x</seg></tuv></tu></body></tmx>\n')


@pytest.mark.parametrize("doctype, shown, line", [
    (None, "&lol0;", 3),  # billion_laughs()
    ('<!DOCTYPE tmx [\n<!ENTITY xxe SYSTEM "file:///etc/passwd">\n]>', "&xxe;", 3),
    ('<!DOCTYPE tmx [<!ENTITY % p "<!ENTITY q \'x\'>"> %p;]>', "%p", 2),
])
def test_entity_declarations_refused(tmp_path, doctype, shown, line):
    text = billion_laughs() if doctype is None else (
        f'<?xml version="1.0"?>\n{doctype}\n<tmx version="1.4"><body>{opus_unit("a", "b")}</body></tmx>\n')
    path = write(tmp_path / "entities.tmx", text)
    with pytest.raises(NmtError) as info:
        list(read_pairs(path, "en", "de"))
    assert str(info.value).startswith(f"{path}:{line}: the DOCTYPE declares the entity {shown}, refused")


def test_memory_stays_bounded_on_a_long_file(tmp_path):
    n = 20_000  # a 3.8 MB file, whose whole tree would take some 45 MB
    unit = ('<tu tuid="{0}"><prop type="x-origin">opus</prop><tuv xml:lang="en"><seg>sentence number {0} '
            '<ph x="1">{{0}}</ph> here</seg></tuv><tuv xml:lang="de"><seg>Satz Nummer {0}</seg></tuv></tu>\n')
    path = tmp_path / "long.tmx"
    with open(path, "w", encoding="utf-8") as f:
        f.write(OPUS_HEAD)
        f.writelines(unit.format(i) for i in range(n))
        f.write(OPUS_TAIL)
    size = path.stat().st_size
    count, last = 0, ("", "")
    tracemalloc.start()
    try:
        for pair in read_pairs(str(path), "en", "de"):
            count, last = count + 1, pair
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert count == n and last == (f"sentence number {n - 1} here", f"Satz Nummer {n - 1}")
    assert peak < 2_000_000 and peak < size / 4, f"peak {peak:,} bytes reading a {size:,}-byte file"


def write_tmx(path: Path, pairs: list[tuple[str, str]]) -> str:
    """`pairs` as a TMX file: every third source's first word in bold codes, and one unit with no German."""
    units = []
    for i, (en, de) in enumerate(pairs):
        en = escape(en)
        if i % 3 == 0:
            first, _, rest = en.partition(" ")
            en = f'<bpt i="1">&lt;b&gt;</bpt>{first}<ept i="1">&lt;/b&gt;</ept> {rest}'
        units.append(opus_unit(en, escape(de), "en-US", "de-DE"))
    units.insert(5, '<tu><tuv xml:lang="en"><seg>untranslated</seg></tuv></tu>\n')
    return write(path, OPUS_HEAD + "".join(units) + OPUS_TAIL)


def test_prepare_tmx_gives_the_data_of_the_prefix_files(tmp_path):
    raw = write_demo(tmp_path / "raw", n_train=300, n_valid=1, n_test=1, seed=5)
    pairs = list(read_pairs(raw["train"], "en", "de"))
    tmx = write_tmx(tmp_path / "train.tmx", pairs)
    common = ["--src-lang", "en", "--tgt-lang", "de", "--vocab-size", "150", "--no-progress"]
    from_tmx = run_cli("prepare", "--train", tmx, "--data-dir", tmp_path / "from-tmx", *common)
    assert from_tmx.exit_code == 0, from_tmx.stderr
    assert f"{tmx}: skipped 1 of {len(pairs) + 1} translation units that lack en or de" in from_tmx.stderr
    from_prefix = run_cli("prepare", "--train", raw["train"], "--data-dir", tmp_path / "from-prefix", *common)
    assert from_prefix.exit_code == 0, from_prefix.stderr
    metas = [json.loads((tmp_path / name / "meta.json").read_text()) for name in ("from-tmx", "from-prefix")]
    assert metas[0]["splits"] == metas[1]["splits"] and metas[0]["filters"] == metas[1]["filters"]
    assert metas[0]["filters"]["read"] == len(pairs) and list(metas[0]["inputs"]) == [tmx]
    assert (tmp_path / "from-tmx" / "spm.model").read_bytes() == (tmp_path / "from-prefix" / "spm.model").read_bytes()
    splits = [DataDir.open(tmp_path / name).split("train") for name in ("from-tmx", "from-prefix")]
    assert splits[0][:]["src_ids"] == splits[1][:]["src_ids"] and splits[0][:]["tgt_ids"] == splits[1][:]["tgt_ids"]


def test_prepare_refuses_a_malformed_tmx_in_one_line(tmp_path):
    path = write(tmp_path / "bad.tmx", MALFORMED[0][0])
    result = run_cli("prepare", "--train", path, "--data-dir", tmp_path / "data", "--no-progress")
    assert_one_line_error(result, f"{path}:12: not well-formed XML (mismatched tag")


def test_distill_reads_the_corpus_from_tmx(tmp_path):
    decomposed = "Cafe\u0301 au lait"  # data.normalize (NFC) applies as to every corpus
    tmx = write(tmp_path / "train.tmx", OPUS_HEAD + opus_unit(decomposed, "Milchkaffee") + OPUS_TAIL)
    cfg = load_config(None, [f"data.train={tmx}", f"data.test={tmx}"])
    assert list(corpus_pairs(cfg, "train")) == list(corpus_pairs(cfg, "test")) == [("Caf\u00e9 au lait", "Milchkaffee")]


def test_prepare_help_names_tmx():
    assert "TMX" in run_cli("prepare", "--help").stdout
