"""Packed batches: a batch's sentences laid end to end in one row, no padding between them.

A padded batch [B, S] spends compute on its padding (Multi30k at the paper's 25k tokens: a third of the source
slots, `python bench/padding.py`) and needs a mask in every attention call. A packed one is [1, total]: each
sentence is a segment of the row, and attention stays inside segments (`PackedMask`). `cu` holds where each
segment begins, the cumulative lengths [0, n_1, n_1 + n_2, ...] that varlen FlashAttention reads
(`torch.nn.attention.varlen.varlen_attn`). The row is filled up to a fixed width with segments of padding
(nmt.data.packing), so every update has the same tensor shapes: one compiled graph.

On a CUDA device attention runs varlen FlashAttention; elsewhere (the CPU, the reference) the same attention with
a [total, total] boolean mask built from the segments, which costs what its size says: packing is for a GPU.
Dropout on the attention weights has no varlen kernel, so packing needs `model.attention_dropout` 0; FlashAttention
computes in bf16 or fp16, so on a GPU it needs `train.amp` bf16 or fp16.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor


@dataclass(frozen=True)
class Segments:
    """One side of a packed batch: cu [N + 1] int32 cumulative segment lengths (cu[-1] = the row's width),
    `longest` the longest segment (a host int: the kernel sizes its grid by it), positions [1, width] long
    (each token's position inside its segment, for the positional encoding)."""

    cu: Tensor
    longest: int
    positions: Tensor

    def map(self, fn: Callable[[Tensor], Tensor]) -> Segments:
        return Segments(fn(self.cu), self.longest, fn(self.positions))

    def ids(self) -> Tensor:
        """The segment of each token [width]: static in shape (no sizes read from the device)."""
        width = self.positions.size(-1)
        tokens = torch.arange(width, device=self.cu.device)
        return torch.searchsorted(self.cu[1:].contiguous(), tokens, right=True)


@dataclass(frozen=True)
class PackedMask:
    """Attention from the segments of `q` to the same-numbered segments of `k`; `causal`: also only to keys
    at or before the query (the decoder's self-attention, where q and k are the same segments)."""

    q: Segments
    k: Segments
    causal: bool

    def attend(self, q: Tensor, k: Tensor, v: Tensor, dropout_p: float) -> Tensor:
        """q [1, H, T, Dh], k and v [1, H, S, Dh] -> [1, H, T, Dh]: equation 1 within each segment."""
        if q.is_cuda:
            return self._varlen(q, k, v, dropout_p)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=self.dense(), dropout_p=dropout_p)

    def dense(self) -> Tensor:
        """The same rule as a boolean mask [1, 1, T, S] (True = may attend)."""
        allowed = self.q.ids()[:, None] == self.k.ids()[None, :]
        if self.causal:
            allowed = allowed & torch.ones_like(allowed).tril()
        return allowed[None, None]

    def _varlen(self, q: Tensor, k: Tensor, v: Tensor, dropout_p: float) -> Tensor:
        from torch.nn.attention.varlen import varlen_attn

        if dropout_p > 0:
            raise ValueError("packed batches need model.attention_dropout 0: varlen FlashAttention has no dropout")
        if q.dtype not in (torch.bfloat16, torch.float16):
            raise ValueError("packed batches on a GPU need train.amp bf16 or fp16: FlashAttention computes in 16 bits")
        out = varlen_attn(q[0].transpose(0, 1), k[0].transpose(0, 1), v[0].transpose(0, 1),  # [T, H, Dh]
                          self.q.cu, self.k.cu, self.q.longest, self.k.longest,
                          window_size=(-1, 0) if self.causal else (-1, -1))
        return out.transpose(0, 1)[None]  # [1, H, T, Dh]


@dataclass(frozen=True)
class Packed:
    """Both sides of a packed batch: the source's and the target's segments, sentence i the i-th of each."""

    src: Segments
    tgt: Segments

    def map(self, fn: Callable[[Tensor], Tensor]) -> Packed:
        return Packed(self.src.map(fn), self.tgt.map(fn))

    @property
    def encoder(self) -> PackedMask:
        return PackedMask(self.src, self.src, causal=False)

    @property
    def decoder(self) -> PackedMask:
        return PackedMask(self.tgt, self.tgt, causal=True)

    @property
    def cross(self) -> PackedMask:
        return PackedMask(self.tgt, self.src, causal=False)


AttentionMask = Tensor | PackedMask  # a padded batch's boolean or additive mask, or a packed batch's segments
