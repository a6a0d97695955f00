"""Float32 Linear layers on CPU, one product at a time: MKL (torch's F.linear) against oneDNN with a packed weight
(what `nmt translate` reads), over the shapes of the tiny and base models' decoding steps, and the choice
`nmt.kernels.fast_linear` makes for each (MKL_MAX_WEIGHT, ONEDNN_MIN_MACS).

Usage (from the repository root):

    python bench/linear.py                      # 2 threads, rows 4..512
    python bench/linear.py --threads 1 --rows 4,128

Each product is timed with the caches flushed before every call (a 12 MB buffer rewritten), as inside a search
step, where the logits and the other layers' weights have just passed through them; alternating MKL and oneDNN,
median of --repeats calls each. Printed: MKL's time / oneDNN's per shape and row count (below 1: MKL is faster),
and which one fast_linear picks ("mkl" / "onednn").
"""

from __future__ import annotations

import argparse
import functools
import time

import common  # noqa: F401  (the OpenMP setting nmt uses, before torch)
import torch
import torch.nn.functional as F
from common import median, table

from nmt import kernels

SHAPES = {  # (in, out) of each layer kind; the tiny model: d_model 128, d_ff 512; base: 512, 2048; vocabulary 8000
    "tiny qkv": (128, 384), "tiny ffn in": (128, 512), "tiny ffn out": (512, 128), "tiny output": (128, 8000),
    "base qkv": (512, 1536), "base ffn in": (512, 2048), "base ffn out": (2048, 512), "base output": (512, 8000),
}


def timed(fn, repeats: int, flush: torch.Tensor) -> list[float]:
    times = []
    for _ in range(repeats):
        flush.add_(1.0)
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def choice(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, packed: torch.Tensor) -> str:
    """Which kernel nmt.kernels.fast_linear calls for this product (asked, not re-derived from its rule)."""
    real, called = kernels._ONEDNN_LINEAR, []
    kernels._ONEDNN_LINEAR = lambda *args: called.append(1) or real(*args)
    try:
        kernels.fast_linear(x, weight, bias, packed)
    finally:
        kernels._ONEDNN_LINEAR = real
    return "onednn" if called else "mkl"


def row(name: str, k: int, n: int, rows: list[int], repeats: int, flush: torch.Tensor) -> list[str]:
    g = torch.Generator().manual_seed(0)
    weight, bias = torch.randn(n, k, generator=g), torch.randn(n, generator=g)
    packed = kernels.pack_weight(weight)
    cells = []
    for m in rows:
        x = torch.randn(m, k, generator=g)
        mkl = functools.partial(F.linear, x, weight, bias)
        onednn = functools.partial(kernels._ONEDNN_LINEAR, x, packed, bias, "none", [], "")
        for fn in (mkl, onednn):
            timed(fn, 3, flush)  # warm-up
        times: dict[str, list[float]] = {"mkl": [], "onednn": []}
        for _ in range(repeats):
            times["mkl"] += timed(mkl, 1, flush)
            times["onednn"] += timed(onednn, 1, flush)
        cells.append(f"{median(times['mkl']) / median(times['onednn']):.2f} {choice(x, weight, bias, packed)}")
    return [name, f"{k}x{n}", *cells]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2, help="intra-op threads (torch.set_num_threads)")
    p.add_argument("--rows", default="4,16,32,128,512", help="rows of the input (beam x sentences), comma-separated")
    p.add_argument("--repeats", type=int, default=40, help="timed calls of each kernel per cell")
    args = p.parse_args()
    if kernels._ONEDNN_LINEAR is None or kernels._ONEDNN_PACK is None:
        raise SystemExit("this torch build has no oneDNN linear: nothing to compare")
    torch.set_num_threads(args.threads)
    rows = [int(r) for r in args.rows.split(",")]
    flush = torch.zeros(3 << 20)  # 12 MB
    with torch.inference_mode():
        body = [row(name, k, n, rows, args.repeats, flush) for name, (k, n) in SHAPES.items()]
    print(f"float32, {args.threads} threads, caches flushed before each call; MKL time / oneDNN (packed) time, "
          f"and fast_linear's choice (MKL_MAX_WEIGHT {kernels.MKL_MAX_WEIGHT}, ONEDNN_MIN_MACS "
          f"{kernels.ONEDNN_MIN_MACS})")
    print(table(["layer", "in x out", *(f"{m} rows" for m in rows)], body))


if __name__ == "__main__":
    main()
