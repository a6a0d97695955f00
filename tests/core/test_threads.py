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


def test_import_nmt_makes_openmp_threads_sleep_at_once():
    assert probe() == "PASSIVE None"


@pytest.mark.parametrize(("env", "seen"), [({"OMP_WAIT_POLICY": "ACTIVE"}, "ACTIVE None"),
                                           ({"GOMP_SPINCOUNT": "10000"}, "None 10000")])
def test_a_users_own_choice_is_kept(env, seen):
    assert probe(**env) == seen


def test_other_programs_get_the_users_environment(monkeypatch):
    for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", threads.OURS):
        monkeypatch.delenv(name, raising=False)
    threads.choose_wait_policy()
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    with threads.users_environment():
        assert "OMP_WAIT_POLICY" not in os.environ and threads.OURS not in os.environ
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")  # the user's: kept for other programs too
    monkeypatch.delenv(threads.OURS)
    with threads.users_environment():
        assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"
