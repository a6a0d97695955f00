"""The English→Chinese demo corpus (nmt/demo/chinese.py) and write_demo's Chinese hook: the number rule, dates, clock
times, measure words, determinism, file names, the German corpus unchanged, and a brief training run on it."""

from __future__ import annotations

import hashlib
import math
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nmt.data.datadir import DataDir
from nmt.demo import german as demo
from nmt.demo.chinese import count_zh, date_zh, generate_pairs_zh, number_to_zh, year_zh
from nmt.demo.files import DemoLanguageError, write_demo
from nmt.rundir import RunDir
from tests.helpers.cli import assert_one_line_error, run_cli
from tests.helpers.training import tiny_config

# the rule: 二 inside and alone, 两 only as a count before a measure word; one 零 per run of inner zeros
NUMBERS = {
    0: "零", 2: "二", 7: "七", 10: "十", 11: "十一", 15: "十五", 20: "二十", 22: "二十二", 100: "一百",
    101: "一百零一", 110: "一百一十", 200: "二百", 342: "三百四十二", 1000: "一千", 1001: "一千零一",
    1010: "一千零一十", 2000: "二千", 10000: "一万", 10001: "一万零一", 10010: "一万零一十", 20000: "二万",
    100000: "十万", 100100: "十万零一百", 110000: "十一万", 201000: "二十万一千", 342001: "三十四万二千零一",
    999999: "九十九万九千九百九十九",
}


@pytest.mark.parametrize("n", sorted(NUMBERS))
def test_number_words(n):
    assert number_to_zh(n) == NUMBERS[n]


def test_count_uses_liang_only_for_two():
    counts = [count_zh(n) for n in (1, 2, 12, 20, 22, 200, 20000)]
    assert counts == ["一", "两", "十二", "二十", "二十二", "二百", "二万"]


@pytest.mark.parametrize("n", [-1, 1_000_000])
def test_number_out_of_range(n):
    with pytest.raises(ValueError):
        number_to_zh(n)


_DIGITS = {c: i for i, c in enumerate("零一二三四五六七八九")}
_UNITS = {"十": 10, "百": 100, "千": 1000}


def _parse_zh(text: str) -> int:
    """An independent reading of a Chinese numeral (10..19 may start with a bare 十)."""
    total = section = digit = 0
    for ch in text:
        if ch in _DIGITS:
            digit = _DIGITS[ch]
        elif ch in _UNITS:
            section += (digit or (1 if ch == "十" else 0)) * _UNITS[ch]
            digit = 0
        else:
            assert ch == "万", text
            total, section, digit = (section + digit) * 10_000, 0, 0
    return total + section + digit


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 999_999))
def test_number_properties(n):
    zh = number_to_zh(n)
    assert _parse_zh(zh) == n
    assert not re.search(r"[0-9两]", zh) and "零零" not in zh
    assert n == 0 or not zh.endswith("零") and not zh.startswith("零")
    assert zh.count("万") <= 1 and not zh.startswith("一十")


def test_dates_and_years():
    assert year_zh(1994) == "一九九四" and year_zh(2005) == "二〇〇五" and year_zh(1800) == "一八〇〇"
    assert date_zh(3, 5, 1994) == "一九九四年五月三日"
    assert date_zh(21, 12) == "十二月二十一日" and date_zh(10, 10, 2000) == "二〇〇〇年十月十日"


@pytest.fixture(scope="module")
def corpus() -> dict[str, str]:
    pairs = generate_pairs_zh(20000, seed=1)
    assert len({en for en, _ in pairs}) == len(pairs)  # one Chinese side per English line
    return dict(pairs)


# exact lines of the seed-1 corpus, written out by hand (they also pin the corpus to its seed)
EXAMPLES = {
    "two yellow dogs": "两只黄色的狗",
    "a blue cat": "一只蓝色的猫",
    "this big book": "这本大书",
    "this white book": "这本白色的书",
    "these fast big trains": "这些快速的大火车",
    "these beautiful young tables": "这些又漂亮又年轻的桌子",
    "I see an old table.": "我看见一张旧桌子。",
    "I see a heavy yellow lamp.": "我看见一盏又重又黄的灯。",
    "The brown cars are in the garden.": "棕色的汽车在花园里。",
    "We bought five old horses for two euros.": "我们花两欧元买了五匹老马。",
    "We bought sixty-five big keys for two euros.": "我们花两欧元买了六十五把大钥匙。",
    "The train leaves at seven o'clock.": "火车七点出发。",
    "The train leaves at two o'clock.": "火车两点出发。",
    "at two o'clock": "两点",
    "the third of May nineteen forty-seven": "一九四七年五月三日",
    "May third, twenty fifty-four": "二〇五四年五月三日",
    "I was born on the first of June nineteen ninety-three.": "我是一九九三年六月一日出生的。",
    "on the sixteenth of January": "在一月十六日",
    "in the year two thousand nine": "在二〇〇九年",
    "two days": "两天",
    "twenty thousand five hundred forty-four": "二万零五百四十四",
    "two hundred eight": "二百零八",
}


