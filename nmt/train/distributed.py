"""Data-parallel training across processes started by `torchrun` (gloo on CPU, NCCL on GPU).

Every decision that ends or skips work (out of time, patience, a skipped update) is agreed on by all
ranks through these collectives, so no rank ever waits in a collective the others have left.
With one process every method is a cheap local no-op.
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn


@dataclass
class Dist:
    device: torch.device
    rank: int = 0
    world: int = 1

    @property
    def main(self) -> bool:
        """Rank 0 writes files and talks to the user."""
        return self.rank == 0

    def sum(self, values: list[float]) -> list[float]:
        """Element-wise sum over ranks (float64)."""
        if self.world == 1:
            return values
        return self.sum_(torch.tensor(values, dtype=torch.float64, device=self.device)).tolist()

    def sum_(self, t: torch.Tensor) -> torch.Tensor:
        """`t` (on this process's device) summed over ranks in place, without waiting on the host."""
        if self.world > 1:
            dist.all_reduce(t)
        return t

    def any(self, flag: bool) -> bool:
        """True on every rank when it is True on one (clocks differ per rank: stop together or deadlock)."""
        if self.world == 1:
            return flag
        t = torch.tensor([float(flag)], device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def from_main(self, flag: bool) -> bool:
        """Rank 0's value of `flag` on every rank."""
        if self.world == 1:
            return flag
        t = torch.tensor([float(flag)], device=self.device)
        dist.broadcast(t, 0)
        return bool(t.item())

    def gather(self, obj: Any) -> Any:
        """Every rank's `obj` as a list (just `obj` with one process)."""
        if self.world == 1:
            return obj
        everyone: list[Any] = [None] * self.world
        dist.all_gather_object(everyone, obj)
        return everyone

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def wrap(self, model: nn.Module) -> nn.parallel.DistributedDataParallel | None:
        """The DDP wrapper that all-reduces gradients in backward (None with one process). The model's buffers
        (the sinusoid table) are constants, the same on every rank: not broadcast before each forward."""
        if self.world == 1:
            return None
        ids = None if self.device.type == "cpu" else [self.device.index]
        return nn.parallel.DistributedDataParallel(model, device_ids=ids, broadcast_buffers=False)


def init(device: torch.device) -> Dist:
    """Join the process group torchrun set up (env RANK/WORLD_SIZE); single process otherwise. On a GPU the
    process's device is set first and given to the group (`device_id`, where torch has it), so NCCL
    binds each rank to its own GPU instead of guessing GPU 0."""
    if device.type == "cuda":
        torch.cuda.set_device(device)
    world = world_size()
    if world <= 1:
        return Dist(device)
    if not dist.is_initialized():
        options: dict[str, Any] = {"backend": "nccl" if device.type == "cuda" else "gloo"}
        if device.type == "cuda" and "device_id" in inspect.signature(dist.init_process_group).parameters:
            options["device_id"] = device
        dist.init_process_group(**options)
    return Dist(device, int(os.environ["RANK"]), world)


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
