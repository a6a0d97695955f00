"""int8 Linear layers on CPU at a decoding step's few rows: every product of the base (or tiny) model's decoder step
in sequence (6 layers of self-attention qkv and out, cross-attention q and out, the two feed-forward products, then
the output projection), per kernel:

- fbgemm:     nmt.int8.FbgemmInt8Linear, what `--quantize int8` computes (eager), where the CPU has AVX512-VNNI;
- fbgemm op:  the same product through the operator nmt::fbgemm_int8_linear, as a compiled package calls it back
              (`--compile --quantize int8`): the difference is the dispatch to a Python kernel;
- int8pack:   nmt.int8.Int8WeightLinear (aten's int8-weight product, bf16 input), the compiled layer without VNNI;
- _int_mm:    torch._int_mm (int8 x int8 -> int32): the input cast to int8, no scale computed (a lower bound);
- fp32:       F.linear on the float32 weights.

Usage (from the repository root):

    python bench/int8_linear.py                 # base, 4 rows, 2 threads
    python bench/int8_linear.py --config tiny --rows 128 --threads 1

Alternating kernels, median of --repeats sequences each (ms).
"""

from __future__ import annotations

import argparse
import time
import warnings

import common  # noqa: F401  (the OpenMP setting nmt uses, before torch)
import torch
import torch.nn.functional as F
from common import median, table
from torch import nn

from nmt import int8

MODELS = {"base": (512, 2048, 6), "tiny": (128, 512, 2)}  # d_model, d_ff, decoder layers; vocabulary 8000


def step_shapes(config: str) -> list[tuple[int, int]]:
    d, ff, layers = MODELS[config]
    return [(d, 3 * d), (d, d), (d, d), (d, d), (d, ff), (ff, d)] * layers + [(d, 8000)]


def kernels(linears: list[nn.Linear]) -> dict[str, list]:
    """Each kernel's callables, one per layer."""
    fbgemm = [int8.FbgemmInt8Linear(linear) for linear in linears] if int8.fbgemm_int8() else []
    weights = [torch.randint(-127, 128, linear.weight.shape, dtype=torch.int8).t() for linear in linears]
    found = {
        "fbgemm": [m.forward for m in fbgemm],
        "fbgemm op": [lambda x, m=m: torch.ops.nmt.fbgemm_int8_linear(x, m.weight, m.packed, m.column_sums,
                                                                       m.scaled_bias, m.scale) for m in fbgemm],
        "int8pack": [int8.Int8WeightLinear(linear).forward for linear in linears],
        "_int_mm": [lambda x, w=w: torch._int_mm(x.to(torch.int8), w) for w in weights],
        "fp32": [lambda x, m=linear: F.linear(x, m.weight, m.bias) for linear in linears],
    }
    return {name: fns for name, fns in found.items() if fns}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", choices=list(MODELS), default="base", help="the model whose step's shapes are timed")
    p.add_argument("--rows", type=int, default=4, help="rows of a step (sentences x beam)")
    p.add_argument("--threads", type=int, default=2, help="intra-op threads")
    p.add_argument("--repeats", type=int, default=30, help="sequences timed per kernel")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    warnings.simplefilter("ignore")  # torch marks fbgemm's operators deprecated
    shapes = step_shapes(args.config)
    linears = [nn.Linear(n_in, n_out) for n_in, n_out in shapes]
    inputs = {n_in: torch.randn(args.rows, n_in) for n_in, _ in shapes}
    runs = kernels(linears)
    times: dict[str, list[float]] = {name: [] for name in runs}
    with torch.inference_mode():
        for i in range(args.repeats + 3):  # 3 warm-up rounds
            for name, fns in runs.items():
                start = time.perf_counter()
                for fn, (n_in, _) in zip(fns, shapes, strict=True):
                    fn(inputs[n_in])
                if i >= 3:
                    times[name].append(time.perf_counter() - start)
    print(f"{args.config} step, {len(shapes)} products at {args.rows} rows, {args.threads} threads "
          f"(median of {args.repeats}, ms)")
    print(table(["kernel", "ms", "x fbgemm" if "fbgemm" in times else "x fp32"],
                [[name, f"{1e3 * median(t):.2f}", f"{median(t) / median(next(iter(times.values()))):.2f}"]
                 for name, t in times.items()]))


if __name__ == "__main__":
    main()
