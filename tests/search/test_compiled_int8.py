"""`--compile --quantize int8`: a compiled package over int8 weights (nmt.int8.Int8WeightLinear) computes what the
same int8 weights compute eagerly, and the translator compiles them for --quantize int8. One package, a one-layer
model's encoder (its Linear layers int8 as the step's are; the compiled step itself is test_compiled.py's), in a
module of its own, so that a second test worker compiles it while the first compiles test_compiled.py's."""

from __future__ import annotations

import pytest
import torch

from nmt import int8
from nmt.search import compiled
from nmt.search.compiled import CompiledDecoder
from nmt.search.static import cross_keys_values
from nmt.translation.translator import ModelOptions, Translator
from tests.helpers.modeling import SRC, make_model
from tests.helpers.paths import DEMO_MODEL


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
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
    assert isinstance(model.output, int8.Int8WeightLinear)
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
                  if isinstance(m, int8.Int8WeightLinear))
    assert 0 < weights < compiled.step_bytes(model) < 2 * weights  # int8 weights, float32 scales and biases


def test_the_translator_compiles_int8_weights_for_quantize_int8():
    t = Translator.load(DEMO_MODEL, None, ModelOptions(config_given=False, compile=True, quantize="int8"))
    assert isinstance(t.compiled.model.output, int8.Int8WeightLinear)
    assert not isinstance(t.model.output, int8.Int8WeightLinear)  # batches that run eagerly: dynamic int8


def test_loading_a_package_first_asks_linux_for_the_amx_registers(monkeypatch, tmp_path):
    """A package autotuned to Inductor's AMX micro-kernels (int8 weights on a Sapphire Rapids) died of SIGILL when a
    later process loaded it before anything had asked for the AMX registers: load asks first."""
    asked = []
    monkeypatch.setattr(torch.cpu, "_init_amx", lambda: asked.append(True) or False, raising=False)
    with pytest.raises(Exception):  # noqa: B017 (no package there: either loader's error)
        compiled.load(tmp_path / "missing.pt2")
    assert asked == [True]
