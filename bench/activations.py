"""Training memory per target token: what autograd keeps from a forward for the backward, for picking
train.max_tokens on a GPU (docs/gpu.md, "Picking max_tokens").

    python bench/activations.py --configs base-gpu,big-gpu --vocab 32000

Runs on a CPU. The model is built as on a GPU (plain Linear and Dropout, PyTorch's fused attention, not the CPU's
oneDNN kernels) and makes one forward and `nmt train`'s loss under bf16 autocast for two batch sizes of the
bench's sentence lengths (bench/train.py make_batch); the tensors saved for backward are summed once per storage.
The per-token figure is the slope between the two sizes: every activation grows with the tokens, while the
bf16 copies of the weights and the loss's [vocab, d_model] weight gradient are the same for any batch (the
intercept). The static memory is 16 bytes per parameter (fp32 weights, gradients and Adam's two moments).
A GPU's attention kernel keeps less than the CPU's (a log-sum-exp row instead of the weights), so the figure is
on the safe side; the loss's chunks and the allocator's slack come on top (docs/gpu.md)."""

from __future__ import annotations

import argparse

import torch
from common import PAD, model_config, ours
from train import make_batch

from nmt import kernels
from nmt.precision import Precision
from nmt.train.update import piece_loss


def saved_bytes(model, max_tokens: int, vocab: int) -> tuple[int, int]:
    """(bytes autograd saves for one piece's backward, its target tokens)."""
    batch = make_batch(max_tokens, vocab, torch.device("cpu"))
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=Precision("bf16").autocast_dtype):
            piece_loss(model, model, batch, 0.1, PAD)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}  # fp32 weights: static, not saved
    return sum(n for ptr, n in seen.items() if ptr not in params), batch.n_tgt_tokens


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--configs", default="base-gpu,big-gpu")
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--tokens", default="512,1024", help="the two batch sizes (padded target tokens)")
    args = p.parse_args()
    kernels.written_out_pays = lambda *a, **k: False  # PyTorch's fused attention, as on a GPU
    small, large = map(int, args.tokens.split(","))
    for name in args.configs.split(","):
        model = ours(model_config(name), args.vocab).train()
        (b1, t1), (b2, t2) = saved_bytes(model, small, args.vocab), saved_bytes(model, large, args.vocab)
        per_token = (b2 - b1) / (t2 - t1)
        params = sum(p.numel() for p in model.parameters())
        print(f"{name}: {params / 1e6:.1f}M parameters, static {16 * params / 2**30:.2f} GiB (fp32 weights, "
              f"gradients, Adam); saved for backward per target token {per_token / 2**10:.0f} KiB, "
              f"per batch {(b1 - per_token * t1) / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
