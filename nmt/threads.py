"""CPU threads on a machine that nmt shares with other programs (a server's HTTP thread, a browser, another job).

PyTorch's CPU build runs its parallel work on GNU OpenMP, whose threads spin at the end of every parallel region
(up to ~300,000 iterations) waiting for the slowest of them. When another process holds a core, the thread that the
kernel descheduled is that slowest one, and the others spin through their time slices waiting for it: a decoder step
is hundreds of small parallel regions, so beside one busy-loop process decoding ran 4-25x slower
(bench/translate.py --busy measures it). With the passive wait policy a waiting thread sleeps at once, giving its
core to whoever can use it. OpenMP reads the policy once, when torch loads it: `nmt/__init__.py` sets it before
anything imports torch, and only where the user has not chosen one (OMP_WAIT_POLICY or GOMP_SPINCOUNT set)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

WAIT_POLICY = "PASSIVE"
OURS = "NMT_SET_OMP_WAIT_POLICY"  # marks the policy as nmt's choice, not the user's: child processes may drop it


def choose_wait_policy(environ: os._Environ[str] | dict[str, str] = os.environ) -> None:
    """Set OMP_WAIT_POLICY=PASSIVE in `environ` unless the user chose OpenMP's waiting already."""
    if "OMP_WAIT_POLICY" in environ or "GOMP_SPINCOUNT" in environ:
        return
    environ["OMP_WAIT_POLICY"] = WAIT_POLICY
    environ[OURS] = "1"


@contextmanager
def users_environment() -> Iterator[None]:
    """Within the block, os.environ as the user had it, without the wait policy nmt chose itself: for starting
    another program (a benchmark's peer) as it would run without nmt."""
    if os.environ.get(OURS) is None:
        yield
        return
    saved = {name: os.environ.pop(name) for name in (OURS, "OMP_WAIT_POLICY")}
    try:
        yield
    finally:
        os.environ.update(saved)
