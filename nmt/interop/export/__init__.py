"""`nmt export`: a trained (or imported) nmt model -> a model another engine runs as `nmt translate` does.

One module per target, each a `write(model, directory, **options)` over nmt.interop.modelspec's description of the
model (never the checkpoint's keys): ct2 (CTranslate2, through its own model-spec API), argos (an Argos
Translate package, which LibreTranslate serves), hf (a Hugging Face MarianMTModel directory). This module does
what every target shares: which checkpoint (a file, or a run dir's averaged/best/last as `nmt translate` picks
it), refusing an existing output unless --force, and writing into a temporary path beside the output that is
moved into place only when complete, so a failed export leaves nothing half-written.
"""

from __future__ import annotations

import importlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nmt import checkpoint
from nmt.errors import NmtError
from nmt.interop.modelspec import describe
from nmt.io import TMP_SUFFIX, fsync_dir
from nmt.log import console
from nmt.rundir import checkpoint_file

TARGETS = ("ct2", "argos", "hf")


def export(source: Path, to: str, output: Path, *, force: bool = False, **options: Any) -> Path:
    """The `nmt export` command: the model at `source` (checkpoint or run dir) written for `to` at `output`."""
    if to not in TARGETS:
        raise NmtError(f"--to {to}: unknown target (choose one of {', '.join(TARGETS)})")
    path = checkpoint_file(source)
    if not path.is_file():
        raise NmtError(f"{path}: no such checkpoint (pass a checkpoint file or a run dir)")
    if output.exists() and not force:
        raise NmtError(f"{output} exists: pass --force to replace it")
    model = describe(checkpoint.load(path))
    target = importlib.import_module(f"nmt.interop.export.{to}")
    write: Callable[..., None] = target.write
    written = _atomically(output, lambda tmp: write(model, tmp, **options))
    console.print(f"exported {path} for {to} -> {written}")
    if hasattr(target, "after"):  # what a target does with the finished output (hf: --push uploads it)
        target.after(written, **options)
    return written


def _atomically(output: Path, build: Callable[[Path], None]) -> Path:
    """Run `build` on a fresh temporary path beside `output` (a directory it fills, or a file it writes), then
    put the result at `output` in one rename (replacing what --force allowed to replace)."""
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp_dir = Path(tempfile.mkdtemp(prefix=f".{output.name}.", suffix=TMP_SUFFIX, dir=output.parent))
    tmp = tmp_dir / output.name
    try:
        build(tmp)
        if output.is_dir() and not output.is_symlink():
            shutil.rmtree(output)
        elif output.exists():
            output.unlink()
        os.replace(tmp, output)
        fsync_dir(output.parent)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
    return output

