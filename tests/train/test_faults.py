"""Fault injection: kill -9 at random moments, damaged checkpoints, a full disk, NaN/inf, out of memory and
two trainers on one run dir. After every fault the run goes on from what was saved and loses nothing.

CI runs a few kill trials; `pytest tests/train/test_faults.py --long` (or NMT_LONG_TESTS=1) runs 24 and more of
everything else. Both print the figures (trials, kills inside a checkpoint write, faults injected by kind,
losses found); with NMT_FAULT_REPORT=FILE they are also appended to FILE as one JSON line per test module.
"""

from __future__ import annotations

import errno
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

import nmt.train.oom
import nmt.train.update as update_mod
from nmt import checkpoint
from nmt.data.prefetch import epochs
from nmt.errors import CheckpointError, NmtError
from nmt.rundir import RunDir
from nmt.train.loop import Trainer, train
from tests.helpers.cli import assert_one_line_error, nmt_env, run_cli
from tests.helpers.report import report_figures
from tests.helpers.training import tiny_config

LONG = os.environ.get("NMT_LONG_TESTS") == "1"
KILL_TRIALS = 24 if LONG else 3
FIGURES = {"kill trials": 0, "kills inside a checkpoint write": 0, "restarts": 0, "damaged checkpoints": 0,
           "disk-full writes": 0, "non-finite updates": 0, "out-of-memory faults": 0,
           "concurrent trainers refused": 0, "losses found": 0}
COUNTS = ("kill trials", "damaged checkpoints", "disk-full writes", "non-finite updates", "out-of-memory faults",
          "concurrent trainers refused")

# The child process: `nmt train` whose atomic writes are torn in two by a pause (NMT_TEST_SAVE_DELAY seconds,
# and inside checkpoint_<N>.pt writes for as long as the file NMT_TEST_HOLD exists), so that kills land inside
# checkpoint writes. Test-only: it patches the module from outside; production code has no hook.
CHILD = r"""
import io, os, sys, time
import nmt.checkpoint as ck
delay, hold = float(os.environ.get("NMT_TEST_SAVE_DELAY", "0")), os.environ.get("NMT_TEST_HOLD", "")
real = ck.atomic_write

def torn_atomic_write(path, write):
    def torn(f):
        buf = io.BytesIO()
        write(buf)
        data = buf.getvalue()
        f.write(data[: len(data) // 2])
        f.flush()
        time.sleep(delay)
        while hold and os.path.basename(path).startswith("checkpoint_") and os.path.exists(hold):
            time.sleep(0.01)
        f.write(data[len(data) // 2 :])
    real(path, torn)

ck.atomic_write = torn_atomic_write
from nmt.cli.main import main
sys.argv = ["nmt", *sys.argv[1:]]
main()
"""


@pytest.fixture(scope="module", autouse=True)
def figures(request):
    yield
    injected = sum(FIGURES[k] for k in COUNTS)
    line = f"fault figures: faults injected {injected} (" + ", ".join(f"{k} {v}" for k, v in FIGURES.items()) + ")"
    report_figures(request, line, {"suite": "faults", "long": LONG, "faults injected": injected, **FIGURES})


def weights(path: Path) -> dict[str, torch.Tensor]:
    return checkpoint.load(path)["model"]


