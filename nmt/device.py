"""Device strings from configs and options -> torch.device, with one-line errors; how the process gets its
CPU memory. (What the hardware computes natively, and so the default precision: nmt.precision.)"""

from __future__ import annotations

import ctypes

import torch

from nmt.errors import NmtError


def pick_device(name: str, option: str, local_rank: int = 0) -> torch.device:
    """'auto' | 'cpu' | 'cuda' | 'cuda:N'; a bare 'cuda' (or auto on a GPU) means this process's local GPU.

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
    return device


# mallopt(3) parameters of glibc's malloc
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
KEEP_FREED_BYTES = 256 << 20  # with 64 MiB 6.6M of those 14.7M faults were left; 256 MiB and 1 GiB measured alike


def keep_freed_memory() -> bool:
    """Have glibc's malloc reuse freed blocks of up to KEEP_FREED_BYTES instead of giving them back to the OS.

    By default a block above a few MB (a decoding step's logits, a copy of the decoder cache) is fresh
    mmap'ed memory, unmapped when freed: every step faults in and zeroes its pages anew. On the 2-core VM
    of the benchmarks, translating 10,000 Multi30k sentences (beam 5, 2 threads) took 14.7M page faults and
    86 s; with freed blocks kept, 0.7M and 58 s (test2016: 1.8M -> 0.2M faults, 1.2x). What PyTorch's CPU
    tuning guide gets from jemalloc/tcmalloc, without a preloaded library. The cost: freed memory stays with
    the process (peak RSS of those 10,000 sentences 1.28 -> 1.76 GB). Training was unaffected (its page
    faults did not change). Does nothing (returns False) where the C library has no mallopt (macOS, Windows)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, KEEP_FREED_BYTES)) and bool(mallopt(_M_TRIM_THRESHOLD, KEEP_FREED_BYTES))
