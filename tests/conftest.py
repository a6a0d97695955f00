"""Shared fixtures and helpers: a small prepared demo corpus, a tiny-model config for fast CPU tests, and
the one way to run the command line (in-process, or as a `python -m nmt` child) and check a refusal. The suite
runs on the CPU even where a GPU is present, except the tests marked `gpu` (tests/test_gpu.py): see
"no CUDA unless marked gpu" below."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner, Result

from nmt.cli.main import main
from nmt.config.experiment import Config, load_config
from nmt.data.prepare import prepare
from nmt.demo.files import write_demo

torch.set_num_threads(1)  # tiny models gain nothing from threads; avoids OpenMP oversubscription

# ---- no CUDA unless marked gpu
#
# The suite's facts are CPU facts (CPULinear layers, fp16 refused, `cuda:0` refused, a bit-exact resume, gloo
# ranks, the "auto" precision), but "auto" devices pick a GPU wherever there is one. So no test sees CUDA unless
# it is marked `gpu`: in this process torch.cuda.is_available() is False and torch.cuda.device_count() 0, and
# CUDA_VISIBLE_DEVICES="" hides the GPUs from the processes tests start (nmt_env children, torchrun, mp.spawn,
# servers). That holds from pytest_configure on, so session and module fixtures (demo_run, a module's
# Translator) and environments captured at import (test_serve's ENV) see no GPU either; the autouse fixture
# `cuda_only_for_gpu_tests` gives a test marked gpu the real CUDA and environment back for its duration.
# The real answers are read first, at import: torch.cuda.is_available() counts the devices once, when first
# asked, from CUDA_VISIBLE_DEVICES as it is then, so asking now keeps this process's GPUs for the gpu tests;
# torch.cuda.device_count() reads CUDA_VISIBLE_DEVICES on every call ("" makes it 0), so a skipif needs it from here.
CUDA_AVAILABLE = torch.cuda.is_available()
CUDA_DEVICES = torch.cuda.device_count()
REAL_CUDA = {"is_available": torch.cuda.is_available, "device_count": torch.cuda.device_count}
REAL_VISIBLE_DEVICES = os.environ.get("CUDA_VISIBLE_DEVICES")  # None: unset
_session_cuda = pytest.MonkeyPatch()


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


@pytest.fixture(autouse=True)
def cuda_only_for_gpu_tests(request, monkeypatch):
    """A test marked gpu sees the machine's CUDA; every other test sees none (as the whole session does)."""
    if request.node.get_closest_marker("gpu") is not None:
        show_cuda(monkeypatch)
    else:
        hide_cuda(monkeypatch)  # already so since pytest_configure; again in case something changed it
    yield


ROOT = Path(__file__).resolve().parents[1]
MULTI30K = ROOT.parent / "shared" / "data" / "multi30k"

# The exit statuses of a refusal (nmt.cli.main): the command's own (a user mistake: nmt.errors.NmtError or an
# OSError, caught by user_errors) and the option parser's (a bad option value, an unknown option or command,
# turned into an `error:` line by main). Either way stderr gets one `error:` line and no traceback.
USER_ERROR = 1
USAGE_ERROR = 2


def run_cli(*args: str | Path, input: bytes | str | None = None) -> Result:
    """`nmt ARGS` in-process: nmt.cli.main.main, the entry point of `nmt` and `python -m nmt`, with stdin fed from
    `input` and stdout and stderr captured apart (Typer's CliRunner isolation). Monkeypatched faults reach
    it; an exception that escapes main is kept in `result.exception`, as CliRunner.invoke keeps it."""
    runner = CliRunner()
    with runner.isolation(input=input) as (stdout, stderr, output):
        exit_code, exception, exc_info = 0, None, None
        try:
            main([str(a) for a in args])
        except SystemExit as e:
            exit_code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
            exception, exc_info = (e, sys.exc_info()) if exit_code else (None, None)
        except Exception as e:
            exit_code, exception, exc_info = 1, e, sys.exc_info()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        return Result(runner, stdout.getvalue(), stderr.getvalue(), output.getvalue(), None, exit_code,
                      exception, exc_info)


def nmt_env(**extra: str) -> dict[str, str]:
    """The environment of an nmt child process: this checkout's nmt, one OpenMP thread, then `extra`. It
    carries CUDA_VISIBLE_DEVICES="" (no GPU) except in tests marked gpu (see "no CUDA unless marked gpu"). A
    PYTHONPATH the tests run with stays after the checkout (packages installed with pip --target)."""
    return {**os.environ, "PYTHONPATH": python_path(), "OMP_NUM_THREADS": "1", **extra}


def python_path() -> str:
    """This checkout first, then the PYTHONPATH this process was given."""
    return os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))


