"""train.compile_mode (nmt/train/compiling.py): the mode reaches torch.compile, and under the CUDA graph modes a
parameter's `.grad` is never the buffer the backward wrote, so a second micro-batch adds to the first instead of
overwriting it. Here TorchDynamo's eager backend stands in for Inductor (no C++ compile); on a GPU,
tests/gpu/test_gpu_graphs.py runs the real CUDA graphs."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from nmt import checkpoint
from nmt.train.compiling import CUDA_GRAPH_MODES, compile_for_training
from nmt.train.loop import train
from tests.helpers.training import tiny_config


@pytest.fixture
def eager_compile(monkeypatch):
    """torch.compile's calls (the module and its keyword arguments), each compiled with the eager backend."""
    calls, real = [], torch.compile

    def compile_(fn, **kwargs):
        calls.append(kwargs)
        return real(fn, backend="eager")

    monkeypatch.setattr(torch, "compile", compile_)
    return calls


def gradient_buffers(mode: str) -> tuple[list[int], list[int]]:
    """The addresses of the gradients a backward hands over and of the `.grad` each parameter ends up holding."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    handed = []
    for p in model.parameters():  # registered first, so it sees what the backward produced
        p.register_hook(lambda g: handed.append(g.data_ptr()))
    forward = compile_for_training(model, model.parameters(), mode)
    forward(torch.randn(5, 4)).square().sum().backward()
    return handed, [p.grad.data_ptr() for p in reversed(list(model.parameters()))]


@pytest.mark.parametrize("mode", CUDA_GRAPH_MODES)
def test_under_cuda_graphs_a_gradient_is_never_the_backwards_own_buffer(eager_compile, mode):
    handed, held = gradient_buffers(mode)
    assert eager_compile == [{"mode": mode}]
    assert len(handed) == len(held) == 4 and not set(handed) & set(held)


def test_without_cuda_graphs_the_gradient_is_not_copied(eager_compile):
    handed, held = gradient_buffers("max-autotune-no-cudagraphs")
    assert sorted(handed) == sorted(held)  # autograd keeps the backward's tensor: no copy where none is needed


def test_train_compile_mode_reaches_torch_compile_and_two_micro_batches_sum(demo_data, tmp_path, eager_compile):
    """nmt train with train.compile_mode=reduce-overhead and two micro-batches per update ends where the eager run
    does."""
    common = ("train.max_updates=3", "model.dropout=0", "train.update_freq=2")
    train(tiny_config(demo_data, tmp_path / "eager", *common), progress=False)
    train(tiny_config(demo_data, tmp_path / "graphs", *common, "train.compile=true",
                      "train.compile_mode=reduce-overhead"), progress=False)
    assert eager_compile == [{"mode": "reduce-overhead"}]
    a = checkpoint.load(tmp_path / "eager" / "last.pt")["model"]
    b = checkpoint.load(tmp_path / "graphs" / "last.pt")["model"]
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-4, atol=1e-5, msg=k)
