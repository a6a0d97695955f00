"""nmt.kernels: each CPU kernel computes what the plain PyTorch code computes (same numbers, same gradients,
same translations) and is taken where it should be."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

import nmt.kernels as K
from nmt import search
from nmt.kernels import MASK_LEVELS, CPULinear, FastDropout, keep_mask, swap_linears
from nmt.model import MultiHeadAttention
from nmt.search import SearchSettings
from nmt.tokenizer import SpecialIds
from tests.helpers.modeling import BOS, EOS, PAD, SRC, TGT, make_model


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dropout_drops_p_and_keeps_the_mean(dtype):
    """The fast CPU paths: a fraction p of zeros, survivors scaled by 1/(1-p') for p rounded to 2^-16
    (in bf16 as exactly as x * scale rounds), the gradient through the same mask, the mask from the seed."""

    scale = MASK_LEVELS / (MASK_LEVELS - round(0.1 * MASK_LEVELS))
    assert abs(scale - 1 / 0.9) < 1e-4
    torch.manual_seed(0)
    x = torch.full((400, 500), 0.5, dtype=dtype, requires_grad=True)
    y = FastDropout(0.1).train()(x)
    dropped = (y == 0).float().mean().item()
    assert abs(dropped - 0.1) < 0.005
    assert torch.equal(y[y != 0], torch.full_like(y[y != 0], 0.5) * scale)
    assert y.dtype == dtype and abs(y.float().mean().item() - 0.5) < 0.005
    y.sum().backward()
    assert torch.equal(x.grad == 0, y == 0)
    torch.manual_seed(0)
    assert torch.equal(FastDropout(0.1).train()(x), y)


def test_packed_weights_give_the_same_results_and_follow_weight_changes(monkeypatch):
    """swap_linears(pack=True) (nmt translate's fp32 CPU model): every CPULinear and the output projection read a
    oneDNN-packed copy of their weight, with the logits and translations of the plain model; a weight
    changed in place is re-packed, never computed stale; with gradients the plain weight is used."""

    if K._ONEDNN_PACK is None:
        pytest.skip("this torch build has no oneDNN weight packing")
    monkeypatch.setattr(K, "ONEDNN_MIN_MACS", 0)  # float32 products this small go to MKL
    monkeypatch.setattr(K, "MKL_MAX_WEIGHT", 0)  # and so do weights this small
    model, packed = make_model(pre_norm=True), make_model(pre_norm=True)
    swap_linears(packed, pack=True)
    layers = [m for m in packed.modules() if isinstance(m, CPULinear)]
    assert len(layers) == 2 * 4 + 2 * 7 + 1 and all(m.packed is not None for m in layers)
    assert packed.output.weight is packed.output_weight
    calls = []
    real = K._ONEDNN_LINEAR
    monkeypatch.setattr(K, "_ONEDNN_LINEAR", lambda x, w, *a: calls.append(w.is_mkldnn) or real(x, w, *a))
    with torch.no_grad():
        logits = packed(SRC, TGT)
        assert calls and all(calls)  # every product, however small, through a packed weight
        torch.testing.assert_close(logits, model(SRC, TGT), atol=1e-5, rtol=0)
        settings, ids = SearchSettings(beam=3, max_len_b=6), SpecialIds(pad=PAD, unk=1, bos=BOS, eos=EOS)
        tokens = [[h[0].tokens for h in search.run(m, SRC, settings, ids)] for m in (packed, model)]
        assert tokens[0] == tokens[1]
        for m in (packed, model):
            m.decoder_layers[0].ffn.w1.weight.mul_(-1.0)
        torch.testing.assert_close(packed(SRC, TGT), model(SRC, TGT), atol=1e-5, rtol=0)
    x = torch.randn(3, 32, requires_grad=True)
    layer = packed.decoder_layers[0].ffn.w1
    layer(x).sum().backward()
    assert layer.weight.grad is not None and x.grad is not None


def test_packed_bf16_model_matches_the_plain_bf16_model():
    """A bf16 model (nmt translate --dtype bf16 on CPU) computes with packed bf16 weights at every size."""

    if not K.onednn_bf16():
        pytest.skip("oneDNN has no bf16 kernels on this CPU (needs AVX512 BW/VL/DQ or AVX-NE-CONVERT)")
    model, packed = make_model(pre_norm=True).bfloat16(), swap_linears(make_model(pre_norm=True).bfloat16(), pack=True)
    assert packed.output.packed is not None and packed.output.packed.dtype == torch.bfloat16
    with torch.no_grad():
        torch.testing.assert_close(packed(SRC, TGT).float(), model(SRC, TGT).float(), atol=0.05, rtol=0.02)


def test_a_bf16_model_where_onednn_has_no_bf16_keeps_plain_weights(monkeypatch):
    """On a CPU without oneDNN's bf16 kernels (AVX2 only), packing a bf16 weight would raise: the model keeps
    its plain weights and computes with F.linear instead."""
    K.onednn_bf16.cache_clear()
    monkeypatch.setattr(K, "_ONEDNN_PACK", lambda w: (_ for _ in ()).throw(RuntimeError("bf16 path needs avx512bw")))
    try:
        assert not K.onednn_bf16()
        assert K.pack_weight(torch.zeros(4, 4, dtype=torch.bfloat16)) is None
        model, plain = make_model().bfloat16(), swap_linears(make_model().bfloat16(), pack=True)
        assert plain.output.packed is None
        with torch.no_grad():
            torch.testing.assert_close(plain(SRC, TGT), model(SRC, TGT), atol=0, rtol=0)
    finally:
        K.onednn_bf16.cache_clear()


def test_bf16_attention_over_short_sequences_is_written_out_and_agrees_with_sdpa(monkeypatch):
    """On CPU in bf16, attention over <= WRITTEN_OUT_MAX_KEYS keys skips SDPA (4x slower there, forward +
    backward); float32 and longer sequences keep it. Both ways give the same output and gradients."""

    torch.manual_seed(0)
    attn = MultiHeadAttention(32, 4, attention_dropout=0.0)
    x = torch.randn(3, 7, 32)
    mask = torch.ones(3, 1, 1, 7, dtype=torch.bool)
    mask[0, ..., 5:] = False

    def run() -> tuple[Tensor, Tensor]:
        attn.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out, _ = attn(x, mask=mask)
        out.float().square().sum().backward()
        return out.float(), attn.qkv_proj.weight.grad.clone()

    sdpa = F.scaled_dot_product_attention
    calls = []
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or sdpa(*a, **k))
    explicit_out, explicit_grad = run()
    assert calls == []
    monkeypatch.setattr(K, "WRITTEN_OUT_MAX_KEYS", 0)
    sdpa_out, sdpa_grad = run()
    assert calls == [1]
    assert (explicit_out - sdpa_out).abs().max() < 0.02
    assert torch.allclose(explicit_grad, sdpa_grad, rtol=0.05, atol=0.05 * sdpa_grad.abs().max().item())
    monkeypatch.setattr(K, "WRITTEN_OUT_MAX_KEYS", 128)
    q, long = torch.randn(1, 4, 7, 8), torch.randn(1, 4, 129, 8)
    assert K.written_out_pays(q.bfloat16(), q.bfloat16(), decoding_step=False)
    assert not K.written_out_pays(q, q, decoding_step=False)  # float32: SDPA
    assert not K.written_out_pays(q.bfloat16(), long.bfloat16(), decoding_step=False)  # 129 keys: SDPA


def test_keep_mask_is_uniform_over_its_16_bit_levels():
    """Each element is dropped with probability dropped / 2^16, independently of its position in the
    64-bit draw it was cut from (a biased quarter would show at one of the four offsets)."""

    torch.manual_seed(0)
    for dropped in (1, MASK_LEVELS // 10, MASK_LEVELS // 2, MASK_LEVELS - 1):
        keep = keep_mask(torch.Size([250_001, 4]), dropped)
        rate = 1 - keep.float().mean(dim=0)  # per offset within a draw
        expected = dropped / MASK_LEVELS
        assert (rate - expected).abs().max() < 5 * math.sqrt(expected * (1 - expected) / 250_001) + 1e-5, rate
    assert keep_mask(torch.Size([3, 5]), 0).all()  # 15 of the 16 levels of 4 draws


def test_fast_linear_equals_f_linear_and_falls_back(monkeypatch):
    """Linear layers on CPU in float32 go through oneDNN for products of at least ONEDNN_MIN_MACS multiply-adds,
    forward and backward: the same numbers as F.linear; F.linear below the size, under autocast, without oneDNN,
    and in inference for a weight of at most MKL_MAX_WEIGHT elements (with gradients, oneDNN)."""

    g = torch.Generator().manual_seed(0)
    w, b = torch.randn(640, 256, generator=g), torch.randn(640, generator=g)
    big, small = torch.randn(3, 8, 256, generator=g), torch.randn(2, 256, generator=g)
    assert big.numel() * 640 >= K.ONEDNN_MIN_MACS > small.numel() * 640 and w.numel() > K.MKL_MAX_WEIGHT
    calls = []
    onednn = K._ONEDNN_LINEAR
    if onednn is not None:
        monkeypatch.setattr(K, "_ONEDNN_LINEAR", lambda *args: calls.append(1) or onednn(*args))
    with torch.no_grad():
        for x in (big, small):
            for bias in (b, None):
                got, want = K.fast_linear(x, w, bias), F.linear(x, w, bias)
                torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-5)
    assert len(calls) == (2 if onednn is not None else 0)  # the big product only, with and without bias
    # training: the gradients of x, W and b through oneDNN's products equal F.linear's
    grads = []
    for linear in (K.fast_linear, F.linear):
        x, w1, b1 = (t.clone().requires_grad_() for t in (big, w, b))
        (linear(x, w1, b1) * torch.linspace(-1, 1, 640)).sum().backward()
        grads.append((x.grad, w1.grad, b1.grad))
    for got, want in zip(*grads, strict=True):
        torch.testing.assert_close(got, want, atol=1e-3, rtol=1e-4)
    assert len(calls) == (5 if onednn is not None else 0)  # forward, dx, dW
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast: F.linear, which casts
        assert K.fast_linear(big, w, b).dtype == torch.bfloat16
    # a small weight (the tiny model's layers): MKL in inference, oneDNN's products with gradients
    small_w, wide = w[:, :128].contiguous(), torch.randn(64, 128, generator=g)
    assert small_w.numel() <= K.MKL_MAX_WEIGHT and wide.numel() * 640 >= K.ONEDNN_MIN_MACS
    with torch.no_grad():
        assert torch.equal(K.fast_linear(wide, small_w, b), F.linear(wide, small_w, b))
    assert len(calls) == (5 if onednn is not None else 0)
    K.fast_linear(wide.requires_grad_(), small_w, b).sum().backward()
    assert len(calls) == (7 if onednn is not None else 0)  # forward and dx (dW not wanted: w has no grad)
    monkeypatch.setattr(K, "_ONEDNN_LINEAR", None)
    with torch.no_grad():
        assert torch.equal(K.fast_linear(big, w, b), F.linear(big, w, b))


def test_swap_linears_keeps_the_weights_and_the_results(monkeypatch):
    """nmt translate's float32 CPU model: every nn.Linear replaced by a CPULinear over the same parameters
    (same state dict, same tensors), the same logits and translations (every product through oneDNN here)."""

    monkeypatch.setattr(K, "ONEDNN_MIN_MACS", 0)
    monkeypatch.setattr(K, "MKL_MAX_WEIGHT", 0)

    model, fast = make_model(pre_norm=True), make_model(pre_norm=True)
    before = {k: v.clone() for k, v in fast.state_dict().items()}
    swap_linears(fast)
    assert not any(type(m) is torch.nn.Linear for m in fast.modules())
    # 2 encoder layers x (qkv, out, w1, w2) + 2 decoder layers x (qkv, out, q, kv, out, w1, w2) + the output
    # projection (a Linear over the tied embedding since the model is plain PyTorch; before, a hook in the model)
    assert sum(isinstance(m, CPULinear) for m in fast.modules()) == 2 * 4 + 2 * 7 + 1
    assert fast.state_dict().keys() == before.keys()
    assert all(torch.equal(fast.state_dict()[k], v) for k, v in before.items())
    with torch.no_grad():
        torch.testing.assert_close(fast(SRC, TGT), model(SRC, TGT), atol=1e-5, rtol=0)
        settings, ids = SearchSettings(beam=3, max_len_b=6), SpecialIds(pad=PAD, unk=1, bos=BOS, eos=EOS)
        tokens = [[h[0].tokens for h in search.run(m, SRC, settings, ids)] for m in (fast, model)]
        assert tokens[0] == tokens[1]


@pytest.mark.parametrize("vocab", [8000, 8000 + 37, 300])
@pytest.mark.parametrize("beams", [1, 4])
def test_top_k_beams_equals_torch_topk(vocab, beams):
    """The grouped top-k (a max per group of 64 plus the row's score, the sentence's best groups, then an exact
    top-k over their entries) gives the flat torch.topk's values and indices over each sentence's beams: rows with
    -inf entries, a row at its length limit (one finite entry), a dead row (score -inf), the k best in one group,
    the best in a row's tail that fills no group (8,037), and a vocabulary too small to group (300)."""
    torch.manual_seed(0)
    x = torch.randn(12 * beams, vocab).log_softmax(dim=-1)
    scores = -torch.rand(12 * beams) * 3
    x[:, [0, 2]] = float("-inf")
    x[1, :] = float("-inf")
    x[1, 3] = 0.0  # a row at its length limit: one finite entry
    x[2, 128:138] = torch.arange(10.0, 20.0)  # all ten best in one group
    x[3, -5:] = torch.arange(5.0, 10.0)  # the best in the tail
    scores[5] = float("-inf")  # a row of a sentence whose search has ended
    flat = (x + scores[:, None]).view(12, beams * vocab)
    for k in (1, 2, 8, 10):
        values, index = K.top_k_beams(x, scores, beams, k)
        expected = flat.topk(k, dim=1)
        assert torch.equal(values, expected.values)
        finite = values.isfinite()  # among -inf ties the index is free
        assert torch.equal(index[finite], expected.indices[finite])
        assert torch.equal(flat.gather(1, index), values)
    if beams == 1:
        assert set(K.top_k_beams(x, scores, 1, 10)[1][2].tolist()) == set(range(128, 138))
