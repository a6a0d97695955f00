"""Device strings from configs and options -> torch.device, with one-line errors; how the process gets its
CPU memory. (What the hardware computes natively, and so the default precision: nmt.precision.)"""

from __future__ import annotations

import ctypes

import torch

from nmt.errors import NmtError


def pick_device(name: str, option: str, local_rank: int = 0, processes: int = 1) -> torch.device:
    """'auto' | 'cpu' | 'cuda' | 'cuda:N'; a bare 'cuda' (or auto on a GPU) means this process's local GPU
    (torchrun's LOCAL_RANK). With several processes a fixed 'cuda:N' is refused: every rank would use it.

    `option` names the setting in error messages (e.g. 'train.device', '--device').
    """
    if name == "auto":
        return torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise NmtError(f"{option}={name} but CUDA is not available on this machine")
    try:
        device = torch.device(name)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise NmtError(f"{option}={name!r} is not a device (use auto, cpu, cuda or cuda:N)")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", local_rank)
    elif device.type == "cuda" and processes > 1:
        raise NmtError(f"{option}={name} would put all {processes} processes on one GPU: use cuda (each "
                       "process takes its LOCAL_RANK's GPU; choose GPUs with CUDA_VISIBLE_DEVICES)")
    return device


# mallopt(3) parameters of glibc's malloc
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
KEEP_FREED_BYTES = 256 << 20  # large enough for a decoding step's logits and cache copies (64 MiB was not)


def keep_freed_memory() -> bool:
    """Have glibc's malloc reuse freed blocks of up to KEEP_FREED_BYTES instead of giving them back to the OS.

    By default a block above a few MB (a decoding step's logits, a copy of the decoder cache) is fresh
    mmap'ed memory, unmapped when freed: every step faults in and zeroes its pages anew, which took a large
    share of a translation's CPU time (`python bench/precision.py` and `bench/translate_memory.py` show the
    speed and the memory). What PyTorch's CPU tuning guide gets from jemalloc/tcmalloc, without a preloaded
    library. The cost: freed memory stays with the process (a higher peak RSS). Does nothing (returns False)
    where the C library has no mallopt (macOS, Windows)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, KEEP_FREED_BYTES)) and bool(mallopt(_M_TRIM_THRESHOLD, KEEP_FREED_BYTES))
