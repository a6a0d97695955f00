"""Training: label-smoothed cross-entropy, Adam with warmup, AMP, accumulation, DDP, exact resume.

One update = `update_freq` token-budget batches per process. The loss of an update is the sum
over its target tokens divided by the update's total target tokens across all processes, so
`torchrun --nproc_per_node W` computes the same gradient as one process with `update_freq * W`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import random
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
import yaml
from torch import nn

from nmt import checkpoint
from nmt.batching import Batch, TokenBatchSampler, collate
from nmt.config import Config, config_from_dict
from nmt.device import pick_device
from nmt.errors import ConfigError, NmtError
from nmt.log import Reporter
from nmt.model import Transformer
from nmt.prepare import load_split, read_meta
from nmt.score import corpus_bleu
from nmt.search import greedy_search
from nmt.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer


def label_smoothed_loss(
    logits: torch.Tensor, target: torch.Tensor, epsilon: float, pad: int = PAD_ID
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sum over non-pad tokens of the label-smoothed loss and of the plain NLL.

    Smoothing spreads `epsilon` uniformly over the vocabulary (Szegedy et al. 2016, as in the
    paper): loss = (1 - eps) * nll + eps * mean_v(-log p_v).
    """
    vocab = logits.size(-1)
    lprobs = F.log_softmax(logits.float(), dim=-1).view(-1, vocab)
    target = target.reshape(-1)
    # masks instead of boolean indexing: no [tokens, vocab] copies in forward or backward
    nll = F.nll_loss(lprobs, target, ignore_index=pad, reduction="sum")
    smooth = -(lprobs.sum(dim=-1) * (target != pad)).sum() / vocab
    return (1.0 - epsilon) * nll + epsilon * smooth, nll


def learning_rate(step: int, cfg: Config) -> float:
    """Learning rate for update `step` (1-based).

    noam (the paper): lr * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), `lr` a scale factor.
    inverse_sqrt (fairseq): linear warmup from warmup_init_lr to lr, then lr * sqrt(warmup / step).
    """
    t, step = cfg.train, max(step, 1)
    if t.schedule == "noam":
        warmup = max(t.warmup, 1)
        return t.lr * cfg.model.d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
    if step < t.warmup:
        return t.warmup_init_lr + (t.lr - t.warmup_init_lr) * step / t.warmup
    return t.lr * math.sqrt(max(t.warmup, 1) / step)


# Exceptions meaning "this batch does not fit in memory". A tuple so tests can add a CPU-raisable class.
OOM_ERRORS: tuple[type[BaseException], ...] = (torch.cuda.OutOfMemoryError,)


def is_oom(error: BaseException) -> bool:
    return isinstance(error, OOM_ERRORS) or (isinstance(error, RuntimeError) and "out of memory" in str(error))


def split_batch(batch: Batch) -> list[Batch]:
    """The two halves (by sentences) of a batch of >= 2 sentences, each trimmed to its own padding."""
    half = len(batch) // 2
    pieces = []
    for rows in (slice(0, half), slice(half, len(batch))):
        src, tgt_in, tgt_out = batch.src[rows], batch.tgt_in[rows], batch.tgt_out[rows]
        src_width = int((src != PAD_ID).sum(1).max())
        tgt_width = int((tgt_out != PAD_ID).sum(1).max())
        pieces.append(Batch(
            src=src[:, :src_width], tgt_in=tgt_in[:, :tgt_width], tgt_out=tgt_out[:, :tgt_width],
            n_src_tokens=int((src != PAD_ID).sum()), n_tgt_tokens=int((tgt_out != PAD_ID).sum()),
            index=batch.index[rows],
        ))
    return pieces


# --------------------------------------------------------------------------- environment


@dataclass
class DistEnv:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0


