"""Same learning: one config trained twice, as path A and path B, on the same data; does B learn what A learns?

A speed change to training (a compiled model or loss, packed batches, another precision) must not change what the
model learns. This trains the config once with A's `--set` overrides and once with B's, each through `nmt train` in
a process of its own, and compares what their metrics.jsonl say:

- the training loss over the last `--window` updates of each run: the difference of the means against the noise of
  those means (the standard error of each, from the loss's spread over the window, combined); within 3 of it is
  "within noise";
- validation loss and BLEU at every validation, and the last validation's BLEU: within `--bleu-tolerance` (0.3).

    python bench/learning.py --config configs/base-gpu.yaml --data-dir data/multi30k-en-de --updates 2000 \\
        --a "train.compile=false train.compile_loss=false train.packed=false" \\
        --b "train.compile=true train.compile_loss=true train.packed=true"

(A: the eager path, bf16 autocast over fp32 weights; B: the candidates.) Both runs get `train.max_updates`,
`train.valid_every` (`--valid-every`), `train.log_every` 1 (every update's loss in the metrics) and their own run
dir under `--out`; the seed is the config's, so the two differ only by their overrides (and by the batches, where B
packs them).
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
from pathlib import Path

from common import table

from nmt.rundir import read_metrics


def run(name: str, args: argparse.Namespace, overrides: list[str]) -> Path:
    """Train one path in a process of its own; returns its run dir."""
    run_dir = args.out / name
    sets = [f"train.run_dir={run_dir}", f"train.max_updates={args.updates}", f"train.valid_every={args.valid_every}",
            f"train.save_every={args.valid_every}", "train.log_every=1", f"data.dir={args.data_dir}", *overrides]
    cmd = [sys.executable, "-m", "nmt", "train", "--config", str(args.config), *[x for s in sets for x in ("--set", s)]]
    print(f"[{name}] {' '.join(cmd)}", file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True)
    return run_dir


def window_mean(losses: list[float], window: int) -> tuple[float, float]:
    """(mean, standard error of the mean) of the last `window` losses."""
    tail = losses[-window:]
    spread = statistics.stdev(tail) if len(tail) > 1 else 0.0
    return statistics.fmean(tail), spread / math.sqrt(len(tail))


def compare(a_dir: Path, b_dir: Path, window: int, bleu_tolerance: float) -> tuple[list[list[str]], list[str], bool]:
    """(the validations' rows, the verdict's lines, whether B learns what A learns) from the two runs' metrics."""
    metrics = {name: read_metrics(d / "metrics.jsonl") for name, d in (("a", a_dir), ("b", b_dir))}
    losses = {k: [r["loss"] for r in m if r["type"] == "train"] for k, m in metrics.items()}
    valid = {k: {r["step"]: r for r in m if r["type"] == "valid"} for k, m in metrics.items()}
    rows = []
    for step in sorted(set(valid["a"]) & set(valid["b"])):
        a, b = valid["a"][step], valid["b"][step]
        rows.append([f"{step:,}", f"{a['loss']:.3f}", f"{b['loss']:.3f}", _bleu(a), _bleu(b)])
    (mean_a, se_a), (mean_b, se_b) = window_mean(losses["a"], window), window_mean(losses["b"], window)
    noise = math.hypot(se_a, se_b)
    loss_ok = abs(mean_a - mean_b) <= 3 * noise
    lines = [f"training loss, last {min(window, len(losses['a']))} updates: A {mean_a:.4f} +- {se_a:.4f}, "
             f"B {mean_b:.4f} +- {se_b:.4f}; difference {mean_b - mean_a:+.4f} = "
             f"{abs(mean_b - mean_a) / noise if noise else math.inf:.1f} x its noise: "
             f"{'within noise' if loss_ok else 'NOT within noise'}"]
    last = rows[-1] if rows else None
    bleu_ok = True
    if last is not None and last[3] != "-" and last[4] != "-":
        difference = float(last[4]) - float(last[3])
        bleu_ok = abs(difference) <= bleu_tolerance
        lines.append(f"validation BLEU at update {last[0]}: A {last[3]}, B {last[4]}, difference {difference:+.2f}: "
                     f"{'within' if bleu_ok else 'NOT within'} {bleu_tolerance}")
    return rows, lines, loss_ok and bleu_ok


def _bleu(record: dict) -> str:
    return f"{record['bleu']:.2f}" if "bleu" in record else "-"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", type=Path, required=True, help="the experiment config both paths train")
    p.add_argument("--data-dir", type=Path, required=True, help="a data dir written by `nmt prepare`")
    p.add_argument("--a", default="", help="path A's --set overrides, space-separated (the reference)")
    p.add_argument("--b", default="", help="path B's --set overrides, space-separated (the change)")
    p.add_argument("--updates", type=int, default=2000, help="train.max_updates of each run")
    p.add_argument("--valid-every", type=int, default=500, help="train.valid_every (and save_every) of each run")
    p.add_argument("--window", type=int, default=200, help="last updates whose training loss is compared")
    p.add_argument("--bleu-tolerance", type=float, default=0.3)
    p.add_argument("--out", type=Path, default=Path("runs/learning"), help="the two run dirs go under it (a, b)")
    args = p.parse_args()
    a_dir, b_dir = run("a", args, args.a.split()), run("b", args, args.b.split())
    rows, lines, same = compare(a_dir, b_dir, args.window, args.bleu_tolerance)
    print(f"A: {args.a or '(the config as it is)'}\nB: {args.b or '(the config as it is)'}")
    print(table(["update", "A valid loss", "B valid loss", "A BLEU", "B BLEU"], rows))
    print("\n".join(lines))
    print(f"same learning: {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
