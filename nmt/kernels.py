"""CPU kernels: faster ways to compute what nmt.model writes the plain PyTorch way. Imports nothing from nmt.

The model asks `written_out_pays` whether to compute attention as equation 1 is written (its
`scaled_dot_product_attention`) rather than through PyTorch's fused SDPA; everything else is swapped in from outside
by nmt.precision (`swap_linears`, `swap_dropout`; int8 layers are nmt.int8's), or called by the loss and the search
(`fast_linear`, `top_k_beams`). Each kernel says why it exists and which bench shows it; the figures themselves live
with the benches and the README, not here.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# ---- attention ------------------------------------------------------------------------------------

WRITTEN_OUT_MAX_KEYS = 128  # bf16/fp16 on CPU: written out up to this many keys, SDPA beyond


def written_out_pays(q: Tensor, k: Tensor, decoding_step: bool) -> bool:
    """Where the written-out attention (nmt.model.scaled_dot_product_attention) is faster than SDPA: on CPU, for a
    decoding step (a few query rows against tens of keys, where SDPA's fixed cost exceeds the work), and in bf16/fp16
    up to WRITTEN_OUT_MAX_KEYS keys (SDPA's CPU flash kernel is slow at translation's lengths; in float32 SDPA
    wins at every length). `python bench/train.py --configs base --dtype bf16` and
    `python bench/translate.py` time both sides."""
    if q.device.type != "cpu":
        return False
    return decoding_step or (q.dtype in (torch.bfloat16, torch.float16) and k.size(-2) <= WRITTEN_OUT_MAX_KEYS)


# ---- Linear layers through oneDNN ------------------------------------------------------------------

# an internal op of torch (inductor's CPU matmul), so looked up rather than assumed
_ONEDNN_LINEAR = getattr(torch.ops.mkldnn, "_linear_pointwise", None) if torch.backends.mkldnn.is_available() else None
_ONEDNN_PACK = getattr(torch.ops.mkldnn, "_reorder_linear_weight", None) if _ONEDNN_LINEAR is not None else None

ONEDNN_MIN_MACS = 2**20  # below, oneDNN's fixed cost per call outweighs its faster kernel
# Inference: a float32 weight of at most this many elements (512 KB: the tiny model's layers, not its output
# projection nor a base model's) multiplies faster through MKL at every row count on Intel Xeons
# (`python bench/linear.py`), and no slower on the AMD EPYC measured before (bench/translate.py --mkl-linear, tiny)
MKL_MAX_WEIGHT = 2**17


def fast_linear(x: Tensor, weight: Tensor, bias: Tensor | None, packed: Tensor | None = None) -> Tensor:
    """F.linear, through oneDNN on CPU where that pays, forward and backward. torch's F.linear calls MKL's
    sgemm for float32, which on some CPUs (AMD EPYC) runs at about half oneDNN's speed but costs a few us
    less per call, so products under ONEDNN_MIN_MACS multiply-adds stay with it, and so do inference products
    with a weight of at most MKL_MAX_WEIGHT elements. `packed` (`pack_weight` of `weight`) is used where no
    gradient is wanted, in float32 and in a bf16 model's bf16. Under autocast, F.linear, which casts.
    `python bench/train.py` (column ours/ours-mkl) and `python bench/linear.py` show what it buys."""
    if (_ONEDNN_LINEAR is None or x.device.type != "cpu" or _cpu_autocast() or x.dtype != weight.dtype
            or x.dtype not in (torch.float32, torch.bfloat16)):
        return F.linear(x, weight, bias)
    if x.dtype == torch.float32 and x.numel() * weight.size(0) < ONEDNN_MIN_MACS:
        return F.linear(x, weight, bias)
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return _OneDNNLinear.apply(x, weight, bias) if x.dtype == torch.float32 else F.linear(x, weight, bias)
    if x.dtype == torch.float32 and weight.numel() <= MKL_MAX_WEIGHT:
        return F.linear(x, weight, bias)
    if packed is not None:
        return _ONEDNN_LINEAR(x, packed, bias, "none", [], "")
    if x.dtype == torch.float32:
        return _ONEDNN_LINEAR(x, weight, bias, "none", [], "")
    return F.linear(x, weight, bias)


@functools.cache
def onednn_bf16() -> bool:
    """Whether oneDNN computes bf16 products on this CPU: it needs AVX512 (BW, VL, DQ) or AVX-NE-CONVERT,
    and torch has no check for the latter, so one tiny weight is packed to find out."""
    if _ONEDNN_PACK is None:
        return False
    try:
        _ONEDNN_PACK(torch.zeros(16, 16, dtype=torch.bfloat16))
    except RuntimeError:
        return False
    return True


def pack_weight(weight: Tensor) -> Tensor | None:
    """A float32 or bf16 CPU weight [N, K] reordered once into oneDNN's blocked layout, for inference: with
    the plain layout oneDNN reorders it on every call, which products with few rows (a decoding step: beam
    x sentences) pay most (`python bench/translate.py --unpacked` runs without). A copy, so it takes the
    weight's memory again and does not follow later changes of `weight` (CPULinear re-packs when the
    weight's version changes). None where oneDNN, its reorder, or (for bf16) its bf16 kernels are missing."""
    if (_ONEDNN_LINEAR is None or _ONEDNN_PACK is None or weight.device.type != "cpu"
            or weight.dtype not in (torch.float32, torch.bfloat16)
            or (weight.dtype == torch.bfloat16 and not onednn_bf16())):
        return None
    return _ONEDNN_PACK(weight.detach())


class _OneDNNLinear(torch.autograd.Function):
    """y = x W^T + b with both gradients from oneDNN products too: dx = dy W, dW = dy^T x (as linear forms)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _ONEDNN_LINEAR(x, weight, bias, "none", [], "")

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        x, weight = ctx.saved_tensors
        rows = grad.reshape(-1, grad.size(-1))
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = _ONEDNN_LINEAR(grad, weight.t(), None, "none", [], "")
        if ctx.needs_input_grad[1]:
            grad_w = _ONEDNN_LINEAR(rows.t(), x.reshape(-1, x.size(-1)).t(), None, "none", [], "")
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = rows.sum(0)
        return grad_x, grad_w, grad_b


def autocast_dtype(device_type: str) -> torch.dtype | None:
    """The dtype autocast computes in on this device type now, None when autocast is off."""
    return torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else None


def _cpu_autocast() -> bool:
    return autocast_dtype("cpu") is not None


class CPULinear(nn.Module):
    """An nn.Linear's weight and bias (same names, same tensors) computed with fast_linear. A bias that is
    not a Parameter (a fixed output bias) stays a buffer. After `pack()` (inference), products that need
    no gradient read a oneDNN-packed copy of the weight."""

    def __init__(self, weight: Tensor, bias: Tensor | None):
        super().__init__()
        self.weight = weight
        if bias is None or isinstance(bias, nn.Parameter):
            self.bias = bias
        else:
            self.register_buffer("bias", bias)
        self.packed: Tensor | None = None
        self._packed_version = -1

    def pack(self) -> CPULinear:
        self.packed, self._packed_version = pack_weight(self.weight), self.weight._version
        return self

    def forward(self, x: Tensor) -> Tensor:
        if self.packed is not None and self._packed_version != self.weight._version:
            self.pack()  # the weight changed in place since: never compute with a stale copy
        return fast_linear(x, self.weight, self.bias, self.packed)


def swap_linears(model: nn.Module, pack: bool = False) -> nn.Module:
    """`model` with every nn.Linear (subclasses included, e.g. a tied output projection) replaced in place by a
    CPULinear over the same parameters; `pack`: (inference) each with a oneDNN-packed copy of its weight."""
    for name, child in model.named_children():
        if isinstance(child, nn.Linear):
            linear = CPULinear(child.weight, child.bias).train(child.training)
            setattr(model, name, linear.pack() if pack else linear)
        else:
            swap_linears(child, pack)
    return model


# ---- dropout masks ---------------------------------------------------------------------------------

MASK_LEVELS = 1 << 16


def keep_mask(shape: torch.Size, dropped: int) -> Tensor:
    """Boolean mask of `shape`, each element False with probability dropped / 2^16: 16-bit uniforms cut
    from full-range 64-bit draws of the default generator (seeded and resumed like any other draw)."""
    n = math.prod(shape)
    bits = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(2**63), None).view(torch.int16)[:n]
    return bits.view(shape) >= dropped - MASK_LEVELS // 2


class FastDropout(nn.Dropout):
    """nn.Dropout with a cheaper mask on CPU: one 64-bit draw of the generator gives four 16-bit uniforms
    (`keep_mask`), where `bernoulli_` / `rand_like` draw one number per element. p is rounded to a multiple
    of 2^-16 and the scale is the exact 1 / (1 - p') of the rounded p', so the output stays unbiased. In
    bf16/fp16 the scale is applied to x, not rounded into the mask (1/0.9 is 1.109 in bf16). Elsewhere (CUDA
    has a fused kernel) and in eval, nn.Dropout. `python bench/train.py` trains with it."""

    def forward(self, x: Tensor) -> Tensor:
        dropped = round(self.p * MASK_LEVELS)
        if not self.training or x.device.type != "cpu" or not 0 < dropped < MASK_LEVELS:
            return super().forward(x)
        keep = keep_mask(x.shape, dropped)
        scale = MASK_LEVELS / (MASK_LEVELS - dropped)
        if x.dtype == torch.float32:
            return x * keep.to(x.dtype).mul_(scale)
        return x.mul(scale) * keep.to(x.dtype)


def swap_dropout(model: nn.Module) -> nn.Module:
    """`model` with every nn.Dropout replaced in place by a FastDropout of the same p."""
    for name, child in model.named_children():
        if type(child) is nn.Dropout:
            setattr(model, name, FastDropout(child.p).train(child.training))
        else:
            swap_dropout(child)
    return model


def without_dropout(model: nn.Module) -> nn.Module:
    """(inference) `model` with every dropout module replaced in place by nn.Identity: in eval mode dropout returns
    its input, but still costs a dispatched operator per call, ~9 of a small decoder step's ~230."""
    for name, child in model.named_children():
        if isinstance(child, (nn.Dropout, FastDropout)):
            setattr(model, name, nn.Identity())
        else:
            without_dropout(child)
    return model


# ---- top-k -----------------------------------------------------------------------------------------

TOPK_GROUP = 64


def top_k_beams(logprobs: Tensor, scores: Tensor, beams: int, k: int) -> tuple[Tensor, Tensor]:
    """Each sentence's k best continuations over all its beams: logprobs [N * beams, V] of each row's next token
    and scores [N * beams] (each row's own so far) -> the k largest `logprobs + scores[:, None]` of each sentence's
    `beams` rows, values [N, k], and their index [N, k] into the sentence's [beams * V] (row * V + token): the
    values of `(logprobs + scores[:, None]).view(N, beams * V).topk(k)`; among equal values the index may differ.

    On CPU, where torch.topk costs ~1-2 us per row plus its per-entry work, in three steps: the maximum of each group
    of TOPK_GROUP consecutive entries of a row (one vectorised pass over the logits), plus the row's score; the k
    best groups of the sentence (a top-k over beams * V / TOPK_GROUP maxima); the exact top-k over those groups'
    entries (and each row's tail that fills no group). A sentence's k best lie in its k best groups. Elsewhere,
    and for a vocabulary too small to group, each row's k best and then the sentence's k best of those (V >= k).
    Beam search's choice (nmt.search.beam.best_continuations); `python bench/translate.py` decodes with it."""
    R, V = logprobs.shape
    N, G = R // beams, V // TOPK_GROUP
    if logprobs.device.type != "cpu" or G < 4 * k:
        row_values, row_tokens = logprobs.topk(k, dim=1)  # [R, k]
        values, pick = (row_values + scores[:, None]).view(N, beams * k).topk(k, dim=1)
        return values, pick.div(k, rounding_mode="floor") * V + row_tokens.view(N, beams * k).gather(1, pick)
    T = TOPK_GROUP
    head = logprobs[:, : G * T].view(R, G, T)  # a view, a row's tail left out: never a copy of the logits
    maxima = (head.amax(dim=2) + scores[:, None]).view(N, beams * G)
    if beams * G < 64 * k:  # torch.topk sorts the whole of a row shorter than 64 k entries, selects in a longer one
        maxima = F.pad(maxima, (0, 64 * k - beams * G), value=float("-inf"))
    # [N, k]: group g of the sentence's row b is b * G + g (a padded one is picked only among -inf ties: clamped)
    groups = maxima.topk(k, dim=1).indices.clamp_(max=beams * G - 1)
    rows = groups.div(G, rounding_mode="floor") + torch.arange(0, R, beams, device=groups.device)[:, None]  # [N, k]
    candidates = head[rows, groups.remainder(G)] + scores[rows][:, :, None]  # [N, k, T]
    if G * T == V:  # group b * G + g starts at entry (b * G + g) * T of the sentence's [beams * V]
        values, pick = candidates.view(N, k * T).topk(k, dim=1)
        return values, groups.gather(1, pick.div(T, rounding_mode="floor")) * T + pick.remainder(T)
    return _with_tails(logprobs, scores, candidates.view(N, k * T), groups, beams, k)


def _with_tails(logprobs: Tensor, scores: Tensor, candidates: Tensor, groups: Tensor, beams: int,
                k: int) -> tuple[Tensor, Tensor]:
    """top_k_beams where V is no multiple of TOPK_GROUP: each row's tail that fills no group (W entries) is always
    a candidate too. candidates [N, k * TOPK_GROUP] the best groups' entries plus their row's score, groups [N, k]."""
    (R, V), T = logprobs.shape, TOPK_GROUP
    N, G, W = R // beams, V // T, V % T
    tail = (logprobs[:, G * T:] + scores[:, None]).view(N, beams * W)
    values, pick = torch.cat([candidates, tail], dim=1).topk(k, dim=1)
    starts = groups.div(G, rounding_mode="floor") * V + groups.remainder(G) * T  # [N, k] into [beams * V]
    grouped = starts.gather(1, pick.clamp(max=k * T - 1).div(T, rounding_mode="floor")) + pick.remainder(T)
    tailed = (pick - k * T).clamp(min=0)  # [N, k] position among the tails: row * W + entry
    return values, torch.where(pick.lt(k * T), grouped, tailed.div(W, rounding_mode="floor") * V + G * T
                               + tailed.remainder(W))
