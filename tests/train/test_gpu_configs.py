"""configs/base-gpu.yaml and big-gpu.yaml, the paper's models set up for one 80 GB GPU: they load and validate, keep
the paper's models and its ~25k target tokens per update, and `nmt train` runs them (shrunk, on CPU) as they are."""

from __future__ import annotations

import pytest

from nmt.config.experiment import check_config, load_config
from nmt.rundir import RunDir
from tests.helpers.cli import run_cli
from tests.helpers.paths import CONFIGS

SHRUNK = ("model.d_model=32", "model.n_heads=2", "model.d_ff=64", "model.encoder_layers=1", "model.decoder_layers=1",
          "train.max_tokens=512", "train.max_updates=2", "train.warmup=10", "train.log_every=1")


@pytest.mark.parametrize("name", ["base-gpu", "big-gpu"])
def test_a_gpu_config_is_the_papers_model_and_batch_in_bf16(name):
    cfg = load_config(CONFIGS / f"{name}.yaml")
    check_config(cfg)
    paper = load_config(CONFIGS / f"{name.removesuffix('-gpu')}.yaml")
    t = cfg.train
    assert cfg.model == paper.model and cfg.train.schedule == paper.train.schedule == "noam"
    assert 24_000 <= t.max_tokens * t.update_freq <= 32_768  # the paper's ~25k target tokens per update
    assert t.update_freq == 1 and t.amp == "bf16" and t.device == "cuda" and t.compile


@pytest.mark.parametrize("name", ["base-gpu", "big-gpu"])
def test_nmt_train_runs_a_gpu_config_shrunk_on_cpu(name, demo_data, tmp_path):
    """Two updates through the CLI with the config's own settings but the model's size, the device (no GPU here)
    and torch.compile (its wiring: tests/gpu/test_gpu_paths.py; a C++ compile per shape is minutes on CPU)."""
    run = tmp_path / "run"
    sets = [*SHRUNK, f"data.dir={demo_data}", f"train.run_dir={run}", "train.device=cpu", "train.compile=false"]
    result = run_cli("train", "--config", CONFIGS / f"{name}.yaml", *[a for s in sets for a in ("--set", s)])
    assert result.exit_code == 0, result.output
    steps = [r["step"] for r in RunDir(run).read_metrics() if r["type"] == "train"]
    assert steps == [1, 2] and (run / "last.pt").exists()
