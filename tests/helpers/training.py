"""The tiny model config fast CPU tests train, and the demo model's recipe (tests/conftest.py's demo_run, and what
tests/fixtures/demo-model.pt was trained with)."""

from __future__ import annotations

from pathlib import Path

from nmt.config.experiment import Config, load_config


def tiny_config(data_dir: Path, run_dir: Path, *overrides: str) -> Config:
    """A very small Transformer so a training update takes milliseconds."""
    return load_config(None, [
        f"data.dir={data_dir}", f"train.run_dir={run_dir}",
        "model.d_model=32", "model.n_heads=2", "model.d_ff=64", "model.encoder_layers=1",
        "model.decoder_layers=1", "model.max_positions=256",
        "train.max_tokens=512", "train.warmup=10", "train.lr=3e-3", "train.log_every=1",
        "train.valid_every=1000", "train.save_every=1000", "train.valid_bleu_sentences=20",
        "train.max_updates=6", "train.average_last=2", *overrides,
    ])
