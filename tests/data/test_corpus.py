from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nmt.data.corpus import (
    RATIO_MIN_TOKENS,
    PairFilter,
    file_sha256,
    read_pairs,
    resolve,
)
from nmt.errors import NmtError
from nmt.text import clean_text, normalize


def _write(path, data: bytes | str):
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path


def test_prefix_pairs_crlf_strip_and_line_separators(tmp_path):
    _write(tmp_path / "c.en", b"  Hello world \r\nsecond\x00 line\r\nthird\xe2\x80\xa8part\n\n")
    _write(tmp_path / "c.de", "Hallo Welt\r\nzweite\tZeile\r\n\ufeffdritter\x1bTeil\r\nleer\r\n")
    pairs = read_pairs(str(tmp_path / "c"), "en", "de")
    assert iter(pairs) is pairs  # a stream, not a list
    assert list(pairs) == [
        ("Hello world", "Hallo Welt"),
        ("second line", "zweite\tZeile"),  # NUL removed, TAB kept
        ("third part", "dritterTeil"),  # U+2028 is not a line break (it becomes a space)
        ("", "leer"),
    ]


def test_clean_text_and_normalize():
    assert clean_text("\ufeff a\x7fb\x85c\u2029d\r ") == "ab c d"
    assert normalize("e\u0301", "NFC") == "\u00e9"
    assert normalize("e\u0301", None) == "e\u0301"
    assert normalize("\ufb01", "NFKC") == "fi"


def test_file_sha256(tmp_path):
    data = b"x" * 3_000_000
    assert file_sha256(_write(tmp_path / "f", data)) == hashlib.sha256(data).hexdigest()


def test_tsv(tmp_path):
    path = _write(tmp_path / "c.tsv", "a b\tA B\r\n\tonly target\nx\t y \n")
    assert list(read_pairs(str(path), "en", "de")) == [("a b", "A B"), ("", "only target"), ("x", "y")]


@pytest.mark.parametrize("line, found", [("no tab here", "no tab"), ("a\tb\tc", "3 tab-separated fields")])
def test_tsv_bad_line(tmp_path, line, found):
    path = _write(tmp_path / "c.tsv", f"ok\tok\n{line}\n")
    with pytest.raises(NmtError, match=rf"c\.tsv:2: .*{found}"):
        list(read_pairs(str(path), "en", "de"))


def test_missing_files(tmp_path):
    _write(tmp_path / "c.en", "a\n")
    with pytest.raises(NmtError, match=r"missing file: .*c\.de"):
        read_pairs(str(tmp_path / "c"), "en", "de")  # checked at call time, before iterating
    with pytest.raises(NmtError, match=r"missing file: .*nothere\.en"):
        read_pairs(str(tmp_path / "nothere"), "en", "de")
    with pytest.raises(NmtError, match=r"missing file: .*x\.tsv"):
        read_pairs(str(tmp_path / "x.tsv"), "en", "de")
    with pytest.raises(NmtError, match=r"missing file: .*x\.jsonl"):
        read_pairs(str(tmp_path / "x.jsonl"), "en", "de")


@pytest.mark.parametrize("n_en, n_de", [(3, 5), (5, 3)])
def test_line_count_mismatch_names_both(tmp_path, n_en, n_de):
    _write(tmp_path / "c.en", "".join(f"e{i}\n" for i in range(n_en)))
    _write(tmp_path / "c.de", "".join(f"d{i}\n" for i in range(n_de)))
    pairs = read_pairs(str(tmp_path / "c"), "en", "de")
    assert next(pairs) == ("e0", "d0")  # streaming: the mismatch shows when one file ends
    with pytest.raises(NmtError) as info:
        list(pairs)
    message = str(info.value)
    assert f"c.en has {n_en} lines" in message and f"c.de has {n_de}" in message
    assert "\n" not in message


def test_invalid_utf8_names_file_and_line(tmp_path):
    _write(tmp_path / "c.en", "a\nb\nc\n")
    _write(tmp_path / "c.de", b"a\nb\xff\xfe\nc\n")
    with pytest.raises(NmtError, match=r"c\.de:2: invalid UTF-8"):
        list(read_pairs(str(tmp_path / "c"), "en", "de"))


