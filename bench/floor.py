"""The matrix-multiply floor of a call (bench/translate.py --floor): its GEMMs recorded, then replayed alone."""

from __future__ import annotations

import torch
from common import interleaved, median
from gpu import synced
from torch.utils._python_dispatch import TorchDispatchMode


class GemmLog(TorchDispatchMode):
    """Records the matrix multiplies (aten linear/matmul/addmm/mm/bmm) of a call: their shapes, strides and dtype."""

    OPS = {"linear", "matmul", "addmm", "mm", "bmm", "baddbmm"}

    def __init__(self):
        super().__init__()
        self.calls: list[tuple] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ in self.OPS:
            self.calls.append((func, [(a.shape, a.stride(), a.dtype) if isinstance(a, torch.Tensor) else a
                                      for a in args]))
        return func(*args, **(kwargs or {}))


def gemm_floor(run, repeats: int, clock: str, device: torch.device, gpu: bool) -> float:
    """Seconds that only the matrix multiplies of one `run()` take: they are recorded, then replayed on
    random tensors of the same shapes and strides (median of `repeats`). No implementation that does these
    multiplies in this dtype can be faster, so a peer's time / this floor bounds the speed-up over it."""
    with GemmLog() as log:
        run()

    def tensor(shape, stride, dtype):
        return torch.empty_strided(shape, stride, dtype=dtype, device=device).normal_()

    replay = [(func, [tensor(*a) if isinstance(a, tuple) else a for a in args]) for func, args in log.calls]

    def call():
        for func, args in replay:
            func(*args)

    timed = synced(call, device) if gpu else call  # on a GPU, timed between syncs as the calls it is compared with
    times = interleaved({"floor": timed}, repeats, progress=False, clock=clock, pause=0.0 if gpu else 0.3)
    return median(times["floor"])
