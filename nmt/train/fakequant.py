"""Int8-aware training: the model's Linear layers computed as `nmt translate --quantize int8` will compute them, so
that training learns weights that lose little when they are rounded to int8 (quantization-aware training).

At inference nmt.int8.to_int8 quantizes every nn.Linear (the tied output projection too): weights int8, one scale per
output channel (symmetric: scale = max|w| / 127.5, values -128..127); activations quantized per call from the
batch's own min and max (asymmetric: 256 levels with fbgemm's product on a CPU with VNNI, 128 with PyTorch's
dynamic quantization elsewhere, `nmt.int8.int8_activation_levels`). `fake_quantize` swaps each such layer for a
FakeQuantLinear that rounds its weight and its input the same way but keeps them float: the forward pass sees int8's
rounding errors, and the backward pass is the straight-through estimator (the rounding's gradient taken as 1, 0
outside the int8 range).

Why torch's own `torch.fake_quantize_per_channel_affine` / `fake_quantize_per_tensor_affine` and not torchao's QAT:
torchao is not a dependency of nmt, and these two operators are in every torch build with the straight-through
gradient built in; what is left to write is the scales, a few lines that match the inference quantizer exactly
(tests/distill/test_int8_finetune.py compares the forward pass with the int8 model's).

A FakeQuantLinear holds the same `weight` and `bias` tensors under the same names as the layer it replaces, so the
model's state dict, and every checkpoint the training loop writes, is in the normal format: `nmt translate
--quantize int8` and `nmt export --to ct2 --quantization int8` read it unchanged. `strip_fake_quant` puts the
original layers back (the same tensors, trained).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from nmt.int8 import INT8_EPS, INT8_WEIGHT_RANGE, int8_activation_levels, int8_weight_scales
from nmt.kernels import CPULinear
from nmt.model import Transformer


def fake_quantize_weight(weight: Tensor) -> Tensor:
    """`weight` [out, in] rounded to its int8 grid, still float; gradient: straight through (0 where clamped:
    at most a row's largest positive weight, which rounds to 128)."""
    scales = int8_weight_scales(weight)
    zeros = torch.zeros_like(scales, dtype=torch.int32)
    return torch.fake_quantize_per_channel_affine(weight, scales, zeros, 0, *INT8_WEIGHT_RANGE)


def fake_quantize_activation(x: Tensor) -> Tensor:
    """`x` rounded to the grid int8 inference picks for this call: the range spans the tensor's min and max and
    always 0 (ChooseQuantizationParams), one scale for the whole tensor (the batch)."""
    low, high = 0, int8_activation_levels() - 1
    x32 = x.float()  # int8 inference quantizes fp32 activations (and the operator wants them)
    lo = x32.detach().amin().clamp(max=0)
    hi = x32.detach().amax().clamp(min=0)
    scale = ((hi - lo) / (high - low)).clamp_min(INT8_EPS).reshape(1)
    zero = (low - lo / scale).round().clamp(low, high).to(torch.int32).reshape(1)
    return torch.fake_quantize_per_tensor_affine(x32, scale, zero, low, high).to(x.dtype)


class FakeQuantLinear(nn.Module):
    """A Linear layer whose weight and input are rounded as int8 inference rounds them. `weight` and `bias` are the
    replaced layer's own tensors (a bias that is a buffer, a fixed output bias, stays one), so the state dict keeps
    its keys. `quantize_input=False` for the output projection: its input is rounded by a hook on the decoder's last
    norm (see `fake_quantize`), which the training loss reads too."""

    def __init__(self, original: nn.Module, quantize_input: bool = True):
        super().__init__()
        self.weight = original.weight
        bias = original.bias
        if bias is None or isinstance(bias, nn.Parameter):
            self.bias = bias
        else:
            self.register_buffer("bias", bias)
        self.quantize_input = quantize_input
        self.input_hook: RemovableHandle | None = None  # the output projection's hook on decoder_norm
        self.train(original.training)
        # kept out of the module tree (no state dict entries, no second copy of the parameters): strip puts it back
        self.__dict__["original"] = original

    @property
    def computed_weight(self) -> Tensor:
        """The weight as this layer computes with it (Transformer.output_weight gives the loss this one)."""
        return fake_quantize_weight(self.weight)

    def forward(self, x: Tensor) -> Tensor:
        if self.quantize_input:
            x = fake_quantize_activation(x)
        # F.linear, not the oneDNN path of the CPULinear it may replace: the rounded weight is a new tensor each step,
        # and F.linear was faster with it (demo-size student, 1 thread: 142-166 vs 165-189 ms an update)
        return F.linear(x, self.computed_weight.to(x.dtype), None if self.bias is None else self.bias.to(x.dtype))

    def restored(self) -> nn.Module:
        """The replaced layer, with this layer's (trained) tensors."""
        original = self.__dict__["original"]
        original.weight, original.bias = self.weight, self.bias
        return original.train(self.training)


def is_linear(module: nn.Module) -> bool:
    """The layers int8 inference quantizes: every nn.Linear (the tied output projection is one), and the CPULinear
    nmt.precision puts in their place for training on a CPU."""
    return isinstance(module, (nn.Linear, CPULinear))


def swap(module: nn.Module) -> None:
    """Every Linear layer under `module` replaced in place by a FakeQuantLinear over the same tensors."""
    for name, child in module.named_children():
        if is_linear(child):
            setattr(module, name, FakeQuantLinear(child))
        elif not isinstance(child, FakeQuantLinear):
            swap(child)


def fake_quantize(model: Transformer) -> Transformer:
    """`model` (in place) computing every Linear layer as int8 inference does, for training. The output projection
    multiplies the decoder's last states by the embedding matrix, and the training loss does that itself
    (nmt.loss.projected_label_smoothed_loss with `model.output_weight`), so its two halves are rounded where both
    paths pass: the weight in `output_weight` (FakeQuantLinear.computed_weight), the states by a hook on
    `decoder_norm`."""
    if isinstance(model.output, FakeQuantLinear):
        return model  # already fake-quantized: a second hook would round the states twice
    output = FakeQuantLinear(model.output, quantize_input=False)
    model.output = output
    swap(model)
    output.input_hook = model.decoder_norm.register_forward_hook(lambda _m, _args, out: fake_quantize_activation(out))
    return model


def strip_fake_quant(model: Transformer) -> Transformer:
    """`model` (in place) with its original Linear layers back (nn.Linear, the tied output projection, or CPULinear),
    holding the trained tensors, and the decoder_norm hook removed: a plain model again."""
    if isinstance(model.output, FakeQuantLinear) and model.output.input_hook is not None:
        model.output.input_hook.remove()
    _restore(model)
    return model


def _restore(module: nn.Module) -> None:
    for name, child in module.named_children():
        if isinstance(child, FakeQuantLinear):
            setattr(module, name, child.restored())
        else:
            _restore(child)


def fake_quantized_layers(model: nn.Module) -> int:
    """How many FakeQuantLinear layers `model` has."""
    return sum(isinstance(m, FakeQuantLinear) for m in model.modules())
