"""bench/train.py's GPU path, checked on CPU: the MFU's peak is the format the update computes in (TF32 once
training has switched it on), the timed update is `nmt train`'s (its loss with the batch's own target positions, its
loss scale, clipping and the finite check), and what a row reports (padding efficiency)."""

from __future__ import annotations

import argparse

import pytest
import torch

import nmt.loss
import nmt.train.update as update_mod
from nmt import precision
from nmt.precision import Precision
from tests.helpers.bench import bench_module, tiny_bench_config

bench_train = bench_module("train")
bench_gpu = bench_module("gpu")
H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture
def tf32_restored():
    was = precision.tf32_enabled()
    yield
    precision.use_tf32(was)


def test_fp32_mfu_is_against_the_tf32_peak_once_tf32_is_on(tf32_restored):
    precision.use_tf32(False)
    assert bench_gpu.peak_tflops(H100, "fp32")[0] == 66.9  # the CUDA cores
    precision.use_tf32(True)
    assert bench_gpu.peak_tflops(H100, "fp32")[0] == 494.7  # the tensor cores in TF32: 7.4x the work per second
    assert bench_gpu.peak_tflops(H100, "bf16")[0] == 989.4  # autocast's format, whatever TF32 is
    assert bench_gpu.mfu(494.7e12 / 2, 1.0, 494.7) == "50.0%"


def bench_args(**kw) -> argparse.Namespace:
    base = dict(max_tokens=64, vocab=50, label_smoothing=0.1, dtype="fp32", marian_attn="sdpa", clip_norm=0.0,
                compile=False, own_settings=False, steps=1, warmup=0, clock="wall", packed=False,
                compile_loss=False, compile_mode="default")
    return argparse.Namespace(**{**base, **kw})


def test_the_peak_is_looked_up_after_training_has_switched_tf32_on(tmp_path, monkeypatch, tf32_restored):
    """prepare(training=True) turns TF32 on on a GPU; a peak looked up before it was the CUDA cores' (MFU 7x)."""
    precision.use_tf32(False)
    real_prepare, seen = bench_train.prepare, []

    def prepare_as_on_cuda(*args, **kwargs):
        precision.use_tf32(True)  # what prepare does for training on CUDA
        return real_prepare(*args, **kwargs)

    monkeypatch.setattr(bench_train, "prepare", prepare_as_on_cuda)
    monkeypatch.setattr(bench_train, "resolve_peak", lambda *a: seen.append(precision.tf32_enabled()) or (1.0, "x"))
    row, _ = bench_train.bench(tiny_bench_config(tmp_path / "t.yaml"), bench_args(), torch.device("cpu"), True, 1.0)
    assert seen == [True]
    assert row[1] == "64" and row[-3].endswith("%") and row[-1] == "n/a"  # max_tokens, MFU; no CUDA memory on CPU


def test_packed_the_bench_times_the_same_sentences_packed(tmp_path):
    """--packed: ours-packed's batch holds the padded batch's sentences end to end, and its row has two more columns."""
    batch = bench_train.make_batch(256, 50, torch.device("cpu"))
    packed = bench_train.packed_batch(batch, torch.device("cpu"))
    assert packed.src.shape == (1, 257) and len(packed) == len(batch)
    assert (packed.n_src_tokens, packed.n_tgt_tokens) == (batch.n_src_tokens, batch.n_tgt_tokens)
    real = packed.tgt_out[0, : batch.n_tgt_tokens]
    assert torch.equal(real, batch.tgt_out[batch.tgt_out.ne(bench_train.PAD)])  # row-major = end to end
    config = tiny_bench_config(tmp_path / "t.yaml")
    plain, _ = bench_train.bench(config, bench_args(), torch.device("cpu"), True, 1.0)
    row, _ = bench_train.bench(config, bench_args(packed=True), torch.device("cpu"), True, 1.0)
    assert len(row) == len(plain) + 2 and float(row[-2].replace(",", "")) > 0 and "(" in row[-1]


