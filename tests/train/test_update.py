"""One update's arithmetic (nmt/train/update.py), shared by `nmt train` and bench/train.py: the gradient norm with
and without clipping, and the finite check that decides whether the step is taken."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from nmt import loss as loss_mod
from nmt.precision import Precision
from nmt.train.loop import train
from nmt.train.state import SkippedUpdate
from nmt.train.update import finish_update, grad_scaler, gradient_norm
from tests.helpers.training import tiny_config


def model_with_grads(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 3))
    model(torch.randn(5, 4)).square().sum().backward()
    return model


def test_without_clipping_the_norm_is_measured_and_the_gradients_are_not_touched(monkeypatch):
    model = model_with_grads()
    grads = [p.grad.clone() for p in model.parameters()]
    expected = torch.nn.utils.clip_grad_norm_(model_with_grads().parameters(), float("inf"))  # the norm logged before
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda *a, **k: pytest.fail("a pass over the gradients"))
    norm = gradient_norm(model.parameters(), 0.0)
    assert torch.equal(norm, expected)
    # the 2-norm of all gradients as one vector, to rounding (a norm of per-tensor norms sums in another order)
    torch.testing.assert_close(norm, torch.cat([g.reshape(-1) for g in grads]).norm(), rtol=1e-6, atol=0)
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), grads, strict=True))


def test_clipping_returns_the_norm_before_it_and_scales_the_gradients_to_the_limit():
    model = model_with_grads()
    norm = gradient_norm(model.parameters(), 0.01)
    after = torch.cat([p.grad.reshape(-1) for p in model.parameters()]).norm()
    assert norm > 1 and after == pytest.approx(0.01, rel=1e-4)


def test_a_non_finite_loss_skips_the_step_and_drops_the_gradients():
    model = model_with_grads()
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    scaler = grad_scaler(Precision("fp32"), torch.device("cpu"))
    with pytest.raises(SkippedUpdate, match="non-finite"):
        finish_update(model.parameters(), optimizer, scaler, 0.0, torch.tensor([float("nan"), 1.0]))
    assert all(p.grad is None and torch.equal(p, b) for p, b in zip(model.parameters(), before, strict=True))
    model = model_with_grads()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    loss_sum, nll_sum, norm = finish_update(model.parameters(), optimizer, scaler, 0.0, torch.tensor([3.0, 2.0]))
    assert (loss_sum, nll_sum) == (3.0, 2.0) and norm > 0 and optimizer.state  # the step was taken


def test_train_compile_loss_sends_every_piece_through_the_compiled_chunks(demo_data, tmp_path, monkeypatch):
    """train.compile_loss reaches the loss (its arithmetic against the eager chunks: tests/core/test_loss_compiled.py);
    the compiled chunks are stood in for by the eager ones here, so no compile is paid."""
    calls = []

    def eager_chunks(rows, weight, labels, keep, spread, bias, step):
        calls.append(step)
        return loss_mod._chunked(rows, weight, labels, spread, bias, with_grad=True)

    monkeypatch.setattr(loss_mod, "compiled_chunked", eager_chunks)
    train(tiny_config(demo_data, tmp_path / "off", "train.max_updates=2"), progress=False)
    assert calls == []
    train(tiny_config(demo_data, tmp_path / "on", "train.max_updates=2", "train.compile_loss=true"), progress=False)
    assert len(calls) == 2 and calls[0] == loss_mod.compiled_chunk_rows(torch.device("cpu"), 400, torch.float32)
