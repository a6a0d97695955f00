"""The run dir: everything `nmt train` leaves on disk and `translate`, `average`, `plot` read back.

```
runs/NAME/
  .lock              held by the one training that writes here (pid inside)
  config.yaml        the resolved config; decides whether a new `train` is the same experiment
  metrics.jsonl      one JSON record per log step and per validation
  checkpoint_<N>.pt  every train.save_every updates (the newest keep_last kept); last.pt links the newest
  best.pt            best validation checkpoint; averaged.pt: average of the last checkpoints
  tensorboard/       the metrics as TensorBoard scalars (train.tensorboard)
```
This module is the only one that knows these names.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from nmt import checkpoint
from nmt.config.experiment import config_from_dict
from nmt.errors import CheckpointError, NmtError
from nmt.io import TMP_SUFFIX, atomic_write, atomic_write_text, fsync_dir

_STEP_RE = re.compile(r"^checkpoint_(\d+)\.pt$")
RUNS_ROOT = Path("runs")  # where `nmt translate` with neither --checkpoint nor --config looks


class RunLock:
    """An exclusive lock on the run dir so two trainings never write the same checkpoints."""

    def __init__(self, run_dir: Path, holder: str = "run dir {} is in use by another `nmt train`"):
        run_dir.mkdir(parents=True, exist_ok=True)
        self.file = open(run_dir / ".lock", "a+")  # noqa: SIM115 - held for the whole run
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.file.seek(0)
            owner = self.file.read().strip() or "?"
            self.file.close()
            raise NmtError(f"{holder.format(run_dir)} (pid {owner})") from None
        self.file.seek(0)
        self.file.truncate()
        self.file.write(str(os.getpid()))
        self.file.flush()

    def release(self) -> None:
        with contextlib.suppress(OSError):
            fcntl.flock(self.file, fcntl.LOCK_UN)
        self.file.close()


def experiment_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """How two configs (as dicts) differ as experiments: their model sections. The data side is checked
    against the checkpoint's vocabularies and languages instead (the data dir's meta.json is the truth)."""
    old, new = a.get("model") or {}, b.get("model") or {}
    return [f"model.{k}: {old.get(k)!r} vs {new.get(k)!r}" for k in sorted(set(old) | set(new))
            if old.get(k) != new.get(k)]


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The train/valid records of a metrics.jsonl, sorted by step (stable: a resumed run's order is kept
    within a step); lines cut by a kill and foreign records are skipped."""
    path = Path(path)
    if not path.is_file():
        raise NmtError(f"no metrics file: {path} (is {path.parent} a training run dir?)")
    records = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(record, dict) and record.get("type") in ("train", "valid") and _is_step(record):
                    records.append(record)
    except OSError as e:
        raise NmtError(f"cannot read {path}: {e.strerror or e}") from None
    return sorted(records, key=lambda r: float(r["step"]))


def _is_step(record: dict[str, Any]) -> bool:
    step = record.get("step")
    return isinstance(step, (int, float)) and not isinstance(step, bool) and math.isfinite(step)


