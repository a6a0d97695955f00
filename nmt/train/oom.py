"""Out-of-memory split-and-retry for one update: a batch that does not fit is halved and the update redone,
so one long batch costs a retry, not the run.

A piece that runs out of memory is split in two (a single sentence is dropped, its tokens staying in the
update's normaliser) and the whole update starts again from zero gradients, since an OOM inside backward
leaves some gradients half-added. Under DDP a retry cannot happen: the other ranks already wait in the
gradient all-reduce, so the run stops with advice instead.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from nmt.data.batches import split
from nmt.data.batching import Batch
from nmt.errors import NmtError
from nmt.train.state import Counters, SkippedUpdate

# Exceptions meaning "this batch does not fit in memory". A tuple so tests can add a CPU-raisable class.
OOM_ERRORS: tuple[type[BaseException], ...] = (torch.cuda.OutOfMemoryError,)

Backward = Callable[[Batch, bool], torch.Tensor]  # (piece, is the last piece) -> its [loss, NLL] sums, on the device


def is_oom(error: BaseException) -> bool:
    return isinstance(error, OOM_ERRORS) or (isinstance(error, RuntimeError) and "out of memory" in str(error))


class SplitOnOOM:
    def __init__(self, counters: Counters, pad: int, reset: Callable[[], None], warn: Callable[[str], None],
                 rank: int = 0, world: int = 1, multiple: int = 1):
        """`reset` drops the partial gradients (and frees cached memory); `counters` counts splits and skips;
        `multiple`: the batches' length multiple, which their halves keep."""
        self.counters, self.pad, self.reset, self.warn, self.multiple = counters, pad, reset, warn, multiple
        self.rank, self.world = rank, world

    def accumulate(self, group: list[Batch], backward: Backward) -> torch.Tensor:
        """Run `backward` over every piece of `group` until all fit; returns the [loss, NLL] sums.
        SkippedUpdate when no sentence fits."""
        pieces = list(group)
        while True:
            failed, sums = self._attempt(pieces, backward)
            if failed is None:
                return sums
            self.reset()
            pieces = self._halve_or_drop(pieces, failed)
            if not pieces:
                raise SkippedUpdate("out of memory on every sentence")

    def _attempt(self, pieces: list[Batch], backward: Backward) -> tuple[int | None, torch.Tensor | None]:
        """The index of the piece that ran out of memory and None, or None and the sums when all fit."""
        sums = None
        for i, batch in enumerate(pieces):
            try:
                piece = backward(batch, i == len(pieces) - 1)
            except Exception as e:
                if not is_oom(e):
                    raise
                if self.world > 1:
                    raise NmtError(f"out of memory at update {self.counters.step + 1} on rank {self.rank}; "
                                   "lower train.max_tokens (and raise train.update_freq)") from None
                break  # outside `except`: the failed batch's traceback and activations are freed
            sums = piece if sums is None else sums + piece
        else:
            return None, sums
        return i, None

    def _halve_or_drop(self, pieces: list[Batch], i: int) -> list[Batch]:
        batch, step = pieces[i], self.counters.step + 1
        if len(batch) > 1:
            self.counters.oom_splits += 1
            self.warn(f"out of memory at update {step} on a batch of {len(batch)} sentences: split in two and retried")
            return pieces[:i] + split(batch, self.pad, self.multiple) + pieces[i + 1:]
        self.counters.oom_skipped += 1
        self.warn(f"out of memory at update {step} on one sentence (train example {int(batch.index[0])}, "
                  f"{batch.n_src_tokens}+{batch.n_tgt_tokens} tokens): skipped")
        return pieces[:i] + pieces[i + 1:]
