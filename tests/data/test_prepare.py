from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from nmt.config.experiment import DataConfig
from nmt.data.datadir import DataDir, read_meta
from nmt.data.prepare import prepare
from nmt.demo.files import write_demo
from nmt.errors import NmtError
from nmt.tokenizer import NMT_IDS
from tests.helpers.paths import MULTI30K

PAD_ID, BOS_ID, EOS_ID = NMT_IDS.pad, NMT_IDS.bos, NMT_IDS.eos


def load_split(data_dir, split):
    return DataDir(data_dir, {}).split(split)



@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> dict[str, str]:
    return write_demo(tmp_path_factory.mktemp("raw"), n_train=2000, n_valid=100, n_test=80, seed=2)


def _cfg(raw: dict[str, str], out: Path, **changes) -> DataConfig:
    base = DataConfig(dir=str(out), train=raw["train"], valid=raw["valid"], test=raw["test"], vocab_size=300,
                      spm_sample=10_000)
    return replace(base, **changes)


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1]


@pytest.fixture(scope="module")
def prepared(raw, tmp_path_factory) -> tuple[DataConfig, dict]:
    cfg = _cfg(raw, tmp_path_factory.mktemp("prep") / "data")
    return cfg, prepare(cfg, progress=False)


def test_layout_and_meta(prepared, raw):
    cfg, meta = prepared
    out = Path(cfg.dir)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["meta.json", "spm.model", "train", "valid", "test", "valid.en", "valid.de", "test.en", "test.de"])
    assert json.loads((out / "meta.json").read_text()) == meta == read_meta(out)
    assert meta["version"] == 1 and meta["joint_vocab"] is True and meta["spm_type"] == "bpe"
    assert meta["special_ids"] == {"pad": 0, "unk": 1, "bos": 2, "eos": 3}
    assert meta["spm_files"] == {"src": "spm.model", "tgt": "spm.model"}
    assert meta["src_vocab_size"] == meta["tgt_vocab_size"] == 300
    assert meta["filters"]["kept"] == meta["splits"]["train"]["pairs"] == 2000
    assert (meta["splits"]["valid"]["pairs"], meta["splits"]["test"]["pairs"]) == (100, 80)
    splits = ("train", "valid", "test")
    assert set(meta["inputs"]) == {f"{raw[s]}.{lang}" for s in splits for lang in ("en", "de")}
    assert "dir" not in meta["options"] and "num_proc" not in meta["options"]
    assert meta["options"]["vocab_size"] == 300 and len(meta["fingerprint"]) == 64
    assert not list(out.glob(".tmp*"))


def test_datasets_content(prepared, raw):
    cfg, meta = prepared
    tokenizer = DataDir.open(cfg.dir).tokenizer()
    for split in ("train", "valid", "test"):
        ds = load_split(cfg.dir, split)
        assert ds.column_names == ["src_ids", "tgt_ids", "src_len", "tgt_len"]
        assert {str(ds.features[c]) for c in ("src_ids", "tgt_ids")} == {"List(Value('int32'))"}
        assert str(ds.features["src_len"]) == str(ds.features["tgt_len"]) == "Value('int32')"
        rows = ds[:]
        assert all(len(ids) == n for ids, n in zip(rows["src_ids"], rows["src_len"], strict=True))
        assert all(len(ids) == n for ids, n in zip(rows["tgt_ids"], rows["tgt_len"], strict=True))
        assert not any(i in (PAD_ID, BOS_ID, EOS_ID) for ids in rows["tgt_ids"] for i in ids)
        assert sum(rows["src_len"]) == meta["splits"][split]["src_tokens"]
        assert sum(rows["tgt_len"]) == meta["splits"][split]["tgt_tokens"]
        # order is preserved and the ids decode back to the raw text
        assert tokenizer.decode_tgt(rows["tgt_ids"][:50]) == _lines(Path(raw[split] + ".de"))[:50]
        assert tokenizer.decode_tgt(rows["src_ids"][:50]) == _lines(Path(raw[split] + ".en"))[:50]
    assert _lines(Path(cfg.dir) / "valid.de") == _lines(Path(raw["valid"] + ".de"))
    assert _lines(Path(cfg.dir) / "test.en") == _lines(Path(raw["test"] + ".en"))


