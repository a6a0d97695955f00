"""The benches' modules (bench/*.py) for tests of their arithmetic: they import each other by their plain names
(`from common import ...`), as `python bench/train.py` runs them, so bench/ goes on sys.path first."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import yaml

from .paths import ROOT

BENCH = ROOT / "bench"


def bench_module(name: str) -> ModuleType:
    """bench/<name>.py as the module `bench_<name>` (imported once), its own imports from bench/."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    if (loaded := sys.modules.get(f"bench_{name}")) is not None:
        return loaded
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def tiny_bench_config(path, **train: object) -> str:
    """A YAML config of a model small enough for a bench row in a test (bench/train.py --configs PATH)."""
    model = {"d_model": 16, "n_heads": 2, "d_ff": 32, "encoder_layers": 1, "decoder_layers": 1, "dropout": 0.0}
    path.write_text(yaml.safe_dump({"model": model, "train": train}), encoding="utf-8")
    return str(path)
