"""BLEU that can see the target's words, and vocabularies that fit its script (issue: Chinese, Japanese and every
language written without spaces).

- nmt.score.bleu_tokenizer: sacreBLEU's own choice by target language (zh, ja-mecab else char, char for Thai...);
- `nmt score` picks it from --tgt-lang or the reference file's suffix and its signature says which;
- validation BLEU on a Chinese target is sacreBLEU's with tokenize="zh"; the run records it and a resumed run keeps
  it; `nmt info` shows it;
- prepare's vocabulary rule on a Chinese corpus: character_coverage 0.9995 and byte fallback (no <unk>), and a
  vocabulary too small for the corpus' characters is one line naming the fix.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sacrebleu
import yaml

from nmt import checkpoint, score
from nmt.config.experiment import load_config
from nmt.data.datadir import DataDir
from nmt.data.prepare import prepare
from nmt.demo.files import write_demo
from nmt.errors import NmtError
from nmt.rundir import RunDir
from nmt.train.loop import train
from nmt.translation.translator import Translator
from tests.helpers.cli import assert_one_line_error, run_cli
from tests.helpers.training import tiny_config

# The example: each hypothesis one character off its reference.
REFS = ["我们花十欧元买了两本书。", "火车九点出发。"]
HYPS = ["我们花十欧元买了三本书。", "火车八点出发。"]


@pytest.mark.parametrize(("lang", "name"), [("zh", "zh"), ("zh-CN", "zh"), ("zh_TW", "zh"), ("zh-Hant", "zh"),
                                            ("de", "13a"), ("en-US", "13a"), (None, "13a"), ("th", "char")])
def test_the_tokenizer_follows_the_target_language(lang, name):
    assert score.bleu_tokenizer(lang).name == name


def test_japanese_without_mecab_falls_back_to_characters_with_a_note(monkeypatch):
    monkeypatch.setattr(score, "_usable", lambda tokenizer: False)
    chosen = score.bleu_tokenizer("ja")
    assert chosen.name == "char" and "ja-mecab" in chosen.note and "\n" not in chosen.note
    monkeypatch.setattr(score, "_usable", lambda tokenizer: True)
    assert score.bleu_tokenizer("ja") == score.BleuTokenizer("ja-mecab")
    assert score.bleu_tokenizer("ko").name == "ko-mecab"


def test_nmt_score_tokenizes_chinese_from_the_reference_suffix(tmp_path):
    ref, hyp = tmp_path / "test.zh", tmp_path / "hyp.txt"
    ref.write_text("\n".join(REFS) + "\n", encoding="utf-8")
    hyp.write_text("\n".join(HYPS) + "\n", encoding="utf-8")
    assert sacrebleu.corpus_bleu(HYPS, [REFS], tokenize="13a").score == 0.0  # what 13a made of it
    result = json.loads(run_cli("score", "--ref", ref, "--hyp", hyp, "--metrics", "bleu", "--json").stdout)
    assert "tok:zh" in result["bleu"]["signature"]
    assert result["bleu"]["score"] == pytest.approx(sacrebleu.corpus_bleu(HYPS, [REFS], tokenize="zh").score)
    assert result["bleu"]["score"] > 50
    forced = json.loads(run_cli("score", "--ref", ref, "--hyp", hyp, "--metrics", "bleu", "--json",
                                "--tokenize", "13a").stdout)
    assert "tok:13a" in forced["bleu"]["signature"] and forced["bleu"]["score"] == 0.0


def test_nmt_score_takes_the_language_from_tgt_lang(tmp_path, monkeypatch):
    monkeypatch.setattr(score, "_usable", lambda tokenizer: False)  # as without sacrebleu[ja]
    ref, hyp = tmp_path / "ref.txt", tmp_path / "hyp.txt"
    ref.write_text("猫が好きです\n", encoding="utf-8")
    hyp.write_text("猫が好きだ\n", encoding="utf-8")
    done = run_cli("score", "--ref", ref, "--hyp", hyp, "--metrics", "bleu", "--tgt-lang", "ja")
    assert "tok:char" in done.stdout and "note: BLEU on ja uses the char tokenizer" in done.stderr
    plain = run_cli("score", "--ref", ref, "--hyp", hyp, "--metrics", "bleu")
    assert "tok:13a" in plain.stdout and "note" not in plain.stderr
    assert_one_line_error(run_cli("score", "--ref", ref, "--hyp", hyp, "--tgt-lang", "中文"), "--tgt-lang",
                          "not a language code")


@pytest.fixture(scope="module")
def zh_data(tmp_path_factory) -> Path:
    """The English→Chinese demo corpus, prepared with the default vocabulary rule."""
    root = tmp_path_factory.mktemp("zh")
    raw = write_demo(root / "raw", n_train=1500, n_valid=40, n_test=40, seed=5, src_lang="en", tgt_lang="zh")
    cfg = load_config(None, [f"data.dir={root / 'data'}", "data.vocab_size=600", "data.src_lang=en",
                             "data.tgt_lang=zh"]).data
    cfg.train, cfg.valid, cfg.test = raw["train"], raw["valid"], raw["test"]
    prepare(cfg, progress=False)
    return root / "data"


def test_a_chinese_vocabulary_holds_every_character(zh_data):
    meta = json.loads((zh_data / "meta.json").read_text(encoding="utf-8"))
    # the demo's characters fit in the vocabulary: each gets a piece; byte fallback still covers the unseen
    assert meta["character_coverage"] == 1.0 and meta["byte_fallback"] is True
    tokenizer = DataDir.open(zh_data).tokenizer()
    unseen = "鑫淼犇"  # characters the demo corpus never uses
    ids = tokenizer.encode_tgt([unseen])[0]
    assert tokenizer.special_ids.unk not in ids and tokenizer.decode_tgt([ids])[0] == unseen


def test_a_vocabulary_too_small_for_the_characters_is_one_line(tmp_path):
    raw = write_demo(tmp_path / "raw", n_train=400, n_valid=10, n_test=10, seed=6, src_lang="en", tgt_lang="zh")
    cfg = load_config(None, [f"data.dir={tmp_path / 'data'}", "data.vocab_size=300", "data.joint_vocab=false",
                             "data.src_lang=en", "data.tgt_lang=zh"]).data
    cfg.train, cfg.valid, cfg.test = raw["train"], raw["valid"], raw["test"]
    with pytest.raises(NmtError) as error:
        prepare(cfg, progress=False)
    message = str(error.value)
    assert "\n" not in message and "data.vocab_size" in message and "data.byte_fallback=false" in message


def test_validation_bleu_on_chinese_is_sacrebleus_zh_and_a_resumed_run_keeps_it(zh_data, tmp_path, capsys):
    run = tmp_path / "run"
    common = ["train.max_updates=30", "train.valid_every=30", "train.save_every=30", "train.valid_bleu_sentences=40",
              "train.max_tokens=2048", "train.lr=5e-3", "train.warmup=10", "model.dropout=0", "train.average_last=0"]
    train(tiny_config(zh_data, run, *common), progress=False)
    assert yaml.safe_load((run / "config.yaml").read_text())["train"]["bleu_tokenize"] == "zh"
    valid = [r for r in RunDir(run).read_metrics() if r["type"] == "valid"]
    # the same greedy translations of the first 40 valid sentences, scored by sacreBLEU itself
    translator = Translator.load(RunDir(run).last)
    sources = (zh_data.parent / "raw" / "valid.en").read_text(encoding="utf-8").splitlines()[:40]
    refs = (zh_data.parent / "raw" / "valid.zh").read_text(encoding="utf-8").splitlines()[:40]
    hyps = [r.text[0] for r in translator.translate_chunk(sources, decode=translator.decode_with(beam=1))]
    assert valid[-1]["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs], tokenize="zh").score, abs=1e-6)
    # resumed with another tokenizer asked for: the run keeps its own, says so, and records it again
    train(tiny_config(zh_data, run, *common, "train.max_updates=60", "train.bleu_tokenize=13a"), progress=False)
    assert checkpoint.load(RunDir(run).last).saved_config["train"]["bleu_tokenize"] == "zh"
    captured = capsys.readouterr()
    assert "keeps this run's tokenizer zh" in captured.err + captured.out
    info = json.loads(run_cli("info", run, "--json").stdout)
    assert info["metrics"]["best"]["tokenize"] == "zh"
    # nmt score takes the language from the data dir or the checkpoint too (the files here say nothing)
    (tmp_path / "ref.txt").write_text("\n".join(refs) + "\n", encoding="utf-8")
    (tmp_path / "hyp.txt").write_text("\n".join(hyps) + "\n", encoding="utf-8")
    for where in (["--data-dir", zh_data], ["--checkpoint", RunDir(run).last]):
        out = run_cli("score", "--ref", tmp_path / "ref.txt", "--hyp", tmp_path / "hyp.txt", "--metrics", "bleu",
                      *where).stdout
        assert "tok:zh" in out


def test_ter_sees_characters_where_bleu_does(tmp_path):
    """TER follows BLEU's tokenizer: for Chinese sacreBLEU's asian support (tercom normalization), so one wrong
    character is one edit, not a whole sentence; other languages keep TER's defaults (papers' signature)."""
    ref, hyp = tmp_path / "test.zh", tmp_path / "hyp.txt"
    ref.write_text("\n".join(REFS) + "\n", encoding="utf-8")
    hyp.write_text("\n".join(HYPS) + "\n", encoding="utf-8")
    result = json.loads(run_cli("score", "--ref", ref, "--hyp", hyp, "--metrics", "ter", "--json").stdout)["ter"]
    assert "asian:yes" in result["signature"] and result["score"] < 20
    plain = score.score(["the cat sat"], [["the cat sat down"]], metrics=("ter",))["ter"]
    assert "asian:no" in plain["signature"] and "norm:no" in plain["signature"]
