"""Training: the update loop. Label-smoothed cross-entropy, Adam with warmup, AMP, accumulation, DDP.

One update = `update_freq` token-budget batches per process. The loss of an update is the sum over
its target tokens divided by the update's total target tokens across all processes, so
`torchrun --nproc_per_node W` computes the same gradient as one process with `update_freq * W`.
The run dir (nmt.rundir), the data dir (nmt.data.datadir), the resume state (nmt.train.state), the time
budget (nmt.train.budget), out-of-memory retries (nmt.train.oom), the batches read ahead (nmt.data.prefetch) and
validation (nmt.train.validate) live in their own modules; this one builds the run and loops.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict
from typing import Any

import torch
from torch import nn

from nmt import checkpoint
from nmt.checkpoint import Checkpoint
from nmt.config.experiment import Config, inherit_model
from nmt.data.batching import Batch, TokenBatchSampler
from nmt.data.datadir import DataDir
from nmt.data.prefetch import Fetched, Prefetcher, epochs
from nmt.device import keep_freed_memory, pick_device
from nmt.errors import NmtError
from nmt.log import Reporter, console
from nmt.model import Transformer
from nmt.precision import autocast, choose, not_finite_reason, prepare
from nmt.rundir import RunDir
from nmt.tokenizer import Tokenizer
from nmt.train import distributed
from nmt.train import state as trainstate
from nmt.train.budget import TimeBudget
from nmt.train.compiling import CompileWatch, compile_for_training
from nmt.train.late import LateUpdates
from nmt.train.oom import SplitOnOOM
from nmt.train.optim import adam, learning_rate
from nmt.train.state import Counters, SkippedUpdate
from nmt.train.tally import Tally
from nmt.train.update import decides_on_device, finish_update, grad_scaler, piece_backward, piece_loss, queue_update
from nmt.train.validate import bleu_sample, choose_bleu_tokenize, greedy_bleu, keep_bleu_tokenize, validation_loss


def fine_tuning_start(cfg: Config, data: DataDir, tokenizer: Tokenizer) -> dict[str, Any]:
    """The weights a fine-tuning run (train.init_from) starts from. Its model config replaces the run's
    (nmt.config.experiment.inherit_model), and the data must be encoded with its tokenizer."""
    path = cfg.train.init_from
    ckpt = checkpoint.load(path)
    if ckpt.tokenizer().fingerprint() != tokenizer.fingerprint():
        raise NmtError(f"{data} is not encoded with the tokenizer of {path}: prepare the data with "
                       f"`nmt prepare --tokenizer-from {path}`")
    cfg.model = inherit_model(ckpt.model_config, cfg, path)
    return ckpt.weights


# What a caller may do to the model before training starts, e.g. nmt.train.fakequant's int8-aware layers: applied
# after the model is on its device and in its training form, before the optimizer, DDP and the weights of a resume
# or train.init_from. It must keep the state dict's keys, so that checkpoints stay in the normal format.
ModelTransform = Callable[[Transformer], nn.Module]


def unchanged(model: Transformer) -> nn.Module:
    return model


class Trainer:
    """One training run: built once (model, optimizer, data, run dir, resume), then `run()` loops."""

    def __init__(self, cfg: Config, *, force: bool = False, progress: bool | None = None,
                 model_transform: ModelTransform = unchanged):
        t = cfg.train
        if t.threads > 0:
            torch.set_num_threads(t.threads)
        self.cfg = cfg
        self.device = pick_device(t.device, "train.device", distributed.local_rank(), distributed.world_size())
        self.dist = distributed.init(self.device)
        self.run_dir = RunDir(t.run_dir)
        self.report = Reporter(self.run_dir, enabled=self.dist.main, progress=progress, tensorboard=t.tensorboard)
        self.data = DataDir.open(cfg.data.dir)
        self.tokenizer = self.data.tokenizer()
        self.init = fine_tuning_start(cfg, self.data, self.tokenizer) if t.init_from else None
        self.special = self.tokenizer.special_ids
        self.train_data = self.data.split("train")
        self.valid_data = self.data.split("valid") if self.data.has_split("valid") else None
        self.lock = self.run_dir.lock() if self.dist.main else None
        if t.checkpoints_kept > t.keep_last:
            self.report.warn(f"train.keep_last={t.keep_last} but train.average_last={t.average_last}: keeping the "
                             f"last {t.checkpoints_kept} checkpoints, which averaging reads")
        try:
            if self.dist.main:
                self.run_dir.check_experiment(cfg.to_dict(), force)
            self.dist.barrier()
            self._build(model_transform)
            choose_bleu_tokenize(cfg.train, self.data.langs[1], self.report.info)
            self.resumed = self._resume(force)
            self.oom = SplitOnOOM(self.counters, self.special.pad, lambda: self.optimizer.zero_grad(set_to_none=True),
                                  self.report.warn, self.dist.rank, self.dist.world, self.sampler.multiple)
            self.tally = Tally(cfg, self.counters, self.report, self.run_dir, self.watch, self.late,
                               lambda: not_finite_reason(self.scaler))
        except BaseException:
            self.close()
            raise

    def _build(self, model_transform: ModelTransform) -> None:
        cfg, t = self.cfg, self.cfg.train
        trainstate.seed_everything(t.seed)
        self.model = Transformer.from_config(cfg.model, *self.data.vocab_sizes, pad_id=self.special.pad,
                                             joint_vocab=self.tokenizer.joint)
        self.precision = choose(t.amp, self.device, cfg.model.d_model, training=True, option="train.amp")
        self.model = model_transform(prepare(self.model, self.device, self.precision, training=True))
        self.ddp = self.dist.wrap(self.model)
        self.forward = self.ddp or self.model
        self.watch = None
        if t.compile:  # the model as a graph: fused kernels, fewer launches (shapes vary: it recompiles a few times)
            self.forward = compile_for_training(self.forward, self.model.parameters(), t.compile_mode)
            self.watch = CompileWatch(self.report.info, t.length_multiple)
        self.optimizer = adam(list(self.model.parameters()), lr=learning_rate(1, cfg), betas=tuple(t.betas),
                              eps=t.eps, weight_decay=t.weight_decay)
        self.scaler = grad_scaler(self.precision, self.device)
        self.late = LateUpdates(cfg, self.device)
        self.report.info(f"training on {self.device} in {self.precision.describe(training=True)} (train.amp={t.amp})")
        train_lens = self.data.split_lengths("train")
        self.data.check_positions(cfg.model.max_positions)
        self.sampler = TokenBatchSampler(train_lens["src_len"], train_lens["tgt_len"], t.max_tokens, shuffle=True,
                                         seed=t.seed, num_replicas=self.dist.world, rank=self.dist.rank,
                                         multiple=t.length_multiple, packed=t.packed)
        self.sampler.set_epoch(1)
        self.sampler_state = self.sampler.state_dict()  # after the last batch trained on (the reader runs ahead)
        self.bleu_sources, self.bleu_references = bleu_sample(self.data, self.valid_data, t.valid_bleu_sentences)

    def _resume(self, force: bool) -> bool:
        """Continue from the newest intact checkpoint (True), or start: config.yaml, fresh metrics (False)."""
        state = trainstate.resume_point(self.run_dir, force, self.dist.main, self.report.warn)
        if state is None:
            self.counters = Counters()
            if self.init is not None:
                self.model.load_state_dict(self.init)
                self.init = None  # not held in memory for the whole run
                self.report.info(f"starting from the weights of {self.cfg.train.init_from} (fresh optimizer and "
                                 "schedule)")
            if self.dist.main:
                self.run_dir.write_config(self.cfg.to_dict())
                self.report.truncate_metrics(0)  # records of a run killed before its first checkpoint
            return False
        self.init = None  # the run's own checkpoints win
        if self.cfg.train.init_from:
            self.report.info(f"resuming the run dir's checkpoints (train.init_from={self.cfg.train.init_from} "
                             "only starts a run)")
        trainstate.check_resumable(state, self.data, self.cfg.to_dict())
        keep_bleu_tokenize(self.cfg.train, state.saved_config, self.report.warn)
        self.counters = trainstate.restore(state, self.model, self.optimizer, self.scaler, self.sampler,
                                           self.dist.rank, self.dist.world, self.cfg.train.seed, self.device)
        self.sampler_state = self.sampler.state_dict()
        if (saved := state.processes) != self.dist.world:
            self.report.warn(f"resuming a {saved}-process run with {self.dist.world}: "
                             "the batch order continues, dropout starts new random streams")
        self.report.truncate_metrics(self.counters.step)
        self.report.info(f"resumed from {state.where} at update {self.counters.step}, "
                         f"epoch {self.counters.epoch}")
        return True

    def close(self) -> None:
        if getattr(self, "lock", None) is not None:
            self.lock.release()
            self.lock = None
        self.report.close()

    # ---- the loop
    def run(self) -> dict[str, Any]:
        """Train until a stopping rule; batches are read ahead on a thread (nmt.data.prefetch)."""
        source = epochs(self.train_data, self.sampler, self.special, self.cfg.train.max_epochs)
        with Prefetcher(source, pin=self.device.type == "cuda") as fetched:
            return self._loop(self.consume(fetched))

    def consume(self, fetched: Iterable[Fetched]) -> Iterator[Batch]:
        """The batches, each one moving the epoch and the sampler position a checkpoint records."""
        for item in fetched:
            self.counters.epoch, self.sampler_state = item.epoch, item.sampler_state
            yield item.batch

    def _loop(self, batches: Iterator[Batch]) -> dict[str, Any]:
        t, c = self.cfg.train, self.counters
        checkpoint_bytes = 3 * sum(p.numel() * p.element_size() for p in self.model.parameters())  # + Adam moments
        budget = TimeBudget(t.max_minutes, c.elapsed, checkpoint_bytes, t.average_last, agree=self.dist.any)
        saved_step = c.step if self.resumed else -1
        self.report.start(total=t.max_updates, done=c.step)
        reason = "max_updates"
        while c.step + len(self.late.queued) < t.max_updates:
            ahead = c.step + len(self.late.queued) + 1  # the count after the next update, if each one is taken
            if budget.exhausted(validate_next=ahead % t.valid_every == 0):
                reason = "max_minutes"
                break
            group = list(itertools.islice(batches, t.update_freq))
            if not group:
                reason = "max_epochs"
                break
            tick = time.monotonic()
            try:
                stats = self.update(group)  # lr -> forward/backward per piece -> clip -> step; None: queued
            except SkippedUpdate as skipped:
                self.tally.settle(budget)
                self.tally.skipped(str(skipped))
                continue
            if stats is not None:
                budget.update_seconds = time.monotonic() - tick
                self.tally.stepped(budget, stats, c.epoch, group[-1])
            else:  # decided on the device: the update before it is read while it runs
                self.tally.settle(budget, keep=1)
                budget.update_seconds = time.monotonic() - tick  # with that wait: the device's pace, not the host's
                n = c.step + 1  # the count after it, if it is taken
                if n % t.valid_every and n % t.save_every and n < t.max_updates:
                    continue
                self.tally.settle(budget)  # what comes next needs the exact count
                if c.step < n:  # skipped: this count's validation and save came when it was reached
                    continue
            stop = False
            if c.step % t.valid_every == 0:
                tick = time.monotonic()
                stop = self.dist.from_main(self.dist.main and self.valid_data is not None and self.validate())
                budget.valid_seconds = time.monotonic() - tick
            if c.step % t.save_every == 0:
                budget.save_seconds, saved_step = self.save(), c.step
            if stop:
                reason = "patience"
                break
        self.tally.settle(budget)
        c.elapsed = budget.elapsed()
        self._finish(saved_step)
        c.elapsed = budget.elapsed()  # final save + averaging included
        self.report.finish(c.step, reason)
        return {**asdict(c), "stopped": reason}

    # ---- one update
    def update(self, group: list[Batch]) -> dict[str, float] | None:
        """Forward/backward over a group of batches and one optimizer step, decided on the device and queued
        (None: nmt.train.late), or where it cannot be (nmt.train.update) on the host, which waits once for the
        numbers it returns (SkippedUpdate when not taken)."""
        t, c = self.cfg.train, self.counters
        tokens, on_device = float(sum(b.n_tgt_tokens for b in group)), decides_on_device(self.optimizer, self.scaler)
        total = self.late.tokens(tokens, self.dist.sum_) if on_device else self.dist.sum([tokens])[0]  # all ranks'
        lr = self.late.learning_rate(c.step) if on_device else learning_rate(c.step + 1, self.cfg)
        for param_group in self.optimizer.param_groups:
            param_group["lr"] = lr
        self.model.train()
        sums = self.oom.accumulate(group, lambda batch, last: self._backward(batch, last, total))  # [loss, nll]
        if on_device:
            numbers = queue_update(self.model.parameters(), self.optimizer, t.clip_norm, sums, self.dist.sum_)
            self.late.push(numbers, lr, total, c.epoch, group[-1])
            return None
        loss_sum, nll_sum, norm = finish_update(self.model.parameters(), self.optimizer, self.scaler, t.clip_norm,
                                                sums, self.dist.sum_)
        return {"loss": loss_sum / total, "nll": nll_sum / total, "lr": lr, "gnorm": norm, "tokens": total}

    def _backward(self, batch: Batch, last: bool, total: float | torch.Tensor) -> torch.Tensor:
        """Add one piece's gradient (its loss normalised by the update's `total` target tokens, on the host or the
        device); returns its loss and NLL sums [2], on the device."""
        batch = batch.to(self.device)
        loss_of = lambda: piece_loss(self.forward, self.model, batch, self.cfg.train.label_smoothing,  # noqa: E731
                                     self.special.pad, self.cfg.train.compile_loss)
        # DDP all-reduces the gradients once, in the backward of the update's last piece
        with contextlib.nullcontext() if self.ddp is None or last else self.ddp.no_sync():
            return piece_backward(loss_of, self.scaler, self.dist.world / total, self.device, self.precision)

    # ---- validation and checkpoints
    def validate(self) -> bool:
        """Validate (rank 0), log, keep best.pt; True when patience is exhausted."""
        t, c = self.cfg.train, self.counters
        self.model.eval()
        amp = lambda: autocast(self.device, self.precision)  # noqa: E731
        result = validation_loss(self.model, self.valid_data, t.max_tokens, t.label_smoothing, self.special,
                                 self.device, amp)
        if t.valid_bleu_sentences > 0:
            d = self.cfg.decode
            result["bleu"] = greedy_bleu(self.model, self.bleu_sources, self.bleu_references, self.tokenizer,
                                         d.max_tokens, d.max_len_a, d.max_len_b, self.device, amp, t.bleu_tokenize)
        if c.validated(result[t.best_by], higher_is_better=t.best_by == "bleu"):
            self.run_dir.save_best(self.snapshot(with_training=False))
        self.report.valid(c.step, result)
        return t.patience > 0 and c.bad_validations >= t.patience

    def snapshot(self, with_training: bool = True) -> Checkpoint:
        """The checkpoint dict; with the training state it is collective under DDP (every rank's RNG)."""
        state = Checkpoint.create(self.model.state_dict(), self.cfg, self.tokenizer, self.data.vocab_sizes,
                                  langs=self.data.langs, data_fingerprint=self.data.fingerprint)
        if with_training:
            rng = self.dist.gather(trainstate.rng_state(self.device))  # dropout differs per rank: each its own
            state = state.with_training(trainstate.training_state(self.counters, self.optimizer, self.scaler,
                                                                  self.sampler_state, rng))
        return state

    def save(self) -> float:
        """A step checkpoint (every rank must call it); returns the seconds rank 0 spent writing."""
        state = self.snapshot()
        if not self.dist.main:
            return 0.0
        started = time.monotonic()
        self.run_dir.save_checkpoint(state, self.counters.step, self.cfg.train.checkpoints_kept)
        return time.monotonic() - started

    def _finish(self, saved_step: int) -> None:
        """The last checkpoint (unless this step was just saved), best.pt if validation never wrote one, and
        averaged.pt."""
        if saved_step != self.counters.step:  # a local flag: every DDP rank must agree without I/O
            self.save()
        self.dist.barrier()  # the collective work is done: the other ranks leave while rank 0 writes
        if not self.dist.main:
            return
        if self.valid_data is not None and not self.run_dir.best.exists():
            self.run_dir.save_best(self.snapshot(with_training=False))
        k = self.cfg.train.average_last
        n = min(k, len(self.run_dir.step_checkpoints()))
        if k > 1 and n >= 2:
            self.report.info(f"averaged {n} checkpoints into {self.run_dir.average(k)}")


def train(cfg: Config, *, force: bool = False, progress: bool | None = None,
          model_transform: ModelTransform = unchanged) -> dict[str, Any]:
    """Train (or resume) the run in cfg.train.run_dir, its model changed by `model_transform` first; returns a
    summary."""
    trainer = Trainer(cfg, force=force, progress=progress, model_transform=model_transform)
    try:
        return trainer.run()
    finally:
        trainer.close()
        distributed.shutdown()


def run(cfg: Config, *, force: bool = False, progress: bool | None = None) -> dict[str, Any]:
    """The `nmt train` command: train, then one summary line."""
    keep_freed_memory()
    summary = train(cfg, force=force, progress=progress)
    best = f", best {cfg.train.best_by} {summary['best']:.2f}" if summary["best"] is not None else ""
    skipped = [f"{summary[key]} {what}" for key, what in (
        ("skipped_updates", "updates skipped"), ("oom_splits", "out-of-memory batch splits"),
        ("oom_skipped", "sentences skipped for memory")) if summary.get(key)]
    console.print(f"done: {summary['step']} updates in {summary['elapsed'] / 60:.1f} min{best}"
                  f"{''.join(', ' + x for x in skipped)}; checkpoints in {cfg.train.run_dir}")
    return summary