class RunDir:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.config_file = self.path / "config.yaml"
        self.metrics_file = self.path / "metrics.jsonl"
        self.last = self.path / "last.pt"
        self.best = self.path / "best.pt"
        self.averaged = self.path / "averaged.pt"
        self.tensorboard = self.path / "tensorboard"

    def __str__(self) -> str:
        return str(self.path)

    def lock(self) -> RunLock:
        return RunLock(self.path)

    # ---- the experiment
    def check_experiment(self, cfg: dict[str, Any], force: bool) -> None:
        """Refuse to mix two experiments in one run dir unless `force` (which clears it)."""
        if not self.config_file.is_file():
            return
        try:
            old = config_from_dict(yaml.safe_load(self.config_file.read_text(encoding="utf-8")) or {}).to_dict()
        except Exception:
            old = None
        diffs = ["config.yaml unreadable"] if old is None else experiment_differences(old, cfg)
        if not diffs:
            return
        if not force:
            raise NmtError(f"run dir {self.path} holds another experiment ({diffs[0]}); "
                           "use --force to start over or choose another train.run_dir")
        self.clear()

    def write_config(self, cfg: dict[str, Any]) -> None:
        # atomic: a kill while writing it must not make the run dir look like another experiment
        atomic_write_text(self.config_file, yaml.safe_dump(cfg, sort_keys=False))

    def clear(self) -> None:
        """Delete everything but the lock (--force)."""
        for p in self.path.iterdir():
            if p.name != ".lock":
                shutil.rmtree(p) if p.is_dir() else p.unlink()

    # ---- checkpoints
    def step_checkpoints(self) -> list[tuple[int, Path]]:
        """`checkpoint_<step>.pt` files, oldest first."""
        found = [(int(m.group(1)), p) for p in self.path.glob("checkpoint_*.pt") if (m := _STEP_RE.match(p.name))]
        return sorted(found)

    def save_checkpoint(self, state: dict[str, Any], step: int, keep_last: int) -> Path:
        """checkpoint_<step>.pt, last.pt pointing at it, and all but the newest `keep_last` step checkpoints
        removed (last/best/averaged are never pruned)."""
        path = self.path / f"checkpoint_{step}.pt"
        checkpoint.save(state, path)
        _link_or_copy(path, self.last)
        for _, old in self.step_checkpoints()[:-keep_last]:
            old.unlink(missing_ok=True)
        return path

    def save_best(self, state: dict[str, Any]) -> None:
        checkpoint.save(state, self.best)

    def average(self, last: int) -> Path:
        """Average the newest `last` step checkpoints into averaged.pt (also `nmt average`)."""
        if last < 1:  # [-0:] would be every checkpoint, [-(-2):] all but the first two
            raise NmtError(f"--last must be >= 1, got {last}")
        paths = [p for _, p in self.step_checkpoints()][-last:]
        if not paths:
            raise NmtError(f"no checkpoint_<step>.pt files in {self.path}")
        checkpoint.save(checkpoint.average(paths), self.averaged)
        return self.averaged

    def remove_partial_writes(self) -> None:
        """Delete the temp files of writes a kill interrupted (call while holding the lock)."""
        for p in self.path.glob(f".*{TMP_SUFFIX}"):
            if p.is_file():
                p.unlink(missing_ok=True)

    def newest_intact(self, warn: Callable[[str], None] = lambda _: None) -> checkpoint.Checkpoint | None:
        """The newest loadable training checkpoint: step checkpoints newest first, then last.pt.

        Loading stops at the first intact one (older files are never read). Damaged candidates are
        reported through `warn` and skipped, so a kill during a write or a corrupted file never loses
        the run. last.pt is a hard link to the newest step checkpoint, so it is only a fallback.
        """
        candidates = [p for _, p in reversed(self.step_checkpoints())] + [self.last]
        for p in candidates:
            if not p.exists():
                continue
            try:
                state = checkpoint.load(p)
            except CheckpointError as e:
                warn(f"{e}; trying an older checkpoint")
                continue
            if state.kind == "training":
                return state
        return None

    def for_translation(self) -> Path:
        """The checkpoint to translate with: averaged.pt, else best.pt, else last.pt."""
        for path in (self.averaged, self.best, self.last):
            if path.is_file():
                return path
        raise CheckpointError(f"no checkpoint in {self.path} (train first, or pass --checkpoint)")

    # ---- metrics.jsonl
    def append_metrics(self, record: dict[str, Any]) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        with open(self.metrics_file, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    def truncate_metrics(self, step: int) -> None:
        """Forget records logged after `step` (a resume redoes them) and lines cut by a kill."""
        if not self.metrics_file.is_file():
            return
        keep = []
        for line in self.metrics_file.read_text(encoding="utf-8").splitlines():
            try:
                if json.loads(line).get("step", 0) <= step:
                    keep.append(line)
            except json.JSONDecodeError:
                continue
        self.metrics_file.write_text("".join(k + "\n" for k in keep), encoding="utf-8")

    def read_metrics(self) -> list[dict[str, Any]]:
        return read_metrics(self.metrics_file)


def checkpoint_file(path: Path) -> Path:
    """A checkpoint file as given, or a run dir's checkpoint for translation (averaged.pt, else best.pt, else
    last.pt): what every command that takes "a checkpoint or a run dir" reads."""
    return RunDir(path).for_translation() if path.is_dir() else path


def checkpoint_to_translate(explicit: Path | None, run_dir: str | Path, config_given: bool) -> Path:
    """--checkpoint, else the config's run dir, else the newest run under runs/ (the caller prints it)."""
    if explicit is not None:
        return explicit
    if config_given or Path(run_dir).is_dir():
        return RunDir(run_dir).for_translation()
    runs = [p.parent for p in RUNS_ROOT.glob("*/last.pt")]
    if not runs:
        raise NmtError("no checkpoint found: pass --checkpoint or --config (train first)")
    return RunDir(max(runs, key=lambda p: (p / "last.pt").stat().st_mtime)).for_translation()


def _link_or_copy(src: Path, dst: Path) -> None:
    """Point `dst` at the same bytes as `src` atomically (hard link when possible: no second write)."""
    tmp = dst.with_name(f".{dst.name}.link{TMP_SUFFIX}")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
        os.replace(tmp, dst)
        fsync_dir(dst.parent)
    except OSError:
        tmp.unlink(missing_ok=True)
        atomic_write(dst, lambda f: f.write(src.read_bytes()))
