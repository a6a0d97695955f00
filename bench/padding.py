"""Padding efficiency of training batches on real data: the share of a training epoch's padded slots that hold real
tokens, source and target, per `train.max_tokens` and `train.length_multiple`, padded and packed (`train.packed`:
the sentences end to end in a row of max_tokens + 1), as `nmt train` builds its batches (nmt.data.batching's
sampler and collate, nmt.data.packing's), with the batches per epoch and the real target tokens per batch.

Usage (from the repository root, on a data dir that `nmt prepare` wrote):

    python bench/padding.py data/multi30k-en-de
    python bench/padding.py data/multi30k-en-de --max-tokens 4096,25000 --multiples 1,8 --layouts padded,packed

Padding is work a GPU does for nothing: a multiple of 8 gives tensor cores and torch.compile rounder shapes, and
this says what it costs on the data at hand (short sentences lose the most). The bench's random batch
(bench/train.py) has its own figure on its row."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from common import table

from nmt.data.batching import TokenBatchSampler, round_up
from nmt.data.datadir import DataDir
from nmt.data.packing import width


def efficiency(src_lens: np.ndarray, tgt_lens: np.ndarray, max_tokens: int, multiple: int,
               packed: bool = False) -> dict[str, float]:
    """An epoch's batches (as `nmt train` cuts them, lengths without BOS/EOS): their count, real target tokens
    per batch, and real tokens / slots of the source (+ EOS) and of the target (+ BOS or EOS)."""
    sampler = TokenBatchSampler(src_lens, tgt_lens, max_tokens, shuffle=False, multiple=multiple, packed=packed)
    src, tgt = np.asarray(src_lens) + 1, np.asarray(tgt_lens) + 1
    real_src = real_tgt = slots_src = slots_tgt = 0
    batches = sampler.batches_for_epoch(1)
    for b in batches:
        real_src, real_tgt = real_src + int(src[b].sum()), real_tgt + int(tgt[b].sum())
        if packed:  # one row per side, as wide as collate_packed makes it
            row = max(width(max_tokens, multiple), width(max(int(src[b].sum()), int(tgt[b].sum())), multiple))
            slots_src, slots_tgt = slots_src + row, slots_tgt + row
        else:
            slots_src += len(b) * round_up(int(src[b].max()), multiple)
            slots_tgt += len(b) * round_up(int(tgt[b].max()), multiple)
    return {"batches": len(batches), "tokens": real_tgt / len(batches), "source": real_src / slots_src,
            "target": real_tgt / slots_tgt}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("data", type=Path, help="a data dir written by `nmt prepare`")
    p.add_argument("--split", default="train")
    p.add_argument("--max-tokens", default="4096,25000", help="comma-separated train.max_tokens values")
    p.add_argument("--multiples", default="1,8", help="comma-separated train.length_multiple values")
    p.add_argument("--layouts", default="padded,packed", help="padded and/or packed (train.packed)")
    args = p.parse_args()
    lengths = DataDir.open(args.data).split_lengths(args.split)
    rows = []
    for layout in args.layouts.split(","):
        for max_tokens in map(int, args.max_tokens.split(",")):
            for multiple in map(int, args.multiples.split(",")):
                e = efficiency(lengths["src_len"], lengths["tgt_len"], max_tokens, multiple, layout == "packed")
                rows.append([layout, f"{max_tokens:,}", str(multiple), f"{e['batches']:,}", f"{e['tokens']:,.0f}",
                             f"{e['source']:.1%}", f"{e['target']:.1%}"])
    n = len(lengths["src_len"])
    print(f"{args.data} ({args.split}, {n:,} sentence pairs): an epoch's batches, real tokens / slots",
          file=sys.stderr)
    print(table(["layout", "max_tokens", "multiple", "batches", "target tokens/batch", "source", "target"], rows))


if __name__ == "__main__":
    main()
