"""`nmt info`: what a checkpoint, run dir and data dir hold, checked against the artifacts themselves."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from nmt import checkpoint
from nmt.cli.info import count_parameters
from nmt.config.experiment import config_from_dict
from nmt.data.datadir import read_meta
from nmt.model import Transformer
from nmt.rundir import RunDir
from nmt.tokenizer import Tokenizer
from tests.helpers.cli import assert_one_line_error, run_cli
from tests.helpers.training import tiny_config

MAX_UPDATES = 6


@pytest.fixture(scope="module")
def run(tmp_path_factory, demo_data) -> Path:
    """A few updates of a tiny model (conftest's demo_run trains 400, ~20 s): checkpoints at 2, 4, 6,
    validations at 3 and 6, averaged.pt of the last two."""
    from nmt.train.loop import train

    path = tmp_path_factory.mktemp("info-run") / "run"
    train(tiny_config(demo_data, path, f"train.max_updates={MAX_UPDATES}", "train.save_every=2",
                      "train.valid_every=3", "train.valid_bleu_sentences=5"), progress=False)
    return path


def info_json(path: Path) -> dict:
    result = run_cli("info", str(path), "--json")
    assert result.exit_code == 0, result.output
    assert result.stdout.count("\n") == 1  # one JSON line
    return json.loads(result.stdout)


def model_parameters(path: Path) -> int:
    """What the model built from the checkpoint's own config has (tied parameters once)."""
    state = checkpoint.load(path)
    tokenizer = Tokenizer.from_state(state["tokenizer"])
    model = Transformer.from_config(config_from_dict(state["config"]).model, *state["vocab"].values(),
                                    pad_id=tokenizer.special_ids.pad, joint_vocab=tokenizer.joint)
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------- checkpoints


def test_training_checkpoint_json_matches_the_model_the_data_and_the_training(run, demo_data):
    path = run / "last.pt"
    c = info_json(path)
    meta = read_meta(demo_data)
    state = checkpoint.load(path)
    assert c["type"] == "checkpoint" and c["kind"] == "training"
    assert c["parameters"] == model_parameters(path) and isinstance(c["parameters"], int)
    assert c["training"]["step"] == MAX_UPDATES == state["train_state"]["step"]
    assert c["training"]["epoch"] == state["train_state"]["progress"]["epoch"]
    assert c["training"]["elapsed_s"] == state["train_state"]["progress"]["elapsed"] > 0
    assert c["training"]["processes"] == 1
    assert (c["src_lang"], c["tgt_lang"]) == (meta["src_lang"], meta["tgt_lang"])
    assert (c["src_vocab_size"], c["tgt_vocab_size"]) == (meta["src_vocab_size"], meta["tgt_vocab_size"])
    assert c["joint_vocab"] == meta["joint_vocab"]
    assert c["data_fingerprint"] == meta["fingerprint"]
    assert c["model"] == state["config"]["model"] and c["model"]["d_model"] == 32
    assert c["tied_embeddings"] == ("src+tgt+output" if meta["joint_vocab"] else "tgt+output")
    assert c["best"] == {"metric": "bleu", "value": state["train_state"]["progress"]["best"], "tokenize": "13a"}
    assert c["size_bytes"] == path.stat().st_size
    assert c["dtype"] == "float32" and c["averaged_from"] is None


def test_averaged_and_best_checkpoints(run):
    averaged = info_json(run / "averaged.pt")
    assert averaged["kind"] == "averaged" and averaged["training"] is None and averaged["best"] is None
    assert [Path(p).name for p in averaged["averaged_from"]] == ["checkpoint_4.pt", "checkpoint_6.pt"]
    assert averaged["parameters"] == model_parameters(run / "averaged.pt")
    weights = checkpoint.load(run / "averaged.pt")["model"]  # the average keeps the tied embedding one tensor
    assert weights["src_embed.weight"].data_ptr() == weights["tgt_embed.weight"].data_ptr()
    best = info_json(run / "best.pt")
    assert best["kind"] == "weights" and best["training"] is None and best["averaged_from"] is None
    assert best["parameters"] == averaged["parameters"]


def test_tied_tensors_count_once_and_equal_tensors_do_not_merge():
    tied = Transformer(50, 50, d_model=8, n_heads=2, d_ff=16, encoder_layers=1, decoder_layers=1,
                       pad_id=0, joint_vocab=True)
    weights = tied.state_dict()
    assert weights["src_embed.weight"].data_ptr() == weights["tgt_embed.weight"].data_ptr()
    expected = sum(p.numel() for p in tied.parameters())
    assert count_parameters(weights) == expected < sum(t.numel() for t in weights.values())
    copies = {k: v.clone() for k, v in weights.items()}  # equal values are not the same parameter
    assert count_parameters(copies) == sum(t.numel() for t in weights.values())
    untied = Transformer(50, 50, d_model=8, n_heads=2, d_ff=16, encoder_layers=1, decoder_layers=1,
                         pad_id=0, joint_vocab=False)
    assert count_parameters(untied.state_dict()) == sum(p.numel() for p in untied.parameters())
    # freshly initialised LayerNorms are equal vectors but separate parameters
    assert count_parameters({"a": torch.ones(8), "b": torch.ones(8)}) == 16


def test_checkpoint_table_shows_the_facts(run):
    result = run_cli("info", str(run / "last.pt"))
    assert result.exit_code == 0, result.output
    out = result.stdout
    for needle in ("training checkpoint", "en -> de", f"{model_parameters(run / 'last.pt'):,}", "d_model 32",
                   "post-norm", "float32", "bleu"):
        assert needle in out, needle
    rows = {cells[1].strip(): cells[2].strip() for line in out.splitlines() if len(cells := line.split("│")) == 4}
    assert rows["step"] == str(MAX_UPDATES) and rows["kind"] == "training checkpoint (resumable)"


# ---------------------------------------------------------------- run dir


def test_run_dir_json(run):
    r = info_json(run)
    records = RunDir(run).read_metrics()
    valid = [x for x in records if x["type"] == "valid"]
    assert r["type"] == "run_dir" and r["problems"] == []
    assert r["config"] == yaml.safe_load((run / "config.yaml").read_text())
    files = {f["name"]: f for f in r["checkpoints"]}
    assert [f["name"] for f in r["checkpoints"]] == [
        "checkpoint_2.pt", "checkpoint_4.pt", "checkpoint_6.pt", "last.pt", "best.pt", "averaged.pt"]
    assert [f["step"] for f in r["checkpoints"]] == [2, 4, 6, 6, None, None]  # last.pt links checkpoint_6.pt
    assert all(f["size_bytes"] == (run / name).stat().st_size for name, f in files.items())
    assert r["translate_checkpoint"] == str(RunDir(run).for_translation()) == str(run / "averaged.pt")
    assert r["checkpoint"] == info_json(run / "averaged.pt")
    best = max(valid, key=lambda x: x["bleu"])
    assert len(valid) == 2  # at steps 3 and 6
    assert r["metrics"] == {"last_step": MAX_UPDATES, "validations": 2,
                            "best": {"metric": "bleu", "value": best["bleu"], "step": best["step"], "tokenize": "13a"}}


def test_run_dir_table(run):
    result = run_cli("info", str(run))
    assert result.exit_code == 0, result.output
    out = result.stdout
    for needle in ("checkpoint_6.pt", "averaged.pt", "<- translate", "averaged weights", "1+1 layers",
                   "last step", "best valid"):
        assert needle in out, needle


def test_run_dir_without_checkpoints_or_metrics(run, tmp_path):
    (tmp_path / "config.yaml").write_bytes((run / "config.yaml").read_bytes())
    r = info_json(tmp_path)
    assert r["translate_checkpoint"] is None and r["checkpoint"] is None and r["checkpoints"] == []
    assert r["metrics"] is None and any("metrics" in p for p in r["problems"])
    assert "none (no checkpoint yet)" in run_cli("info", str(tmp_path)).stdout


def test_run_dir_with_a_damaged_checkpoint_is_still_described(run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    (copy / "averaged.pt").write_bytes(b"\0" * 100)
    r = info_json(copy)
    assert r["checkpoint"] is None and len(r["checkpoints"]) == 6
    assert len(r["problems"]) == 1 and "averaged.pt" in r["problems"][0]


# ---------------------------------------------------------------- data dir


def test_data_dir_json_and_table(demo_data):
    d = info_json(demo_data)
    meta = read_meta(demo_data)
    assert d["type"] == "data_dir"
    assert (d["src_lang"], d["tgt_lang"]) == ("en", "de")
    assert (d["src_vocab_size"], d["tgt_vocab_size"]) == (meta["src_vocab_size"], meta["tgt_vocab_size"]) == (400, 400)
    assert d["joint_vocab"] is meta["joint_vocab"] and d["fingerprint"] == meta["fingerprint"]
    assert d["splits"] == meta["splits"] and d["splits"]["train"]["pairs"] == 2000
    assert d["filters"] == meta["filters"]
    sizes = {f["name"]: f["size_bytes"] for f in d["files"]}
    assert sizes["meta.json"] == (demo_data / "meta.json").stat().st_size
    assert {"train", "valid", "test", "valid.de", "test.en"} <= set(sizes) and all(sizes.values())
    out = run_cli("info", str(demo_data)).stdout
    for needle in ("en -> de", "400 / 400", "2,000", f"{meta['splits']['train']['src_tokens']:,}", "meta.json",
                   meta["fingerprint"][:16]):
        assert needle in out, needle


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("name, needle", [
    ("missing.pt", "no such file"),
    ("notes.txt", "not an nmt checkpoint"),
    ("empty-dir", "neither a run dir"),
    ("truncated.pt", "corrupt or truncated"),
    ("foreign.pt", "not an nmt checkpoint"),
])
def test_what_is_not_an_nmt_artifact_is_a_one_line_error(run, tmp_path, name, needle):
    (tmp_path / "notes.txt").write_text("hello\n")
    (tmp_path / "empty-dir").mkdir()
    data = (run / "last.pt").read_bytes()
    (tmp_path / "truncated.pt").write_bytes(data[: len(data) // 2])
    torch.save({"weights": torch.zeros(2)}, tmp_path / "foreign.pt")
    for args in ([str(tmp_path / name)], [str(tmp_path / name), "--json"]):
        result = run_cli("info", *args)
        assert_one_line_error(result, needle, name)
        assert result.stdout == "" and len(result.stderr.splitlines()) == 1, result.stderr



def test_help_describes_the_command():
    top = run_cli("--help")
    assert top.exit_code == 0 and "info" in top.stdout
    sub = run_cli("info", "--help")
    assert sub.exit_code == 0 and "--json" in sub.stdout and "PATH" in sub.stdout
