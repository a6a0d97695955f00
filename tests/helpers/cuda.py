"""The machine's real CUDA, read at import, and hiding or showing it (see tests/conftest.py, "no CUDA unless marked
gpu"). tests/conftest.py imports this module first, before pytest_configure hides CUDA, so the values here are the
machine's.

The real answers are read first, at import: torch.cuda.is_available() counts the devices once, when first asked,
from CUDA_VISIBLE_DEVICES as it is then, so asking now keeps this process's GPUs for the gpu tests;
torch.cuda.device_count() reads CUDA_VISIBLE_DEVICES on every call ("" makes it 0), so a skipif needs it from here."""

from __future__ import annotations

import os

import pytest
import torch

CUDA_AVAILABLE = torch.cuda.is_available()
CUDA_DEVICES = torch.cuda.device_count()
REAL_CUDA = {"is_available": torch.cuda.is_available, "device_count": torch.cuda.device_count}
REAL_VISIBLE_DEVICES = os.environ.get("CUDA_VISIBLE_DEVICES")  # None: unset


def hide_cuda(mp: pytest.MonkeyPatch) -> None:
    """No CUDA for this process (torch.cuda answers none) and for the processes it starts (the environment)."""
    mp.setattr(torch.cuda, "is_available", lambda: False)
    mp.setattr(torch.cuda, "device_count", lambda: 0)
    mp.setenv("CUDA_VISIBLE_DEVICES", "")


def show_cuda(mp: pytest.MonkeyPatch) -> None:
    """The real torch.cuda answers and the CUDA_VISIBLE_DEVICES pytest started with."""
    for name, real in REAL_CUDA.items():
        mp.setattr(torch.cuda, name, real)
    if REAL_VISIBLE_DEVICES is None:
        mp.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        mp.setenv("CUDA_VISIBLE_DEVICES", REAL_VISIBLE_DEVICES)
