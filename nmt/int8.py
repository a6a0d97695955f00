"""int8 inference on a CPU: every Linear layer with int8 weights, one scale per output channel, as CTranslate2
quantizes. `to_int8` for `--quantize int8` (eager), `to_int8_weights` for a compiled search (`--compile --quantize
int8`, nmt.search.compiled); nmt.train.fakequant rounds as these do, for int8-aware training. Imports nothing from nmt.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from typing import Any

import torch
from torch import Tensor, nn


def to_int8(model: nn.Module) -> nn.Module:
    """Dynamic int8 quantization of every nn.Linear: weights int8 with a scale per output channel (as CTranslate2
    quantizes; one scale per matrix lost more BLEU, `python bench/precision.py`), activations quantized per call.
    Where fbgemm_int8() holds, each layer becomes an FbgemmInt8Linear, elsewhere PyTorch's quantize_dynamic's.
    A Linear subclass (a tied output projection: the embedding matrix) is first replaced by a plain nn.Linear copy,
    as HF's lm_head and CTranslate2's output layer are quantized; with a large vocabulary it is most of a decoding
    step's work."""
    _untie_linears(model)
    if fbgemm_int8():
        _swap_plain_linears(model, FbgemmInt8Linear)
        return model
    quantization = getattr(torch.ao, "quantization", None)
    quantize_dynamic = getattr(quantization, "quantize_dynamic", None)
    if quantize_dynamic is None:
        raise RuntimeError("int8 quantization needs torch.ao.quantization, which this torch build lacks")
    with warnings.catch_warnings():  # torch marks eager quantization deprecated in favour of torchao
        warnings.simplefilter("ignore")
        return quantize_dynamic(model, {nn.Linear: quantization.per_channel_dynamic_qconfig}, dtype=torch.qint8)


INT8_EPS = torch.finfo(torch.float32).eps  # the smallest scale (torch's observers'): an all-zero row stays finite
INT8_WEIGHT_RANGE = (-128, 127)  # qint8, zero point 0 (per_channel_symmetric)


def int8_weight_scales(weight: Tensor) -> Tensor:
    """One scale per output channel (row) of a weight [N, K]: its largest magnitude / 127.5, symmetric int8
    (INT8_WEIGHT_RANGE), as torch's PerChannelMinMaxObserver computes it for qint8 (nmt.train.fakequant rounds the
    same way)."""
    low, high = INT8_WEIGHT_RANGE
    return (weight.detach().abs().amax(dim=1).float() / ((high - low) / 2)).clamp_min(INT8_EPS)


@functools.cache
def fbgemm_int8() -> bool:
    """Whether to_int8 calls fbgemm's int8 product directly (FbgemmInt8Linear): torch still has the operators, and
    the CPU has AVX512-VNNI, whose uint8 x int8 products sum in 32 bits. Without VNNI, fbgemm sums pairs of them
    in 16 bits, which full 8-bit activations can saturate: the reason torch's quantize_dynamic keeps activations
    to 7 bits on x86 (reduce_range), the path taken there."""
    ops = ("fbgemm_pack_quantized_matrix", "fbgemm_linear_int8_weight_fp32_activation")
    if not all(hasattr(torch, op) for op in ops) or "fbgemm" not in torch.backends.quantized.supported_engines:
        return False
    return "avx512_vnni" in cpu_flags()


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as Linux lists them (/proc/cpuinfo); empty elsewhere."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def int8_activation_levels() -> int:
    """The levels an int8 layer rounds its input to (asymmetric, one scale per call, over the input's range and 0):
    256 with fbgemm's own product (FbgemmInt8Linear), 128 with quantize_dynamic's 7 bits."""
    return 256 if fbgemm_int8() else 128


