"""The precision policy, one for training, translation, serving and the benches: which number format a
model computes in (`choose`) and the model in that form on its device (`prepare`: dtype, CPU kernels,
int8 weights). What the hardware computes natively is read here too.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch import nn

from nmt import int8, kernels
from nmt.errors import NmtError

NAMES = ("fp32", "bf16", "fp16", "int8")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "int8": torch.float32}


@dataclass(frozen=True)
class Precision:
    """fp32, bf16 or fp16 (training: fp32 weights under autocast; inference: weights in that dtype), or int8
    (inference on CPU: int8 weights, fp32 activations)."""

    name: str

    @property
    def dtype(self) -> torch.dtype:
        """The floating-point dtype of inference weights and activations (int8: fp32 activations)."""
        return DTYPES[self.name]

    @property
    def float_name(self) -> str:
        """The floating-point format weights and activations are in: the name, fp32 for int8."""
        return "fp32" if self.name == "int8" else self.name

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        """Training: the autocast dtype of forward passes, None for full precision."""
        return None if self.name in ("fp32", "int8") else self.dtype

    @property
    def grad_scaler(self) -> bool:
        """Training: fp16 needs a GradScaler (its range is too small for small gradients); bf16 does not."""
        return self.name == "fp16"

    def describe(self, training: bool) -> str:
        """For log lines, e.g. 'bf16 autocast' (training), 'fp32 with int8 weights' (inference)."""
        if training:
            return {"fp32": "fp32", "bf16": "bf16 autocast", "fp16": "fp16 autocast + GradScaler"}[self.name]
        return "fp32 with int8 weights" if self.name == "int8" else self.name

    def __str__(self) -> str:
        return self.describe(training=False)


# ---- what the hardware computes natively -----------------------------------------------------------

CPU_BF16_MIN_D_MODEL = 256  # below, bf16 saves nothing on CPU (`python bench/train.py --dtype bf16`)


def cpu_native_bf16() -> bool:
    """Whether this CPU computes bf16 in hardware (AVX512-BF16 or AMX), as torch's own CPU check reports
    it; elsewhere oneDNN emulates bf16 and it is slower than fp32."""
    checks = (getattr(torch.cpu, "_is_avx512_bf16_supported", None), getattr(torch.cpu, "_is_amx_tile_supported", None))
    return any(check is not None and check() for check in checks)


def cpu_bf16_pays(d_model: int) -> bool:
    """bf16 as the CPU default: native bf16, and a model wide enough for its faster matrix multiplies to
    outweigh the casts around them."""
    return cpu_native_bf16() and d_model >= CPU_BF16_MIN_D_MODEL


def cuda_native_bf16(device: torch.device) -> bool:
    """Whether this GPU computes in bf16 in hardware: compute capability 8.0 (Ampere) or newer on CUDA.
    torch.cuda.is_bf16_supported() also says yes where bf16 is only emulated (V100, T4), and slow."""
    if torch.version.hip:  # ROCm: the GPUs that report bf16 have it
        return torch.cuda.is_bf16_supported()
    return torch.cuda.get_device_capability(device) >= (8, 0)


# ---- the policy ------------------------------------------------------------------------------------


def auto(device: torch.device, d_model: int, training: bool) -> Precision:
    """The default. On a GPU, training and decoding alike: bf16 where native (Ampere and newer), else fp16
    (training with a GradScaler): the tensor cores' formats, as CTranslate2 and fairseq use them. On a CPU:
    bf16 where the CPU has it natively and the model is wide enough for it to pay, else fp32."""
    if device.type == "cuda":
        return Precision("bf16" if cuda_native_bf16(device) else "fp16")
    return Precision("bf16" if device.type == "cpu" and cpu_bf16_pays(d_model) else "fp32")


def choose(requested: str, device: torch.device, d_model: int, *, training: bool,
           option: str = "--dtype") -> Precision:
    """The precision asked for (auto | fp32 | none (= fp32) | bf16 | fp16 | int8), checked against the
    device; `option` names the setting in errors (train.amp, --dtype, --quantize)."""
    name = "fp32" if requested == "none" else requested
    if name == "auto":
        return auto(device, d_model, training)
    if name not in NAMES or (training and name == "int8"):
        allowed = "auto, bf16, fp16, none" if training else f"auto, {', '.join(NAMES[:3])}"
        raise NmtError(f"{option} must be one of {allowed}, got '{requested}'")
    if name == "fp16" and device.type != "cuda":
        setting, alternatives = ("=fp16", "bf16 or none") if training else (" fp16", "bf16 or fp32")
        raise NmtError(f"{option}{setting} needs a CUDA device (use {alternatives} on CPU)")
    if name == "int8" and device.type != "cpu":
        raise NmtError(f"{option} int8 runs on CPU only (use --dtype bf16/fp16 on GPU)")
    return Precision(name)


def for_inference(dtype: str, quantize: str | None, device: torch.device, d_model: int) -> Precision:
    """`nmt translate` / `nmt serve`'s --dtype and --quantize as one Precision."""
    if quantize is None:
        return choose(dtype, device, d_model, training=False, option="--dtype")
    if quantize != "int8":
        raise NmtError(f"--quantize supports 'int8', got '{quantize}'")
    if dtype not in ("auto", "fp32"):
        raise NmtError(f"--quantize int8 computes in fp32: drop --dtype {dtype}")
    return choose("int8", device, d_model, training=False, option="--quantize")


