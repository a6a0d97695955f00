"""What a training checkpoint holds besides the weights, so that a resume is exact: the optimizer,
loss scaler and sampler states, every rank's RNG states and the run's counters."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from nmt.checkpoint import Checkpoint
from nmt.data.datadir import DataDir
from nmt.errors import NmtError
from nmt.rundir import RunDir, experiment_differences


class SkippedUpdate(Exception):
    """An update whose step was not taken (non-finite gradient, or no sentence fit in memory)."""


@dataclass
class Counters:
    step: int = 0
    epoch: int = 1
    best: float | None = None
    bad_validations: int = 0
    bad_updates: int = 0  # consecutive skipped updates
    skipped_updates: int = 0  # total skipped updates
    oom_splits: int = 0  # batches split in two after running out of memory
    oom_skipped: int = 0  # single sentences skipped because even they ran out of memory
    elapsed: float = 0.0  # training seconds, summed over resumes (for max_minutes)

    def validated(self, metric: float, higher_is_better: bool) -> bool:
        """Keep `metric` when it is the best yet (True); otherwise count one more validation without progress."""
        if self.best is None or (metric > self.best if higher_is_better else metric < self.best):
            self.best, self.bad_validations = metric, 0
            return True
        self.bad_validations += 1
        return False

    def skipped(self) -> None:
        self.bad_updates += 1
        self.skipped_updates += 1

    def stepped(self) -> None:
        self.bad_updates, self.step = 0, self.step + 1


def rng_state(device: torch.device) -> dict[str, Any]:
    """This process's random states: CPU, Python, NumPy, and the GPU it trains on (only that one: a resume
    may see other GPUs, or fewer)."""
    state = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": list(np.random.get_state())}
    state["numpy"][1] = state["numpy"][1].tolist()
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    """Continue the streams of `rng_state`. Older checkpoints hold every visible GPU's state (a list): the
    one of this process's GPU index is used, if the saving process saw that many."""
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np_state = list(state["numpy"])
    np_state[1] = np.asarray(np_state[1], dtype=np.uint32)
    np.random.set_state(tuple(np_state))
    cuda = state.get("cuda")
    if cuda is None or device.type != "cuda":
        return
    if isinstance(cuda, (list, tuple)):
        index = device.index or 0
        if index >= len(cuda):
            return
        cuda = cuda[index]
    torch.cuda.set_rng_state(cuda, device)


def seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)


def training_state(counters: Counters, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
                   sampler_state: dict[str, int], rng: Any) -> dict[str, Any]:
    """The checkpoint's "train_state"; `sampler_state` is the sampler's after the last batch trained on,
    `rng` every rank's rng_state() (one per rank under DDP)."""
    return {
        "step": counters.step,
        "optimizer": optimizer.state_dict(),
        "scaler": scaler.state_dict() if scaler.is_enabled() else None,
        "sampler": dict(sampler_state),
        "rng": rng,
        "progress": asdict(counters),
    }


def resume_point(run_dir: RunDir, force: bool, main: bool, warn: Callable[[str], None]) -> Checkpoint | None:
    """The newest intact checkpoint of the run dir, or None to start. When every checkpoint is damaged,
    starting over would mix new checkpoints with the damaged ones (pruning, averaging): only --force does,
    and clears the run dir first. Call holding the run dir's lock."""
    if main:
        run_dir.remove_partial_writes()  # left by a kill during a save
    damaged: list[str] = []

    def note(message: str) -> None:
        damaged.append(message)
        warn(message)

    state = run_dir.newest_intact(warn=note)
    if state is None and damaged:
        if not force:
            raise NmtError(f"no intact checkpoint in {run_dir}: all {len(damaged)} are damaged "
                           "(see the warnings above); use --force to start over")
        if main:
            run_dir.clear()
    return state


def check_resumable(ckpt: Checkpoint, data: DataDir, cfg: dict[str, Any]) -> None:
    """A checkpoint continues this run only with the same languages, vocabularies and model, and on the
    same prepared data unless train.resume_on_new_data says otherwise."""
    where, langs, sizes = ckpt.where, data.langs, data.vocab_sizes
    if (ckpt.langs or langs) != langs:
        raise NmtError(f"{where} translates {'->'.join(ckpt.langs)} but {data} holds {'->'.join(langs)}")
    if ckpt.vocab_sizes != sizes:
        src, tgt = ckpt.vocab_sizes
        raise NmtError(f"{where} was trained with vocabularies {src}/{tgt} but {data} has {sizes[0]}/{sizes[1]}")
    diffs = experiment_differences(ckpt.saved_config, cfg)
    if diffs:
        raise NmtError(f"{where} belongs to another experiment ({diffs[0]}); use --force")
    old, new = ckpt.data_fingerprint, data.fingerprint
    if old and new and old != new and not cfg["train"]["resume_on_new_data"]:
        raise NmtError(f"{where} was trained on other data: {data} was prepared again since (fingerprint "
                       f"{old[:12]} -> {new[:12]}); use --force to start over, or "
                       "--set train.resume_on_new_data=true to continue on the new data")


def restore(ckpt: Checkpoint, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
            scaler: torch.amp.GradScaler, sampler: Any, rank: int, world: int, seed: int,
            device: torch.device = torch.device("cpu")) -> Counters:
    """Load a training checkpoint into the run's objects; returns its counters.

    Each rank continues its own RNG stream. Resumed with another number of processes, the streams
    cannot continue (ranks would be missing or share one): every rank then starts a new one, seeded by
    (seed, step, rank); the batch order continues either way (the sampler's position is global)."""
    ts = ckpt.train_state
    model.load_state_dict(ckpt.weights)
    optimizer.load_state_dict(ts["optimizer"])
    if ts.get("scaler"):
        scaler.load_state_dict(ts["scaler"])
    sampler.load_state_dict(ts["sampler"])
    rng = ts["rng"] if isinstance(ts["rng"], list) else [ts["rng"]]
    if len(rng) == world:
        set_rng_state(rng[rank], device)
    else:
        seed_everything((seed * 1_000_003 + ts["step"] * 1_009 + rank) % 2**32)
    return Counters(**ts["progress"])
