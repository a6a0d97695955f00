"""Device strings from configs and options -> torch.device, with one-line errors."""

from __future__ import annotations

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
