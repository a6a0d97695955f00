"""Token-budget batch sampler (budget, coverage, DDP sharding, exact resume) and the padding collate."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nmt.data.batches import batches_from_dataset
from nmt.data.batching import (
    Batch,
    TokenBatchSampler,
    collate,
    cut_loop,
    cut_windows,
)
from nmt.errors import NmtError
from nmt.tokenizer import NMT_IDS

IDS = dict(pad=NMT_IDS.pad, bos=NMT_IDS.bos, eos=NMT_IDS.eos)


def _lengths(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    src = rng.integers(0, 60, n)
    tgt = np.clip((src * rng.uniform(0.6, 1.5, n)).astype(int), 0, None)
    return src, tgt


def _padded_tokens(batch, src, tgt, extra=1) -> int:
    b = np.asarray(batch)
    return len(b) * int(max((src[b] + extra).max(), (tgt[b] + extra).max()))


def _as_lists(batches) -> list[list[int]]:
    return [list(map(int, b)) for b in batches]


def test_budget_and_each_example_once():
    src, tgt = _lengths(3000)
    s = TokenBatchSampler(src, tgt, max_tokens=500, seed=3)
    batches = list(s)
    assert len(batches) == len(s) > 1
    for b in batches:
        assert _padded_tokens(b, src, tgt) <= 500
    flat = np.concatenate(batches)
    assert np.array_equal(np.sort(flat), np.arange(3000))


def test_batches_are_length_buckets():
    src, tgt = _lengths(3000)
    s = TokenBatchSampler(src, tgt, max_tokens=500, shuffle=False)
    batches = list(s)
    # sorted by (tgt, src): consecutive batches never go back in target length
    tmax = [tgt[b].max() for b in batches]
    tmin = [tgt[b].min() for b in batches]
    assert all(tmax[i] <= tmin[i + 1] for i in range(len(batches) - 1))


def test_extra_tokens_counted():
    # 10 examples of length 9: +1 gives 10 tokens each, so 100 tokens fit exactly 10 per batch
    s = TokenBatchSampler([9] * 20, [9] * 20, max_tokens=100, shuffle=False)
    assert [len(b) for b in s] == [10, 10]
    s0 = TokenBatchSampler([9] * 20, [9] * 20, max_tokens=100, shuffle=False, extra_tokens=2)
    assert [len(b) for b in s0] == [9, 9, 2]


def test_larger_side_bounds_the_batch():
    s = TokenBatchSampler([2] * 8, [19] * 8, max_tokens=40, shuffle=False)  # tgt side: 20 tokens each
    assert [len(b) for b in s] == [2, 2, 2, 2]


def test_oversize_example_forms_its_own_batch():
    src = [3, 500, 4, 2, 700]
    tgt = [3, 10, 4, 900, 2]
    s = TokenBatchSampler(src, tgt, max_tokens=64, seed=5)
    batches = _as_lists(s)
    assert sorted(i for b in batches for i in b) == [0, 1, 2, 3, 4]
    for big in (1, 3, 4):
        assert [big] in batches
    assert [0, 2] in batches or [2, 0] in batches


def test_epochs_reshuffle_and_same_seed_repeats():
    src, tgt = _lengths(2000)
    s = TokenBatchSampler(src, tgt, max_tokens=400, seed=7)
    e1, e2 = _as_lists(s.batches_for_epoch(1)), _as_lists(s.batches_for_epoch(2))
    assert e1 != e2
    assert sorted(map(len, e1)) == sorted(map(len, e2))  # cut points do not depend on the epoch
    again = TokenBatchSampler(src, tgt, max_tokens=400, seed=7)
    assert _as_lists(again.batches_for_epoch(2)) == e2
    assert _as_lists(again.batches_for_epoch(1)) == e1
    other_seed = TokenBatchSampler(src, tgt, max_tokens=400, seed=8)
    assert _as_lists(other_seed.batches_for_epoch(1)) != e1


def test_tie_break_changes_with_epoch():
    # all lengths equal: only the random tie-break decides who shares a batch
    s = TokenBatchSampler([5] * 600, [5] * 600, max_tokens=60, seed=1)
    e1 = {frozenset(map(int, b)) for b in s.batches_for_epoch(1)}
    e2 = {frozenset(map(int, b)) for b in s.batches_for_epoch(2)}
    assert e1 != e2


def test_no_shuffle_is_sorted_and_deterministic():
    src, tgt = _lengths(1500, seed=4)
    a = TokenBatchSampler(src, tgt, max_tokens=300, shuffle=False)
    b = TokenBatchSampler(src, tgt, max_tokens=300, shuffle=False, seed=99)
    assert _as_lists(a.batches_for_epoch(1)) == _as_lists(b.batches_for_epoch(5))
    flat = np.concatenate(a.batches_for_epoch(1))
    keys = list(zip(tgt[flat].tolist(), src[flat].tolist(), flat.tolist(), strict=True))
    assert keys == sorted(keys)  # (tgt, src, index)
    # a validation sampler can be iterated again and again
    assert _as_lists(a) == _as_lists(a) == _as_lists(a.batches_for_epoch(1))


@pytest.mark.parametrize("world", [2, 3])
def test_ddp_shards(world):
    src, tgt = _lengths(1001, seed=2)
    ranks = [TokenBatchSampler(src, tgt, 350, seed=11, num_replicas=world, rank=r) for r in range(world)]
    for s in ranks:
        s.set_epoch(4)
    glob = _as_lists(ranks[0].batches_for_epoch(4))
    assert len(glob) % world == 0
    single = TokenBatchSampler(src, tgt, 350, seed=11)
    n_real = len(single)
    assert glob[:n_real] == _as_lists(single.batches_for_epoch(4))  # padding appended after the real ones
    assert glob[n_real:] == glob[: len(glob) - n_real]  # ...and repeats the first batches
    per_rank = [_as_lists(s) for s in ranks]
    assert len({len(p) for p in per_rank}) == 1
    assert all(len(s) == len(per_rank[0]) for s in ranks)
    for r in range(world):
        assert per_rank[r] == glob[r::world]
    covered = {i for p in per_rank for b in p for i in b}
    assert covered == set(range(1001))


def test_ddp_with_fewer_batches_than_ranks():
    s = [TokenBatchSampler([1, 2], [1, 2], 4, num_replicas=3, rank=r) for r in range(3)]
    got = [_as_lists(x) for x in s]
    assert all(len(g) == 1 for g in got)
    assert {i for g in got for b in g for i in b} == {0, 1}


@pytest.mark.parametrize("world,rank", [(1, 0), (2, 1)])
def test_exact_resume_mid_epoch(world, rank):
    src, tgt = _lengths(2500, seed=6)
    kw = dict(max_tokens=300, seed=5, num_replicas=world, rank=rank)
    ref = TokenBatchSampler(src, tgt, **kw)
    ref.set_epoch(3)
    expected = _as_lists(ref)

    first = TokenBatchSampler(src, tgt, **kw)
    first.set_epoch(3)
    it = iter(first)
    head = [next(it) for _ in range(7)]
    state = first.state_dict()
    assert state == {"epoch": 3, "position": 7, "seed": 5, "max_tokens": 300, "num_replicas": world,
                     "multiple": 1, "packed": 0}

    resumed = TokenBatchSampler(src, tgt, **kw)
    resumed.load_state_dict(state)
    resumed.set_epoch(3)  # setting the restored epoch again must not rewind
    assert head + _as_lists(resumed) == expected
    # the finished pass moved on to the start of the next epoch
    assert resumed.state_dict()["epoch"] == 4 and resumed.state_dict()["position"] == 0
    ref.set_epoch(4)
    assert _as_lists(resumed) == _as_lists(ref)


def test_resume_at_end_of_epoch_does_not_replay():
    src, tgt = _lengths(500)
    s = TokenBatchSampler(src, tgt, 200, seed=2)
    it = iter(s)
    for _ in range(len(s)):
        next(it)
    state = s.state_dict()
    assert state["position"] == len(s)
    r = TokenBatchSampler(src, tgt, 200, seed=2)
    r.load_state_dict(state)
    assert list(r) == []
    assert r.state_dict()["epoch"] == state["epoch"] + 1
    r2 = TokenBatchSampler(src, tgt, 200, seed=2)
    r2.set_epoch(state["epoch"] + 1)
    assert _as_lists(r) == _as_lists(r2)


def test_set_epoch_resets_position():
    src, tgt = _lengths(500)
    s = TokenBatchSampler(src, tgt, 200, seed=2)
    it = iter(s)
    next(it), next(it)
    s.set_epoch(9)
    assert s.state_dict()["position"] == 0
    assert _as_lists(s) == _as_lists(s.batches_for_epoch(9))


def test_resume_with_changed_budget_is_refused_or_moves_on():
    src, tgt = _lengths(500)
    s = TokenBatchSampler(src, tgt, 200)
    it = iter(s)
    next(it)
    state = s.state_dict()
    other = TokenBatchSampler(src, tgt, 300)
    with pytest.raises(NmtError, match="max_tokens 200 -> 300"):
        other.load_state_dict(state)
    other.load_state_dict(state, strict=False)
    assert other.state_dict()["epoch"] == state["epoch"] + 1 and other.state_dict()["position"] == 0


def test_resume_with_other_world_size_keeps_global_progress():
    src, tgt = _lengths(800)
    one = TokenBatchSampler(src, tgt, 200, seed=3)
    it = iter(one)
    for _ in range(6):
        next(it)
    two = TokenBatchSampler(src, tgt, 200, seed=3, num_replicas=2, rank=1)
    two.load_state_dict(one.state_dict())
    assert two.state_dict()["position"] == 3
    assert _as_lists(two)[0] == _as_lists(one.batches_for_epoch(1))[7]


def test_invalid_arguments():
    with pytest.raises(NmtError, match="max_tokens"):
        TokenBatchSampler([1], [1], 0)
    with pytest.raises(NmtError, match="rank"):
        TokenBatchSampler([1], [1], 10, num_replicas=2, rank=2)
    with pytest.raises(NmtError, match="tgt_lens has 2"):
        TokenBatchSampler([1], [1, 2], 10)
    with pytest.raises(NmtError, match="negative"):
        TokenBatchSampler([-1], [1], 10)


def test_empty_dataset():
    s = TokenBatchSampler([], [], 100, num_replicas=2, rank=1)
    assert len(s) == 0 and list(s) == []


@settings(max_examples=60, deadline=None)
@given(
    pairs=st.lists(st.tuples(st.integers(0, 80), st.integers(0, 80)), min_size=0, max_size=120),
    max_tokens=st.integers(1, 400),
    world=st.integers(1, 3),
    seed=st.integers(0, 2**31),
    epoch=st.integers(0, 5),
)
def test_property_budget_coverage_sharding(pairs, max_tokens, world, seed, epoch):
    src = np.array([p[0] for p in pairs], dtype=np.int64)
    tgt = np.array([p[1] for p in pairs], dtype=np.int64)
    samplers = [
        TokenBatchSampler(src, tgt, max_tokens, seed=seed, num_replicas=world, rank=r) for r in range(world)
    ]
    glob = samplers[0].batches_for_epoch(epoch)
    assert len(glob) % world == 0
    real = len(TokenBatchSampler(src, tgt, max_tokens, seed=seed))
    flat = np.concatenate(glob[:real]) if real else np.zeros(0, dtype=np.int64)
    assert np.array_equal(np.sort(flat), np.arange(len(pairs)))  # each example exactly once
    for b in glob:
        assert len(b) >= 1
        assert len(b) == 1 or _padded_tokens(b, src, tgt) <= max_tokens
    for r, s in enumerate(samplers):
        s.set_epoch(epoch)
        assert _as_lists(s) == _as_lists(glob[r::world])


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 300), min_size=1, max_size=400),
    max_tokens=st.integers(1, 3000),
)
def test_property_window_cut_equals_reference_loop(sizes, max_tokens):
    arr = np.array(sizes, dtype=np.int64)
    assert np.array_equal(cut_windows(arr, max_tokens), cut_loop(arr, max_tokens))


def test_builds_fast_for_a_million_examples():
    src, tgt = _lengths(1_000_000, seed=1)
    start = time.perf_counter()
    s = TokenBatchSampler(src, tgt, max_tokens=4096, seed=1)
    s.set_epoch(2)
    first = next(iter(s))
    elapsed = time.perf_counter() - start
    assert first and elapsed < 10, f"{elapsed:.1f}s"


def test_collate_layout():
    b = collate([[5, 6, 7], [8]], [[9], [10, 11]], indices=[4, 2], **IDS)
    assert isinstance(b, Batch) and len(b) == 2
    assert b.src.tolist() == [[5, 6, 7, 3], [8, 3, 0, 0]]
    assert b.tgt_in.tolist() == [[2, 9, 0], [2, 10, 11]]
    assert b.tgt_out.tolist() == [[9, 3, 0], [10, 11, 3]]
    assert b.index.tolist() == [4, 2]
    assert b.n_src_tokens == 6 and b.n_tgt_tokens == 5
    assert b.n_tgt_tokens == int((b.tgt_out != 0).sum())
    for t in (b.src, b.tgt_in, b.tgt_out, b.index):
        assert t.dtype == torch.long
    # teacher forcing: labels are the decoder input shifted left by one
    assert torch.equal(b.tgt_out[:, :-1][b.tgt_in[:, 1:] != 0], b.tgt_in[:, 1:][b.tgt_in[:, 1:] != 0])


def test_collate_empty_sequences_and_custom_ids():
    b = collate([[], [7]], [[], []], pad=9, bos=1, eos=4)
    assert b.src.tolist() == [[4, 9], [7, 4]]
    assert b.tgt_in.tolist() == [[1], [1]]
    assert b.tgt_out.tolist() == [[4], [4]]
    assert b.index.tolist() == [0, 1]
    assert b.n_src_tokens == 3 and b.n_tgt_tokens == 2


def test_collate_accepts_numpy_rows():
    rows = [np.array([4, 5], dtype=np.int32), np.array([6], dtype=np.int32)]
    b = collate(rows, rows, np.array([0, 1]), **IDS)
    assert b.src.tolist() == [[4, 5, 3], [6, 3, 0]]


def test_batch_to_returns_copy():
    b = collate([[5]], [[6]], **IDS)
    moved = b.to("cpu")
    assert moved is not b and torch.equal(moved.src, b.src) and moved.n_tgt_tokens == b.n_tgt_tokens


class _DictDataset:
    """Mimics a HF Dataset: indexing with a list returns a dict of columns."""

    def __init__(self, src, tgt):
        self.cols = {"src_ids": src, "tgt_ids": tgt}

    def __getitem__(self, idx):
        return {k: [v[i] for i in idx] for k, v in self.cols.items()}


def test_batches_from_dataset_round_trip():
    rng = np.random.default_rng(0)
    src = [rng.integers(4, 50, rng.integers(0, 12)).tolist() for _ in range(200)]
    tgt = [rng.integers(4, 50, rng.integers(0, 12)).tolist() for _ in range(200)]
    sampler = TokenBatchSampler([len(s) for s in src], [len(t) for t in tgt], 64, seed=2)
    seen = []
    for batch in batches_from_dataset(_DictDataset(src, tgt), sampler, NMT_IDS):
        assert batch.src.numel() <= 64 and batch.tgt_out.numel() <= 64
        for row, i in enumerate(batch.index.tolist()):
            s, t = batch.src[row].tolist(), batch.tgt_out[row].tolist()
            assert s[: len(src[i]) + 1] == src[i] + [3]
            assert t[: len(tgt[i]) + 1] == tgt[i] + [3]
            seen.append(i)
    assert sorted(seen) == list(range(200))


def test_hf_dataset_integration():
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict(
        {
            "src_ids": [[4, 5], [6], [7, 8, 9]],
            "tgt_ids": [[10], [11, 12], []],
            "src_len": [2, 1, 3],
            "tgt_len": [1, 2, 0],
        }
    )
    sampler = TokenBatchSampler.from_dataset(ds, max_tokens=8, shuffle=False)
    batches = list(batches_from_dataset(ds, sampler, NMT_IDS))
    assert sorted(i for b in batches for i in b.index.tolist()) == [0, 1, 2]
    by_index = {int(i): b for b in batches for i in b.index}
    b = by_index[2]
    row = b.index.tolist().index(2)
    assert b.src[row].tolist()[:4] == [7, 8, 9, 3] and b.tgt_out[row].tolist()[0] == 3


def test_usable_as_dataloader_batch_sampler():
    src, tgt = _lengths(300)
    pairs = [([4] * int(s), [5] * int(t)) for s, t in zip(src, tgt, strict=True)]
    sampler = TokenBatchSampler(src, tgt, 120, seed=4)

    def collate_rows(rows):
        return collate([r[0] for r in rows], [r[1] for r in rows], **IDS)

    loader = torch.utils.data.DataLoader(pairs, batch_sampler=sampler, collate_fn=collate_rows)
    assert len(loader) == len(sampler)
    batches = list(loader)
    assert sum(len(b) for b in batches) == 300
    assert all(b.src.numel() <= 120 and b.tgt_out.numel() <= 120 for b in batches if len(b) > 1)
