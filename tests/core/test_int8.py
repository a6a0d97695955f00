"""nmt.int8: int8 layers compute what the float32 layer computes, within int8's rounding, with a scale per output
channel; fbgemm's product (FbgemmInt8Linear) is taken where the CPU's VNNI makes it exact, and rounds as
nmt.train.fakequant models it."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nmt import int8, search
from nmt.search import SearchSettings
from nmt.tokenizer import SpecialIds
from tests.helpers.modeling import BOS, EOS, PAD, SRC, make_model

needs_fbgemm = pytest.mark.skipif(not int8.fbgemm_int8(), reason="fbgemm's int8 product is taken with AVX512-VNNI only")


def outlier_linear(n_in: int = 64, n_out: int = 48) -> nn.Linear:
    torch.manual_seed(0)
    linear = nn.Linear(n_in, n_out)
    with torch.no_grad():
        linear.weight[3] *= 100  # one row far larger: its scale is its own, the others keep their precision
    return linear


def test_int8_weights_round_each_row_to_its_own_scale_and_compute_in_float32():
    linear = outlier_linear()
    q = int8.Int8WeightLinear(linear)
    assert q.weight.dtype == torch.int8 and q.weight.abs().amax(dim=1).eq(127).all()
    dequantized = q.weight.float() * q.scale[:, None]
    assert ((dequantized - linear.weight).abs() <= q.scale[:, None] / 2 + 1e-7).all()  # at most half a step off
    assert q.scale[3] > 50 * q.scale[2]
    x = torch.randn(2, 5, 64)
    y = q(x)  # its input and scales rounded to bf16 (8 significant bits): within a percent of float32's product
    assert y.dtype == torch.float32 and y.shape == (2, 5, 48)
    want = F.linear(x, dequantized, linear.bias)
    assert ((y - want).abs() <= 0.01 * F.linear(x.abs(), dequantized.abs()) + 1e-5).all()


@pytest.mark.parametrize("vnni", [True, False])
def test_to_int8_weights_quantizes_every_linear_the_tied_output_projection_too(monkeypatch, vnni):
    """fbgemm's layer where its product is exact (the one eager --quantize int8 computes), else Int8WeightLinear."""
    if vnni and not int8.fbgemm_int8():
        pytest.skip("fbgemm's int8 product is taken with AVX512-VNNI only")
    monkeypatch.setattr(int8, "fbgemm_int8", lambda: vnni)
    model = make_model().eval()
    tied = model.output.weight is model.tgt_embed.weight
    int8.to_int8_weights(model)
    assert not any(isinstance(m, torch.nn.Linear) for m in model.modules())
    layer = int8.FbgemmInt8Linear if vnni else int8.Int8WeightLinear
    assert type(model.output) is layer and tied  # untied first: the embedding stays float32
    assert model.tgt_embed.weight.dtype == torch.float32
    with torch.inference_mode():
        hyps = search.run(model, SRC, SearchSettings(beam=2), SpecialIds(pad=PAD, unk=1, bos=BOS, eos=EOS))
    assert len(hyps) == SRC.size(0) and all(h for h in hyps)


@needs_fbgemm
def test_fbgemm_int8_rounds_weights_per_row_and_inputs_per_call_to_256_levels():
    linear = outlier_linear()
    q = int8.FbgemmInt8Linear(linear)
    assert q.weight.dtype == torch.int8 and q.scale[3] > 50 * q.scale[2]
    assert ((q.weight.float() * q.scale[:, None] - linear.weight).abs() <= q.scale[:, None] / 2 + 1e-7).all()
    x = torch.randn(3, 7, 64)
    y = q(x)
    assert y.dtype == torch.float32 and y.shape == (3, 7, 48)
    # the exact product of the rounded input and weight: the input on 256 levels over its range (and 0)
    lo, hi = x.min().clamp(max=0), x.max().clamp(min=0)
    step = (hi - lo) / 255
    zero = (-lo / step).round()
    x_q = ((x / step).round() + zero).clamp(0, 255).sub(zero).mul(step)
    want = F.linear(x_q, q.weight.float() * q.scale[:, None], linear.bias)
    torch.testing.assert_close(y, want, atol=1e-4, rtol=1e-4)
    # and close to float32's: within a few steps of the input's rounding
    assert (y - linear(x)).abs().max() < 0.02 * linear(x).abs().max()


@needs_fbgemm
def test_fbgemm_int8_copies_pickles_and_a_bias_free_layer_work():
    linear = nn.Linear(32, 16, bias=False)
    q = int8.FbgemmInt8Linear(linear)
    x = torch.randn(4, 32)
    for other in (copy.deepcopy(q), pickle.loads(pickle.dumps(q))):
        assert other.packed is not q.packed  # packed again, never the same handle twice
        assert torch.equal(other(x), q(x))
    del q
    torch.testing.assert_close(other(x), linear(x), atol=0.05, rtol=0.05)


@needs_fbgemm
def test_to_int8_takes_fbgemm_where_it_can_and_translates():
    model = make_model().eval()
    int8.to_int8(model)
    assert isinstance(model.output, int8.FbgemmInt8Linear)
    assert not any(type(m) is nn.Linear for m in model.modules())
    assert int8.int8_activation_levels() == 256
    with torch.inference_mode():
        hyps = search.run(model, SRC, SearchSettings(beam=2), SpecialIds(pad=PAD, unk=1, bos=BOS, eos=EOS))
    assert len(hyps) == SRC.size(0) and all(h for h in hyps)


def test_without_vnni_to_int8_keeps_torchs_7_bit_dynamic_quantization(monkeypatch):
    monkeypatch.setattr(int8, "cpu_flags", lambda: frozenset({"avx2"}))
    int8.fbgemm_int8.cache_clear()
    try:
        assert not int8.fbgemm_int8() and int8.int8_activation_levels() == 128
        model = int8.to_int8(make_model().eval())
        assert not any(isinstance(m, int8.FbgemmInt8Linear) for m in model.modules())
        assert type(model.output).__module__.startswith("torch.ao.nn.quantized.dynamic")
    finally:
        int8.fbgemm_int8.cache_clear()


@needs_fbgemm
def test_fbgemm_layers_export_with_their_packed_weights_as_the_programs_inputs():
    """torch.export captures an FbgemmInt8Linear as nmt::fbgemm_int8_linear, its packed weight (a handle to this
    process's memory) an input of the program, never a constant: the program computes what the layer computes."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 24), nn.ReLU(), nn.Linear(24, 16))
    int8.to_int8_weights(model)
    layers = int8.fbgemm_layers(model)
    assert [layer.slot for layer in layers] == [0, 1] and layers == [model[0], model[2]]

    class Program(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x, *packed):
            with int8.packed_as_inputs(packed):
                return self.model(x)

    x = torch.randn(5, 32)
    packed = tuple(layer.packed for layer in layers)
    program = torch.export.export(Program(), (x, *packed))
    calls = [n.target for n in program.graph.nodes if n.op == "call_function"]
    assert calls.count(torch.ops.nmt.fbgemm_int8_linear.default) == 2
    assert not any(t.dtype == torch.uint8 for t in program.constants.values())  # no handle baked in
    with torch.inference_mode():
        want = model(x)
        assert torch.equal(program.module()(x, *packed), want)
        assert torch.equal(torch.ops.nmt.fbgemm_int8_linear(x, model[0].weight, model[0].packed, model[0].column_sums,
                                                            model[0].scaled_bias, model[0].scale), model[0](x))
