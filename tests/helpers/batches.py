"""Tiny corpora of token ids and a dataset as the batching code reads one (tests of padded and packed batches)."""

from __future__ import annotations

import numpy as np
import pytest

from nmt.data.batching import TokenBatchSampler
from nmt.errors import NmtError
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


def assert_resume_refused_under(key: str, changed: dict, message: str) -> None:
    """A sampler state taken with the defaults cannot be resumed by a sampler built with `changed` (an NmtError
    naming `message`), nor can a state from before `key` existed, which counts as the default and resumes under it."""
    lens = np.random.default_rng(0).integers(1, 40, 400)
    started = TokenBatchSampler(lens, lens, 200)
    next(iter(started))
    state = started.state_dict()
    with pytest.raises(NmtError, match=message):
        TokenBatchSampler(lens, lens, 200, **changed).load_state_dict(state)
    before = {k: v for k, v in state.items() if k != key}  # a checkpoint from before the key: the default
    TokenBatchSampler(lens, lens, 200).load_state_dict(before)
    with pytest.raises(NmtError, match=message):
        TokenBatchSampler(lens, lens, 200, **changed).load_state_dict(before)
