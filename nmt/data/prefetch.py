"""Training batches read ahead: the next batches are fetched from the memory-mapped data, collated and (for
a GPU) pinned on a background thread while the current update computes, so the host-to-GPU copy
(non-blocking from pinned memory) and the batch preparation overlap the GPU's work instead of stalling it.

The order is the sampler's, unchanged: the thread only runs ahead of it. Each batch carries the sampler's
state after it, so a checkpoint records the position of the batches training consumed, not of the
thread's read-ahead: a resume continues exactly.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from nmt.data.batches import batches_from_dataset
from nmt.data.batching import Batch


@dataclass
class Fetched:
    batch: Batch
    sampler_state: dict[str, int]  # the sampler after this batch: where a resume continues once it is used
    epoch: int  # the epoch this batch belongs to


def epochs(dataset: Any, sampler: Any, special: Any, max_epochs: int) -> Iterator[Fetched]:
    """Training batches, epoch after epoch from the sampler's position, until `max_epochs` (0: no limit)."""
    while True:
        epoch = sampler.epoch
        for batch in batches_from_dataset(dataset, sampler, special):
            yield Fetched(batch, sampler.state_dict(), epoch)
        if max_epochs and epoch >= max_epochs:
            return
        sampler.set_epoch(epoch + 1)  # the sampler's own iteration has moved there already


_END = object()


class Prefetcher:
    """Iterates `source` on a daemon thread, `depth` items ahead; pins batches when `pin`. An error in the
    thread is raised where the item would have been. Use as a context manager (or call close()): the
    thread stops when training does, whatever the reason."""

    def __init__(self, source: Iterator[Fetched], pin: bool, depth: int = 4):
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._fill, args=(source, pin), name="nmt-prefetch", daemon=True)
        self._thread.start()

    def _fill(self, source: Iterator[Fetched], pin: bool) -> None:
        try:
            for item in source:
                if pin:
                    item.batch = item.batch.pin_memory()
                if not self._put(item):
                    return
        except BaseException as e:  # handed to the training thread, which raises it
            self._put(e)
            return
        self._put(_END)

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> Iterator[Fetched]:
        while True:
            item = self._queue.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def __enter__(self) -> Prefetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
