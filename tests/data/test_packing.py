"""Packed batches (train.packed; issue 48): the sentences of a batch end to end in one row of a fixed width give the
padded batch's loss and gradients exactly; the sampler budgets their summed lengths; the row's layout (segments,
positions, fill) is what the varlen attention kernel needs; an OOM split, resume and the config keep to it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from nmt import checkpoint
from nmt.config.experiment import Config, check_config
from nmt.data.batches import batches_from_dataset, split
from nmt.data.batching import TokenBatchSampler, collate, cut_packed
from nmt.data.datadir import DataDir
from nmt.data.packing import SEGMENT_MULTIPLE, collate_packed, width
from nmt.errors import ConfigError
from nmt.model import Transformer
from nmt.rundir import RunDir
from nmt.train.loop import train
from nmt.train.update import piece_loss
from tests.helpers.batches import IDS, Columns, assert_resume_refused_under, corpus
from tests.helpers.bench import bench_module
from tests.helpers.modeling import PAD
from tests.helpers.training import tiny_config


def model(pre_norm: bool = False, output_bias: bool = False) -> Transformer:
    torch.manual_seed(0)
    return Transformer(24, 24, d_model=32, n_heads=4, d_ff=64, encoder_layers=2, decoder_layers=2, dropout=0.0,
                       pre_norm=pre_norm, output_bias=output_bias, pad_id=PAD, joint_vocab=True).double()


def loss_and_grads(m: Transformer, batch) -> tuple[float, float, dict[str, torch.Tensor]]:
    m.zero_grad()
    loss, nll = piece_loss(m, m, batch, 0.1, PAD)
    loss.backward()
    return loss.item(), nll.item(), {n: p.grad.clone() for n, p in m.named_parameters()}


@pytest.mark.parametrize("pre_norm,output_bias", [(False, False), (True, True)])
def test_a_packed_batch_gives_the_padded_batchs_loss_and_gradients(pre_norm, output_bias):
    src, tgt = corpus(12, seed=1)
    m = model(pre_norm, output_bias)
    padded = loss_and_grads(m, collate(src, tgt, **IDS))
    packed = loss_and_grads(m, collate_packed(src, tgt, range(12), **IDS, max_tokens=400))
    assert packed[:2] == pytest.approx(padded[:2], rel=1e-12)
    for name, grad in padded[2].items():
        torch.testing.assert_close(packed[2][name], grad, rtol=1e-10, atol=1e-12, msg=name)


def test_no_sentence_sees_another():
    """Changing one sentence of a packed batch changes no other sentence's decoder states."""
    src, tgt = corpus(6, seed=2)
    m = model().eval()
    before = collate_packed(src, tgt, range(6), **IDS, max_tokens=200)
    src[3] = [5] * 20
    tgt[3] = [6] * 3
    after = collate_packed(src, tgt, range(6), **IDS, max_tokens=200)
    with torch.no_grad():
        h0 = m(before.src, before.tgt_in, project=False, packed=before.packed)[0]
        h1 = m(after.src, after.tgt_in, project=False, packed=after.packed)[0]
    for i in (0, 1, 2, 4, 5):  # sentences after 3 moved: compare segment by segment
        a0, b0 = before.packed.tgt.cu[i:i + 2].tolist()
        a1, b1 = after.packed.tgt.cu[i:i + 2].tolist()
        torch.testing.assert_close(h1[a1:b1], h0[a0:b0])


def test_the_layout_the_kernel_reads():
    src, tgt = corpus(40, seed=3)
    batch = collate_packed(src, tgt, range(40), **IDS, max_tokens=2000, multiple=8)
    assert batch.src.shape == batch.tgt_in.shape == batch.tgt_out.shape == (1, width(2000, 8)) == (1, 2008)
    assert len(batch) == 40 and batch.n_tgt_tokens == sum(len(t) + 1 for t in tgt)
    for side, seqs in (("src", src), ("tgt", tgt)):
        seg = getattr(batch.packed, side)
        lengths = np.diff(seg.cu.numpy())
        assert seg.cu.dtype == torch.int32 and len(seg.cu) % SEGMENT_MULTIPLE == 1 and seg.cu[-1] == 2008
        assert lengths[:40].tolist() == [len(s) + 1 for s in seqs]
        fill = lengths[40:][lengths[40:] > 0]
        assert fill.min() >= 1 and fill.max() <= seg.longest == lengths.max()
        assert seg.longest == max(len(s) + 1 for s in seqs)  # the fill is cut no longer than the real sentences
        assert not lengths[40 + len(fill):].any()  # then only empty segments
        starts = seg.cu[:40].tolist()
        assert seg.positions[0, starts].eq(0).all() and seg.positions[0, starts[1]:].max() < 1024
    assert len(batch.packed.src.cu) == len(batch.packed.tgt.cu)  # sentence i is segment i on both sides
    row = batch.packed.tgt.cu[:41].tolist()
    for i in (0, 17, 39):  # BOS + target in, target + EOS out, at the segment's place
        a, b = row[i], row[i + 1]
        assert batch.tgt_in[0, a:b].tolist() == [IDS["bos"], *tgt[i]]
        assert batch.tgt_out[0, a:b].tolist() == [*tgt[i], IDS["eos"]]
    assert batch.tgt_out[0, row[40]:].eq(PAD).all() and batch.tgt_positions.numel() == batch.n_tgt_tokens