class FbgemmInt8Linear(nn.Module):
    """An nn.Linear computed by fbgemm's int8 product, called as the aten operator
    `fbgemm_linear_int8_weight_fp32_activation` (fbgemm_int8()): the weight int8 with a scale per output channel,
    the input rounded per call to uint8 over its own range (one scale for all of its rows), the output and bias
    float32. quantize_dynamic's quantized::linear_dynamic rounds the input to 7 bits and spends more around the
    product (`python bench/precision.py --modes fp32,int8,int8-dynamic` and `bench/ab.py` over `bench/translate.py
    --dtype int8` compare them). The operator takes one weight scale, so it computes with
    scale 1 and the bias divided by each row's scale, and the output is multiplied by the scales afterwards. Its
    packed weight is an opaque handle to fbgemm's memory: never copied (a copy packs again)."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        w = linear.weight.detach().float()
        scale = int8_weight_scales(w)
        bias = torch.zeros(w.size(0)) if linear.bias is None else linear.bias.detach().float()
        # times the inverse, as torch's quantize_per_channel rounds (and fakequant's model of it)
        q = (w * (1.0 / scale)[:, None]).round().clamp(*INT8_WEIGHT_RANGE)
        self.register_buffer("weight", q.to(torch.int8))
        self.register_buffer("scale", scale)
        self.register_buffer("scaled_bias", bias / scale)
        self.register_buffer("column_sums", self.weight.sum(dim=1, dtype=torch.int32))  # fbgemm's col_offsets
        self.packed = self._pack()
        self.slot = -1  # its place among the model's (fbgemm_layers): that of its packed weight in a program's inputs

    def _pack(self) -> Tensor:
        with warnings.catch_warnings():  # torch marks these operators deprecated; the first call would say so
            warnings.simplefilter("ignore")
            packed = torch.fbgemm_pack_quantized_matrix(self.weight)
            torch.fbgemm_linear_int8_weight_fp32_activation(torch.zeros(1, self.weight.size(1)), self.weight, packed,
                                                            self.column_sums, 1.0, 0, self.scaled_bias)
        return packed

    def forward(self, x: Tensor) -> Tensor:
        handles = _EXPORTED_HANDLES.get()
        if handles is not None:  # being exported: the packed weight is an input of the program (packed_as_inputs)
            return torch.ops.nmt.fbgemm_int8_linear(x.float(), self.weight, handles[self.slot], self.column_sums,
                                                    self.scaled_bias, self.scale)
        return _fbgemm_int8_linear(x.float(), self.weight, self.packed, self.column_sums, self.scaled_bias, self.scale)

    def __getstate__(self) -> dict[str, Any]:  # copy.deepcopy, pickle: the handle's bytes would point at freed memory
        state = self.__dict__.copy()
        state["packed"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self.packed = self._pack()


def _fbgemm_int8_linear(x: Tensor, weight: Tensor, packed: Tensor, column_sums: Tensor, scaled_bias: Tensor,
                        scale: Tensor) -> Tensor:
    # torch's deprecation warning, said once a process, was said (and silenced) by FbgemmInt8Linear._pack
    y = torch.fbgemm_linear_int8_weight_fp32_activation(x, weight, packed, column_sums, 1.0, 0, scaled_bias)
    return y.mul_(scale)


# FbgemmInt8Linear's product as an operator, nmt::fbgemm_int8_linear, which torch.export captures (fbgemm's own has
# no shape function) and an AOTInductor package calls back (nmt.search.compiled: `--compile --quantize int8`), the
# packed weight one of the package's inputs: a handle to this process's memory, which its constants cannot hold.
# Defined with torch.library.Library rather than torch.library.custom_op, whose Python wrapping costs more a call
# (a base model's step makes 37).
_LIBRARY = torch.library.Library("nmt", "FRAGMENT")
_LIBRARY.define("fbgemm_int8_linear(Tensor x, Tensor weight, Tensor packed, Tensor column_sums, Tensor scaled_bias, "
                "Tensor scale) -> Tensor")
_LIBRARY.impl("fbgemm_int8_linear", _fbgemm_int8_linear, "CPU")


@torch.library.register_fake("nmt::fbgemm_int8_linear", lib=_LIBRARY)
def _(x: Tensor, weight: Tensor, packed: Tensor, column_sums: Tensor, scaled_bias: Tensor, scale: Tensor) -> Tensor:
    return x.new_empty(*x.shape[:-1], weight.size(0))


# while a program is exported (packed_as_inputs): the packed weights that are its inputs, by FbgemmInt8Linear.slot
_EXPORTED_HANDLES: ContextVar[Sequence[Tensor] | None] = ContextVar("nmt_int8_handles", default=None)


def fbgemm_layers(model: nn.Module) -> list[FbgemmInt8Linear]:
    """The model's FbgemmInt8Linear layers, each told its place in this list (slot): that of its packed weight in
    the inputs of a program exported from the model (torch.export works on copies of the layers, which keep it)."""
    layers = [m for m in model.modules() if isinstance(m, FbgemmInt8Linear)]
    for slot, layer in enumerate(layers):
        layer.slot = slot
    return layers


@contextlib.contextmanager
def packed_as_inputs(handles: Sequence[Tensor]) -> Iterator[None]:
    """Within: the FbgemmInt8Linear layers compute through nmt::fbgemm_int8_linear, `handles` (a traced program's
    inputs, in the order of fbgemm_layers) their packed weights, for torch.export to capture."""
    token = _EXPORTED_HANDLES.set(handles)
    try:
        yield
    finally:
        _EXPORTED_HANDLES.reset(token)


class Int8WeightLinear(nn.Module):
    """An nn.Linear with its weight stored in int8, one scale per output channel (as to_int8 and CTranslate2
    quantize weights): y = x (scale * W_int8)^T + b by aten._weight_int8pack_mm, its input rounded to bf16 (the
    operator's fast CPU kernel takes bf16; float32 input runs a scalar loop ~15x slower), the output and bias float32.
    A decoding step at a few rows reads its weights from memory, and int8 reads a quarter of float32's bytes;
    a plain aten operator, which torch.export captures and Inductor compiles: `--compile --quantize int8`'s layer
    where fbgemm_int8() does not hold (to_int8_weights)."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        w = linear.weight.detach().float()
        scale = w.abs().amax(dim=1).clamp(min=1e-12) / 127  # [N]: the largest weight of a row maps to 127
        self.register_buffer("weight", (w / scale[:, None]).round().clamp(-127, 127).to(torch.int8))
        self.register_buffer("scale", scale)
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().float().clone())

    def forward(self, x: Tensor) -> Tensor:
        x16 = x.reshape(-1, x.size(-1)).to(torch.bfloat16)
        y = torch.ops.aten._weight_int8pack_mm(x16, self.weight, self.scale.to(torch.bfloat16)).float()
        y = y.view(*x.shape[:-1], y.size(-1))
        return y if self.bias is None else y + self.bias


