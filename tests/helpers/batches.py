"""Tiny corpora of token ids and a dataset as the batching code reads one (tests of padded and packed batches)."""

from __future__ import annotations

import numpy as np

from tests.helpers.modeling import BOS, EOS, PAD

IDS = dict(pad=PAD, bos=BOS, eos=EOS)


class Columns:
    """A dataset as batches_from_dataset reads one: a list of indices -> {column: [rows]}."""

    def __init__(self, src, tgt):
        self.cols = {"src_ids": src, "tgt_ids": tgt}

    def __getitem__(self, idx):
        return {k: [v[i] for i in idx] for k, v in self.cols.items()}


def corpus(n: int = 300, seed: int = 0) -> tuple[list[list[int]], list[list[int]]]:
    rng = np.random.default_rng(seed)
    src = [rng.integers(4, 23, rng.integers(1, 30)).tolist() for _ in range(n)]
    tgt = [rng.integers(4, 23, rng.integers(1, 30)).tolist() for _ in range(n)]
    return src, tgt
