"""The tiny model config that fast CPU tests train, and the demo model's recipe (what tests/fixtures/demo-model.pt
was trained with)."""

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


def train_demo_model(data_dir: Path, run_dir: Path) -> Path:
    """The demo model's recipe: 400 updates of a 2+2-layer d_model 64 Transformer on the demo corpus as
    tests/conftest.py's demo_data prepares it; its averaged.pt (the last two checkpoints averaged) is
    tests/fixtures/demo-model.pt (tests/fixtures/make_demo_model.py). Returns the run dir."""
    from nmt.train.loop import train

    cfg = tiny_config(data_dir, run_dir, "model.d_model=64", "model.d_ff=128", "model.n_heads=4",
                      "model.encoder_layers=2", "model.decoder_layers=2",
                      "train.max_updates=400", "train.max_tokens=2048", "train.lr=5e-3", "train.warmup=30",
                      "train.save_every=50", "train.log_every=50", "train.average_last=2", "model.dropout=0")
    train(cfg, progress=False)
    return run_dir
