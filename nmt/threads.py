"""CPU threads on a machine that nmt shares with other programs (a server's HTTP thread, a browser, another job).

PyTorch's CPU build runs its parallel work on GNU OpenMP, whose threads spin at the end of every parallel region
(by default up to ~300,000 iterations, a few ms) waiting for the slowest of them. When another process holds a core,
the thread that the kernel descheduled is that slowest one, and the others spin through their time slices waiting
for it: a decoder step is hundreds of small operations, so beside one busy-loop process decoding ran 3-4x slower
(bench/translate.py --busy measures it). Two things keep the speed. A short spin (GOMP_SPINCOUNT=30000, ~0.3 ms)
before a waiting thread sleeps: on a quiet machine the others arrive within it (a passive policy, sleeping at once,
cost a third of the speed at batch 1), and beside a busy process it gives the core back soon. OpenMP reads it once,
when torch loads it: `nmt/__init__.py` sets it before anything imports torch, only where the user has not chosen
(OMP_WAIT_POLICY or GOMP_SPINCOUNT set). And FreeCores, which runs each batch on the cores other threads leave
free."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

WAIT = {"GOMP_SPINCOUNT": "30000"}
OURS = "NMT_SET_OMP_WAIT_POLICY"  # marks the policy as nmt's choice, not the user's: child processes may drop it


def choose_wait_policy(environ: os._Environ[str] | dict[str, str] = os.environ) -> None:
    """Set nmt's OpenMP waiting (WAIT) in `environ` unless the user chose OpenMP's waiting already (or a process
    started by `users_environment` is told to keep OpenMP's defaults)."""
    if "OMP_WAIT_POLICY" in environ or "GOMP_SPINCOUNT" in environ or environ.get(OURS) == "0":
        return
    environ.update(WAIT)
    environ[OURS] = "1"


@contextmanager
def users_environment() -> Iterator[None]:
    """Within the block, os.environ as the user had it, without the waiting nmt chose itself: for starting another
    program (a benchmark's peer) as it would run without nmt. A Python child that imports nmt again (a spawned
    worker) is told not to choose: OURS is "0" there."""
    if os.environ.get(OURS) != "1":
        yield
        return
    saved = {name: os.environ.pop(name) for name in (OURS, *WAIT)}
    os.environ[OURS] = "0"
    try:
        yield
    finally:
        os.environ.update(saved)


def running_elsewhere() -> int | None:
    """Threads of other processes (and of this one besides the caller) that are running or ready to run on this
    machine right now: /proc/loadavg's count of runnable threads, less the caller. None where it cannot be read."""
    try:
        with open("/proc/loadavg", encoding="ascii") as f:
            running = int(f.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return None
    return max(0, running - 1)


class FreeCores:
    """The thread count for the next batch: the cores that other threads leave free, at most `wanted` (the
    --threads asked for, or torch's default of one per core). Two threads beside one busy process on two cores
    wait for each other at every barrier, while one thread gets a core to itself (bench/translate.py --busy). Read
    between batches, when this process's pool has gone to sleep (its short spin is long over), from the count of
    runnable threads: the median of the last three readings, so that a neighbour's moment of work does not flip it.
    Where the machine has more CPUs than this process may use, the others are assumed spread evenly over them."""

    def __init__(self, wanted: int):
        self.wanted = wanted
        self.cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        self.share = self.cores / max(self.cores, os.cpu_count() or 1)
        self.readings: list[int] = []

    def choose(self) -> int:
        """The thread count for the next batch (`wanted` where runnable threads cannot be read)."""
        elsewhere = running_elsewhere()
        if self.wanted <= 1 or elsewhere is None:
            return self.wanted
        self.readings = [*self.readings[-2:], elsewhere]
        busy = sorted(self.readings)[(len(self.readings) - 1) // 2] * self.share
        return max(1, min(self.wanted, self.cores - round(busy)))

    def fit(self) -> int:
        """Set torch's intra-op threads for the next batch; returns the count."""
        import torch  # here, not at the top: `import nmt` imports this module before torch may load

        chosen = self.choose()
        if torch.get_num_threads() != chosen:
            torch.set_num_threads(chosen)
        return chosen
