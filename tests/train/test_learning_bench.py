"""bench/learning.py: the same config trained as two paths, and the verdict whether the second learns what the first
does (issue 48's "same learning" check for a GPU), from the two runs' metrics."""

from __future__ import annotations

import json
import sys

import numpy as np

from tests.helpers.bench import bench_module
from tests.helpers.paths import CONFIGS

learning = bench_module("learning")


def write_run(path, losses, bleus):
    path.mkdir(parents=True)
    records = [{"type": "train", "step": i + 1, "loss": x} for i, x in enumerate(losses)]
    records += [{"type": "valid", "step": step, "loss": 3.0, "bleu": b} for step, b in bleus.items()]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_the_verdict_weighs_the_loss_difference_against_its_noise_and_bleu_against_the_tolerance(tmp_path):
    noise = np.random.default_rng(0).normal(0, 0.05, 400)
    a = write_run(tmp_path / "a", (3.0 + noise).tolist(), {200: 10.0, 400: 20.0})
    same = write_run(tmp_path / "same", (3.0 + noise[::-1]).tolist(), {200: 10.1, 400: 20.2})
    worse = write_run(tmp_path / "worse", (3.1 + noise).tolist(), {200: 10.0, 400: 20.2})
    lower = write_run(tmp_path / "lower", (3.0 + noise).tolist(), {200: 10.0, 400: 19.5})
    rows, lines, ok = learning.compare(a, same, 200, 0.3)
    assert ok and [r[0] for r in rows] == ["200", "400"] and rows[1][3:] == ["20.00", "20.20"]
    assert "within noise" in lines[0] and "within 0.3" in lines[1]
    assert not learning.compare(a, worse, 200, 0.3)[2]  # 0.1 lower loss everywhere: ~30x the noise of the means
    rows, lines, ok = learning.compare(a, lower, 200, 0.3)
    assert not ok and "NOT within 0.3" in lines[1]


def test_it_trains_both_paths_through_nmt_train_and_prints_the_verdict(demo_data, tmp_path, monkeypatch, capsys):
    tiny = ("model.d_model=32 model.n_heads=2 model.d_ff=64 model.encoder_layers=1 model.decoder_layers=1 "
            "model.max_positions=256 train.max_tokens=512 train.valid_bleu_sentences=10 train.device=cpu")
    monkeypatch.setattr(sys, "argv", [
        "learning.py", "--config", str(CONFIGS / "tiny.yaml"), "--data-dir", str(demo_data), "--updates", "4",
        "--valid-every", "2", "--window", "3", "--out", str(tmp_path / "runs"), "--a", tiny,
        "--b", tiny + " train.packed=true"])
    learning.main()
    out = capsys.readouterr().out
    assert "same learning: " in out and "training loss, last 3 updates" in out
    assert [line.split()[0] for line in out.splitlines() if line.strip()[:1].isdigit()] == ["2", "4"]
    assert (tmp_path / "runs" / "b" / "last.pt").is_file()
    config = (tmp_path / "runs" / "b" / "config.yaml").read_text()
    assert "packed: true" in config and "max_updates: 4" in config