def prepare(model: nn.Module, device: torch.device, precision: Precision, training: bool) -> nn.Module:
    """`model` on `device` in the form that computes in `precision` (in place where it can be; use the
    returned module). Training: fp32 weights (bf16/fp16 come from `autocast`); on CPU, Linear layers
    through oneDNN where faster and cheaper dropout masks (nmt.kernels). Inference: eval mode, weights
    in the precision's dtype; on CPU, Linear layers (the output projection too) through oneDNN with
    prepacked weights, or, for int8, dynamically quantized ones; no dropout modules."""
    if device.type == "cuda":
        use_tf32(training)
    if training:
        model.to(device)
        if device.type == "cpu":
            kernels.swap_dropout(kernels.swap_linears(model))
        return model
    kernels.without_dropout(model.to(device=device, dtype=precision.dtype).eval())
    if precision.name == "int8":
        try:
            return int8.to_int8(model)
        except RuntimeError as e:
            raise NmtError(f"--quantize int8: {e}") from None
    if device.type == "cpu":
        kernels.swap_linears(model, pack=True)
    return model


def use_tf32(enabled: bool) -> None:
    """Training on a GPU: fp32 matrix products on the tensor cores in TF32 (fp32 range, a 10-bit mantissa), as
    most trainers compute the fp32 parts of mixed precision (and fp32 runs); ~8x the fp32 throughput on an
    A100/H100. Off for decoding: `--dtype fp32` there means fp32 (bf16/fp16 are the fast choices). Process-wide:
    torch's own switch, for CUDA matrix products only (CPU products keep their precision). cuDNN's switches are
    left alone: a Transformer has no convolution or RNN, and torch >= 2.9 raises on its legacy cuDNN query (which
    torch.export makes: nmt.search.compiled) once its convolution and RNN switches differ. torch >= 2.9 documents
    per-backend `fp32_precision` and makes mixing it with `allow_tf32` an error; older torch has `allow_tf32`
    alone."""
    if _PER_BACKEND_TF32:
        torch.backends.cuda.matmul.fp32_precision = "tf32" if enabled else "ieee"
    else:
        torch.backends.cuda.matmul.allow_tf32 = enabled


def tf32_enabled() -> bool:
    """Whether CUDA fp32 matrix products run in TF32 (the switch `use_tf32` sets)."""
    if _PER_BACKEND_TF32:
        return torch.backends.cuda.matmul.fp32_precision == "tf32"
    return bool(torch.backends.cuda.matmul.allow_tf32)


_PER_BACKEND_TF32 = hasattr(torch.backends.cuda.matmul, "fp32_precision")


def autocast(device: torch.device, precision: Precision) -> contextlib.AbstractContextManager:
    """Mixed precision for training's forward passes; a no-op for full precision."""
    if precision.autocast_dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=precision.autocast_dtype)


def not_finite_reason(scaler: torch.amp.GradScaler) -> str:
    """Why a non-finite update is skipped; with fp16 the scaler lowers its scale, as its own step would."""
    if not scaler.is_enabled():
        return "non-finite loss/gradient"
    scale = scaler.get_scale()
    scaler.update()  # the overflow unscale_ recorded halves the scale
    return f"non-finite gradient in fp16 (loss scale {scale:g} -> {scaler.get_scale():g})"