def test_the_bench_batch_carries_its_target_positions_and_its_padding_efficiency():
    batch = bench_train.make_batch(256, 50, torch.device("cpu"))
    assert torch.equal(batch.tgt_positions, nmt.loss.target_positions(batch.tgt_out, bench_train.PAD))
    src, tgt = bench_train.padding_efficiency(batch)
    assert src == batch.src.ne(bench_train.PAD).sum().item() / batch.src.numel() and 0.6 < src < 1
    assert tgt == batch.tgt_out.ne(bench_train.PAD).sum().item() / batch.tgt_out.numel() and 0.6 < tgt < 1


def tiny_update(tmp_path, dtype="fp32", clip_norm=0.0, loss_fn=None):
    cfg = bench_train.model_config(tiny_bench_config(tmp_path / "t.yaml"))
    model = bench_train.ours(cfg, 50)
    batch = bench_train.make_batch(64, 50, torch.device("cpu"))
    opt = bench_train.adam(list(model.parameters()), lr=1e-3)
    update = bench_train.update_fn(model, loss_fn or bench_train.ours_loss, opt, batch, 0.1, torch.device("cpu"),
                                   Precision(dtype), clip_norm)
    return model, update


def test_the_timed_update_is_nmt_trains_loss_without_a_search_for_positions(tmp_path, monkeypatch):
    """The loss gets the batch's positions: nonzero() on the device (a host wait on a GPU) never runs."""
    model, update = tiny_update(tmp_path)
    monkeypatch.setattr(nmt.loss, "target_positions", lambda *a: pytest.fail("positions searched in the loss"))
    before = model.output_weight.detach().clone()
    update()
    assert not torch.equal(model.output_weight, before) and update.skipped == 0


def test_the_timed_update_clips_and_checks_for_finite_values(tmp_path, monkeypatch):
    norms = []
    real = update_mod.gradient_norm
    monkeypatch.setattr(update_mod, "gradient_norm", lambda params, clip: norms.append(clip) or real(params, clip))
    _, update = tiny_update(tmp_path, clip_norm=0.5)
    update()
    assert norms == [0.5]

    def infinite(model, batch, eps):
        loss, nll = bench_train.ours_loss(model, batch, eps)
        return loss * float("inf"), nll

    model, update = tiny_update(tmp_path, loss_fn=infinite)
    before = model.output_weight.detach().clone()
    update()
    assert torch.equal(model.output_weight, before)  # no step: decided on the device, as nmt train's
    monkeypatch.setattr(bench_train, "decides_on_device", lambda optimizer, scaler: False)  # fp16's way
    model, update = tiny_update(tmp_path, loss_fn=infinite)
    before = model.output_weight.detach().clone()
    update()
    assert update.skipped == 1 and torch.equal(model.output_weight, before)  # counted on the host, no step


def test_the_fp16_loss_scale_starts_where_nmt_trains_does(tmp_path):
    _, update = tiny_update(tmp_path, dtype="fp16")  # an enabled GradScaler on CPU: only its scale is read
    assert update.scaler.get_scale() == update_mod.INITIAL_LOSS_SCALE == 2.0**7  # not torch's 2**16


def test_own_settings_take_each_configs_batch_and_compile(tmp_path):
    path = tiny_bench_config(tmp_path / "t.yaml", max_tokens=1234, compile=True)
    assert bench_train.own_batch(path, bench_args(own_settings=True)) == (1234, True)
    assert bench_train.own_batch(path, bench_args()) == (64, False)


def test_a_compiled_forward_is_called_not_asked_for_its_truth(tmp_path):
    """torch.compile's module raises on len(), so on bool(): the bench's loss must test `forward is None`, not `or`
    (`--compile` crashed before its first update)."""
    cfg = bench_train.model_config(tiny_bench_config(tmp_path / "t.yaml"))
    model = bench_train.ours(cfg, 50)
    batch = bench_train.make_batch(64, 50, torch.device("cpu"))
    calls = []

    class LikeCompiled:  # torch._dynamo's OptimizedModule: callable, no len()
        def __call__(self, *args, **kwargs):
            calls.append(1)
            return model(*args, **kwargs)

        def __len__(self):
            raise TypeError("Transformer does not support len()")

    loss, nll = bench_train.ours_loss(model, batch, 0.1, forward=LikeCompiled())
    assert calls == [1] and loss > nll > 0