def init_distributed(device: torch.device) -> DistEnv:
    """Join the process group torchrun set up (env RANK/WORLD_SIZE); single process otherwise."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistEnv()
    env = DistEnv(int(os.environ["RANK"]), world, int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return env


def amp_dtype(amp: str, device: torch.device) -> torch.dtype | None:
    """Autocast dtype: bf16 where supported, fp16 (with GradScaler) on older GPUs, none on CPU by default."""
    if amp == "none" or (amp == "auto" and device.type != "cuda"):
        return None
    if amp == "auto":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if amp == "fp16" and device.type != "cuda":
        raise NmtError("train.amp=fp16 needs a CUDA device (use bf16 or none on CPU)")
    return torch.bfloat16 if amp == "bf16" else torch.float16


def rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": list(np.random.get_state())}
    state["numpy"][1] = state["numpy"][1].tolist()
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np_state = list(state["numpy"])
    np_state[1] = np.asarray(np_state[1], dtype=np.uint32)
    np.random.set_state(tuple(np_state))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class RunLock:
    """An exclusive lock on the run dir so two trainings never write the same checkpoints."""

    def __init__(self, run_dir: Path):
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / ".lock"
        self.file = open(self.path, "a+")  # noqa: SIM115 - held for the whole run
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.file.seek(0)
            owner = self.file.read().strip() or "?"
            self.file.close()
            raise NmtError(f"run dir {run_dir} is in use by another `nmt train` (pid {owner})") from None
        self.file.seek(0)
        self.file.truncate()
        self.file.write(str(os.getpid()))
        self.file.flush()

    def release(self) -> None:
        with contextlib.suppress(OSError):
            fcntl.flock(self.file, fcntl.LOCK_UN)
        self.file.close()


# --------------------------------------------------------------------------- state


@dataclass
class Progress:
    """Counters saved in every checkpoint (the rest of the resume state lives beside them)."""

    step: int = 0
    epoch: int = 1
    best: float | None = None
    bad_validations: int = 0
    bad_updates: int = 0  # consecutive non-finite updates
    skipped_updates: int = 0  # total non-finite updates skipped
    oom_splits: int = 0  # batches split in two after running out of memory
    oom_skipped: int = 0  # single sentences skipped because even they ran out of memory
    elapsed: float = 0.0  # training seconds, summed over resumes (for max_minutes)


def _experiment_key(cfg_dict: dict[str, Any]) -> dict[str, Any]:
    """The parts of a config that make a run dir 'the same experiment'."""
    # The data side is checked against the checkpoint's vocabulary/languages (the data dir's meta.json
    # is the truth there, not the data section of a train config).
    return {"model": cfg_dict["model"]}


def _differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return [
        f"{s}.{k}: {a[s].get(k)!r} vs {b[s].get(k)!r}"
        for s in a
        for k in sorted(set(a[s]) | set(b[s]))
        if a[s].get(k) != b[s].get(k)
    ]


def check_run_dir(cfg: Config, run_dir: Path, force: bool) -> None:
    """Refuse to mix two experiments in one run dir unless --force (which clears it)."""
    saved = run_dir / "config.yaml"
    if not saved.is_file():
        return
    try:
        old = config_from_dict(yaml.safe_load(saved.read_text(encoding="utf-8")) or {}).to_dict()
    except Exception:
        old = None
    diffs = ["config.yaml unreadable"] if old is None else _differences(
        _experiment_key(old), _experiment_key(cfg.to_dict())
    )
    if not diffs:
        return
    if not force:
        raise NmtError(
            f"run dir {run_dir} holds another experiment ({diffs[0]}); "
            "use --force to start over or choose another train.run_dir"
        )
    clear_run_dir(run_dir)


def clear_run_dir(run_dir: Path) -> None:
    for p in run_dir.iterdir():
        if p.name == ".lock":
            continue
        shutil.rmtree(p) if p.is_dir() else p.unlink()


def adam(params: list[nn.Parameter], **kwargs: Any) -> torch.optim.Adam:
    """Adam with the fused kernel (one pass over all parameters; ~3x faster steps for the base model on
    CPU) where this torch has it for the parameters' device, else the default multi-tensor version."""
    try:
        return torch.optim.Adam(params, fused=True, **kwargs)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.Adam(params, **kwargs)


# --------------------------------------------------------------------------- the trainer


