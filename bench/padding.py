"""Padding efficiency of training batches on real data: the share of a training epoch's padded slots that hold real
tokens, source and target, per `train.max_tokens` and `train.length_multiple` (nmt.data.batching's sampler and
collate, as `nmt train` builds its batches), with the batches per epoch and the real target tokens per batch.

Usage (from the repository root, on a data dir that `nmt prepare` wrote):

    python bench/padding.py data/multi30k-en-de
    python bench/padding.py data/multi30k-en-de --max-tokens 4096,25000 --multiples 1,8

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


def efficiency(src_lens: np.ndarray, tgt_lens: np.ndarray, max_tokens: int, multiple: int) -> dict[str, float]:
    """An epoch's batches (as `nmt train` cuts them, lengths without BOS/EOS): their count, real target tokens
    per batch, and real tokens / padded slots of the source (+ EOS) and of the target (+ BOS or EOS)."""
    sampler = TokenBatchSampler(src_lens, tgt_lens, max_tokens, shuffle=False, multiple=multiple)
    src, tgt = np.asarray(src_lens) + 1, np.asarray(tgt_lens) + 1
    real_src = real_tgt = slots_src = slots_tgt = 0
    batches = sampler.batches_for_epoch(1)
    for b in batches:
        real_src, real_tgt = real_src + int(src[b].sum()), real_tgt + int(tgt[b].sum())
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
    args = p.parse_args()
    lengths = DataDir.open(args.data).split_lengths(args.split)
    rows = []
    for max_tokens in map(int, args.max_tokens.split(",")):
        for multiple in map(int, args.multiples.split(",")):
            e = efficiency(lengths["src_len"], lengths["tgt_len"], max_tokens, multiple)
            rows.append([f"{max_tokens:,}", str(multiple), f"{e['batches']:,}", f"{e['tokens']:,.0f}",
                         f"{e['source']:.1%}", f"{e['target']:.1%}"])
    n = len(lengths["src_len"])
    print(f"{args.data} ({args.split}, {n:,} sentence pairs): an epoch's batches, real tokens / padded slots",
          file=sys.stderr)
    print(table(["max_tokens", "multiple", "batches", "target tokens/batch", "source", "target"], rows))


if __name__ == "__main__":
    main()