def nmt_process(*args: str, stdin: bytes | None = None, cwd: Path | None = None, entry: Sequence[str] = ("-m", "nmt"),
                timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    """`python -m nmt ARGS` (or `python ENTRY ARGS`) run to its end as a separate process, for what needs
    one: the real start-up, environment variables read at import, a module blocked before nmt loads."""
    return subprocess.run([sys.executable, *entry, *args], cwd=cwd, input=stdin, capture_output=True,
                          env=nmt_env(**env), timeout=timeout)


def assert_one_line_error(result: Result | subprocess.CompletedProcess, *fragments: str,
                          exit_code: int = USER_ERROR) -> str:
    """A refusal as the user sees it: exit status `exit_code`, no traceback (nor an exception escaping the
    CLI), and exactly one `error:` line on stderr, the last one, holding every fragment. Lines a command
    printed before it failed (training's log) may precede it. Returns the error line."""
    if isinstance(result, subprocess.CompletedProcess):
        code, err = result.returncode, result.stderr.decode(errors="replace")
    else:
        assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
        code, err = result.exit_code, result.stderr
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert code == exit_code and "Traceback" not in err and len(errors) == 1, f"exit {code}:\n{err[-3000:]}"
    assert err.splitlines()[-1] == errors[0], f"more after the error line:\n{err[-3000:]}"
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    return errors[0]


@pytest.fixture(scope="session")
def demo_raw(tmp_path_factory) -> dict[str, str]:
    """Raw demo text files (train 2,000 / valid 100 / test 100 pairs)."""
    return write_demo(tmp_path_factory.mktemp("demo-raw"), n_train=2000, n_valid=100, n_test=100, seed=3)


@pytest.fixture(scope="session")
def demo_data(tmp_path_factory, demo_raw) -> Path:
    """The demo corpus prepared into a data dir with a small joint BPE vocabulary."""
    out = tmp_path_factory.mktemp("demo-data") / "data"
    cfg = load_config(None, [f"data.dir={out}", "data.vocab_size=400"]).data
    cfg.train, cfg.valid, cfg.test = demo_raw["train"], demo_raw["valid"], demo_raw["test"]
    prepare(cfg, progress=False)
    return out


def report_figures(request, line: str, record: dict[str, Any]) -> None:
    """Print a suite's figures after its tests (shown even without -s) and, when NMT_FAULT_REPORT names a
    file, append `record` to it as a JSON line."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.ensure_newline()
            reporter.write_line(line)
    if os.environ.get("NMT_FAULT_REPORT"):
        with open(os.environ["NMT_FAULT_REPORT"], "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")


def tiny_config(data_dir: Path, run_dir: Path, *overrides: str) -> Config:
    """A very small Transformer so a training update takes milliseconds."""
    return load_config(None, [
        f"data.dir={data_dir}", f"train.run_dir={run_dir}",
        "model.d_model=32", "model.n_heads=2", "model.d_ff=64", "model.encoder_layers=1",
        "model.decoder_layers=1", "model.max_positions=256",
        "train.max_tokens=512", "train.warmup=10", "train.lr=3e-3", "train.log_every=1",
        "train.valid_every=1000", "train.save_every=1000", "train.valid_bleu_sentences=20",
        "train.max_updates=6", "train.average_last=2", *overrides,
    ])


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory, demo_data) -> Path:
    """A small model trained briefly on the demo corpus (shared by translate/plot tests)."""
    from nmt.train.loop import train

    run = tmp_path_factory.mktemp("demo-run") / "run"
    cfg = tiny_config(demo_data, run, "model.d_model=64", "model.d_ff=128", "model.n_heads=4",
                      "model.encoder_layers=2", "model.decoder_layers=2",
                      "train.max_updates=400", "train.max_tokens=2048", "train.lr=5e-3", "train.warmup=30",
                      "train.save_every=50", "train.log_every=50", "train.average_last=2", "model.dropout=0")
    train(cfg, progress=False)
    return run


# ---- long mode: `pytest --long` or NMT_LONG_TESTS=1 (more fault-injection trials and hypothesis examples)


def pytest_addoption(parser):
    parser.addoption("--long", action="store_true", default=False,
                     help="long fault-injection mode (same as NMT_LONG_TESTS=1); also runs tests marked slow")


def pytest_configure(config):
    import os

    if config.getoption("--long"):
        os.environ["NMT_LONG_TESTS"] = "1"  # read by test modules at import (hypothesis example counts)
    hide_cuda(_session_cuda)  # before collection imports the test modules: see "no CUDA unless marked gpu"


def pytest_unconfigure(config):
    _session_cuda.undo()


def pytest_collection_modifyitems(config, items):
    import os

    if os.environ.get("NMT_LONG_TESTS") == "1":
        return
    skip = pytest.mark.skip(reason="long mode only (--long or NMT_LONG_TESTS=1)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


# the models `nmt export` is proven on: session fixtures defined once here, so every tests/test_export_*.py shares
# one build (imported at the end: export_models.py uses this module's helpers)
from .export_models import export_lines, export_models  # noqa: E402, F401
