"""The suite runs on the CPU on every machine: a test not marked gpu sees no CUDA, neither in this process nor in
the processes it starts (tests/conftest.py: "no CUDA unless marked gpu"), so its CPU facts hold on a GPU machine too.
The other side, a gpu test seeing the real CUDA, is test_gpu.py's first test."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from nmt.device import pick_device
from nmt.errors import NmtError
from tests.helpers.cli import nmt_env


def test_a_test_not_marked_gpu_sees_no_cuda():
    assert not torch.cuda.is_available() and torch.cuda.device_count() == 0
    assert pick_device("auto", "train.device") == torch.device("cpu")
    with pytest.raises(NmtError, match="CUDA is not available"):
        pick_device("cuda:0", "--device")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "" and nmt_env()["CUDA_VISIBLE_DEVICES"] == ""


def test_the_processes_it_starts_see_no_cuda():
    """An nmt child (nmt_env) and a child that inherits the environment (torchrun, mp.spawn, servers)."""
    code = ("import os, torch; "
            "print(repr(os.environ.get('CUDA_VISIBLE_DEVICES')), torch.cuda.is_available(), torch.cuda.device_count())")
    child = subprocess.run([sys.executable, "-c", code], env=nmt_env(), capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == ["''", "False", "0"]
    inherited = subprocess.run([sys.executable, "-c", "import os; print(repr(os.environ.get('CUDA_VISIBLE_DEVICES')))"],
                               capture_output=True, text=True, timeout=60)
    assert inherited.stdout.strip() == "''"