def test_reuse_different_and_force(raw, tmp_path):
    cfg = _cfg(raw, tmp_path / "data", test=None)
    meta = prepare(cfg, progress=False)
    stamp = (tmp_path / "data" / "train").stat().st_mtime_ns
    started = time.perf_counter()
    again = prepare(replace(cfg, num_proc=2), progress=False)  # num_proc is not part of the fingerprint
    assert time.perf_counter() - started < 1.0
    assert again == meta and (tmp_path / "data" / "train").stat().st_mtime_ns == stamp

    changed = replace(cfg, vocab_size=250, test=raw["test"])
    with pytest.raises(NmtError, match="holds a different preparation; use --force to overwrite"):
        prepare(changed, progress=False)
    assert read_meta(cfg.dir) == meta  # untouched
    forced = prepare(changed, force=True, progress=False)
    assert forced["src_vocab_size"] == 250 and forced["fingerprint"] != meta["fingerprint"]
    assert (tmp_path / "data" / "test").is_dir() and (tmp_path / "data" / "test.de").is_file()

    # back to separate vocabularies without test: stale outputs of the old preparation disappear
    separate_cfg = replace(changed, joint_vocab=False, test=None, vocab_size=200)
    separate = prepare(separate_cfg, force=True, progress=False)
    names = sorted(p.name for p in (tmp_path / "data").iterdir())
    expected = ["meta.json", "spm.en.model", "spm.de.model", "train", "valid", "valid.en", "valid.de"]
    assert names == sorted(expected)
    assert separate["spm_files"] == {"src": "spm.en.model", "tgt": "spm.de.model"}
    tokenizer = DataDir.open(cfg.dir).tokenizer()
    assert not tokenizer.joint and tokenizer.src_vocab_size == 200


def test_filters_train_only_valid_test_never(tmp_path):
    long_en = " ".join(["word"] * 80)
    train_en = ["the red car", "", "the red car", "a blue dog", long_en, "one", "two green cats"] * 3
    many = "eins eins eins eins zwei drei vier fünf sechs sieben acht neun"
    train_de = ["das rote Auto", "leer", "das rote Auto", "ein blauer Hund", long_en, many,
                "zwei grüne Katzen"] * 3
    for split, en, de in (("train", train_en, train_de), ("valid", train_en[:7], train_de[:7])):
        (tmp_path / f"{split}.en").write_text("\n".join(en) + "\n", encoding="utf-8")
        (tmp_path / f"{split}.de").write_text("\n".join(de) + "\n", encoding="utf-8")
    cfg = DataConfig(dir=str(tmp_path / "data"), train=str(tmp_path / "train"), valid=str(tmp_path / "valid"),
                     vocab_size=80, max_len=40, max_ratio=3.0, dedup=True, spm_sample=1000)
    meta = prepare(cfg, progress=False)
    assert meta["filters"] == {"empty": 3, "duplicate": 13, "too_long": 1, "ratio": 1, "kept": 3, "read": 21}
    assert meta["splits"]["train"]["pairs"] == 3
    valid = load_split(cfg.dir, "valid")
    assert len(valid) == 7 and meta["splits"]["valid"]["pairs"] == 7
    assert valid[1]["src_len"] == 0 and valid[4]["src_len"] > 40  # empty and too long stay
    assert _lines(tmp_path / "data" / "valid.en") == train_en[:7]


def test_everything_filtered(raw, tmp_path):
    en = [f"this is sentence number {i} of the test" for i in range(150)] + [""] * 5
    de = [f"das ist Satz Nummer {i} des Tests" for i in range(150)] + ["x"] * 5
    (tmp_path / "t.en").write_text("\n".join(en) + "\n", encoding="utf-8")
    (tmp_path / "t.de").write_text("\n".join(de) + "\n", encoding="utf-8")
    cfg = _cfg(raw, tmp_path / "data", train=str(tmp_path / "t"), max_len=4, vocab_size=100)
    message = r"no training pairs left after filtering \(155 read; empty=5, .*too_long=150"
    with pytest.raises(NmtError, match=message):
        prepare(cfg, progress=False)
    assert not (tmp_path / "data" / "meta.json").exists() and not list((tmp_path / "data").glob(".tmp*"))


def test_empty_training_file(tmp_path):
    for lang in ("en", "de"):
        (tmp_path / f"train.{lang}").write_text("\n\n", encoding="utf-8")
    with pytest.raises(NmtError, match=r"no training pairs left after filtering \(2 read; empty=2"):
        prepare(DataConfig(dir=str(tmp_path / "data"), train=str(tmp_path / "train")), progress=False)


def test_num_proc_gives_identical_data(prepared, raw, tmp_path):
    cfg, meta = prepared
    two = prepare(replace(cfg, dir=str(tmp_path / "two"), num_proc=2), progress=False)
    assert two == meta
    for split in ("train", "valid", "test"):
        assert load_split(tmp_path / "two", split)[:] == load_split(cfg.dir, split)[:]
    assert (tmp_path / "two" / "spm.model").read_bytes() == (Path(cfg.dir) / "spm.model").read_bytes()


def test_input_errors_leave_nothing(raw, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "train.en").write_text("a\nb\nc\n", encoding="utf-8")
    (bad / "train.de").write_text("a\nb\n", encoding="utf-8")
    (bad / "utf.en").write_text("a\nb\n", encoding="utf-8")
    (bad / "utf.de").write_bytes(b"a\n\xc3\x28\n")
    out = tmp_path / "data"
    cases = [
        (_cfg(raw, out, valid=str(tmp_path / "nothere")), r"missing file: .*nothere\.en"),
        (_cfg(raw, out, test=str(bad / "train")), r"train\.en has 3 lines but .*train\.de has 2"),
        (_cfg(raw, out, valid=str(bad / "utf")), r"utf\.de:2: invalid UTF-8"),
        (_cfg(raw, out, vocab_size=50_000), r"vocab size 50000 is too large for this data \(max \d+\)"),
        (_cfg(raw, out, train=None), r"data\.train is not set"),
        (_cfg(raw, out, tgt_lang="en"), r"both 'en'"),
    ]
    for cfg, message in cases:
        with pytest.raises(NmtError, match=message) as info:
            prepare(cfg, progress=False)
        assert "\n" not in str(info.value)
        if out.exists():
            assert not (out / "meta.json").exists() and not list(out.glob(".tmp*"))


