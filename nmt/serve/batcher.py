"""Dynamic batching for `nmt serve`: requests queue their sentences; one model thread takes what is waiting
(sentences that share search options, up to a token budget) as one batch and resolves each sentence's future.
The budget counts padded source tokens, rows x the longest (EOS included), as decode.max_tokens does: a batch
taken here is one batch of the translator, never split again.

The asyncio side only submits and awaits; every model call happens on the thread that runs `serve_forever`.
While the model is busy, work piles up for the next batch. When it is free, it waits at most `max_delay` seconds
for company, and only while company is due: the clients of the batch it has just answered tend to send their
next request at once, and waiting the few milliseconds they take merges them into one batch, where they would
otherwise trickle into two half batches that then alternate for good. One client sending a request at a time
never waits. Futures cancelled before their batch starts (their client left) are dropped unrun.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

Run = Callable[[Any, list[str]], Sequence[Any]]  # (options, sentences) -> one result per sentence, in order


class Closed(RuntimeError):
    """Work submitted after close()."""


@dataclass
class Job:
    text: str
    options: Hashable  # only jobs with equal options share a batch (one search setting per batch)
    request: int  # the request it came from: with batching off, a batch is one request's sentences
    arrived: float
    future: Future = field(default_factory=Future)
    cost: int | None = None  # source tokens + EOS; the batch's padded cost is counted against the budget


class Batcher:
    def __init__(self, run: Run, cost: Callable[[str], int], max_cost: int, max_delay: float,
                 batching: bool = True, clock: Callable[[], float] = time.monotonic):
        self._run, self._cost, self._clock = run, cost, clock
        self.max_cost, self.max_delay, self.batching = max_cost, max_delay, batching
        self._pending: list[Job] = []
        self._cond = threading.Condition()
        self._closed = False
        self._request_ids = itertools.count()
        self._due = 0  # sentences the next batch waits for (see _finished)
        self._free_since = clock()  # when the model last became free
        self.batches = 0  # batches run so far (served on /health: how well requests are merged)
        self.sentences = 0

    @property
    def queued(self) -> int:
        return len(self._pending)

    def submit(self, texts: Sequence[str], options: Hashable) -> list[Future]:
        """Queue one request's sentences; returns a future per sentence, in order."""
        request, now = next(self._request_ids), self._clock()
        jobs = [Job(t, options, request, now) for t in texts]
        with self._cond:
            if self._closed:
                raise Closed("the server is shutting down")
            self._pending.extend(jobs)
            self._cond.notify()
        return [j.future for j in jobs]

    def close(self) -> None:
        """No more submissions; serve_forever finishes what is queued, then returns."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def serve_forever(self) -> None:
        """The model thread's loop."""
        while (batch := self._next_batch()) is not None:
            self._process(batch)

    def _next_batch(self) -> list[Job] | None:
        with self._cond:
            due, self._due = self._due, 0
            while True:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if not self._pending:
                    return None  # closed and drained
                self._wait_for_company(due)
                batch = self._take()
                if batch:
                    return batch  # else every job looked at was cancelled: look again

    def _wait_for_company(self, due: int) -> None:
        """Wait until `due` sentences are queued, the budget is full, or max_delay has passed since the oldest
        sentence came or the model became free, whichever was later."""
        if not self.batching:
            return
        deadline = max(self._pending[0].arrived, self._free_since) + self.max_delay
        while not self._closed and len(self._pending) < due and self._queued_cost() < self.max_cost:
            left = deadline - self._clock()
            if left <= 0:
                return
            self._cond.wait(left)

    def _cost_of(self, job: Job) -> int:
        """Counted here, on the model thread: tokenizing on the event loop slowed every request there."""
        if job.cost is None:
            try:
                job.cost = self._cost(job.text)
            except Exception:  # the model thread must live on: the sentence's batch will report what is wrong
                job.cost = 1
        return job.cost

    def _queued_cost(self) -> int:
        return len(self._pending) * max((self._cost_of(j) for j in self._pending), default=0)

    def _take(self) -> list[Job]:
        """The oldest job and every later one that may share its batch and fits the budget; the rest stay."""
        live = [j for j in self._pending if not j.future.cancelled()]  # a client that left: its sentences go
        batch: list[Job] = []
        rest: list[Job] = []
        longest = 0
        for job in live:
            first = batch[0] if batch else job
            fits = job.options == first.options and (self.batching or job.request == first.request)
            cost = self._cost_of(job)
            if fits and (not batch or (len(batch) + 1) * max(longest, cost) <= self.max_cost):
                if job.future.set_running_or_notify_cancel():  # from now on its client cannot cancel it
                    batch.append(job)
                    longest = max(longest, cost)
            else:
                rest.append(job)
        self._pending = rest
        return batch

    def _finished(self, answered: int) -> None:
        """Company due for the next batch: what queued meanwhile, and the clients about to be answered coming back.
        Counted before any answer goes out: a client quick to send its next request must not count twice."""
        with self._cond:
            self._due = len(self._pending) + answered
            self._free_since = self._clock()

    def _process(self, batch: list[Job]) -> None:
        try:
            results = self._run(batch[0].options, [j.text for j in batch])
            if len(results) != len(batch):  # else some futures would never be resolved: their clients would hang
                raise RuntimeError(f"{len(results)} results for {len(batch)} sentences")
        except Exception as e:  # a failed batch fails its requests, never the model thread
            for job in batch:
                job.future.set_exception(e)
            return
        finally:
            self._finished(len(batch))
        self.batches += 1
        self.sentences += len(batch)
        for job, result in zip(batch, results):
            job.future.set_result(result)
