"""The projected loss's chunk as one `torch.compile`d function (nmt.loss, `compiled=True`): Triton kernels on a GPU,
C++ on a CPU, from the same Python below. Imports nothing from nmt.

Eager, a chunk is ~40 kernel launches and several full passes over its [n, V] logits, in fp32 copies. Here the
[n, V] tensors are the GEMM's output z and the gradient d loss / d z = p - (1 - eps) onehot - eps / V, both in the
compute dtype (bf16 under autocast: together the bytes of one fp32 chunk). Inductor fuses everything that reads z
(max and sum-exp, its online softmax; the label's logit; the sums; writing the gradient) into one kernel on a CPU
(tests/core/test_loss_compiled.py reads its code), a reduction and a pointwise pass at most on a GPU. That gradient
is all the two other GEMMs need: d rows = g W and d W += g^T h, no gather of W[label], no index_add_ (atomics on a
GPU), and on CUDA both write fp32 (`_mm32`).

Every chunk has the same shape (`step` rows, the last one padded with zero rows of weight 0), so the function is
compiled once for a run whatever its batch sizes.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor


def _mm32(a: Tensor, b: Tensor) -> Tensor:
    """a @ b as fp32. On CUDA a bf16/fp16 product is written in fp32 by the GEMM itself (`out_dtype`, cuBLAS
    accumulates in fp32 anyway): no rounding of the result to bf16. CPU has no such kernel (mm.dtype is
    CUDA-only in torch 2.13), so there the product is rounded to a's dtype and widened, as the eager path does."""
    if a.is_cuda and a.dtype in (torch.bfloat16, torch.float16):
        return torch.mm(a, b, out_dtype=torch.float32)
    return torch.mm(a, b).float()


def chunk_step(h: Tensor, weight: Tensor, label: Tensor, valid: Tensor, bias: Tensor | None, mean_row: Tensor,
               mean_bias: Tensor, keep: float, spread: float, grad_weight: Tensor, sums: Tensor) -> Tensor:
    """One chunk: h [C, D], weight [V, D] (both in the compute dtype), label [C], valid [C] (1.0 for a real row,
    0.0 for padding), bias [V] fp32 or None, mean_row [D] = mean_v(W) and mean_bias (fp32). Adds the chunk's
    (loss, NLL) sums to `sums` [2] and its d loss / d W to `grad_weight` [V, D] (fp32), in place; returns
    d loss / d h [C, D] (fp32). The formulas are `nmt.loss._chunked`'s."""
    z = torch.mm(h, weight.t())  # [C, V] in h's dtype: the chunk's only tensor of logits
    z32 = z.float() if bias is None else z.float() + bias  # in registers: fused into each read of z
    m = z32.amax(dim=1, keepdim=True)
    e = (z32 - m).exp()
    s = e.sum(dim=1, keepdim=True)
    lse = (m + s.log()).squeeze(1)
    nll = (lse - z32.gather(1, label.unsqueeze(1)).squeeze(1)) * valid
    smooth = (lse - h.float() @ mean_row - mean_bias) * valid
    sums += torch.stack([keep * nll.sum() + spread * smooth.sum(), nll.sum()])
    # d loss / d z, folded in fp32 before the one rounding to z's dtype: p - keep at the label is rounded
    # relative to itself, not to p (the eager path rounds p, then subtracts keep W[label] in fp32). A padding
    # row's is not masked: its h is zero, so is its g^T h, and its d h is dropped by the caller.
    onehot = torch.arange(z.size(1), device=z.device).unsqueeze(0) == label.unsqueeze(1)
    g = (e / s - keep * onehot.float() - spread / z.size(1)).to(h.dtype)
    grad_weight += _mm32(g.t(), h)
    return _mm32(g, weight)


@functools.cache
def compiled_step():
    """`chunk_step` compiled for static shapes: the chunk shape is fixed, so nothing in it is dynamic."""
    return torch.compile(chunk_step, dynamic=False, fullgraph=True)


def padded_chunk(rows: Tensor, labels: Tensor, start: int, step: int, ones: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Rows, labels and valid [step] (1.0 or 0.0) of the chunk at `start`, zero rows (of label 0) added up to `step`;
    `ones` [step] is a full chunk's valid."""
    h, label = rows[start:start + step], labels[start:start + step]
    real = h.size(0)
    if real == step:
        return h, label, ones
    return (torch.cat([h, h.new_zeros(step - real, h.size(1))]), torch.cat([label, label.new_zeros(step - real)]),
            (torch.arange(step, device=rows.device) < real).float())


def compiled_chunked(rows: Tensor, weight: Tensor, labels: Tensor, keep: float, spread: float,
                     bias: Tensor | None, step: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """`nmt.loss._chunked(..., with_grad=True)` through `compiled_step`, `step` rows a chunk: loss and NLL sums,
    d loss / d rows [N, D] and d loss / d weight [V, D] (fp32)."""
    rows, weight = rows.detach(), weight.detach()  # one graph: chunks of rows that require grad or not alike
    mean_row = weight.float().mean(dim=0)
    mean_bias = bias.mean() if bias is not None else rows.new_zeros((), dtype=torch.float32)
    sums = rows.new_zeros(2, dtype=torch.float32)
    grad_rows = rows.new_empty(rows.shape, dtype=torch.float32)
    grad_weight = weight.new_zeros(weight.shape, dtype=torch.float32)
    step_fn, ones = compiled_step(), rows.new_ones(step, dtype=torch.float32)
    for start in range(0, rows.size(0), step):
        h, label, valid = padded_chunk(rows, labels, start, step, ones)
        grad_h = step_fn(h, weight, label, valid, bias, mean_row, mean_bias, keep, spread, grad_weight, sums)
        grad_rows[start:start + step] = grad_h[: min(step, rows.size(0) - start)]
    return sums[0], sums[1], grad_rows, grad_weight
