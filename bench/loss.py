"""The projected loss alone, eager against compiled (`projected_label_smoothed_loss(..., compiled=True)`): forward
and backward of the loss from random decoder states and an output matrix, both paths on the same inputs, interleaved.

Usage (from the repository root):

    python bench/loss.py                                   # CPU, fp32 and bf16, 4096 rows, D 512, V 32000
    python bench/loss.py --rows 4096 --dim 512 --vocab 8000 --dtypes bf16 --steps 10
    python bench/loss.py --threads 1 --clock cpu           # CPU time: steadier on a busy shared machine
    python bench/loss.py --device cuda --rows 25000        # a GPU batch (each call timed between synchronisations)

Reports per dtype the median seconds per call of each path, their spread (min-max of the timed calls), the ratio
compiled / eager (median of per-round ratios) and how much CPU other processes took meanwhile. The compiled path
compiles in the warm-up (not timed).
"""

from __future__ import annotations

import argparse

import torch
from common import OtherLoad, interleaved, median, table
from gpu import device_from, synced

from nmt.loss import projected_label_smoothed_loss


def loss_call(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, dtype: str, compiled: bool):
    """One forward and backward of the loss over all rows (no padding: every row a target), under bf16 autocast for
    "bf16" as `nmt train` runs it; the gradients are dropped after each call."""
    device = hidden.device

    def call() -> None:
        h, w = hidden.detach().requires_grad_(), weight.detach().requires_grad_()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=dtype == "bf16"):
            loss, _ = projected_label_smoothed_loss(h, w, target, 0.1, pad=-1, compiled=compiled)
        loss.backward()

    return call


def bench(args, dtype: str, device: torch.device) -> list[str]:
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(args.rows, args.dim, generator=g).to(device)
    weight = (torch.randn(args.vocab, args.dim, generator=g) * args.dim**-0.5).to(device)
    target = torch.randint(0, args.vocab, (args.rows,), generator=g).to(device)
    calls = {name: synced(loss_call(hidden, weight, target, dtype, name == "compiled"), device)
             for name in ("eager", "compiled")}
    times = interleaved(calls, args.steps, args.warmup, clock=args.clock, pause=0.3 if device.type == "cpu" else 0.0)
    ratio = median([c / e for e, c in zip(times["eager"], times["compiled"], strict=True)])
    cells = [f"{median(times[n]):.3f} ({min(times[n]):.3f}-{max(times[n]):.3f})" for n in calls]
    return [dtype, *cells, f"{median(times['compiled']) / median(times['eager']):.2f} ({ratio:.2f})"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtypes", default="fp32,bf16", help="comma-separated: fp32, bf16 (autocast)")
    p.add_argument("--rows", type=int, default=4096, help="target tokens")
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                   help="wall: elapsed time; cpu: this process's CPU time (robust to other load; use --threads 1)")
    args = p.parse_args()
    device = device_from(args.device)
    torch.set_num_threads(args.threads)
    with OtherLoad() as load:
        rows = [bench(args, dtype, device) for dtype in args.dtypes.split(",")]
    print(f"\nprojected loss forward + backward, {args.rows} rows, D {args.dim}, V {args.vocab}, {device}, seconds per "
          f"call ({args.clock} clock): median (min-max) of {args.steps}, {args.threads} threads, torch "
          f"{torch.__version__}, other processes' CPU share during the run: {load}; in brackets: median of per-round "
          "ratios")
    print(table(["dtype", "eager s", "compiled s", "compiled / eager"], rows))


if __name__ == "__main__":
    main()