def to_int8_weights(model: nn.Module) -> nn.Module:
    """`model` (float32) with every nn.Linear, a tied output projection included (untied first, as in to_int8),
    replaced in place by int8 layers that a compiled search exports: FbgemmInt8Linear where fbgemm_int8() holds (the
    product eager `--quantize int8` computes, exported as nmt::fbgemm_int8_linear), else Int8WeightLinear."""
    _untie_linears(model)
    _swap_plain_linears(model, FbgemmInt8Linear if fbgemm_int8() else Int8WeightLinear)
    return model


def _swap_plain_linears(model: nn.Module, layer: type[nn.Module]) -> None:
    for module in list(model.modules()):
        for name, child in module.named_children():
            if type(child) is nn.Linear:
                setattr(module, name, layer(child))


def _untie_linears(model: nn.Module) -> None:
    for name, child in model.named_children():
        if isinstance(child, nn.Linear) and type(child) is not nn.Linear:
            plain = nn.Linear(child.in_features, child.out_features, bias=child.bias is not None,
                              dtype=child.weight.dtype, device=child.weight.device)
            with torch.no_grad():
                plain.weight.copy_(child.weight)
                if child.bias is not None:
                    plain.bias.copy_(child.bias)
            setattr(model, name, plain)
        else:
            _untie_linears(child)
