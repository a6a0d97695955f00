"""Counting what a piece of code asks of the device: its host waits (a tensor's value read by Python: .item(),
.tolist(), bool(tensor), int(tensor), nonzero(), a boolean-mask index, .cpu(); a list made a tensor) and its aten
operators. On a CPU
nothing waits, but the same calls are the ones that stall a GPU's launch queue, so counting them on the CPU shows
what a GPU run would do (tests/search/test_host_waits.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

# Python-level calls that copy data between the host and the device (not aten operators, so only a function mode
# sees them): a tensor's to the host, or a Python list's to the device (on a GPU a synchronous copy, too)
HOST_COPIES = {"tolist", "numpy", "cpu", "tensor", "as_tensor"}
# aten operators that hand a value to Python, or whose output's size depends on the data (the host must read it)
DATA_DEPENDENT = {"_local_scalar_dense", "nonzero", "masked_select", "unique", "_unique2", "unique_consecutive"}


def _is_bool_index(func, args) -> bool:
    """aten.index with a boolean mask: its output size is the mask's count (a nonzero inside)."""
    return func.__name__.startswith("index.") and any(
        isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] if len(args) > 1 else ()) or ())


class Counts(TorchDispatchMode):
    """aten operators by name (`ops`) and host waits by kind (`waits`) while active."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.waits: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        self.ops[name] += 1
        if name in DATA_DEPENDENT or _is_bool_index(func, args):
            self.waits[name] += 1
        return func(*args, **(kwargs or {}))


class _HostCopies(TorchFunctionMode):
    def __init__(self, counts: Counts) -> None:
        super().__init__()
        self.counts = counts

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in HOST_COPIES:
            self.counts.waits[name] += 1
        return func(*args, **(kwargs or {}))


@contextmanager
def counting() -> Iterator[Counts]:
    """`with counting() as c: ...`: then c.waits (host waits by kind) and c.ops (aten operators by name)."""
    counts = Counts()
    with _HostCopies(counts), counts:
        yield counts


@contextmanager
def no_host_wait(device: torch.device) -> Iterator[None]:
    """Fails if the code inside waits for the device: on CUDA by torch's own check (an error at the call that
    synchronizes), elsewhere by the counts above."""
    if device.type == "cuda":
        torch.cuda.set_sync_debug_mode("error")
        try:
            yield
        finally:
            torch.cuda.set_sync_debug_mode("default")
        return
    with counting() as counts:
        yield
    assert not counts.waits, f"host waits inside a search step: {dict(counts.waits)}"


def guard_search_steps(monkeypatch, device: torch.device) -> Counter[str]:
    """Every search step (nmt.search.loop.step: the decoder step, the masks, the strategy's choice) and every cache
    reorder run under `no_host_wait`; the polls between them do not. Returns the calls guarded, by name."""
    from nmt.cache import DecoderCache
    from nmt.search import loop

    calls: Counter[str] = Counter()

    def guarded(name, fn):
        def call(*args, **kwargs):
            calls[name] += 1
            with no_host_wait(device):
                return fn(*args, **kwargs)
        return call

    monkeypatch.setattr(loop, "step", guarded("step", loop.step))
    monkeypatch.setattr(DecoderCache, "reorder", guarded("reorder", DecoderCache.reorder))
    return calls