def test_refuses_to_overwrite_inputs(tmp_path):
    raw = write_demo(tmp_path / "data", n_train=300, n_valid=20, n_test=20)
    with pytest.raises(NmtError, match=r"valid\.en would be overwritten by the prepared 'valid\.en'"):
        prepare(_cfg(raw, tmp_path / "data"), progress=False)


def test_read_meta_and_load_split_errors(tmp_path, prepared):
    with pytest.raises(NmtError, match=r"no prepared data in .*nowhere \(run `nmt prepare` first\)"):
        read_meta(tmp_path / "nowhere")
    (tmp_path / "meta.json").write_text("{not json")
    with pytest.raises(NmtError, match="corrupt"):
        read_meta(tmp_path)
    (tmp_path / "meta.json").write_text('{"version": 99}')
    with pytest.raises(NmtError, match="not a version-1 preparation"):
        read_meta(tmp_path)
    with pytest.raises(NmtError, match="has no 'test' split"):
        load_split(tmp_path, "test")


def test_corrupt_meta_needs_force(raw, tmp_path):
    cfg = _cfg(raw, tmp_path / "data", valid=None, test=None)
    prepare(cfg, progress=False)
    (tmp_path / "data" / "meta.json").write_text("garbage")
    with pytest.raises(NmtError, match="different preparation"):
        prepare(cfg, progress=False)
    assert prepare(cfg, force=True, progress=False)["splits"]["train"]["pairs"] == 2000


def test_jsonl_input(tmp_path):
    rows = [{"translation": {"en": f"number {i}", "de": f"Nummer {i}"}} for i in range(300)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    train = str(tmp_path / "train.jsonl")
    cfg = DataConfig(dir=str(tmp_path / "data"), train=train, vocab_size=40, spm_sample=1000)
    meta = prepare(cfg, progress=False)
    assert meta["splits"]["train"]["pairs"] == 300 and list(meta["inputs"]) == [train]
    ids = load_split(cfg.dir, "train")[:2]["tgt_ids"]
    assert DataDir.open(cfg.dir).tokenizer().decode_tgt(ids) == ["Nummer 0", "Nummer 1"]


@pytest.mark.skipif(not MULTI30K.is_dir(), reason="shared Multi30k data not available")
def test_multi30k_en_de(tmp_path):
    cfg = DataConfig(dir=str(tmp_path / "data"), train=str(MULTI30K / "train"), valid=str(MULTI30K / "val"),
                     test=str(MULTI30K / "test2016"), vocab_size=8000, joint_vocab=True, spm_type="bpe",
                     spm_sample=20_000, num_proc=2)
    meta = prepare(cfg, progress=False)
    assert meta["filters"]["read"] == 29_000 and meta["filters"]["kept"] >= 28_900
    assert meta["splits"]["valid"]["pairs"] == 1014 and meta["splits"]["test"]["pairs"] == 1000
    assert meta["src_vocab_size"] == 8000
    assert _lines(tmp_path / "data" / "test.de") == [
        line.strip() for line in _lines(MULTI30K / "test2016.de")]
    # token-budget batches of the kept pairs cover each exactly once per epoch
    from nmt.data.batching import TokenBatchSampler

    train = load_split(cfg.dir, "train")
    sampler = TokenBatchSampler.from_dataset(train, 4096, seed=1)
    lens = train.with_format("numpy", columns=["src_len", "tgt_len"])[:]
    for epoch in (1, 2):
        sampler.set_epoch(epoch)
        batches = list(sampler)
        seen = np.concatenate(batches)
        assert len(seen) == meta["filters"]["kept"] == len(train) and len(np.unique(seen)) == len(seen)
        for b in batches:
            longest = max(lens["src_len"][b].max(), lens["tgt_len"][b].max()) + 1
            assert len(b) * longest <= 4096 or len(b) == 1


def test_empty_valid_split(raw, tmp_path):
    for lang in ("en", "de"):
        (tmp_path / f"valid.{lang}").write_text("", encoding="utf-8")
    meta = prepare(_cfg(raw, tmp_path / "data", valid=str(tmp_path / "valid"), test=None), progress=False)
    assert meta["splits"]["valid"] == {"pairs": 0, "src_tokens": 0, "tgt_tokens": 0}
    assert len(load_split(tmp_path / "data", "valid")) == 0
    assert (tmp_path / "data" / "valid.de").read_text() == ""