@pytest.mark.parametrize("en", sorted(EXAMPLES))
def test_generated_examples(corpus, en):
    assert corpus[en] == EXAMPLES[en]


# an independent table of measure words for some nouns (plural english → measure word, chinese noun)
MEASURE_WORDS = {"cars": ("辆", "汽车"), "bicycles": ("辆", "自行车"), "dogs": ("只", "狗"), "cats": ("只", "猫"),
                 "books": ("本", "书"), "children": ("个", "孩子"), "apples": ("个", "苹果"), "tables": ("张", "桌子"),
                 "trees": ("棵", "树"), "letters": ("封", "信"), "horses": ("匹", "马"), "flowers": ("朵", "花")}
_SMALL = {"two": "两", "three": "三", "four": "四", "five": "五", "six": "六", "seven": "七", "eight": "八",
          "nine": "九", "ten": "十", "eleven": "十一", "twelve": "十二"}
_ADJECTIVES = "|".join(en for en, _ in demo.ADJECTIVES)


def test_counted_nouns_take_their_measure_word(corpus):
    checked = 0
    for en, zh in corpus.items():
        m = re.fullmatch(rf"(?:We bought )?(\w+) (?:(?:{_ADJECTIVES}) ){{0,2}}([a-z]+)(?: for .*)?", en)
        if m and m[1] in _SMALL and m[2] in MEASURE_WORDS:
            measure, noun = MEASURE_WORDS[m[2]]
            body = zh.split("买了")[-1].rstrip("。")
            assert body.startswith(_SMALL[m[1]] + measure) and body.endswith(noun), (en, zh)
            checked += 1
    assert checked > 100


def test_sentences_put_time_and_price_before_the_verb(corpus):
    sentences = [(en, zh) for en, zh in corpus.items() if en.endswith(".")]
    assert len(sentences) > 4000 and all(zh.endswith("。") for _, zh in sentences)
    assert all(en[0].isupper() for en, _ in sentences)
    for en, zh in sentences:
        if en.startswith("We bought"):
            assert re.fullmatch(r"我们花\w+欧元买了\w+。", zh), (en, zh)
        if en.startswith("The train leaves at"):
            assert re.fullmatch(r"火车\w+点出发。", zh), (en, zh)
    everything = "".join(corpus.values())
    assert not re.search(r"[0-9A-Za-z.,]", everything)  # Chinese words and full-width punctuation only


def test_generate_deterministic_distinct():
    pairs = generate_pairs_zh(3000, seed=7)
    assert pairs == generate_pairs_zh(3000, seed=7)
    assert pairs != generate_pairs_zh(3000, seed=8)
    assert len(set(pairs)) == 3000
    assert all(en and zh and "\n" not in en + zh for en, zh in pairs)


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")


def test_write_demo_chinese_files_and_disjoint_splits(tmp_path):
    prefixes = write_demo(tmp_path / "raw", n_train=400, n_valid=50, n_test=60, seed=3, src_lang="en", tgt_lang="zh")
    assert prefixes == {s: str(tmp_path / "raw" / s) for s in ("train", "valid", "test")}
    assert sorted(p.name for p in (tmp_path / "raw").iterdir()) == [
        f"{s}.{lang}" for s in ("test", "train", "valid") for lang in ("en", "zh")]
    lines = {}
    for split, n in (("train", 400), ("valid", 50), ("test", 60)):
        en, zh = _lines(tmp_path / "raw" / f"{split}.en"), _lines(tmp_path / "raw" / f"{split}.zh")
        assert len(en) == len(zh) == n + 1 and en[-1] == zh[-1] == ""  # trailing newline
        assert all(re.search(r"[\u4e00-\u9fff]", line) for line in zh[:-1])
        assert not any(re.search(r"[\u4e00-\u9fff]", line) for line in en[:-1])
        lines[split] = set(en[:-1])
    assert not lines["train"] & lines["valid"] and not lines["train"] & lines["test"]
    assert not lines["valid"] & lines["test"]
    # Chinese→English and the other Simplified codes: the same lines, in files named for the codes given
    write_demo(tmp_path / "rev", n_train=400, n_valid=50, n_test=60, seed=3, src_lang="ZH", tgt_lang="en")
    assert (tmp_path / "rev" / "test.ZH").read_bytes() == (tmp_path / "raw" / "test.zh").read_bytes()
    for code in ("zh-CN", "zh-Hans", "zh_cn"):
        write_demo(tmp_path / code, n_train=400, n_valid=50, n_test=60, seed=3, tgt_lang=code)
        assert (tmp_path / code / f"valid.{code}").read_bytes() == (tmp_path / "raw" / "valid.zh").read_bytes()


