"""A PNG's pixel size read from its header, a figure size in pixels, and a run's metrics.jsonl to plot (with the
damage a kill leaves)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from nmt.plot.charts import DPI

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from the IHDR chunk, which a valid PNG has right after the signature."""
    head = path.read_bytes()[:24]
    assert head[:8] == PNG_MAGIC
    assert head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


def pixels(figsize: tuple[float, float]) -> tuple[int, int]:
    return round(figsize[0] * DPI), round(figsize[1] * DPI)


def write_metrics(run: Path, bleu: bool = True) -> None:
    run.mkdir(parents=True, exist_ok=True)
    lines = []
    for step in range(10, 210, 10):
        nll = 6.0 * 0.99 ** step
        lines.append(json.dumps({"type": "train", "step": step, "epoch": 1 + step // 100, "loss": nll + 0.3,
                                 "nll": nll, "ppl": float(np.exp(nll)), "lr": 7e-4 * min(1, step / 50),
                                 "gnorm": 1.0, "updates_per_s": 5.0, "tgt_tokens_per_s": 9000.0}))
        if step % 50 == 0:
            rec = {"type": "valid", "step": step, "loss": nll + 0.5, "nll": nll + 0.2,
                   "ppl": float(np.exp(nll + 0.2))}
            if bleu:
                rec["bleu"] = step / 10
            lines.append(json.dumps(rec))
    lines.insert(5, '{"type": "train", "step": 55, "loss"')  # cut by a kill
    lines.insert(9, "not json at all")
    lines.append(json.dumps({"type": "train", "step": "x", "loss": 1.0}))  # no numeric step
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
