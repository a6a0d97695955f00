"""Where the compiled search's packages (nmt.search.compiled) live on disk: a checkpoint's directory of them, the
removal of the stale twins a new build replaces, and loading one."""

from __future__ import annotations

import hashlib
import importlib
import os
import re
from pathlib import Path
from typing import Any

import torch


def package_dir(checkpoint: Path | None) -> Path:
    """Where a checkpoint's packages are kept: `<checkpoint>.compiled/` beside it where that can be written, else a
    directory of its own (named by its path) in the user's cache, `$XDG_CACHE_HOME/nmt/compiled` (by default
    ~/.cache/nmt/compiled). One checkpoint path per directory: a package built there replaces its stale twins
    (prune)."""
    if checkpoint is not None:
        beside = Path(checkpoint).with_name(Path(checkpoint).name + ".compiled")
        if os.access(beside if beside.exists() else beside.parent, os.W_OK):
            return beside
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nmt" / "compiled"
    owner = hashlib.sha256(str(Path(checkpoint).resolve()).encode()).hexdigest()[:16] if checkpoint else "unnamed"
    return cache / owner


def prune(directory: Path, prefix: str, keep: Path) -> list[Path]:
    """Remove the packages named `prefix` (a kind, weights and shape) in `directory` but `keep`: built from what the
    checkpoint at this path held before, or by other code or another torch, none of them is loaded again (a package
    holds its weights: about 100 MB for a base model's step). A process that loaded one keeps it (unlinked, still
    open). Returns what was removed."""
    name = re.compile(rf"{re.escape(prefix)}-[0-9a-f]{{16}}\.pt2")  # not another build's temporary file
    stale = [p for p in directory.glob(f"{prefix}-*.pt2") if p != keep and name.fullmatch(p.name)]
    for path in stale:
        path.unlink(missing_ok=True)
    return stale


def load(path: Path) -> Any:
    """The package's loader, called flat (`boxed_run`: a list of tensors in, a list out). Not through
    torch._inductor.aoti_load_package: importing torch._inductor takes seconds at every start, and the loaded model's
    __call__ parses its input and output specification from JSON at every step (about a quarter of a millisecond).
    Inductor's AMX micro-kernels need the process to have asked Linux for the AMX registers (which importing
    torch._inductor, or a oneDNN bf16 or int8 call, does on the way): without it a package autotuned to them dies of
    SIGILL at its first call, so it is asked here (a no-op on CPUs without AMX)."""
    init_amx = getattr(torch.cpu, "_init_amx", None)
    if init_amx is not None:
        init_amx()
    try:
        return torch._C._aoti.AOTIModelPackageLoader(str(path), "model", False, 1, -1)
    except (AttributeError, RuntimeError, TypeError):  # another torch's loader: its public way
        return importlib.import_module("torch._inductor").aoti_load_package(str(path)).loader