def test_the_sampler_budgets_the_summed_lengths():
    src, tgt = corpus(300)
    sampler = TokenBatchSampler([len(s) for s in src], [len(t) for t in tgt], 400, seed=3, packed=True)
    seen, real = [], []
    for batch in batches_from_dataset(Columns(src, tgt), sampler, type("Ids", (), IDS)):
        assert batch.packed is not None and batch.src.shape == (1, 401)
        assert max(batch.n_src_tokens, batch.n_tgt_tokens) <= 400 or len(batch) == 1
        seen += batch.index.tolist()
        real.append(batch.n_tgt_tokens)
    assert sorted(seen) == list(range(300))
    padded = TokenBatchSampler([len(s) for s in src], [len(t) for t in tgt], 400, seed=3)
    assert len(sampler) < len(padded)  # the same budget holds more sentences without padding


def test_cut_packed_is_greedy_on_both_sides_and_keeps_a_long_example():
    src = np.array([3, 4, 5, 9, 2, 30, 1])
    assert cut_packed(src, src, 12).tolist() == [0, 3, 5, 6, 7]  # 3+4+5 | 9+2 | 30 alone | 1
    tgt = np.array([1, 1, 9, 1, 1, 1, 1])
    assert cut_packed(src, tgt, 12).tolist() == [0, 3, 5, 6, 7]
    assert cut_packed(tgt, src, 12).tolist() == [0, 3, 5, 6, 7]  # whichever side fills first cuts
    assert cut_packed(np.array([2, 2, 2]), np.array([6, 6, 1]), 12).tolist() == [0, 2, 3]
    assert cut_packed(np.array([], dtype=np.int64), np.array([], dtype=np.int64), 12).tolist() == [0]


def test_an_out_of_memory_split_gives_two_packed_halves_of_the_same_sums():
    src, tgt = corpus(9, seed=4)
    m = model()
    whole = collate_packed(src, tgt, range(9), **IDS, max_tokens=600)
    halves = split(whole, PAD, multiple=8)
    assert [len(h) for h in halves] == [4, 5] and all(h.src.size(1) % 8 == 0 for h in halves)
    assert all(h.src.size(1) < whole.src.size(1) for h in halves)  # a narrower row: what frees memory
    assert torch.equal(torch.cat([h.index for h in halves]), whole.index)
    total = loss_and_grads(m, whole)
    parts = [loss_and_grads(m, h) for h in halves]
    assert sum(p[0] for p in parts) == pytest.approx(total[0], rel=1e-6)  # float32 sums
    torch.testing.assert_close(parts[0][2]["tgt_embed.weight"] + parts[1][2]["tgt_embed.weight"],
                               total[2]["tgt_embed.weight"], rtol=1e-5, atol=1e-5)  # the loss's float32 parts


def test_a_run_resumes_its_batch_order_only_packed_as_it_started():
    assert_resume_refused_under("packed", {"packed": True}, "packed 0 -> 1")  # a state from before: unpacked
    lens = np.random.default_rng(0).integers(1, 40, 400)
    packed = TokenBatchSampler(lens, lens, 200, packed=True)
    packed.load_state_dict(packed.state_dict())


def test_packing_refuses_attention_dropout():
    cfg = Config()
    cfg.train = dataclasses.replace(cfg.train, packed=True)
    check_config(cfg)
    cfg.model = dataclasses.replace(cfg.model, attention_dropout=0.1)
    with pytest.raises(ConfigError, match="train.packed needs model.attention_dropout 0"):
        check_config(cfg)


def test_a_packed_run_trains_and_resumes_exactly(demo_data, tmp_path):
    """`nmt train` with train.packed: a run interrupted at update 3
    and resumed is the uninterrupted one (dropout on; the sampler's epoch crossing is shared with padded batches,
    tests/train/test_train.py)."""
    common = ("train.packed=true", "train.max_tokens=1024", "model.dropout=0.1", "train.save_every=3",
              "train.log_every=1")
    full, parts = tmp_path / "full", tmp_path / "parts"
    train(tiny_config(demo_data, full, "train.max_updates=8", *common), progress=False)
    train(tiny_config(demo_data, parts, "train.max_updates=3", *common), progress=False)
    (parts / "averaged.pt").unlink(missing_ok=True)
    train(tiny_config(demo_data, parts, "train.max_updates=8", *common), progress=False)
    losses = [r["loss"] for r in RunDir(full).read_metrics() if r["type"] == "train"]
    assert len(losses) == 8 and all(np.isfinite(losses))
    assert [r["loss"] for r in RunDir(parts).read_metrics() if r["type"] == "train"] == losses
    a, b = (checkpoint.load(run / "last.pt")["model"] for run in (full, parts))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_the_padding_bench_counts_what_packed_batches_hold(demo_data):
    """bench/padding.py's packed figures are those of the rows collate_packed builds, and packing fills more."""
    data = DataDir.open(demo_data)
    lengths, split = data.split_lengths("train"), data.split("train")
    bench = bench_module("padding")
    figures = bench.efficiency(lengths["src_len"], lengths["tgt_len"], 512, 8, packed=True)
    sampler = TokenBatchSampler(lengths["src_len"], lengths["tgt_len"], 512, shuffle=False, multiple=8, packed=True)
    batches = list(batches_from_dataset(split, sampler, type("Ids", (), IDS)))
    real = {side: sum(getattr(b, f"n_{side}_tokens") for b in batches) for side in ("src", "tgt")}
    assert figures["batches"] == len(batches) and figures["tokens"] == pytest.approx(real["tgt"] / len(batches))
    assert figures["source"] == pytest.approx(real["src"] / sum(b.src.numel() for b in batches))
    assert figures["target"] == pytest.approx(real["tgt"] / sum(b.tgt_out.numel() for b in batches))
    padded = bench.efficiency(lengths["src_len"], lengths["tgt_len"], 512, 8)
    assert figures["source"] > padded["source"] and figures["tokens"] > padded["tokens"]
