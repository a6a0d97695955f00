"""nmt.precision: one policy for training, translation and serving (`choose`, `for_inference`), and
`prepare`, which puts a model in the form that computes in it (CPU kernels, packed weights, int8)."""

from __future__ import annotations

import pytest
import torch

from nmt import int8, precision
from nmt.errors import NmtError
from nmt.kernels import CPULinear, FastDropout
from nmt.precision import Precision, choose, cpu_native_bf16, for_inference, prepare
from tests.helpers.modeling import SRC, TGT, make_model

CPU = torch.device("cpu")


def test_amp_auto_uses_fp16_on_gpus_that_only_emulate_bf16(monkeypatch):
    gpu = torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)  # as on a V100
    monkeypatch.setattr(torch.version, "hip", None)
    for capability, expected in (((7, 0), torch.float16), ((7, 5), torch.float16), ((8, 0), torch.bfloat16),
                                 ((9, 0), torch.bfloat16)):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None, c=capability: c)
        assert choose("auto", gpu, 512, training=True).autocast_dtype == expected, capability


def test_amp_auto_on_cpu_is_bf16_only_where_it_is_native_and_pays(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    for native in (False, True):
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda n=native: n, raising=False)
        assert cpu_native_bf16() is native
        assert choose("auto", cpu, 512, training=True).autocast_dtype == (torch.bfloat16 if native else None)
        assert choose("auto", cpu, 128, training=True).autocast_dtype is None  # too narrow to gain from bf16
        assert choose("bf16", cpu, 128, training=True).autocast_dtype == torch.bfloat16
        assert choose("none", cpu, 512, training=True).autocast_dtype is None
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    assert choose("auto", cpu, 512, training=True).autocast_dtype == torch.bfloat16  # AMX counts too




def test_dtype_auto_is_bf16_only_where_it_pays(monkeypatch):
    """auto = bf16 on CPUs with native bf16 for models of d_model >= 256 (the rule training uses), else fp32."""
    cpu = torch.device("cpu")
    for native, wide, expected in ((True, 512, "bf16"), (True, 128, "fp32"), (False, 512, "fp32")):
        monkeypatch.setattr(precision, "cpu_native_bf16", lambda n=native: n)
        assert for_inference("auto", None, cpu, wide).float_name == expected
        assert for_inference("auto", "int8", cpu, wide).float_name == "fp32"  # int8 quantization works on fp32 weights
    for capability, expected in (((9, 0), "bf16"), ((8, 0), "bf16"), ((7, 5), "fp16")):  # H100, A100, T4
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None, c=capability: c)
        assert for_inference("auto", None, torch.device("cuda", 0), 512).float_name == expected, capability


def test_one_line_errors_name_the_setting():
    cases = [
        (lambda: choose("fp16", CPU, 512, training=True, option="train.amp"),
         "train.amp=fp16 needs a CUDA device (use bf16 or none on CPU)"),
        (lambda: for_inference("fp16", None, CPU, 512), "--dtype fp16 needs a CUDA device (use bf16 or fp32 on CPU)"),
        (lambda: for_inference("fp64", None, CPU, 512), "--dtype must be one of auto, fp32, bf16, fp16, got 'fp64'"),
        (lambda: for_inference("auto", "int4", CPU, 512), "--quantize supports 'int8', got 'int4'"),
        (lambda: for_inference("bf16", "int8", CPU, 512), "--quantize int8 computes in fp32: drop --dtype bf16"),
        (lambda: choose("int8", CPU, 512, training=True, option="train.amp"), "train.amp must be one of"),
    ]
    for call, message in cases:
        with pytest.raises(NmtError) as e:
            call()
        assert str(e.value).startswith(message) and "\n" not in str(e.value)
    monkeypatch_free_gpu = torch.device("cuda", 0)
    with pytest.raises(NmtError, match=r"^--quantize int8 runs on CPU only"):
        for_inference("auto", "int8", monkeypatch_free_gpu, 512)


def test_precision_names_dtypes_and_descriptions():
    assert [Precision(n).dtype for n in ("fp32", "bf16", "fp16", "int8")] == [
        torch.float32, torch.bfloat16, torch.float16, torch.float32]
    assert Precision("int8").float_name == "fp32" and Precision("bf16").float_name == "bf16"
    assert Precision("fp16").grad_scaler and not Precision("bf16").grad_scaler
    assert Precision("int8").autocast_dtype is None and Precision("bf16").autocast_dtype == torch.bfloat16
    assert str(Precision("int8")) == "fp32 with int8 weights"
    assert Precision("fp16").describe(training=True) == "fp16 autocast + GradScaler"


def test_prepare_for_training_on_cpu_swaps_kernels_and_keeps_the_parameters():
    """Training on CPU: every Linear (the tied output projection too) computes with fast_linear over the same
    Parameters, every dropout draws cheap masks; names, tensors and results in eval are those of the model."""
    model, plain = make_model(pre_norm=True, dropout=0.1), make_model(pre_norm=True, dropout=0.1)
    params = dict(model.named_parameters())
    prepared = prepare(model, CPU, Precision("fp32"), training=True)
    assert prepared is model and model.training is False  # prepare does not change the mode when training
    assert not any(type(m) in (torch.nn.Linear, torch.nn.Dropout) for m in model.modules())
    assert sum(isinstance(m, FastDropout) for m in model.modules()) == 1 + 2 * 2 + 2 * 3 + 4 * 1
    assert dict(model.named_parameters()) == params  # the same Parameter objects: the optimizer sees no change
    assert model.output.weight is model.tgt_embed.weight
    assert model.state_dict().keys() == plain.state_dict().keys()
    with torch.no_grad():
        torch.testing.assert_close(model(SRC, TGT), plain(SRC, TGT), atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", ["fp32", "bf16", "int8"])
def test_prepare_for_inference(name):
    """Inference: eval mode, weights in the precision's dtype; fp32/bf16 Linear layers prepacked for oneDNN;
    int8 quantizes every Linear, the output projection as a copy (the embedding itself stays float)."""
    model = make_model(pre_norm=True, output_bias=True).train()
    model = prepare(model, CPU, Precision(name), training=False)
    assert not model.training
    assert model.tgt_embed.weight.dtype == Precision(name).dtype
    if name == "int8":
        quantized = int8.FbgemmInt8Linear if int8.fbgemm_int8() else torch.ao.nn.quantized.dynamic.Linear
        assert isinstance(model.output, quantized) and not any(type(m) is torch.nn.Linear for m in model.modules())
    else:
        assert isinstance(model.output, CPULinear) and model.output.weight is model.tgt_embed.weight
        assert "output.bias" in model.state_dict()  # the fixed bias stays a buffer of the swapped projection
    with torch.no_grad():
        assert torch.isfinite(model(SRC, TGT).float()).all()
