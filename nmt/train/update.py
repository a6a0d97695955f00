"""One training update's arithmetic: a piece's loss and backward, the gradient norm (and clipping), the finite
check and the optimizer step. `nmt train` (nmt.train.loop) runs it, and bench/train.py times the same functions,
so that the bench measures what training runs.

Two ways to end an update. `queue_update`: the decision whether the step is taken is made on the device (fused
Adam skips a step through its `found_inf` input) and the update's numbers stay there, read by the host one update
later, while the next one runs: nothing in an update waits for the device. `finish_update`, where that cannot be
(fp16's loss scaler, an Adam without the fused kernel): one host wait per update, for the decision.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch
from torch import Tensor, nn

from nmt.data.batching import Batch
from nmt.loss import projected_label_smoothed_loss
from nmt.precision import Precision, autocast, not_finite_reason
from nmt.train.state import SkippedUpdate

# fairseq's initial fp16 loss scale: 2**16 (torch's) overflows for the first ~10 updates, each skipped
INITIAL_LOSS_SCALE = 2.0**7


def grad_scaler(precision: Precision, device: torch.device) -> torch.amp.GradScaler:
    """The loss scaler of an update: active for fp16 only; disabled, it passes loss and step through unchanged."""
    return torch.amp.GradScaler(device.type, init_scale=INITIAL_LOSS_SCALE, enabled=precision.grad_scaler)


def piece_loss(forward: Callable[..., Tensor], model: nn.Module, batch: Batch, label_smoothing: float,
               pad: int, compiled_loss: bool = False) -> tuple[Tensor, Tensor]:
    """Sums of the label-smoothed loss and of the NLL over a batch on the model's device: the decoder's last
    states into the projected loss (no full logits). `forward` is the model or what wraps it (DDP, compile);
    the positions of the target tokens come with the batch, so the loss never asks the device for them. A packed
    batch (nmt.data.packing) brings its sentences' segments. `compiled_loss`: the loss's chunks through
    torch.compile (train.compile_loss, nmt.loss_compiled)."""
    layout = {} if batch.packed is None else {"packed": batch.packed}  # a padded batch: the model's plain call
    hidden = forward(batch.src, batch.tgt_in, project=False, **layout)
    return projected_label_smoothed_loss(hidden, model.output_weight, batch.tgt_out, label_smoothing, pad,
                                         model.output_bias, positions=batch.tgt_positions, compiled=compiled_loss)


def piece_backward(loss_of: Callable[[], tuple[Tensor, Tensor]], scaler: torch.amp.GradScaler, weight: float | Tensor,
                   device: torch.device, precision: Precision) -> Tensor:
    """Adds one piece's gradient, its loss times `weight` (1 / the update's target tokens, a float or a tensor on
    the device); returns its loss and NLL sums [2], left on the device."""
    with autocast(device, precision):
        loss, nll = loss_of()
    if isinstance(weight, Tensor):  # float64 on the device: rounded to float32 as a float is in loss * weight
        weight = weight.float()
    scaler.scale(loss * weight).backward()
    return torch.stack([loss.detach(), nll.detach()])


def gradient_norm(params: Iterable[nn.Parameter], clip_norm: float) -> Tensor:
    """The total 2-norm of the gradients, on the device, clipped to `clip_norm` when it is > 0. With 0 the norm
    is only measured (it is logged and checked for finiteness): the gradients are left as they are rather than
    multiplied by 1.0."""
    with_grads = [p for p in params if p.grad is not None]
    if clip_norm > 0:
        return torch.nn.utils.clip_grad_norm_(with_grads, clip_norm)
    return torch.nn.utils.get_total_norm([p.grad for p in with_grads])


def decides_on_device(optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler) -> bool:
    """Whether an update's step can be decided on the device (queue_update): fused Adam, which takes `found_inf`,
    and no fp16 loss scaler (whose own skip and scale update finish_update keeps)."""
    return bool(optimizer.defaults.get("fused")) and not scaler.is_enabled()


def queue_update(params: Iterable[nn.Parameter], optimizer: torch.optim.Optimizer, clip_norm: float, sums: Tensor,
                 reduce: Callable[[Tensor], Tensor] = lambda t: t) -> Tensor:
    """The end of an update without a host wait: the gradient norm (clipped), the step taken unless the loss or
    the norm is not finite (fused Adam's `found_inf`: then nothing moves, its step count neither), the gradients
    dropped. Returns [loss sum, NLL sum, gradient norm, taken (1 or 0)] as float64 on the device, with `sums` [2]
    reduced over the processes by `reduce`; the optimizer's learning rate is whatever tensor its groups hold."""
    params = list(params)
    norm = gradient_norm(params, clip_norm)
    numbers = torch.cat([reduce(sums.double()), norm.double().reshape(1)])
    finite = norm.isfinite() & numbers[0].isfinite()
    optimizer.found_inf = (~finite).float()
    try:
        optimizer.step()
    finally:
        optimizer.found_inf = None
    optimizer.zero_grad(set_to_none=True)
    return torch.cat([numbers, finite.double().reshape(1)])


def finish_update(params: Iterable[nn.Parameter], optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
                  clip_norm: float, sums: Tensor,
                  reduce: Callable[[Tensor], Tensor] = lambda t: t) -> tuple[float, float, float]:
    """Unscales, measures (and clips) the gradients and takes the step: returns (loss sum, NLL sum, gradient
    norm), with `sums` [2] reduced over the processes by `reduce`. The host waits for the device here, once,
    for the numbers that decide whether the step is taken and that are logged. SkippedUpdate, with the
    gradients dropped, when the loss or the norm is not finite."""
    scaler.unscale_(optimizer)
    norm = gradient_norm(params, clip_norm)
    loss_sum, nll_sum, norm_value = torch.cat([reduce(sums.double()), norm.double().reshape(1)]).tolist()
    if not (math.isfinite(norm_value) and math.isfinite(loss_sum)):
        optimizer.zero_grad(set_to_none=True)
        raise SkippedUpdate(not_finite_reason(scaler))
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return loss_sum, nll_sum, norm_value
