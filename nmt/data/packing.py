"""Packed training batches (`train.packed`): a batch's sentences end to end in one row of a fixed width.

The sampler cuts packed batches by the sums of the sentences' lengths rather than by sentences x the longest
(`cut_packed`), so a batch of 25,000 tokens holds ~25,000 real ones on its longer side; `collate_packed` lays them
out with their segments (nmt.packed) and fills the row to a width that is the same for every batch (`width`),
so that every update has one shape. The fill is padding split into segments of its own, each attending only
to itself: no segment is longer than the batch's real ones (the attention kernel's grid is sized by the
longest), and none is empty (a query with no key to attend to has no softmax). The segment count is rounded up
to a multiple of SEGMENT_MULTIPLE with empty segments at the end (the kernel skips them), so the [N + 1] offsets
take few shapes too.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import torch

from nmt.data.batching import Batch, round_up
from nmt.loss import target_positions
from nmt.packed import Packed, Segments

SEGMENT_MULTIPLE = 64


def width(max_tokens: int, multiple: int = 1) -> int:
    """The row width of every packed batch under a budget: room for the budget and at least one fill token."""
    return int(round_up(max_tokens + 1, multiple))


def fill_lengths(real: int, pieces: int) -> list[int]:
    """`real` fill tokens in `pieces` near-equal segments (each >= 1)."""
    base, extra = divmod(real, pieces)
    return [base + 1] * extra + [base] * (pieces - extra)


def _row(seqs: Sequence[Sequence[int]], row_width: int, pad: int) -> tuple[np.ndarray, list[int]]:
    """One side's row [row_width]: the sequences end to end, then pad; and their lengths."""
    row = np.full(row_width, pad, dtype=np.int64)
    flat = list(itertools.chain.from_iterable(seqs))
    row[:len(flat)] = flat
    return row, [len(s) for s in seqs]


def _segments(lengths: list[int], fill: list[int], count: int) -> Segments:
    """Segments of `lengths`, then `fill`, then empty ones up to `count`."""
    every = np.asarray(lengths + fill + [0] * (count - len(lengths) - len(fill)), dtype=np.int64)
    cu = np.concatenate([[0], np.cumsum(every)])
    starts = np.repeat(cu[:-1], every)
    positions = np.arange(int(cu[-1])) - starts
    positions[sum(lengths):] = 0  # the fill: any position the model has (a long fill must not run past them)
    return Segments(cu=torch.from_numpy(cu.astype(np.int32)), longest=int(every.max()),
                    positions=torch.from_numpy(positions)[None])


def pack(src_seqs: list[list[int]], tgt_in: list[list[int]], tgt_out: list[list[int]], index: torch.Tensor,
         row_width: int, pad: int) -> Batch:
    """A packed Batch of full sequences (src with EOS, tgt_in with BOS, tgt_out with EOS) in rows of row_width."""
    src, src_lens = _row(src_seqs, row_width, pad)
    tgt_row, tgt_lens = _row(tgt_in, row_width, pad)
    out_row, _ = _row(tgt_out, row_width, pad)
    fill_src, fill_tgt = row_width - sum(src_lens), row_width - sum(tgt_lens)
    if min(fill_src, fill_tgt) < 1:
        raise ValueError(f"packed row of {row_width} has no room for its fill ({sum(src_lens)}, {sum(tgt_lens)})")
    # as many fill segments as keep each no longer than the real ones, never more than the shorter fill has tokens
    pieces = max(-(-fill_src // max(src_lens, default=1)), -(-fill_tgt // max(tgt_lens, default=1)))
    pieces = min(pieces, fill_src, fill_tgt)
    count = int(round_up(len(src_lens) + pieces, SEGMENT_MULTIPLE))
    packed = Packed(src=_segments(src_lens, fill_lengths(fill_src, pieces), count),
                    tgt=_segments(tgt_lens, fill_lengths(fill_tgt, pieces), count))
    target = torch.from_numpy(out_row)[None]
    return Batch(src=torch.from_numpy(src)[None], tgt_in=torch.from_numpy(tgt_row)[None], tgt_out=target,
                 n_src_tokens=sum(src_lens), n_tgt_tokens=sum(tgt_lens), index=index,
                 tgt_positions=target_positions(target, pad), packed=packed)


def collate_packed(src_ids: Sequence[Sequence[int]], tgt_ids: Sequence[Sequence[int]],
                   indices: Sequence[int] | np.ndarray, *, pad: int, bos: int, eos: int, max_tokens: int,
                   multiple: int = 1) -> Batch:
    """(src, tgt) id sequences (without BOS/EOS) into a packed Batch of width(max_tokens, multiple) columns
    (wider, to a multiple, for a single sentence over the budget)."""
    src = [[*s, eos] for s in src_ids]
    tgt_in = [[bos, *t] for t in tgt_ids]
    tgt_out = [[*t, eos] for t in tgt_ids]
    longest_side = max(sum(map(len, src)), sum(map(len, tgt_in)))
    row_width = max(width(max_tokens, multiple), width(longest_side, multiple))
    index = torch.as_tensor(np.asarray(indices, dtype=np.int64))
    return pack(src, tgt_in, tgt_out, index, row_width, pad)


def split_packed(batch: Batch, pad: int, multiple: int = 1) -> list[Batch]:
    """The two halves (by sentences) of a packed batch of >= 2 sentences, each in a row just wide enough (a CUDA
    out-of-memory retry: a narrower row is what frees memory)."""
    assert batch.packed is not None
    n = len(batch)
    halves = []
    for lo, hi in ((0, n // 2), (n // 2, n)):
        src_cu, tgt_cu = batch.packed.src.cu[lo:hi + 1].tolist(), batch.packed.tgt.cu[lo:hi + 1].tolist()
        src = [batch.src[0, a:b].tolist() for a, b in itertools.pairwise(src_cu)]
        tgt_in = [batch.tgt_in[0, a:b].tolist() for a, b in itertools.pairwise(tgt_cu)]
        tgt_out = [batch.tgt_out[0, a:b].tolist() for a, b in itertools.pairwise(tgt_cu)]
        row_width = width(max(src_cu[-1] - src_cu[0], tgt_cu[-1] - tgt_cu[0]), multiple)
        halves.append(pack(src, tgt_in, tgt_out, batch.index[lo:hi], row_width, pad))
    return halves
