"""Text in the scripts written without spaces, as users bring it: a Chinese→Japanese pair, full-width punctuation,
mixed scripts in one line, and unspaced lines longer than data.max_len pieces. Each is handled or counted: nothing
is dropped silently."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest

from nmt.config.experiment import load_config
from nmt.data.datadir import DataDir
from nmt.data.prepare import prepare
from nmt.demo.chinese import number_to_zh
from nmt.score import bleu_tokenizer

ZH = ["我喜欢猫。", "今天天气很好！", "他买了三本书，花了十欧元。", "东京在日本。", "这是新的产品（样品）。",
      "请问，车站在哪里？", "我们九点出发。", "她在学习汉语和日语。"]
JA = ["私は猫が好きです。", "今日はいい天気です！", "彼は本を三冊買って、十ユーロ払いました。",
      "東京は日本にあります。", "これは新しい製品（見本）です。", "すみません、駅はどこですか？",
      "私たちは九時に出発します。", "彼女は中国語と日本語を勉強しています。"]
MIXED = "ＡＢＣ公司，（２０２４年）ＯＫ！English 和中文、カタカナ、한국어 ９９％"


def write_pairs(prefix: Path, pairs: list[tuple[str, str]], src: str = "zh", tgt: str = "ja") -> str:
    for lang, side in ((src, 0), (tgt, 1)):
        Path(f"{prefix}.{lang}").write_text("".join(p[side] + "\n" for p in pairs), encoding="utf-8")
    return str(prefix)


def corpus(n: int) -> list[tuple[str, str]]:
    """`n` distinct zh/ja pairs: the sentences above, numbered ("第三百四十二号" in both scripts' numerals)."""
    return [(f"第{number_to_zh(i)}号：{ZH[i % len(ZH)]}", f"第{number_to_zh(i)}号：{JA[i % len(JA)]}")
            for i in range(1, n + 1)]


def prepared(tmp_path: Path, train_pairs: list[tuple[str, str]], *settings: str) -> Path:
    raw = tmp_path / "raw"
    raw.mkdir()
    cfg = load_config(None, [f"data.dir={tmp_path / 'data'}", "data.src_lang=zh", "data.tgt_lang=ja",
                             "data.vocab_size=400", *settings]).data
    cfg.train = write_pairs(raw / "train", train_pairs)
    cfg.valid = write_pairs(raw / "valid", corpus(20))
    prepare(cfg, progress=False)
    return tmp_path / "data"


def test_a_chinese_to_japanese_pair_prepares_with_the_cjk_rule(tmp_path):
    data = prepared(tmp_path, corpus(400))
    meta = json.loads((data / "meta.json").read_text(encoding="utf-8"))
    assert (meta["src_lang"], meta["tgt_lang"]) == ("zh", "ja")
    assert meta["character_coverage"] == 1.0 and meta["byte_fallback"] is True  # ~150 characters, vocab 400
    assert meta["spm_normalization"] == "identity"  # SentencePiece's NFKC would fold ，（） into ASCII
    assert meta["filters"]["kept"] == 400  # nothing dropped
    assert bleu_tokenizer("ja").name in ("ja-mecab", "char")  # never 13a: Japanese has no spaces
    tokenizer = DataDir.open(data).tokenizer()
    for text in (MIXED, "鑫淼犇", "ｶﾀｶﾅ"):  # mixed scripts, full-width and half-width forms, unseen characters
        ids = tokenizer.encode_src([text])[0]
        assert tokenizer.special_ids.unk not in ids
        assert tokenizer.decode_tgt([tokenizer.encode_tgt([text])[0]])[0] == unicodedata.normalize("NFC", text)


def test_full_width_punctuation_is_kept_as_written(tmp_path):
    """NFC (the default normalization) keeps full-width forms: "，" and "。" are the punctuation of Chinese text,
    not ASCII in disguise (NFKC, which folds them, is an option: data.normalize)."""
    data = prepared(tmp_path, corpus(300))
    train_text = (data / "valid.ja").read_text(encoding="utf-8")
    assert "：" in train_text and "。" in train_text
    tokenizer = DataDir.open(data).tokenizer()
    assert tokenizer.decode_tgt(tokenizer.encode_tgt(["十ユーロ、払いました。"]))[0] == "十ユーロ、払いました。"


@pytest.mark.parametrize("max_len", [24])
def test_unspaced_lines_longer_than_max_len_are_counted(tmp_path, max_len):
    """A line with no spaces is one long run of pieces: past data.max_len the pair is dropped from training and
    counted in meta.json (filters.too_long), as any long pair is."""
    long_pairs = [("".join(ZH) * 3 + str(i), "".join(JA) * 3 + str(i)) for i in range(7)]
    data = prepared(tmp_path, corpus(300) + long_pairs, f"data.max_len={max_len}")
    filters = json.loads((data / "meta.json").read_text(encoding="utf-8"))["filters"]
    assert filters["too_long"] >= len(long_pairs) and filters["read"] == 307
    assert filters["kept"] + sum(filters[name] for name in ("empty", "duplicate", "too_long", "ratio")) == 307


def test_the_coverage_rule_counts_the_corpus_characters():
    """0.9995 (SentencePiece's advice for CJK) where the characters outnumber half the vocabulary, 1.0 where each
    can have a piece; 1.0 for other scripts without counting; a value given is kept."""
    from datasets import Dataset

    from nmt.data.prepare import vocabulary_rules

    han = [chr(0x4E00 + i) for i in range(600)]
    many = Dataset.from_dict({"src": ["cat"] * 60, "tgt": ["".join(han[i::60]) for i in range(60)]})
    few = Dataset.from_dict({"src": ["cat"], "tgt": ["猫"]})
    cfg = load_config(None, ["data.src_lang=en", "data.tgt_lang=zh-CN", "data.vocab_size=1000"]).data
    assert vocabulary_rules(cfg, many) == {"character_coverage": 0.9995, "byte_fallback": True,
                                          "normalization": "identity"}
    assert vocabulary_rules(cfg, few)["character_coverage"] == 1.0
    german = load_config(None, ["data.vocab_size=1000"]).data
    assert vocabulary_rules(german, many) == {"character_coverage": 1.0, "byte_fallback": False,
                                             "normalization": "nmt_nfkc"}
    given = load_config(None, ["data.tgt_lang=ja", "data.character_coverage=0.98", "data.byte_fallback=false"]).data
    assert vocabulary_rules(given, many)["character_coverage"] == 0.98
    assert vocabulary_rules(given, many)["byte_fallback"] is False
