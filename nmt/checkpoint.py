"""The checkpoint file format: self-contained, written atomically, loaded with clear errors, averaged
as in the paper. Which checkpoints a run keeps, and where, is nmt.rundir's business.

A checkpoint holds everything `nmt translate` needs (weights, config, tokenizer model bytes) and,
for training checkpoints, everything an exact resume needs (optimizer, scheduler, scaler, RNG
states, sampler position, counters).
"""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path
from typing import Any

import torch

from nmt.errors import CheckpointError, NmtError, first_line
from nmt.io import atomic_write

FORMAT = "nmt-checkpoint"
VERSION = 1


def save(state: dict[str, Any], path: str | Path) -> None:
    """Atomically save a checkpoint dict (adds format/version tags)."""
    payload = {"format": FORMAT, "version": VERSION, **state}
    atomic_write(path, lambda f: torch.save(payload, f))


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
        reason = first_line(e, 120)
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


def average(paths: list[Path]) -> dict[str, Any]:
    """Average the weights of several checkpoints (Vaswani et al.: last 5/20 checkpoints). Names that share
    one tensor in the first checkpoint (tied embeddings) share one averaged tensor, as the model saved them."""
    if not paths:
        raise NmtError("no checkpoints to average")
    first = load(paths[0])
    names = tensors_by_storage(first["model"])
    total = {k: first["model"][k].double() if first["model"][k].is_floating_point() else first["model"][k].clone()
             for k in names}
    for p in paths[1:]:
        model = load(p)["model"]
        if model.keys() != first["model"].keys():
            raise CheckpointError(f"{p}: parameters differ from {paths[0]}; cannot average")
        for k, v in total.items():
            if v.is_floating_point():
                v += model[k].double()
    averaged = {}
    for k, v in total.items():
        dtype = first["model"][k].dtype
        mean = (v / len(paths)).to(dtype) if v.is_floating_point() else v
        averaged.update(dict.fromkeys(names[k], mean))
    out = {k: v for k, v in first.items() if k not in ("model", "train_state", "format", "version")}
    out["model"] = {k: averaged[k] for k in first["model"]}
    out["averaged_from"] = [str(p) for p in paths]
    return out


def tensors_by_storage(weights: dict[str, Any]) -> dict[str, list[str]]:
    """First name of each distinct tensor -> every name that is that same tensor (same storage and view),
    e.g. tied embeddings; entries that are not tensors are left out."""
    groups: dict[tuple[Any, ...], list[str]] = {}
    for name, t in weights.items():
        if not isinstance(t, torch.Tensor):
            continue
        view = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)
        groups.setdefault(view, []).append(name)
    return {group[0]: group for group in groups.values()}
