"""`--compile --quantize int8`: a compiled package over int8 layers computes what the same layers compute eagerly,
and the translator compiles them for --quantize int8. Both of nmt.int8.to_int8_weights's layers: fbgemm's product
(FbgemmInt8Linear, with VNNI), which the package calls back with its packed weights as inputs, and aten's int8-weight
product (Int8WeightLinear), which Inductor compiles. A one-layer model's encoder for each (its Linear layers int8 as
the step's are), and with fbgemm a whole beam step too (the fp32 step is test_compiled.py's), in a module of its own,
so that a second test worker compiles them while the first compiles test_compiled.py's."""

from __future__ import annotations

import pytest
import torch

from nmt import int8, search
from nmt.search import SearchSettings, compiled, package_store
from nmt.search.compiled import CompiledDecoder
from nmt.search.static import cross_keys_values
from nmt.translation.translator import ModelOptions, Translator
from tests.helpers.modeling import SRC, make_model
from tests.helpers.paths import DEMO_MODEL
from tests.helpers.tables import IDS

LAYERS = {"fbgemm": int8.FbgemmInt8Linear, "bf16": int8.Int8WeightLinear}


@pytest.fixture(scope="module", params=list(LAYERS))
def decoder(request, tmp_path_factory):
    vnni = request.param == "fbgemm"
    if vnni and not int8.fbgemm_int8():
        pytest.skip("fbgemm's int8 product is taken with AVX512-VNNI only")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(int8, "fbgemm_int8", lambda: vnni)
        model = int8.to_int8_weights(make_model(encoder_layers=1, decoder_layers=1))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(compiled, "AUTOTUNE", False)
        d = CompiledDecoder(model, tmp_path_factory.mktemp("compiled-int8"))
        d.said = []
        d.announce = d.said.append
        with torch.inference_mode():
            d.encode(SRC)
        yield d


def test_int8_weights_compiled_compute_what_they_compute_eagerly(decoder):
    model = decoder.model
    assert type(model.output) in LAYERS.values()
    assert not any(isinstance(m, torch.nn.Linear) for m in model.modules())
    for src in (SRC, SRC[1:, :3]):  # another batch and source length: the same package
        with torch.inference_mode():
            cross_kv, src_pad_mask = decoder.encode(src)
            memory, want_mask = model.encode(src)
            torch.testing.assert_close(cross_kv, cross_keys_values(model, memory), rtol=1e-4, atol=1e-4)
        assert torch.equal(src_pad_mask, want_mask)
    assert [kind for kind, _, _ in decoder.runners] == ["encode"] and len(decoder.said) == 1
    assert [p.name.rsplit("-", 1)[0] for p in decoder.directory.glob("*.pt2")] == ["encode-int8-1t"]  # not fp32's


def test_a_step_over_int8_weights_counts_their_bytes(decoder):
    model = decoder.model
    weights = sum(m.weight.numel() for m in [*model.decoder_layers.modules(), model.output]
                  if type(m) in LAYERS.values())
    assert 0 < weights < compiled.step_bytes(model) < 2 * weights  # int8 weights, float32 scales and biases


def test_a_compiled_beam_step_over_fbgemm_layers_finds_the_eager_hypotheses(decoder):
    """The beam step's package calls fbgemm's product back with the packed weights the decoder passes it: the same
    product as eagerly, so the same hypotheses. Scores agree within int8's rounding only: the product rounds its
    input with one scale over all its rows, and the compiled step's rows (fixed, padded to a bucket) are not the
    eager search's (finished sentences removed)."""
    model = decoder.model
    if not isinstance(model.output, int8.FbgemmInt8Linear):
        pytest.skip("the step over Int8WeightLinear layers compiles as the fp32 one does (test_compiled.py)")
    settings = SearchSettings(beam=2, nbest=2, max_len_a=0.0, max_len_b=6)
    with torch.inference_mode():
        got = search.run(decoder, SRC, settings, IDS)
        want = search.run(model, SRC, settings, IDS)
    assert [[h.tokens for h in hyps] for hyps in got] == [[h.tokens for h in hyps] for hyps in want]
    for g, w in zip(sum(got, []), sum(want, []), strict=True):
        assert (g.score, g.logprob) == pytest.approx((w.score, w.logprob), rel=5e-3)
    assert sorted(kind for kind, _, _ in decoder.runners) == ["beam2-2.3.0", "encode"]


def test_the_translator_compiles_int8_layers_for_quantize_int8():
    t = Translator.load(DEMO_MODEL, None, ModelOptions(config_given=False, compile=True, quantize="int8"))
    layer = int8.FbgemmInt8Linear if int8.fbgemm_int8() else int8.Int8WeightLinear
    assert type(t.compiled.model.output) is layer
    assert not isinstance(t.model.output, int8.Int8WeightLinear)  # batches that run eagerly: to_int8's layers
    # with fbgemm, the eager batches' layers are the compiled ones: the model is held once
    assert (t.compiled.model is t.model) == int8.fbgemm_int8()


def test_loading_a_package_first_asks_linux_for_the_amx_registers(monkeypatch, tmp_path):
    """A package autotuned to Inductor's AMX micro-kernels (int8 weights on a Sapphire Rapids) died of SIGILL when a
    later process loaded it before anything had asked for the AMX registers: load asks first."""
    asked = []
    monkeypatch.setattr(torch.cpu, "_init_amx", lambda: asked.append(True) or False, raising=False)
    with pytest.raises(Exception):  # noqa: B017 (no package there: either loader's error)
        package_store.load(tmp_path / "missing.pt2")
    assert asked == [True]