def test_datasets_dir_and_dict(tmp_path):
    import datasets

    rows = {"en": ["one", " two\n"], "de": ["eins", None], "id": [1, 2]}
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "flat"))
    assert list(read_pairs(str(tmp_path / "flat"), "en", "de")) == [("one", "eins"), ("two", "")]
    assert resolve(str(tmp_path / "flat"), "en", "de").kind == "disk"

    translation = {"translation": [{"de": "Haus", "en": "house"}, {"de": "Baum", "en": "tree"}]}
    splits = datasets.DatasetDict({"train": datasets.Dataset.from_dict(translation),
                                   "validation": datasets.Dataset.from_dict({"translation": translation[
                                       "translation"][:1]})})
    splits.save_to_disk(str(tmp_path / "dict"))
    assert list(read_pairs(str(tmp_path / "dict"), "en", "de")) == [("house", "Haus"), ("tree", "Baum")]
    assert list(read_pairs(str(tmp_path / "dict"), "de", "en", hf_split="validation")) == [("Haus", "house")]
    with pytest.raises(NmtError, match=r"no split 'test' \(available: train, validation\)"):
        read_pairs(str(tmp_path / "dict"), "en", "de", hf_split="test")
    with pytest.raises(NmtError, match=r"'translation' has no language 'fr' \(available: de, en\)"):
        list(read_pairs(str(tmp_path / "dict"), "fr", "de"))


def test_jsonl_translation_column_and_overrides(tmp_path):
    path = tmp_path / "c.jsonl"
    rows = [{"translation": {"en": f"hello {i}", "de": f"hallo {i}"}, "src": f"s{i}", "ref": f"r{i}"}
            for i in range(3)]
    _write(path, "".join(json.dumps(r) + "\n" for r in rows))
    cache = str(tmp_path / "cache")
    assert list(read_pairs(str(path), "en", "de", cache_dir=cache))[2] == ("hello 2", "hallo 2")
    got = list(read_pairs(str(path), "en", "de", src_column="src", tgt_column="translation.de",
                          cache_dir=cache))
    assert got[0] == ("s0", "hallo 0")
    message = r"no column 'text' \(data.src_column; available: translation, src, ref\)"
    with pytest.raises(NmtError, match=message):
        list(read_pairs(str(path), "en", "de", src_column="text", cache_dir=cache))


def test_csv_missing_column_names_available(tmp_path):
    path = _write(tmp_path / "c.csv", "english,german\nhi,hallo\n")
    with pytest.raises(NmtError, match=r"no column 'en' \(available: english, german\)"):
        list(read_pairs(str(path), "en", "de", cache_dir=str(tmp_path / "cache")))
    got = read_pairs(str(path), "en", "de", src_column="english", tgt_column="german",
                     cache_dir=str(tmp_path / "cache"))
    assert list(got) == [("hi", "hallo")]


def test_not_a_datasets_dir(tmp_path):
    (tmp_path / "plain").mkdir()
    with pytest.raises(NmtError, match="not a `datasets` save_to_disk directory"):
        read_pairs(str(tmp_path / "plain"), "en", "de")


def test_text_filters_count():
    f = PairFilter(dedup=True)
    pairs = [("a", "b"), ("", "b"), ("a", ""), ("a", "b"), ("a", "c"), ("a", "b")]
    assert [f.keep_text(s, t) for s, t in pairs] == [True, False, False, False, True, False]
    assert f.counts["read"] == 6 and f.counts["empty"] == 2 and f.counts["duplicate"] == 2
    no_dedup = PairFilter(dedup=False)
    assert all(no_dedup.keep_text("a", "b") for _ in range(3))


def test_dedup_keeps_only_hashes():
    f = PairFilter(dedup=True)
    for i in range(1000):
        f.keep_text(f"sentence number {i} " * 20, "x")
    assert len(f._seen) == 1000 and all(isinstance(h, int) and h < 2**64 for h in f._seen)
    f.release()
    assert not f._seen


def test_length_filters_count():
    f = PairFilter(max_len=10, max_ratio=2.0)
    src = [3, 11, 4, 1, 2, 3, 0, 10]
    tgt = [3, 3, 12, 6, 5, 9, 4, 5]
    # keep, too_long, too_long, ratio (6 vs 1), short pair not judged (2 vs 5), ratio, empty, keep (2.0 ok)
    assert f.length_mask(src, tgt).tolist() == [True, False, False, False, True, False, False, True]
    assert (f.counts["too_long"], f.counts["ratio"], f.counts["empty"], f.counts["kept"]) == (2, 2, 1, 3)
    assert "too_long=2" in f.summary() and "ratio=2" in f.summary()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), max_size=30),
       st.integers(1, 30), st.floats(1.0, 4.0))
def test_length_filter_scalar_matches_vector_and_rule(lengths, max_len, max_ratio):
    vector, scalar = PairFilter(max_len=max_len, max_ratio=max_ratio), PairFilter(max_len=max_len,
                                                                                    max_ratio=max_ratio)
    mask = vector.length_mask([s for s, _ in lengths], [t for _, t in lengths]).tolist()
    assert mask == [scalar.keep_lengths(s, t) for s, t in lengths]
    assert vector.counts == scalar.counts
    for (s, t), keep in zip(lengths, mask, strict=True):
        longer, shorter = max(s, t), min(s, t)
        ratio_bad = longer >= RATIO_MIN_TOKENS and longer > max_ratio * shorter
        assert keep == (shorter > 0 and longer <= max_len and not ratio_bad)
