"""Optimisation settings: the learning-rate schedules and Adam. (Mixed precision: nmt.precision.)"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from nmt.config.experiment import Config


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


def learning_rate_on(step: Tensor, cfg: Config) -> Tensor:
    """learning_rate for update `step` (a float64 tensor, 1-based) where the tensor is: on the device, the step
    count of a run whose updates are decided there (nmt.train.update.queue_update) is known to the host only an
    update late. The same formulas in the same order: equal to learning_rate's to the last bit or two."""
    t, step = cfg.train, step.clamp(min=1)
    if t.schedule == "noam":
        warmup = max(t.warmup, 1)
        return t.lr * cfg.model.d_model**-0.5 * torch.minimum(step**-0.5, step * warmup**-1.5)
    ramp = t.warmup_init_lr + (t.lr - t.warmup_init_lr) * step / t.warmup if t.warmup else step
    return torch.where(step < t.warmup, ramp, t.lr * torch.sqrt(max(t.warmup, 1) / step))


def adam(params: list[nn.Parameter], **kwargs: Any) -> torch.optim.Adam:
    """Adam with the fused kernel (one pass over all parameters instead of a few kernels per tensor) where this
    torch has it for the parameters' device, else the default multi-tensor version."""
    try:
        return torch.optim.Adam(params, fused=True, **kwargs)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.Adam(params, **kwargs)