def same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def train_records(run: Path) -> list[tuple[int, float]]:
    lines = (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [(r["step"], r["loss"]) for r in map(json.loads, lines) if r["type"] == "train"]


def newest_step(run: Path) -> int:
    state = RunDir(run).newest_intact()
    return 0 if state is None else state["train_state"]["step"]


# ---------------------------------------------------------------- kill -9

# save every update, validate (best.pt) every 5, average at the end: every kind of write is in the window
KILL_RUN = ("train.threads=1", "train.save_every=1", "train.valid_every=5", "train.valid_bleu_sentences=4",
            "train.keep_last=3", "train.average_last=2", "model.dropout=0.1", "train.max_tokens=1024")


def kill_config(demo_data: Path, run: Path, updates: int) -> Path:
    cfg = tiny_config(demo_data, run, *KILL_RUN, f"train.max_updates={updates}")
    path = run.parent / f"{run.name}.yaml"
    path.write_text(yaml.safe_dump(cfg.to_dict()), encoding="utf-8")
    return path


def child(config: Path, *extra: str, delay: float = 0.0, hold: Path | None = None, log: Path) -> subprocess.Popen:
    env = nmt_env(NMT_TEST_SAVE_DELAY=str(delay), NMT_TEST_HOLD=str(hold or ""))
    with open(log, "ab") as err:
        return subprocess.Popen([sys.executable, "-c", CHILD, "train", "--config", str(config), "--no-progress",
                                 *extra], env=env, stdout=subprocess.DEVNULL, stderr=err)


def wait_for(condition, proc: subprocess.Popen, timeout: float = 120) -> bool:
    """Poll until condition() holds (True) or the process ends (False)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.003)
    raise AssertionError("timed out waiting for the training process")


def logged_step(run: Path) -> int:
    try:
        lines = (run / "metrics.jsonl").read_bytes().splitlines()
    except FileNotFoundError:
        return 0
    for line in reversed(lines):
        try:
            return json.loads(line)["step"]
        except (ValueError, KeyError):
            continue
    return 0


def partial_writes(run: Path) -> list[Path]:
    return list(run.glob(".*.tmp"))


@pytest.fixture(scope="module")
def reference(demo_data, tmp_path_factory):
    """Uninterrupted in-process runs (same config, CPU, same seed), by number of updates."""
    runs: dict[int, Path] = {}

    def get(updates: int) -> Path:
        if updates not in runs:
            run = tmp_path_factory.mktemp("reference") / f"ref{updates}"
            train(tiny_config(demo_data, run, *KILL_RUN, f"train.max_updates={updates}"), progress=False)
            runs[updates] = run
        return runs[updates]

    return get


def kill_once(run: Path, proc: subprocess.Popen, rng: random.Random, mode: str, stale: set[Path]) -> bool:
    """Kill -9 `proc` at a moment chosen by `mode`; False when it finished first."""
    start = logged_step(run)

    def writing(pattern: str = ".*.tmp") -> bool:
        return bool(set(run.glob(pattern)) - stale)

    if mode == "first-save":  # inside the first checkpoint write, after update 1 was logged
        hit = wait_for(lambda: writing(".checkpoint_*.tmp"), proc)
    elif mode == "in-save":  # as soon as a checkpoint/last/config/best/average write is under way
        hit = wait_for(writing, proc)
        time.sleep(rng.uniform(0, 0.01))
    elif mode == "after-update":  # at a random moment of the training loop
        hit = wait_for(lambda: logged_step(run) > start, proc)
        time.sleep(rng.uniform(0, 0.3))
    else:  # "any": start-up, data loading, restoring a checkpoint, or training
        time.sleep(rng.uniform(0.2, 4.5))
        hit = proc.poll() is None
    if not hit or proc.poll() is not None:
        return False
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return True


def test_kill_9_at_random_moments_resumes_exactly(demo_data, reference, tmp_path):
    """Each trial kills a training process; the restarted run must end bit for bit like the reference run,
    and after every kill the run dir must still hold a loadable checkpoint at least as new as before."""
    rng = random.Random(1234)
    updates = 40 if LONG else 12
    kills, attempt = 0, 0
    while kills < KILL_TRIALS:
        attempt += 1
        run = tmp_path / f"run{attempt}"
        config = kill_config(demo_data, run, updates)
        log = tmp_path / f"run{attempt}.log"
        first = True
        while True:
            saved = newest_step(run) if run.exists() else 0
            stale = set(partial_writes(run)) if run.exists() else set()
            # the first trial of a run kills inside its first checkpoint write (nothing saved yet, update 1 logged)
            mode = "first-save" if first else rng.choice(["in-save", "after-update", "any"])
            delay = 0.05 if first else rng.choice([0.0, 0.02, 0.05])
            proc = child(config, delay=delay, log=log)
            FIGURES["restarts"] += 1
            first = False
            if kills >= KILL_TRIALS or not kill_once(run, proc, rng, mode, stale):
                assert proc.wait(timeout=300) == 0, log.read_text(errors="replace")[-3000:]
                break
            kills += 1
            FIGURES["kill trials"] += 1
            FIGURES["kills inside a checkpoint write"] += bool(set(run.glob(".*.pt.*.tmp")) - stale)
            after = newest_step(run)
            if after < saved:
                FIGURES["losses found"] += 1
            assert after >= saved, f"kill {kills} ({mode}) lost checkpoint {saved}: newest intact is now {after}"
            if saved:
                checkpoint.load(RunDir(run).for_translation())  # translate still finds a good one
        if kills == 0 and attempt > 3:
            pytest.fail("no kill landed: the runs finish too fast")
        ref = reference(updates)
        lost = not same_weights(weights(ref / "last.pt"), weights(run / "last.pt"))
        FIGURES["losses found"] += lost
        assert not lost, f"run {attempt}: resumed weights differ from the uninterrupted run"
        assert same_weights(weights(ref / "averaged.pt"), weights(run / "averaged.pt"))
        assert train_records(run) == train_records(ref), "metrics.jsonl must hold every update once"
        assert not partial_writes(run)
        assert "Traceback" not in log.read_text(errors="replace")


def snapshot(run: Path) -> dict[str, bytes | None]:
    """Contents of the run dir's files (the held write's temp file by name only: it may still be growing)."""
    return {p.name: None if p.suffix == ".tmp" else p.read_bytes()
            for p in run.iterdir() if p.is_file() and p.name != ".lock"}


def test_second_trainer_on_the_same_run_dir_is_refused(demo_data, reference, tmp_path):
    """While a training holds the run dir (paused inside its first checkpoint write), two more trainings
    (one with --force) start, refuse with one line, and change nothing; the first then ends as the reference."""
    run = tmp_path / "run"
    config = kill_config(demo_data, run, 12)
    hold = tmp_path / "hold"
    hold.touch()
    first = child(config, hold=hold, log=tmp_path / "first.log")
    try:
        assert wait_for(lambda: any(p.stat().st_size for p in run.glob(".checkpoint_*.tmp")), first)
        before = snapshot(run)
        others = [subprocess.Popen([sys.executable, "-m", "nmt", "train", "--config", str(config), "--no-progress",
                                    *extra], env=nmt_env(), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
                  for extra in ([], ["--force"])]
        for other in others:
            _, err = other.communicate(timeout=120)
            assert_one_line_error(subprocess.CompletedProcess(other.args, other.returncode, None, err),
                                  "in use by another `nmt train`", str(run))
            FIGURES["concurrent trainers refused"] += 1
        assert snapshot(run) == before
        assert first.poll() is None
    finally:
        hold.unlink()
    assert first.wait(timeout=300) == 0, (tmp_path / "first.log").read_text(errors="replace")[-3000:]
    assert same_weights(weights(reference(12) / "last.pt"), weights(run / "last.pt"))


# ---------------------------------------------------------------- damaged checkpoints

DAMAGES = ["truncated", "zero-byte", "random-bytes", "wrong-version"]


def damage(path: Path, how: str) -> None:
    """Damage a checkpoint in place (a hard-linked twin, e.g. last.pt and checkpoint_N.pt, is damaged too)."""
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 3])
    elif how == "zero-byte":
        path.write_bytes(b"")
    elif how == "random-bytes":
        path.write_bytes(random.Random(7).randbytes(len(data)))
    else:
        state = torch.load(path, weights_only=True)
        state["version"] = checkpoint.VERSION + 1
        with open(path, "wb") as f:
            torch.save(state, f)


STEPS = ("train.threads=1", "train.save_every=2", "model.dropout=0.1")


@pytest.fixture(scope="module")
def six_updates(demo_data, tmp_path_factory) -> dict[str, Path]:
    """A run stopped at update 6 (checkpoints 2, 4, 6) and an uninterrupted 8-update reference."""
    base = tmp_path_factory.mktemp("six")
    train(tiny_config(demo_data, base / "run", *STEPS, "train.max_updates=6", "train.keep_last=5"), progress=False)
    train(tiny_config(demo_data, base / "ref8", *STEPS, "train.max_updates=8", "train.keep_last=5"), progress=False)
    return {"run": base / "run", "ref8": base / "ref8"}


def copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)  # copies hard links as separate files
    os.unlink(dst / "last.pt")
    os.link(dst / "checkpoint_6.pt", dst / "last.pt")  # as the trainer leaves it
    return dst


def train_args(demo_data: Path, run: Path, *overrides: str) -> list[str]:
    cfg = tiny_config(demo_data, run, *STEPS, "train.keep_last=5", *overrides)
    config = run.parent / f"{run.name}.yaml"
    config.write_text(yaml.safe_dump(cfg.to_dict()), encoding="utf-8")
    return ["train", "--config", str(config), "--no-progress"]


@pytest.mark.parametrize("how", DAMAGES)
def test_damaged_newest_checkpoint_falls_back_and_says_so(demo_data, six_updates, tmp_path, how):
    run = copy_run(six_updates["run"], tmp_path / "run")
    damage(run / "last.pt", how)  # damages checkpoint_6.pt too (hard link): resume from checkpoint_4
    FIGURES["damaged checkpoints"] += 1
    with pytest.raises(CheckpointError, match=str(run / "last.pt")) as err:
        checkpoint.load(run / "last.pt")
    assert "\n" not in str(err.value)
    result = run_cli(*train_args(demo_data, run, "train.max_updates=8"))
    assert result.exit_code == 0, result.stderr
    assert f"{run / 'checkpoint_6.pt'}" in result.stderr and "trying an older checkpoint" in result.stderr
    assert f"resumed from {run / 'checkpoint_4.pt'} at update 4" in result.stderr
    assert same_weights(weights(six_updates["ref8"] / "last.pt"), weights(run / "last.pt"))
    assert [s for s, _ in train_records(run)] == list(range(1, 9))


@pytest.mark.parametrize("how", DAMAGES)
def test_damaged_checkpoint_is_a_one_line_error_for_translate_and_average(six_updates, tmp_path, how):
    run = copy_run(six_updates["run"], tmp_path / "run")
    bad = run / "checkpoint_4.pt"
    damage(bad, how)
    FIGURES["damaged checkpoints"] += 1
    assert_one_line_error(run_cli("translate", "--checkpoint", str(bad), "--no-progress", input=b"one\n"), str(bad))
    assert_one_line_error(run_cli("average", "--run-dir", str(run), "--last", "3"), str(bad))
    assert not (run / "averaged.pt").exists() or checkpoint.load(run / "averaged.pt")


def test_flipped_bits_never_load_as_silently_different_weights(six_updates, tmp_path):
    """torch.load does not check the archive's CRC-32s; checkpoint.load does, so a flipped bit anywhere either
    changes nothing that is read or is a one-line error naming the file."""
    good = six_updates["run"] / "checkpoint_4.pt"
    data, expected = good.read_bytes(), checkpoint.load(good)
    rng = random.Random(99)
    bad = tmp_path / "flipped.pt"
    outcomes = {"error": 0, "unchanged": 0}
    for _ in range(400 if LONG else 40):
        flipped = bytearray(data)
        for _ in range(rng.choice([1, 1, 2, 8])):
            flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
        bad.write_bytes(flipped)
        FIGURES["damaged checkpoints"] += 1
        try:
            state = checkpoint.load(bad)
        except CheckpointError as e:
            assert str(bad) in str(e) and "\n" not in str(e)
            outcomes["error"] += 1
            continue
        same = same_weights(state["model"], expected["model"]) and state["config"] == expected["config"]
        optimizer = state["train_state"]["optimizer"]["state"], expected["train_state"]["optimizer"]["state"]
        same = same and all(torch.equal(optimizer[0][i][k], optimizer[1][i][k]) for i in optimizer[1]
                            for k in optimizer[1][i])
        FIGURES["losses found"] += not same
        assert same, "a damaged checkpoint loaded with different contents"
        outcomes["unchanged"] += 1
    assert outcomes["error"] > outcomes["unchanged"]


def test_every_checkpoint_damaged_refuses_unless_forced(demo_data, six_updates, tmp_path):
    run = copy_run(six_updates["run"], tmp_path / "run")
    for _, path in RunDir(run).step_checkpoints():
        damage(path, "truncated")
    FIGURES["damaged checkpoints"] += 3
    kept = {p.name: p.read_bytes() for p in run.glob("*.pt")}
    assert_one_line_error(run_cli(*train_args(demo_data, run, "train.max_updates=8")), "no intact checkpoint", str(run))
    assert {p.name: p.read_bytes() for p in run.glob("*.pt")} == kept  # nothing overwritten or pruned
    result = run_cli(*train_args(demo_data, run, "train.max_updates=8"), "--force")
    assert result.exit_code == 0, result.stderr
    assert same_weights(weights(six_updates["ref8"] / "last.pt"), weights(run / "last.pt"))


# ---------------------------------------------------------------- disk full


def test_disk_full_while_saving_keeps_the_previous_checkpoint(demo_data, six_updates, tmp_path, monkeypatch):
    run = copy_run(six_updates["run"], tmp_path / "run")
    before = (run / "last.pt").read_bytes()
    real_save = torch.save

    def disk_full(obj, f, *args, **kwargs):
        f.write(b"x" * 1000)  # part of the file made it to disk
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint.torch, "save", disk_full)
    result = run_cli(*train_args(demo_data, run, "train.max_updates=8"))
    FIGURES["disk-full writes"] += 1
    assert_one_line_error(result, "no space left on device", str(run / "checkpoint_8.pt"), "previous files are intact")
    assert (run / "last.pt").read_bytes() == before and checkpoint.load(run / "last.pt")
    assert not partial_writes(run) and not (run / "checkpoint_8.pt").exists()
    monkeypatch.setattr(checkpoint.torch, "save", real_save)  # space freed: the run goes on from update 6
    result = run_cli(*train_args(demo_data, run, "train.max_updates=8"))
    assert result.exit_code == 0 and "resumed from" in result.stderr
    assert same_weights(weights(six_updates["ref8"] / "last.pt"), weights(run / "last.pt"))


def test_disk_full_writing_the_log_is_a_one_line_error(demo_data, six_updates, tmp_path, monkeypatch):
    import nmt.rundir

    run = copy_run(six_updates["run"], tmp_path / "run")
    before = (run / "last.pt").read_bytes()

    def full_open(path, mode="r", *args, **kwargs):
        if "a" in mode and str(path).endswith("metrics.jsonl"):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return open(path, mode, *args, **kwargs)

    monkeypatch.setattr(nmt.rundir, "open", full_open, raising=False)
    FIGURES["disk-full writes"] += 1
    assert_one_line_error(run_cli(*train_args(demo_data, run, "train.max_updates=8")), "No space left on device",
                          "metrics.jsonl")
    assert (run / "last.pt").read_bytes() == before


def test_log_reader_going_away_is_not_reported_as_success(demo_data, six_updates, tmp_path, monkeypatch):
    """`nmt train 2>&1 | head`: the pipe breaks and training stops; the exit status must not say it finished
    (it was 0), and the next start resumes from the last checkpoint."""
    import nmt.log

    run = copy_run(six_updates["run"], tmp_path / "run")
    real_update = nmt.log.Reporter.update

    def broken_pipe(self, step, *args, **kwargs):
        if step == 7:
            raise BrokenPipeError(32, "Broken pipe")
        return real_update(self, step, *args, **kwargs)

    monkeypatch.setattr(nmt.log.Reporter, "update", broken_pipe)
    assert run_cli(*train_args(demo_data, run, "train.max_updates=8")).exit_code == 141
    monkeypatch.setattr(nmt.log.Reporter, "update", real_update)
    assert run_cli(*train_args(demo_data, run, "train.max_updates=8")).exit_code == 0
    assert same_weights(weights(six_updates["ref8"] / "last.pt"), weights(run / "last.pt"))


# ---------------------------------------------------------------- NaN / inf


def test_inf_logits_and_nan_gradients_are_skipped_counted_and_abort_after_k(demo_data, tmp_path, monkeypatch):
    run = tmp_path / "run"
    cfg = tiny_config(demo_data, run, "train.max_updates=8", "train.save_every=2", "train.max_bad_updates=3")
    trainer = Trainer(cfg, progress=False)
    real_forward = trainer.model.forward
    calls = {"n": 0}
    poisoned = {2: "inf", 5: "nan-grad"}  # forward call number -> fault

    def faulty(src, tgt_in, project=True):
        calls["n"] += 1
        states = real_forward(src, tgt_in, project=project)  # training asks for the states before the projection
        fault = poisoned.get(calls["n"])
        if fault == "inf":
            return states + float("inf")
        if fault == "nan-grad":  # finite loss, NaN gradient
            states.register_hook(lambda g: g * float("nan"))
        return states

    monkeypatch.setattr(trainer.model, "forward", faulty)
    try:
        summary = trainer.run()
    finally:
        trainer.close()
    FIGURES["non-finite updates"] += 2
    assert summary["step"] == 8 and summary["skipped_updates"] == 2
    state = checkpoint.load(run / "last.pt")
    assert state["train_state"]["progress"]["skipped_updates"] == 2
    assert all(torch.isfinite(v).all() for v in state["model"].values() if v.is_floating_point())
    # K in a row: abort with the last good checkpoint untouched, then resume once the fault is gone
    before = (run / "last.pt").read_bytes()
    trainer = Trainer(tiny_config(demo_data, run, "train.max_updates=12", "train.max_bad_updates=3"), progress=False)
    monkeypatch.setattr(trainer.model, "forward",
                        lambda src, tgt_in, project=True: real_forward(src, tgt_in, project) * float("nan"))
    with pytest.raises(NmtError, match="3 non-finite updates in a row"):
        try:
            trainer.run()
        finally:
            trainer.close()
    FIGURES["non-finite updates"] += 3
    assert (run / "last.pt").read_bytes() == before
    summary = train(tiny_config(demo_data, run, "train.max_updates=10", "train.save_every=2"), progress=False)
    assert summary["step"] == 10 and summary["skipped_updates"] == 2  # the counters survive the resume


def test_a_poisoned_training_example_is_skipped_every_epoch(demo_data, tmp_path, monkeypatch):
    """Data that makes the loss non-finite (here: whatever contains example 7) is skipped each time it comes
    round and never aborts the run, since the updates around it are fine."""
    real = update_mod.projected_label_smoothed_loss
    state = {"batch": None}
    real_update = Trainer.update

    def remember(self, group):
        state["batch"] = group
        return real_update(self, group)

    def poisoned(hidden, weight, target, eps, pad=0, bias=None, **kwargs):
        loss, nll = real(hidden, weight, target, eps, pad, bias, **kwargs)
        hit = any(7 in b.index.tolist() for b in state["batch"])
        return (loss * float("inf"), nll) if hit else (loss, nll)

    monkeypatch.setattr(Trainer, "update", remember)
    monkeypatch.setattr(update_mod, "projected_label_smoothed_loss", poisoned)
    run = tmp_path / "run"
    result = run_cli(*train_args(demo_data, run, "train.max_tokens=8192", "train.max_epochs=2",
                             "train.max_updates=100000", "train.max_bad_updates=3", "train.save_every=5"))
    assert result.exit_code == 0, result.stderr
    progress = checkpoint.load(run / "last.pt")["train_state"]["progress"]
    FIGURES["non-finite updates"] += progress["skipped_updates"]
    assert progress["skipped_updates"] == 2 and progress["epoch"] == 2  # once per epoch
    assert "(max_epochs)" in result.stderr and ", 2 updates skipped;" in result.stderr


# ---------------------------------------------------------------- out of memory


class FakeOOM(RuntimeError):
    """Stands for torch.cuda.OutOfMemoryError on a CPU-only machine."""


@pytest.fixture
def fake_oom(monkeypatch):
    monkeypatch.setattr(nmt.train.oom, "OOM_ERRORS", (*nmt.train.oom.OOM_ERRORS, FakeOOM))


def captured_gradients(trainer: Trainer, group) -> dict[str, torch.Tensor]:
    """The gradient one _update hands to the optimizer (the step itself is not taken)."""
    grads = {}

    def capture(*_):
        grads.update({n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None})

    trainer.scaler.step = capture  # where the host decides (fp16's scaler)
    trainer.optimizer.step = capture  # where the device decides (nmt.train.update.queue_update)
    trainer.update(group)
    assert grads
    return grads


def oom_when_big(trainer: Trainer, limit: int, where: str, error=FakeOOM) -> dict[str, int]:
    """Make batches of more than `limit` sentences run out of memory in forward or half-way through backward
    (after the decoder's gradients were already added)."""
    seen = {"oom": 0}
    real_forward = trainer.model.forward

    def forward(src, tgt_in, project=True):
        if src.shape[0] > limit and where == "forward":
            seen["oom"] += 1
            raise error("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real_forward(src, tgt_in, project)

    def encoder_output(module, args, output):
        if output[0].shape[0] > limit and where == "backward":
            def boom(grad):
                seen["oom"] += 1
                raise error("CUDA out of memory. Tried to allocate 2.00 GiB")
            output[0].register_hook(boom)

    trainer.model.forward = forward
    trainer.model.encoder_layers[0].register_forward_hook(encoder_output)
    return seen


@pytest.mark.parametrize("where", ["forward", "backward"])
def test_oom_batch_is_split_and_gives_the_same_gradient(demo_data, tmp_path, fake_oom, where):
    cfg = tiny_config(demo_data, tmp_path / "run", "model.dropout=0", "train.update_freq=2", "train.max_tokens=1024")
    trainer = Trainer(cfg, progress=False)
    try:
        batches = epochs(trainer.train_data, trainer.sampler, trainer.special, max_epochs=0)
        group = [next(batches).batch, next(batches).batch]
        sizes = [len(b) for b in group]
        expected = captured_gradients(trainer, group)
        seen = oom_when_big(trainer, limit=min(sizes) // 3, where=where)
        got = captured_gradients(trainer, group)
    finally:
        trainer.close()
    FIGURES["out-of-memory faults"] += seen["oom"]
    assert seen["oom"] >= 4 and trainer.counters.oom_splits == seen["oom"] and trainer.counters.oom_skipped == 0
    assert expected.keys() == got.keys()
    for name in expected:  # the same sum of token losses, added up in another order
        torch.testing.assert_close(got[name], expected[name], rtol=1e-4, atol=1e-6, msg=name)


def test_oom_on_a_single_sentence_is_skipped_and_logged(demo_data, tmp_path, capsys):
    """A RuntimeError saying 'out of memory' (what older torch raises) counts too, without OOM_ERRORS."""
    cfg = tiny_config(demo_data, tmp_path / "run", "train.max_updates=5", "train.save_every=5")
    trainer = Trainer(cfg, progress=False)
    seen = oom_when_big(trainer, limit=0, where="forward", error=RuntimeError)  # every sentence is too big
    try:
        with pytest.raises(NmtError, match=r"10 skipped updates in a row.*last good checkpoint"):
            trainer.run()
    finally:
        trainer.close()
    FIGURES["out-of-memory faults"] += seen["oom"]
    err = capsys.readouterr().err
    assert "out of memory at update 1 on one sentence (train example" in err and "skipped" in err
    assert trainer.counters.oom_skipped > 0 and trainer.counters.step == 0
    # only a few long sentences too big: they are skipped, the run completes
    trainer = Trainer(cfg, progress=False)
    real_forward = trainer.model.forward

    def forward(src, tgt_in, project=True):
        if (src != 0).sum(1).max() > 12:
            raise RuntimeError("CUDA out of memory. Tried to allocate 1.00 GiB")
        return real_forward(src, tgt_in, project)

    trainer.model.forward = forward
    try:
        summary = trainer.run()
    finally:
        trainer.close()
    assert summary["step"] == 5 and summary["oom_skipped"] > 0 and summary["oom_splits"] > 0
    state = checkpoint.load(tmp_path / "run" / "last.pt")["train_state"]["progress"]
    assert state["oom_skipped"] == summary["oom_skipped"]  # counted in the run's saved state
    FIGURES["out-of-memory faults"] += summary["oom_splits"] + summary["oom_skipped"]


def test_oom_end_to_end_matches_a_run_without_oom(demo_data, tmp_path, fake_oom):
    common = ("model.dropout=0", "train.max_updates=6", "train.save_every=6")
    train(tiny_config(demo_data, tmp_path / "plain", *common), progress=False)
    trainer = Trainer(tiny_config(demo_data, tmp_path / "oom", *common), progress=False)
    seen = oom_when_big(trainer, limit=6, where="backward")
    try:
        summary = trainer.run()
    finally:
        trainer.close()
    FIGURES["out-of-memory faults"] += seen["oom"]
    assert summary["oom_splits"] == seen["oom"] > 0 and summary["skipped_updates"] == 0
    a, b = weights(tmp_path / "plain" / "last.pt"), weights(tmp_path / "oom" / "last.pt")
    diff = sum((a[k].double() - b[k].double()).norm() ** 2 for k in a) ** 0.5
    # Adam turns float noise in ~0 gradients into lr-sized steps: compare the whole model (as the DDP test does)
    assert diff / sum(a[k].double().norm() ** 2 for k in a) ** 0.5 < 1e-3
    got, expected = train_records(tmp_path / "oom"), train_records(tmp_path / "plain")
    assert [s for s, _ in got] == [s for s, _ in expected]
    assert [x for _, x in got] == pytest.approx([x for _, x in expected], rel=1e-4)
    assert all(math.isfinite(float(v.sum())) for v in b.values())


def test_non_oom_errors_are_not_swallowed(demo_data, tmp_path, fake_oom):
    trainer = Trainer(tiny_config(demo_data, tmp_path / "run"), progress=False)
    trainer.model.forward = lambda src, tgt_in, project=True: (_ for _ in ()).throw(ValueError("a real bug"))
    try:
        with pytest.raises(ValueError, match="a real bug"):
            trainer.run()
    finally:
        trainer.close()
