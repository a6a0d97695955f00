"""The projected (chunked, fused) loss gives the numbers and gradients of the plain one."""

from __future__ import annotations

import pytest
import torch

from nmt import loss as loss_mod
from nmt.loss import label_smoothed_loss, projected_label_smoothed_loss


def inputs(seed: int = 0, vocab: int = 50):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(3, 7, 16, generator=g, dtype=torch.float64).float()
    weight = torch.randn(vocab, 16, generator=g) * 0.3
    target = torch.randint(4, vocab, (3, 7), generator=g)
    target[0, 5:] = 0  # padding (id 0) at the end of two rows
    target[2, 3:] = 0
    return hidden, weight, target


def with_grads(fn, hidden, weight, target):
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    loss, nll = fn(h, w, target)
    loss.backward()
    return loss.detach(), nll.detach(), h.grad, w.grad


@pytest.mark.parametrize("chunk_rows", [1, 4, 1000])  # one row per chunk, a ragged last chunk, one chunk
def test_projected_loss_equals_the_plain_loss_and_its_gradients(monkeypatch, chunk_rows):
    hidden, weight, target = inputs()
    monkeypatch.setattr(loss_mod, "CHUNK_BYTES", chunk_rows * 4 * weight.size(0))
    plain = with_grads(lambda h, w, t: label_smoothed_loss(h @ w.t(), t, 0.1, pad=0), hidden, weight, target)
    fused = with_grads(lambda h, w, t: projected_label_smoothed_loss(h, w, t, 0.1, pad=0), hidden, weight, target)
    for name, a, b in zip(("loss", "nll", "d hidden", "d weight"), plain, fused, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=name)
    assert fused[2][0, 5:].abs().sum() == 0 and fused[2][2, 3:].abs().sum() == 0  # padding gets no gradient


def test_gradient_scales_with_what_backward_brings():
    """backward multiplies the gradient formed in forward: loss * c must give c times the gradient."""
    hidden, weight, target = inputs(1)
    once = with_grads(lambda h, w, t: projected_label_smoothed_loss(h, w, t, 0.2, pad=0), hidden, weight, target)
    scaled = with_grads(lambda h, w, t: [x * 3.0 for x in projected_label_smoothed_loss(h, w, t, 0.2, pad=0)],
                        hidden, weight, target)
    torch.testing.assert_close(scaled[2], 3.0 * once[2])
    torch.testing.assert_close(scaled[3], 3.0 * once[3])


def test_without_gradients_it_is_the_plain_loss():
    hidden, weight, target = inputs(2)
    with torch.no_grad():
        loss, nll = projected_label_smoothed_loss(hidden, weight, target, 0.1, pad=0)
        expected = label_smoothed_loss(hidden @ weight.t(), target, 0.1, pad=0)
    assert not loss.requires_grad
    torch.testing.assert_close((loss, nll), expected)


def test_under_bf16_autocast_it_stays_close_to_fp32():
    hidden, weight, target = inputs(3)
    reference = with_grads(lambda h, w, t: projected_label_smoothed_loss(h, w, t, 0.1, pad=0), hidden, weight, target)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = with_grads(lambda h, w, t: projected_label_smoothed_loss(h, w, t, 0.1, pad=0), hidden, weight, target)
    assert low[2].dtype == hidden.dtype and low[3].dtype == weight.dtype  # gradients in the parameters' dtype
    for a, b in zip(reference, low, strict=True):
        torch.testing.assert_close(b, a, rtol=0.03, atol=0.03)


@pytest.mark.parametrize("gathered_rows", [1, 3, 100])  # a product per chunk, per 3 chunks (ragged end), one
def test_low_precision_weight_gradient_gathers_chunks_into_one_product(monkeypatch, gathered_rows):
    """In bf16 the e^T (h / s) products of several one-row chunks are made as one (LowPrecisionGradWeight);
    the gradients stay those of the plain loss on the same bf16 inputs, and each product is cast once."""
    hidden, weight, target = inputs(5)
    monkeypatch.setattr(loss_mod, "CHUNK_BYTES", 4 * weight.size(0))  # one row per chunk
    monkeypatch.setattr(loss_mod, "DW_BYTES", gathered_rows * 2 * weight.size(0))
    products = []
    flush = loss_mod.LowPrecisionGradWeight.flush_into
    monkeypatch.setattr(loss_mod.LowPrecisionGradWeight, "flush_into",
                        lambda self, g: products.append(self.used) or flush(self, g))
    h16, w16 = hidden.bfloat16().float(), weight.bfloat16().float()
    plain = with_grads(lambda h, w, t: label_smoothed_loss(h @ w.t(), t, 0.1, pad=0), h16, w16, target)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = with_grads(lambda h, w, t: projected_label_smoothed_loss(h, w, t, 0.1, pad=0), hidden, weight, target)
    rows = int(target.ne(0).sum())
    assert sum(products) == rows and max(products) == min(gathered_rows, rows)
    torch.testing.assert_close(low[3], plain[3], rtol=0.02, atol=0.02)
    torch.testing.assert_close(low[2], plain[2], rtol=0.02, atol=0.02)


def test_a_fixed_output_bias_is_part_of_the_logits():
    hidden, weight, target = inputs(4)
    bias = torch.linspace(-2.0, 2.0, weight.size(0))
    plain = with_grads(lambda h, w, t: label_smoothed_loss(h @ w.t() + bias, t, 0.1, pad=0), hidden, weight, target)
    fused = with_grads(lambda h, w, t: projected_label_smoothed_loss(h, w, t, 0.1, pad=0, bias=bias),
                       hidden, weight, target)
    for a, b in zip(plain, fused, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


def test_gathering_the_weight_gradients_products_is_kept_to_the_cpu(monkeypatch):
    """LowPrecisionGradWeight is a CPU workaround: on a GPU each chunk's bf16 product is made and added at once
    (`add_product`). That path, run here by calling the CPU a GPU, gives the gathered path's gradients."""
    assert loss_mod.gathers_products(torch.device("cpu"))
    assert not loss_mod.gathers_products(torch.device("cuda", 0))  # by construction: no CUDA needed to ask
    hidden, weight, target = inputs(6)
    monkeypatch.setattr(loss_mod, "CHUNK_BYTES", 4 * 4 * weight.size(0))  # four rows per chunk
    monkeypatch.setattr(loss_mod, "DW_BYTES", 4 * 2 * weight.size(0))  # a product per chunk, as a GPU's chunk made
    fn = lambda h, w, t: projected_label_smoothed_loss(h, w, t, 0.1, pad=0)  # noqa: E731
    with torch.autocast("cpu", dtype=torch.bfloat16):
        gathered = with_grads(fn, hidden, weight, target)
    monkeypatch.setattr(loss_mod, "gathers_products", lambda device: device.type == "cuda")
    monkeypatch.setattr(loss_mod.LowPrecisionGradWeight, "__init__", lambda *a: pytest.fail("gathered on a GPU"))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        direct = with_grads(fn, hidden, weight, target)
    for a, b in zip(gathered, direct, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)  # the same products, added in another order
