"""Device strings from configs and options -> torch.device, with one-line errors; what the CPU computes
natively (which decides the default precision); how the process gets its CPU memory."""

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


CPU_BF16_MIN_D_MODEL = 256  # below, bf16 autocast saves nothing on CPU (measured: d128 1.03x, d256 1.53x)


def cpu_native_bf16() -> bool:
    """Whether this CPU computes bf16 in hardware (AVX512-BF16 or AMX), as torch's own CPU check reports
    it; elsewhere oneDNN emulates bf16 and it is slower than fp32."""
    checks = (getattr(torch.cpu, "_is_avx512_bf16_supported", None), getattr(torch.cpu, "_is_amx_tile_supported", None))
    return any(check is not None and check() for check in checks)


def cpu_bf16_pays(d_model: int) -> bool:
    """bf16 as the CPU default: native bf16, and a model wide enough for its faster matrix multiplies to
    outweigh the casts around them."""
    return cpu_native_bf16() and d_model >= CPU_BF16_MIN_D_MODEL


# mallopt(3) parameters of glibc's malloc
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
KEEP_FREED_BYTES = 1 << 30


def keep_freed_memory() -> bool:
    """Have glibc's malloc reuse freed blocks of up to KEEP_FREED_BYTES instead of giving them back to the OS.

    By default a block above a few MB (a decoding step's logits, a training batch's activations) is fresh
    mmap'ed memory, unmapped when freed: every step faults in and zeroes its pages anew. On the 2-core
    VM of the benchmarks that was 1.8M page faults and 30% of the CPU time of translating Multi30k test2016
    (1 thread); kept, 0.5M faults and 1.3-1.5x faster. What PyTorch's CPU tuning guide gets from
    jemalloc/tcmalloc, without a preloaded library. The cost: memory freed stays with the process, so its
    resident size is its peak, which training and streaming translation reach in their first batches anyway.
    Does nothing (returns False) where the C library has no mallopt (macOS, Windows, musl)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, KEEP_FREED_BYTES)) and bool(mallopt(_M_TRIM_THRESHOLD, KEEP_FREED_BYTES))
