"""OpenMP's wait policy (nmt/threads.py): set by `import nmt` before torch loads OpenMP, unless the user chose one."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from nmt import threads
from tests.helpers.cli import python_path

# `import nmt` must not load torch itself: OpenMP reads the policy once, when torch loads it
PROBE = ("import os, sys, nmt; assert 'torch' not in sys.modules;"
         " print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('GOMP_SPINCOUNT'))")


def probe(**env: str) -> str:
    """What a fresh `import nmt` leaves in the environment that OpenMP reads when torch loads it."""
    clean = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", threads.OURS)}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**clean, "PYTHONPATH": python_path(), **env},
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_import_nmt_makes_openmp_threads_spin_briefly():
    assert probe() == "None 30000"
    assert probe(**{threads.OURS: "0"}) == "None None"  # a worker started by users_environment: OpenMP's defaults


@pytest.mark.parametrize(("env", "seen"), [({"OMP_WAIT_POLICY": "ACTIVE"}, "ACTIVE None"),
                                           ({"GOMP_SPINCOUNT": "10000"}, "None 10000")])
def test_a_users_own_choice_is_kept(env, seen):
    assert probe(**env) == seen


def test_other_programs_get_the_users_environment(monkeypatch):
    for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", threads.OURS):
        monkeypatch.delenv(name, raising=False)
    threads.choose_wait_policy()
    assert os.environ["GOMP_SPINCOUNT"] == "30000"
    with threads.users_environment():
        assert "GOMP_SPINCOUNT" not in os.environ and os.environ[threads.OURS] == "0"
        threads.choose_wait_policy()  # what a spawned Python worker importing nmt does: nothing
        assert "GOMP_SPINCOUNT" not in os.environ
    assert os.environ["GOMP_SPINCOUNT"] == "30000" and os.environ[threads.OURS] == "1"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")  # the user's: kept for other programs too
    monkeypatch.delenv(threads.OURS)
    with threads.users_environment():
        assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"


def free_cores(monkeypatch, readings: list[int | None], wanted: int = 2, cores: int = 2, cpus: int = 2):
    """A FreeCores on a machine of `cpus` CPUs, `cores` of them this process's, whose runnable-thread readings
    (besides the caller) are `readings`, one per choice."""
    it = iter(readings)
    monkeypatch.setattr(threads, "running_elsewhere", lambda: next(it))
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: set(range(cores)))
    monkeypatch.setattr(threads.os, "cpu_count", lambda: cpus)
    return threads.FreeCores(wanted)


def test_a_busy_neighbour_leaves_one_thread_a_quiet_machine_all(monkeypatch):
    f = free_cores(monkeypatch, [0, 1, 1, 1, 0, 0, 5])
    assert [f.choose() for _ in range(7)] == [2, 2, 1, 1, 1, 2, 2]  # the (lower) median of the last three
    assert free_cores(monkeypatch, [0, 0]).choose() == 2


def test_wanted_is_the_most_and_one_the_least(monkeypatch):
    assert free_cores(monkeypatch, [0], wanted=1).choose() == 1
    assert free_cores(monkeypatch, [0], wanted=2, cores=8, cpus=8).choose() == 2
    assert free_cores(monkeypatch, [9], wanted=4, cores=4, cpus=4).choose() == 1
    assert free_cores(monkeypatch, [None], wanted=3, cores=4, cpus=4).choose() == 3  # no /proc/loadavg


def test_others_on_a_bigger_machine_count_by_our_share_of_it(monkeypatch):
    # 4 threads running elsewhere on a 64-CPU machine of which 2 are ours: 1/8 of a core on ours
    assert free_cores(monkeypatch, [4], cores=2, cpus=64).choose() == 2

