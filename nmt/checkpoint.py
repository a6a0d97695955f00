"""Checkpoints: self-contained, written atomically, loaded with clear errors, averaged as in the paper.

A checkpoint holds everything `nmt translate` needs (weights, config, tokenizer model bytes) and,
for training checkpoints, everything an exact resume needs (optimizer, scheduler, scaler, RNG
states, sampler position, counters).
"""

from __future__ import annotations

import errno
import os
import re
import tempfile
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from nmt.errors import CheckpointError, NmtError

FORMAT = "nmt-checkpoint"
VERSION = 1
_STEP_RE = re.compile(r"^checkpoint_(\d+)\.pt$")


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # some filesystems/platforms cannot open directories
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str | Path, write: Callable[[Any], None]) -> None:
    """Write through a temp file in the same dir, fsync, then rename: readers see old or new, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would hide checkpoints from the rest of a team
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError) and e.errno == errno.ENOSPC:
            raise NmtError(f"no space left on device while writing {path}; previous files are intact") from None
        raise


def save(state: dict[str, Any], path: str | Path) -> None:
    """Atomically save a checkpoint dict (adds format/version tags)."""
    payload = {"format": FORMAT, "version": VERSION, **state}
    atomic_write(path, lambda f: torch.save(payload, f))


def link_or_copy(src: str | Path, dst: str | Path) -> None:
    """Point `dst` at the same bytes as `src` atomically (hard link when possible: no second write)."""
    src, dst = Path(src), Path(dst)
    tmp = dst.with_name(f".{dst.name}.link.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
        os.replace(tmp, dst)
        _fsync_dir(dst.parent)
    except OSError:
        tmp.unlink(missing_ok=True)
        atomic_write(dst, lambda f: f.write(src.read_bytes()))


def remove_partial_writes(run_dir: str | Path) -> None:
    """Delete the temp files of checkpoint/config writes a kill interrupted (atomic_write's and link_or_copy's)."""
    for pattern in (".*.pt.*.tmp", ".config.yaml.*.tmp"):
        for p in Path(run_dir).glob(pattern):
            if p.is_file():
                p.unlink(missing_ok=True)


def _damaged_member(path: Path) -> str | None:
    """The first record of a torch zip archive whose CRC-32 does not match (torch.load does not check them:
    a flipped bit in the weights would load silently), or None. Non-zip files are left to torch.load."""
    if not zipfile.is_zipfile(path):
        return None
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.testzip()
    except (zipfile.BadZipFile, EOFError, ValueError, NotImplementedError, zlib.error) as e:
        return f"the archive ({type(e).__name__})"


def load(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load and check a checkpoint; any damage is a one-line CheckpointError naming the file."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    if path.stat().st_size == 0:
        raise CheckpointError(f"{path}: empty checkpoint file (0 bytes)")
    damaged = _damaged_member(path)
    if damaged is not None:
        raise CheckpointError(f"{path}: corrupt checkpoint (checksum mismatch in {damaged})")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # torch raises many types for truncated/garbled files
        reason = str(e).strip().splitlines()[0][:120] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"{path}: corrupt or truncated checkpoint ({reason})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not an nmt checkpoint")
    if state.get("version") != VERSION:
        raise CheckpointError(
            f"{path}: checkpoint format version {state.get('version')!r}, this nmt reads version {VERSION}"
        )
    for key in ("model", "config", "tokenizer", "vocab"):
        if key not in state:
            raise CheckpointError(f"{path}: checkpoint lacks '{key}'")
    return state


def step_checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    """`checkpoint_<step>.pt` files in the run dir, oldest first."""
    found = []
    for p in Path(run_dir).glob("checkpoint_*.pt"):
        m = _STEP_RE.match(p.name)
        if m:
            found.append((int(m.group(1)), p))
    return sorted(found)


def prune(run_dir: str | Path, keep_last: int) -> None:
    """Remove all but the newest `keep_last` step checkpoints (last/best/averaged are never touched)."""
    for _, p in step_checkpoints(run_dir)[:-keep_last]:
        p.unlink(missing_ok=True)


def newest_intact(run_dir: str | Path, warn: Callable[[str], None] = lambda _: None) -> dict[str, Any] | None:
    """The newest loadable training checkpoint: step checkpoints newest first, then last.pt.

    Loading stops at the first intact one (older files are never read). Damaged candidates are
    reported through `warn` and skipped, so a kill during a write or a corrupted file never loses
    the run. last.pt is a hard link to the newest step checkpoint, so it is only a fallback.
    """
    run_dir = Path(run_dir)
    candidates = [p for _, p in reversed(step_checkpoints(run_dir))] + [run_dir / "last.pt"]
    for p in candidates:
        if not p.exists():
            continue
        try:
            state = load(p)
        except CheckpointError as e:
            warn(f"{e}; trying an older checkpoint")
            continue
        if "train_state" in state:
            state["_path"] = str(p)
            return state
    return None


def average(paths: list[Path]) -> dict[str, Any]:
    """Average the weights of several checkpoints (Vaswani et al.: last 5/20 checkpoints)."""
    if not paths:
        raise NmtError("no checkpoints to average")
    first = load(paths[0])
    total = {k: v.double() if v.is_floating_point() else v.clone() for k, v in first["model"].items()}
    for p in paths[1:]:
        model = load(p)["model"]
        if model.keys() != total.keys():
            raise CheckpointError(f"{p}: parameters differ from {paths[0]}; cannot average")
        for k, v in model.items():
            if v.is_floating_point():
                total[k] += v.double()
    dtype = {k: v.dtype for k, v in first["model"].items()}
    averaged = {k: (v / len(paths)).to(dtype[k]) if v.is_floating_point() else v for k, v in total.items()}
    out = {k: v for k, v in first.items() if k not in ("model", "train_state", "format", "version")}
    out["model"] = averaged
    out["averaged_from"] = [str(p) for p in paths]
    return out


def resolve_for_translation(run_dir: str | Path) -> Path:
    """Default checkpoint of a run: averaged.pt, else best.pt, else last.pt."""
    run_dir = Path(run_dir)
    for name in ("averaged.pt", "best.pt", "last.pt"):
        if (run_dir / name).is_file():
            return run_dir / name
    raise CheckpointError(f"no checkpoint in {run_dir} (train first, or pass --checkpoint)")