@pytest.mark.parametrize("codes", [("en", "zh-Hant"), ("en", "zh-TW"), ("zh-hant", "en")])
def test_traditional_chinese_is_refused(tmp_path, codes):
    with pytest.raises(ValueError, match="Simplified Chinese") as error:
        write_demo(tmp_path, n_train=10, n_valid=2, n_test=2, src_lang=codes[0], tgt_lang=codes[1])
    assert isinstance(error.value, DemoLanguageError)  # an NmtError too: one line on the command line
    assert not list(tmp_path.iterdir())


def test_prepare_demo_refuses_traditional_chinese_in_one_line(tmp_path):
    result = run_cli("prepare", "--demo", "--tgt-lang", "zh-TW", "--data-dir", tmp_path / "data")
    assert_one_line_error(result, "Simplified Chinese", "zh-TW")
    assert not (tmp_path / "data").exists() and not (tmp_path / "data-raw").exists()


# sha256 over (name, bytes) of every file write_demo wrote, computed with nmt/demo/german.py before the Chinese hook
GERMAN_SMALL = "4e5f47cf30a5637a98cefd8371ddf5df2c8ef03b751c4a8e9389e04980fdbdfc"  # 300/50/50, seed 1
GERMAN_DEFAULT = "468d370d674f23b606c9d4624309f9dd0feccf86235d9464e5ba4ab10b4f3da4"  # 20,000/500/500, seed 1


def _digest(directory: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(directory.iterdir()):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def test_german_demo_unchanged(tmp_path):
    write_demo(tmp_path / "small", n_train=300, n_valid=50, n_test=50, seed=1)
    assert _digest(tmp_path / "small") == GERMAN_SMALL
    write_demo(tmp_path / "reverse", n_train=300, n_valid=50, n_test=50, seed=1, src_lang="de", tgt_lang="en")
    assert _digest(tmp_path / "reverse") == GERMAN_SMALL  # the same files: each holds the language it is named for
    write_demo(tmp_path / "default", seed=1)
    assert _digest(tmp_path / "default") == GERMAN_DEFAULT


def test_prepare_and_train_on_the_chinese_demo(tmp_path):
    from nmt.config.experiment import load_config
    from nmt.data.prepare import prepare
    from nmt.train.loop import train

    raw = write_demo(tmp_path / "raw", n_train=2000, n_valid=100, n_test=100, seed=3, src_lang="en", tgt_lang="zh")
    data = tmp_path / "data"
    cfg = load_config(None, [f"data.dir={data}", "data.vocab_size=500", "data.src_lang=en", "data.tgt_lang=zh"]).data
    cfg.train, cfg.valid, cfg.test = raw["train"], raw["valid"], raw["test"]
    prepare(cfg, progress=False)
    references = _lines(Path(raw["test"] + ".zh"))[:50]
    tokenizer = DataDir.open(data).tokenizer()
    assert tokenizer.decode_tgt(tokenizer.encode_tgt(references)) == references  # no character lost (<unk>)
    run = tmp_path / "run"
    summary = train(tiny_config(data, run, "train.max_updates=40", "train.max_tokens=1024", "train.log_every=1"),
                    progress=False)
    assert summary["step"] == 40 and (run / "last.pt").is_file()
    losses = [r["loss"] for r in RunDir(run).read_metrics() if r["type"] == "train"]
    assert len(losses) == 40 and all(math.isfinite(x) for x in losses)
    assert sum(losses[-5:]) / 5 < 0.85 * sum(losses[:5]) / 5  # learning (6.7 → 4.7 when written)
