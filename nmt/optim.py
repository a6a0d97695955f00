"""Optimisation settings: the learning-rate schedules, Adam, and the mixed-precision dtype."""

from __future__ import annotations

import contextlib
import math
from typing import Any

import torch
from torch import nn

from nmt.config import Config
from nmt.device import cpu_bf16_pays
from nmt.errors import NmtError


def learning_rate(step: int, cfg: Config) -> float:
    """Learning rate for update `step` (1-based).

    noam (the paper): lr * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), `lr` a scale factor.
    inverse_sqrt (fairseq): linear warmup from warmup_init_lr to lr, then lr * sqrt(warmup / step).
    """
    t, step = cfg.train, max(step, 1)
    if t.schedule == "noam":
        warmup = max(t.warmup, 1)
        return t.lr * cfg.model.d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
    if step < t.warmup:
        return t.warmup_init_lr + (t.lr - t.warmup_init_lr) * step / t.warmup
    return t.lr * math.sqrt(max(t.warmup, 1) / step)


def adam(params: list[nn.Parameter], **kwargs: Any) -> torch.optim.Adam:
    """Adam with the fused kernel (one pass over all parameters; ~3x faster steps for the base model on
    CPU) where this torch has it for the parameters' device, else the default multi-tensor version."""
    try:
        return torch.optim.Adam(params, fused=True, **kwargs)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.Adam(params, **kwargs)


def native_bf16(device: torch.device) -> bool:
    """Whether this GPU computes in bf16 in hardware: compute capability 8.0 (Ampere) or newer on CUDA.
    torch.cuda.is_bf16_supported() also says yes where bf16 is only emulated (V100, T4), and slow."""
    if torch.version.hip:  # ROCm: the GPUs that report bf16 have it
        return torch.cuda.is_bf16_supported()
    return torch.cuda.get_device_capability(device) >= (8, 0)


def amp_dtype(amp: str, device: torch.device, d_model: int) -> torch.dtype | None:
    """Autocast dtype. auto: bf16 on GPUs with native bf16, fp16 (with GradScaler) on older GPUs; on CPU
    bf16 where the CPU has native bf16 and the model is wide enough for it to pay, else full precision."""
    if amp == "none":
        return None
    if amp == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if native_bf16(device) else torch.float16
        if device.type == "cpu" and cpu_bf16_pays(d_model):
            return torch.bfloat16
        return None
    if amp == "fp16" and device.type != "cuda":
        raise NmtError("train.amp=fp16 needs a CUDA device (use bf16 or none on CPU)")
    return torch.bfloat16 if amp == "bf16" else torch.float16


def autocast(device: torch.device, dtype: torch.dtype | None) -> contextlib.AbstractContextManager:
    """Mixed precision for forward passes; a no-op for full precision."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)