class Trainer:
    def __init__(self, cfg: Config, *, force: bool = False, progress: bool | None = None):
        self.cfg = cfg
        self.force = force
        t = cfg.train
        if t.threads > 0:
            torch.set_num_threads(t.threads)
        self.device = pick_device(t.device, "train.device", int(os.environ.get("LOCAL_RANK", "0")))
        self.env = init_distributed(self.device)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        self.run_dir = Path(t.run_dir)
        self.report = Reporter(self.run_dir, enabled=self.env.main, progress=progress, tensorboard=t.tensorboard)
        self.meta = read_meta(cfg.data.dir)
        self.tokenizer = Tokenizer.load(cfg.data.dir)
        self.train_data = load_split(cfg.data.dir, "train")
        self.valid_data = load_split(cfg.data.dir, "valid") if "valid" in self.meta["splits"] else None
        self.lock = RunLock(self.run_dir) if self.env.main else None
        try:
            if self.env.main:
                check_run_dir(cfg, self.run_dir, force)
            self._barrier()
            self._build()
        except BaseException:
            self.close()
            raise

    # ---- setup
    def _build(self) -> None:
        cfg, t = self.cfg, self.cfg.train
        torch.manual_seed(t.seed)
        random.seed(t.seed)
        np.random.seed(t.seed)
        self.model = Transformer(
            self.meta["src_vocab_size"], self.meta["tgt_vocab_size"], pad_id=PAD_ID, **asdict(cfg.model)
        ).to(self.device)
        self.ddp = (
            torch.nn.parallel.DistributedDataParallel(self.model, device_ids=None if self.device.type == "cpu"
                                                      else [self.device.index])
            if self.env.world > 1 else None
        )
        self.optimizer = adam(list(self.model.parameters()), lr=learning_rate(1, cfg), betas=tuple(t.betas),
                              eps=t.eps, weight_decay=t.weight_decay)
        self.dtype = amp_dtype(t.amp, self.device)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.dtype == torch.float16)
        lens = self.train_data.with_format("numpy", columns=["src_len", "tgt_len"])[:]
        self._check_positions(lens)
        self.sampler = TokenBatchSampler(
            lens["src_len"], lens["tgt_len"], t.max_tokens, shuffle=True, seed=t.seed,
            num_replicas=self.env.world, rank=self.env.rank,
        )
        self.sampler.set_epoch(1)
        self.state = Progress()
        if self.env.main:
            checkpoint.remove_partial_writes(self.run_dir)  # left by a kill during a save; we hold the lock
        damaged: list[str] = []

        def warn(message: str) -> None:
            damaged.append(message)
            self.report.warn(message)

        resumed = checkpoint.newest_intact(self.run_dir, warn=warn)
        if resumed is None and damaged:
            # starting over would mix new checkpoints with the damaged ones (prune, average): the user decides
            if not self.force:
                raise NmtError(f"no intact checkpoint in {self.run_dir}: all {len(damaged)} are damaged "
                               "(see the warnings above); use --force to start over")
            if self.env.main:
                clear_run_dir(self.run_dir)
        if resumed is not None:
            self._restore(resumed)
        elif self.env.main:
            # atomic: a kill while writing it must not make the run dir look like another experiment
            checkpoint.atomic_write(self.run_dir / "config.yaml",
                                    lambda f: f.write(yaml.safe_dump(cfg.to_dict(), sort_keys=False).encode()))
            self.report.truncate_metrics(0)  # records of a run killed before its first checkpoint
        self._valid_refs: list[str] | None = None
        self.skip_reason = ""
        self._piece = 0
        # Sizes the time-budget reserve; re-measured at every save/validation. A first guess from the
        # checkpoint size (weights + 2 Adam moments) at a conservative 100 MB/s.
        n_bytes = sum(p.numel() * p.element_size() for p in self.model.parameters()) * 3
        self.save_seconds = 0.05 + n_bytes / 100e6
        self.valid_seconds = 0.0
        self.saved_step = self.state.step if resumed is not None else -1

    def _check_positions(self, train_lens: dict[str, np.ndarray]) -> None:
        """Every sentence (+ EOS/BOS) must fit model.max_positions: else the first long batch would crash."""
        splits = {"training": train_lens}
        if self.valid_data is not None and len(self.valid_data):
            splits["validation"] = self.valid_data.with_format("numpy", columns=["src_len", "tgt_len"])[:]
        for name, lens in splits.items():
            longest = int(max(lens["src_len"].max(initial=0), lens["tgt_len"].max(initial=0))) + 1
            if longest > self.cfg.model.max_positions:
                raise ConfigError(f"model.max_positions={self.cfg.model.max_positions} but the longest {name} "
                                  f"sentence needs {longest} positions; raise it (or prepare with a lower "
                                  "data.max_len)")

    def _restore(self, state: dict[str, Any]) -> None:
        vocab, langs = state["vocab"], (self.meta["src_lang"], self.meta["tgt_lang"])
        if tuple(state.get("langs", langs)) != langs:
            raise NmtError(f"{state['_path']} translates {'->'.join(state['langs'])} but {self.cfg.data.dir} "
                           f"holds {'->'.join(langs)}")
        if (vocab["src"], vocab["tgt"]) != (self.meta["src_vocab_size"], self.meta["tgt_vocab_size"]):
            raise NmtError(
                f"{state['_path']} was trained with vocabularies {vocab['src']}/{vocab['tgt']} but "
                f"{self.cfg.data.dir} has {self.meta['src_vocab_size']}/{self.meta['tgt_vocab_size']}"
            )
        diffs = _differences(_experiment_key(state["config"]), _experiment_key(self.cfg.to_dict()))
        if diffs:
            raise NmtError(f"{state['_path']} belongs to another experiment ({diffs[0]}); use --force")
        ts = state["train_state"]
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(ts["optimizer"])
        self.scaler.load_state_dict(ts["scaler"]) if ts.get("scaler") else None
        self.sampler.load_state_dict(ts["sampler"])
        self.state = Progress(**ts["progress"])
        set_rng_state(ts["rng"][self.env.rank] if isinstance(ts["rng"], list) else ts["rng"])
        self.report.truncate_metrics(self.state.step)
        self.report.info(f"resumed from {state['_path']} at update {self.state.step}, epoch {self.state.epoch}")

    def close(self) -> None:
        if getattr(self, "lock", None) is not None:
            self.lock.release()
            self.lock = None
        self.report.close()

    def _barrier(self) -> None:
        if self.env.world > 1:
            dist.barrier()

    # ---- checkpoints
    def _state_dict(self, with_training: bool = True) -> dict[str, Any]:
        state = {
            "model": self.model.state_dict(),
            "config": self.cfg.to_dict(),
            "tokenizer": self.tokenizer.to_state(),
            "vocab": {"src": self.meta["src_vocab_size"], "tgt": self.meta["tgt_vocab_size"]},
            "langs": [self.meta["src_lang"], self.meta["tgt_lang"]],
            "data_fingerprint": self.meta.get("fingerprint"),
        }
        if with_training:
            rng = self._gather_rng()
            state["train_state"] = {
                "step": self.state.step,
                "optimizer": self.optimizer.state_dict(),
                "scaler": self.scaler.state_dict() if self.scaler.is_enabled() else None,
                "sampler": self.sampler.state_dict(),
                "rng": rng,
                "progress": asdict(self.state),
            }
        return state

    def _gather_rng(self) -> Any:
        """RNG states of every rank (dropout differs per rank), so each resumes its own stream."""
        mine = rng_state()
        if self.env.world == 1:
            return mine
        everyone: list[Any] = [None] * self.env.world
        dist.all_gather_object(everyone, mine)
        return everyone

    def save(self) -> None:
        state = self._state_dict()  # collective under DDP: every rank calls save()
        self.saved_step = self.state.step
        if not self.env.main:
            return
        started = time.monotonic()
        path = self.run_dir / f"checkpoint_{self.state.step}.pt"
        checkpoint.save(state, path)
        checkpoint.link_or_copy(path, self.run_dir / "last.pt")
        checkpoint.prune(self.run_dir, max(self.cfg.train.keep_last, self.cfg.train.average_last))
        self.save_seconds = time.monotonic() - started

    def average(self) -> None:
        k = self.cfg.train.average_last
        if not self.env.main or k <= 1:
            return
        paths = [p for _, p in checkpoint.step_checkpoints(self.run_dir)][-k:]
        if len(paths) < 2:
            return
        checkpoint.save(checkpoint.average(paths), self.run_dir / "averaged.pt")
        self.report.info(f"averaged {len(paths)} checkpoints into {self.run_dir / 'averaged.pt'}")

    # ---- one update
    def _batches(self) -> Iterator[Batch]:
        while True:
            for indices in self.sampler:
                rows = self.train_data[list(map(int, indices))]
                yield collate(rows["src_ids"], rows["tgt_ids"], indices)
            if self.cfg.train.max_epochs and self.state.epoch >= self.cfg.train.max_epochs:
                return
            self.state.epoch += 1
            self.sampler.set_epoch(self.state.epoch)

    def _autocast(self) -> contextlib.AbstractContextManager:
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.dtype)

    def _update(self, group: list[Batch]) -> dict[str, float] | None:
        """Forward/backward over a group of batches and one optimizer step. None = skipped (see skip_reason)."""
        t = self.cfg.train
        ntok = torch.tensor([sum(b.n_tgt_tokens for b in group)], dtype=torch.float64, device=self.device)
        if self.env.world > 1:
            dist.all_reduce(ntok)
        total = float(ntok.item())
        self.model.train()
        pieces = list(group)
        while True:
            try:
                loss_sum, nll_sum = self._forward_backward(pieces, total)
                break
            except Exception as e:
                if not is_oom(e):
                    raise
                if self.env.world > 1:  # the other ranks wait in all-reduce: a retry here cannot match them
                    raise NmtError(f"out of memory at update {self.state.step + 1} on rank {self.env.rank}; "
                                   "lower train.max_tokens (and raise train.update_freq)") from None
            # outside `except`: the traceback (and with it the failed batch's activations) is gone now
            pieces = self._after_oom(pieces)
            if not pieces:
                self.skip_reason = "out of memory on every sentence"
                return None
        self.scaler.unscale_(self.optimizer)
        gnorm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), t.clip_norm if t.clip_norm > 0 else math.inf)
        lr = learning_rate(self.state.step + 1, self.cfg)
        for group_ in self.optimizer.param_groups:
            group_["lr"] = lr
        finite = bool(torch.isfinite(gnorm)) and math.isfinite(loss_sum)
        if not finite and not self.scaler.is_enabled():
            self.optimizer.zero_grad(set_to_none=True)
            self.skip_reason = "non-finite loss/gradient"
            return None
        scale = self.scaler.get_scale() if self.scaler.is_enabled() else None
        self.scaler.step(self.optimizer)  # with fp16, skips the step itself on overflow
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        if scale is not None and self.scaler.get_scale() < scale:
            self.report.warn(f"fp16 overflow at update {self.state.step + 1}: step skipped, loss scale {scale} -> "
                             f"{self.scaler.get_scale()}")
        stats = torch.tensor([loss_sum, nll_sum], dtype=torch.float64, device=self.device)
        if self.env.world > 1:
            dist.all_reduce(stats)
        return {"loss": stats[0].item() / total, "nll": stats[1].item() / total, "lr": lr,
                "gnorm": float(gnorm), "tokens": total}

    def _forward_backward(self, pieces: list[Batch], total: float) -> tuple[float, float]:
        """Accumulate the gradient of every piece; the loss is normalised by the update's `total` tokens."""
        module = self.ddp or self.model
        loss_sum = nll_sum = 0.0
        for i, batch in enumerate(pieces):
            self._piece = i  # which piece ran out of memory, for _after_oom
            batch = batch.to(self.device)
            sync = self.ddp is None or i == len(pieces) - 1
            with contextlib.nullcontext() if sync else self.ddp.no_sync():
                with self._autocast():
                    logits = module(batch.src, batch.tgt_in)
                loss, nll = label_smoothed_loss(logits, batch.tgt_out, self.cfg.train.label_smoothing)
                self.scaler.scale(loss * (self.env.world / total)).backward()
            loss_sum += float(loss.detach())
            nll_sum += float(nll.detach())
        return loss_sum, nll_sum

    def _after_oom(self, pieces: list[Batch]) -> list[Batch]:
        """Drop the partial gradients and retry the whole update with the failed piece halved, or without it
        when it is a single sentence. (A skipped sentence's tokens stay in the update's normaliser.)"""
        self.optimizer.zero_grad(set_to_none=True)  # an OOM inside backward leaves some gradients half-added
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        i, step = self._piece, self.state.step + 1
        batch = pieces[i]
        if len(batch) > 1:
            self.state.oom_splits += 1
            self.report.warn(f"out of memory at update {step} on a batch of {len(batch)} sentences: "
                             "split in two and retried")
            return pieces[:i] + split_batch(batch) + pieces[i + 1:]
        self.state.oom_skipped += 1
        self.report.warn(f"out of memory at update {step} on one sentence (train example {int(batch.index[0])}, "
                         f"{batch.n_src_tokens}+{batch.n_tgt_tokens} tokens): skipped")
        return pieces[:i] + pieces[i + 1:]

    # ---- validation
    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        """Loss/perplexity on the valid split and greedy BLEU on its first sentences (rank 0 only)."""
        self.model.eval()
        data = self.valid_data
        lens = data.with_format("numpy", columns=["src_len", "tgt_len"])[:]
        sampler = TokenBatchSampler(lens["src_len"], lens["tgt_len"], self.cfg.train.max_tokens, shuffle=False)
        loss_sum = nll_sum = ntok = 0.0
        for indices in sampler:
            rows = data[list(map(int, indices))]
            batch = collate(rows["src_ids"], rows["tgt_ids"], indices).to(self.device)
            with self._autocast():
                logits = self.model(batch.src, batch.tgt_in)
            loss, nll = label_smoothed_loss(logits, batch.tgt_out, self.cfg.train.label_smoothing)
            loss_sum, nll_sum, ntok = loss_sum + float(loss), nll_sum + float(nll), ntok + batch.n_tgt_tokens
        result = {"loss": loss_sum / ntok, "nll": nll_sum / ntok, "ppl": math.exp(min(nll_sum / ntok, 50))}
        if self.cfg.train.valid_bleu_sentences > 0:
            result["bleu"] = self._greedy_bleu()
        return result

    def _greedy_bleu(self) -> float:
        n = min(self.cfg.train.valid_bleu_sentences, len(self.valid_data))
        if self._valid_refs is None:
            ref_file = Path(self.cfg.data.dir) / f"valid.{self.meta['tgt_lang']}"
            self._valid_refs = ref_file.read_text(encoding="utf-8").split("\n")[:n]
        src = self.valid_data.select(range(n))["src_ids"]
        d = self.cfg.decode
        # length-sorted batches under the decode token budget (targets unknown: count sources only)
        sampler = TokenBatchSampler([len(s) for s in src], [0] * n, d.max_tokens, shuffle=False)
        hyps: list[str] = [""] * n
        for idx in sampler:
            idx = [int(i) for i in idx]
            batch = collate([src[i] for i in idx], [[] for _ in idx]).to(self.device)
            with self._autocast():
                out = greedy_search(self.model, batch.src, max_len_a=d.max_len_a, max_len_b=d.max_len_b,
                                    bos=BOS_ID, eos=EOS_ID, pad=PAD_ID)
            for i, hyp in zip(idx, self.tokenizer.decode_tgt([h[0].tokens for h in out])):
                hyps[i] = hyp
        return corpus_bleu(hyps, [self._valid_refs])

    def _after_validation(self, result: dict[str, float]) -> bool:
        """Track the best checkpoint; True when patience is exhausted."""
        t = self.cfg.train
        metric = result.get(t.best_metric, result["loss"])
        better = self.state.best is None or (metric > self.state.best if t.best_metric == "bleu"
                                             else metric < self.state.best)
        if better:
            self.state.best, self.state.bad_validations = metric, 0
            checkpoint.save(self._state_dict(with_training=False), self.run_dir / "best.pt")
        else:
            self.state.bad_validations += 1
        return t.patience > 0 and self.state.bad_validations >= t.patience

    # ---- the loop
    def _out_of_time(self, elapsed: float, update_seconds: float) -> bool:
        budget = self.cfg.train.max_minutes * 60
        if budget <= 0:
            return False
        # keep room for one more update (and its validation), the final save and the averaging
        # (reads K checkpoints, writes one)
        t = self.cfg.train
        reserve = update_seconds + self.save_seconds * (t.average_last + 3) + 0.5
        if (self.state.step + 1) % t.valid_every == 0:
            reserve += self.valid_seconds
        stop = torch.tensor([float(elapsed + reserve >= budget)], device=self.device)
        if self.env.world > 1:  # clocks differ per rank: stop together or deadlock
            dist.all_reduce(stop, op=dist.ReduceOp.MAX)
        return bool(stop.item())

    def _validate_everywhere(self) -> bool:
        stop = torch.zeros(1, device=self.device)
        if self.env.main and self.valid_data is not None:
            started = time.monotonic()
            result = self.validate()
            self.valid_seconds = time.monotonic() - started
            stop[0] = float(self._after_validation(result))
            self.report.valid(self.state.step, result)
        if self.env.world > 1:
            dist.broadcast(stop, 0)
        return bool(stop.item())

    def run(self) -> dict[str, Any]:
        t = self.cfg.train
        batches = self._batches()
        started = time.monotonic()
        base_elapsed = self.state.elapsed
        self.report.start(total=t.max_updates, done=self.state.step)
        last_update = 0.0
        reason = "max_updates"
        while self.state.step < t.max_updates:
            if self._out_of_time(base_elapsed + time.monotonic() - started, last_update):
                reason = "max_minutes"
                break
            tick = time.monotonic()
            group = [b for _, b in zip(range(t.update_freq), batches)]
            if not group:
                reason = "max_epochs"
                break
            stats = self._update(group)
            if stats is None:
                self.state.bad_updates += 1
                self.state.skipped_updates += 1
                self.report.warn(f"{self.skip_reason} at update {self.state.step + 1}: update skipped "
                                 f"({self.state.bad_updates} in a row)")
                if self.state.bad_updates >= t.max_bad_updates:
                    what = "non-finite" if self.skip_reason.startswith("non-finite") else "skipped"
                    raise NmtError(f"{self.state.bad_updates} {what} updates in a row; stopping "
                                   f"(last good checkpoint kept in {self.run_dir})")
                continue
            self.state.bad_updates = 0
            self.state.step += 1
            last_update = time.monotonic() - tick
            self.state.elapsed = base_elapsed + (time.monotonic() - started)
            self.report.update(self.state.step, self.state.epoch, stats, last_update, t.log_every)
            stop = False
            if self.state.step % t.valid_every == 0:
                stop = self._validate_everywhere()
            if self.state.step % t.save_every == 0:
                self.save()
            if stop:
                reason = "patience"
                break
        self.state.elapsed = base_elapsed + (time.monotonic() - started)
        if self.saved_step != self.state.step:  # a local flag: every DDP rank must agree without I/O
            self.save()
        if self.valid_data is not None and not (self.run_dir / "best.pt").exists() and self.env.main:
            checkpoint.save(self._state_dict(with_training=False), self.run_dir / "best.pt")
        self.average()
        self._barrier()
        self.state.elapsed = base_elapsed + (time.monotonic() - started)  # final save + averaging included
        self.report.finish(self.state.step, reason)
        return {"step": self.state.step, "epoch": self.state.epoch, "stopped": reason, "best": self.state.best,
                "skipped_updates": self.state.skipped_updates, "oom_splits": self.state.oom_splits,
                "oom_skipped": self.state.oom_skipped, "elapsed": self.state.elapsed}


def train(cfg: Config, *, force: bool = False, progress: bool | None = None) -> dict[str, Any]:
    """Train (or resume) the run in cfg.train.run_dir; returns a summary."""
    trainer = Trainer(cfg, force=force, progress=progress)
    try:
        return trainer.run()
    finally:
        trainer.close()
        if dist.is_initialized():
            dist.destroy_process_group()


def average_run(run_dir: str | Path, last: int) -> Path:
    """`nmt average`: average the last `last` step checkpoints of a run into averaged.pt."""
    if last < 1:  # [-0:] would be every checkpoint, [-(-2):] all but the first two
        raise NmtError(f"--last must be >= 1, got {last}")
    paths = [p for _, p in checkpoint.step_checkpoints(run_dir)][-last:]
    if not paths:
        raise NmtError(f"no checkpoint_<step>.pt files in {run_dir}")
    out = Path(run_dir) / "averaged.pt"
    checkpoint.save(checkpoint.average(paths), out)
    return out


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise NmtError(f"no metrics.jsonl in {run_dir}")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
