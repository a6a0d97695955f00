"""Updates decided on the device, read by the host one update late (nmt.train.update.queue_update).

The host reads an update's numbers (its loss, NLL and gradient norm, whether its step was taken, its learning
rate) while the next update runs, so the device never waits for the host between updates. What depends on
whether an update was taken is kept on the device: the count of taken updates and, from it, the next learning
rate (a skipped update does not move the schedule, as when the host decided). The host settles everything
queued before it validates, saves or stops (nmt.train.loop)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from nmt.config.experiment import Config
from nmt.data.batching import Batch
from nmt.train.optim import learning_rate_on


@dataclass
class Queued:
    """An update not yet read: [loss sum, NLL sum, gradient norm, taken, learning rate, target tokens] (on a GPU
    being copied to pinned host memory, `copied` recorded after the copy), its epoch, its last piece (what a
    torch.compile watch reports) and when the host queued it (time.monotonic: the log's updates/s)."""

    numbers: Tensor
    copied: torch.cuda.Event | None
    epoch: int
    batch: Batch
    at: float


class LateUpdates:
    def __init__(self, cfg: Config, device: torch.device):
        self.cfg, self.device = cfg, device
        self.taken: Tensor | None = None  # updates taken, float64 on the device (from the host's count at the first)
        self.queued: list[Queued] = []
        # fused Adam reads a tensor learning rate as float32 on CUDA (its kernel's lr_ptr), as a double on a CPU
        self.lr_dtype = torch.float32 if device.type == "cuda" else torch.float64

    def learning_rate(self, steps: int) -> Tensor:
        """The next update's learning rate, on the device, from the updates taken before it; `steps` (the host's
        count, exact when nothing is queued) starts the device's count at the first update."""
        if self.taken is None:
            self.taken = torch.full((), float(steps), dtype=torch.float64, device=self.device)  # no host copy
        return learning_rate_on(self.taken + 1, self.cfg).to(self.lr_dtype)

    def tokens(self, count: float, reduce: Callable[[Tensor], Tensor]) -> Tensor:
        """An update's target tokens summed over the processes (`reduce`) on the device: nothing waits for it."""
        return reduce(torch.full((), count, dtype=torch.float64, device=self.device))

    def push(self, numbers: Tensor, lr: Tensor, tokens: Tensor, epoch: int, batch: Batch) -> None:
        """Queue an update: `numbers` as queue_update returns them, `lr` the rate it ran at, `tokens` its target
        tokens over all processes (float64, on the device)."""
        self.taken += numbers[3]
        numbers, copied = torch.cat([numbers, lr.double().reshape(1), tokens.reshape(1)]), None
        if numbers.device.type == "cuda":  # read later without waiting for the updates queued after this one
            numbers, copied = numbers.to("cpu", non_blocking=True), torch.cuda.Event()
            copied.record()
        self.queued.append(Queued(numbers, copied, epoch, batch, time.monotonic()))

    def read(self, keep: int = 0) -> list[tuple[Queued, list[float]]]:
        """The queued updates but the last `keep`, oldest first, with their numbers read: one host wait for all,
        and on a GPU only for their own copies (a read from the device would wait for every kernel queued before
        it, the next update's included)."""
        n = len(self.queued) - keep
        if n <= 0:
            return []
        done, self.queued = self.queued[:n], self.queued[n:]
        if done[-1].copied is not None:
            done[-1].copied.synchronize()
        return list(zip(done, torch.stack([q.numbers for q in done]).tolist(), strict=True))
