"""Batch lengths padded to a multiple (train.length_multiple; issue 48): the budget counts the rounded lengths, the
batch's tensors have them, the extra columns are padding that changes no loss or gradient, an OOM split keeps them,
a run cannot resume its batch order under another multiple, and bench/padding.py counts what the batches hold."""

from __future__ import annotations

import pytest
import torch

from nmt.data.batches import batches_from_dataset
from nmt.data.batching import TokenBatchSampler, collate, round_up, split_batch
from nmt.data.datadir import DataDir
from nmt.errors import NmtError
from nmt.train.update import piece_loss
from tests.helpers.batches import IDS, Columns, assert_resume_refused_under, corpus
from tests.helpers.bench import bench_module
from tests.helpers.modeling import PAD, make_model


def test_round_up():
    assert [round_up(n, 8) for n in (1, 7, 8, 9, 16, 17)] == [8, 8, 8, 16, 16, 24]
    assert round_up(13, 1) == 13


def test_every_batch_has_lengths_of_the_multiple_within_the_budget_and_every_sentence_once():
    src, tgt = corpus()
    sampler = TokenBatchSampler([len(s) for s in src], [len(t) for t in tgt], 256, seed=3, multiple=8)
    seen = []
    for batch in batches_from_dataset(Columns(src, tgt), sampler, type("Ids", (), IDS)):
        assert batch.src.size(1) % 8 == 0 and batch.tgt_in.size(1) % 8 == 0 and batch.tgt_out.size(1) % 8 == 0
        assert len(batch) == 1 or len(batch) * max(batch.src.size(1), batch.tgt_in.size(1)) <= 256
        plain = collate([src[i] for i in batch.index.tolist()], [tgt[i] for i in batch.index.tolist()], **IDS)
        for name in ("src", "tgt_in", "tgt_out"):  # the same rows, then padding only
            wide, narrow = getattr(batch, name), getattr(plain, name)
            assert torch.equal(wide[:, : narrow.size(1)], narrow) and bool(wide[:, narrow.size(1):].eq(PAD).all())
        assert (batch.n_src_tokens, batch.n_tgt_tokens) == (plain.n_src_tokens, plain.n_tgt_tokens)
        assert torch.equal(batch.tgt_positions // batch.tgt_out.size(1), plain.tgt_positions // plain.tgt_out.size(1))
        seen += batch.index.tolist()
    assert sorted(seen) == list(range(len(src)))


def test_the_budget_counts_the_rounded_lengths():
    # 10 sentences of 9 tokens (+ EOS = 10): 4 per batch of 40 padded tokens unrounded, 2 per batch rounded to 16
    lens = [9] * 10
    assert {len(b) for b in TokenBatchSampler(lens, lens, 40, shuffle=False)} == {4, 2}
    assert {len(b) for b in TokenBatchSampler(lens, lens, 40, shuffle=False, multiple=8)} == {2}


def test_the_extra_padding_changes_no_loss_or_gradient():
    src, tgt = corpus(6, seed=1)
    losses, grads = [], []
    for multiple in (1, 8):
        model = make_model().train()
        for m in model.modules():  # dropout draws its masks over the padded shape: none here
            if isinstance(m, torch.nn.Dropout):
                m.p = 0.0
        batch = collate(src, tgt, **IDS, multiple=multiple)
        loss, nll = piece_loss(model, model, batch, 0.1, PAD)
        loss.backward()
        losses.append(torch.stack([loss, nll]).detach())
        grads.append({k: p.grad.clone() for k, p in model.named_parameters()})
    assert collate(src, tgt, **IDS, multiple=8).src.size(1) > collate(src, tgt, **IDS).src.size(1)
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-5)
    for k in grads[0]:
        torch.testing.assert_close(grads[1][k], grads[0][k], rtol=1e-4, atol=5e-5, msg=k)  # float rounding only


def test_an_out_of_memory_split_keeps_the_multiple():
    src, tgt = corpus(7, seed=2)
    halves = split_batch(collate(src, tgt, **IDS, multiple=8), PAD, multiple=8)
    assert [len(h) for h in halves] == [3, 4]
    for half, rows in zip(halves, (slice(0, 3), slice(3, 7))):
        assert half.src.size(1) % 8 == 0 and half.tgt_out.size(1) % 8 == 0
        want = collate(src[rows], tgt[rows], **IDS, multiple=8)
        assert torch.equal(half.src, want.src) and torch.equal(half.tgt_out, want.tgt_out)
        assert torch.equal(half.tgt_positions, want.tgt_positions)


def test_a_run_resumes_its_batch_order_only_under_its_own_multiple():
    assert_resume_refused_under("multiple", {"multiple": 8}, "multiple 1 -> 8")  # a state from before: taken at 1
    with pytest.raises(NmtError, match="multiple must be >= 1"):
        TokenBatchSampler([1, 2], [1, 2], 200, multiple=0)



def test_the_padding_bench_counts_what_the_batches_hold(demo_data):
    """bench/padding.py's figures for the demo data dir are those of the batches batches_from_dataset builds, and a
    multiple of 8 costs padding."""
    data = DataDir.open(demo_data)
    lengths, split = data.split_lengths("train"), data.split("train")
    figures = {}
    for multiple in (1, 8):
        figures[multiple] = bench_module("padding").efficiency(lengths["src_len"], lengths["tgt_len"], 512, multiple)
        sampler = TokenBatchSampler(lengths["src_len"], lengths["tgt_len"], 512, shuffle=False, multiple=multiple)
        batches = list(batches_from_dataset(split, sampler, type("Ids", (), IDS)))
        real = {side: sum(getattr(b, f"n_{side}_tokens") for b in batches) for side in ("src", "tgt")}
        assert figures[multiple]["batches"] == len(batches)
        assert figures[multiple]["tokens"] == pytest.approx(real["tgt"] / len(batches))
        assert figures[multiple]["source"] == pytest.approx(real["src"] / sum(b.src.numel() for b in batches))
        assert figures[multiple]["target"] == pytest.approx(real["tgt"] / sum(b.tgt_out.numel() for b in batches))
    assert figures[8]["target"] < figures[1]["target"] and figures[8]["source"] < figures[1]["source"]
