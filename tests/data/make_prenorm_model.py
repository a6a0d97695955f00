"""Writes tests/data/prenorm-model.pt: a small "Multi30k-shaped" model for the golden tests (tests/test_golden_*.py).

The options of configs/multi30k.yaml (pre-norm, all embeddings shared, one joint BPE vocabulary, its
schedule, clipping, label smoothing and search settings), but tiny: d_model 64, 2+2 layers, 4 heads, d_ff 128,
a vocabulary of VOCAB pieces, trained for UPDATES updates on the first LINES pairs of Multi30k's en-de training
data (validation: the first 500 pairs of val). As demo-model.pt was made: only the `nmt` command line (prepare,
then train), and the file committed is the run's averaged.pt, the average of its last 2 checkpoints, which
`nmt train` writes without the training state (optimizer, scheduler, RNG) that a resumable checkpoint carries.

The data: ../shared/data/multi30k beside the checkout, else $NMT_SHARED/data/multi30k.

    python -m tests.data.make_prenorm_model      # from the repository root (2.5-4 minutes: training runs one thread)

Not bit-reproducible across machines (training's float sums follow the CPU and its threads): the committed file is
what the golden outputs were recorded with; remaking it means regenerating them (NMT_UPDATE_GOLDEN=1).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "prenorm-model.pt"
LINES = 15000
VALID_LINES = 500
VOCAB = 1000
UPDATES = 700

# train.threads=1, not the config's 2: on a busy 2-core machine 40 updates took 11 s with one thread and 71 s with
# two (OpenMP threads waiting for a core), and the losses logged were the same
SETTINGS = [
    "model.d_model=64", "model.n_heads=4", "model.d_ff=128", "model.encoder_layers=2", "model.decoder_layers=2",
    "model.dropout=0.1", "train.threads=1", "train.seed=1", "train.max_updates=" + str(UPDATES),
    "train.max_minutes=0", "train.warmup=200", "train.log_every=100", "train.valid_every=100000",
    "train.valid_bleu_sentences=0", "train.save_every=50", "train.keep_last=2", "train.average_last=2",
]


def multi30k() -> Path:
    """Multi30k's directory: ../shared/data/multi30k beside the checkout, else $NMT_SHARED/data/multi30k."""
    candidates = [ROOT.parent / "shared" / "data" / "multi30k"]
    if os.environ.get("NMT_SHARED"):
        candidates.append(Path(os.environ["NMT_SHARED"]) / "data" / "multi30k")
    for path in candidates:
        if (path / "train.en").is_file():
            return path
    sys.exit(f"Multi30k not found in {' or '.join(map(str, candidates))} (set NMT_SHARED to the shared dir)")


def head(src: Path, dst: Path, n: int) -> None:
    lines = src.read_text(encoding="utf-8").split("\n")[:n]
    dst.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def nmt(*args: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    subprocess.run([sys.executable, "-m", "nmt", *args], check=True, env=env, cwd=ROOT)


def main() -> None:
    started = time.monotonic()
    data = multi30k()
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw"
        raw.mkdir()
        for lang in ("en", "de"):
            head(data / f"train.{lang}", raw / f"train.{lang}", LINES)
            head(data / f"val.{lang}", raw / f"valid.{lang}", VALID_LINES)
        prepared, run = Path(tmp) / "data", Path(tmp) / "run"
        config = ["--config", str(ROOT / "configs" / "multi30k.yaml")]
        nmt("prepare", *config, "--train", str(raw / "train"), "--valid", str(raw / "valid"), "--data-dir",
            str(prepared), "--vocab-size", str(VOCAB), "--num-proc", "1", "--no-progress")
        nmt("train", *config, "--data-dir", str(prepared), "--run-dir", str(run), "--no-progress",
            *(x for s in SETTINGS for x in ("--set", s)))
        shutil.copyfile(run / "averaged.pt", OUT)
    print(f"wrote {OUT} ({OUT.stat().st_size:,} bytes) in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
