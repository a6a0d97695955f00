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

Under load it stays fair and bounded:
- fair: sentences are taken in fair-queueing order over clients (nmt.serve.fairqueue), so one sending a single
  sentence is in the next batch while another has thousands queued;
- bounded: the queue holds at most `max_queue_seconds` of work at the measured throughput (`rate`, characters
  per second), twice that for small requests; past it `submit` raises Full, which says when to retry;
- closing (shutdown) keeps the queued requests that fit in the time given, fails the others at once with Closed,
  and fails what is still queued at that deadline.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future
from typing import Any

from nmt.serve.fairqueue import FairQueue, Job

Run = Callable[[Any, list[str]], Sequence[Any]]  # (options, sentences) -> one result per sentence, in order


class Closed(RuntimeError):
    """Work submitted after close(), or queued work that close() could not fit in its time."""


class Full(RuntimeError):
    """The queue holds max_queue_seconds of work already."""

    def __init__(self, message: str, retry_after: float):
        super().__init__(message)
        self.retry_after = retry_after


class Batcher:
    def __init__(self, run: Run, cost: Callable[[str], int], max_cost: int, max_delay: float,
                 batching: bool = True, clock: Callable[[], float] = time.monotonic,
                 max_queue_seconds: float = math.inf):
        self._run, self._cost, self._clock = run, cost, clock
        self.max_cost, self.max_delay, self.batching = max_cost, max_delay, batching
        self.max_queue_seconds = max_queue_seconds
        self.rate: float | None = None  # characters per second the model translates (None: unknown, no bound)
        self._queue = FairQueue()
        self._cond = threading.Condition()
        self._closed = False
        self._deadline = math.inf  # once closed: queued work still there at this time fails
        self._request_ids = itertools.count()
        self._due = 0  # sentences the next batch waits for (see _finished)
        self._free_since = clock()  # when the model last became free
        self.batches = 0  # batches run so far (served on /health: how well requests are merged)
        self.sentences = 0

    @property
    def queued(self) -> int:
        return len(self._queue)

    @property
    def queued_seconds(self) -> float | None:
        return self._queue.chars / self.rate if self.rate else None

    def submit(self, texts: Sequence[str], options: Hashable, client: Hashable = None) -> list[Future]:
        """Queue one request's sentences; returns a future per sentence, in order."""
        request, now = next(self._request_ids), self._clock()
        jobs = [Job(t, options, request, now) for t in texts]
        chars = sum(j.chars for j in jobs)
        with self._cond:
            if self._closed:
                raise Closed("the server is shutting down")
            self._check_room(chars)
            self._queue.add(jobs, client)
            self._cond.notify()
        return [j.future for j in jobs]

    def _check_room(self, chars: int) -> None:
        """Full when this request would take the queue past max_queue_seconds of work (a request alone may: it
        would otherwise never be served). Small requests (1/64 of that at most) are still taken up to twice the
        bound: fair queueing answers them in the next batches, so large requests flooding the queue do not lock
        out a client sending a sentence."""
        queued = self._queue.chars
        if self.rate is None or not queued:
            return
        bound = self.rate * self.max_queue_seconds
        if queued + chars > (2 * bound if chars <= bound / 64 else bound):
            wait = queued / self.rate
            raise Full(f"the server is busy: {wait:.0f} s of work queued, the limit serve.max_queue_seconds="
                       f"{self.max_queue_seconds:g}", retry_after=wait)

    def close(self, within: float = math.inf) -> None:
        """No more submissions; serve_forever runs what is queued, then returns. Given `within` seconds, the
        queued requests that fit (in queue order, at the measured rate) still run; the others fail at once."""
        with self._cond:
            self._closed = True
            self._deadline = min(self._deadline, self._clock() + within)
            if math.isfinite(within) and self.rate:
                kept = self._queue.fitting(within * self.rate)
                self._queue.fail(lambda job: job.request not in kept, Closed("the server is shutting down"))
            self._cond.notify_all()

    def serve_forever(self) -> None:
        """The model thread's loop."""
        while (batch := self._next_batch()) is not None:
            self._process(batch)

    def _next_batch(self) -> list[Job] | None:
        with self._cond:
            due, self._due = self._due, 0
            while True:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if self._closed and self._clock() > self._deadline:
                    self._queue.fail(lambda job: True, Closed("the server is shutting down: not translated in time"))
                if not self._queue:
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
        jobs = self._queue.jobs()
        deadline = max(min(j.arrived for j in jobs), self._free_since) + self.max_delay
        while not self._closed and len(self._queue) < due and self._queued_cost() < self.max_cost:
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
        jobs = self._queue.jobs()
        return len(jobs) * max((self._cost_of(j) for j in jobs), default=0)

    def _take(self) -> list[Job]:
        """The first job in fair order and every later one that may share its batch and fits the budget."""
        batch: list[Job] = []
        rest: list[Job] = []
        longest = 0
        for job in self._queue.jobs():
            if job.future.cancelled():  # a client that left: its sentences go
                continue
            first = batch[0] if batch else job
            fits = job.options == first.options and (self.batching or job.request == first.request)
            cost = self._cost_of(job)
            if fits and (not batch or (len(batch) + 1) * max(longest, cost) <= self.max_cost):
                if job.future.set_running_or_notify_cancel():  # from now on its client cannot cancel it
                    batch.append(job)
                    longest = max(longest, cost)
            else:
                rest.append(job)
        self._queue.keep(rest, batch)
        return batch

    def _finished(self, answered: int) -> None:
        """Company due for the next batch: what queued meanwhile, and the clients about to be answered coming back.
        Counted before any answer goes out: a client quick to send its next request must not count twice."""
        with self._cond:
            self._due = len(self._queue) + answered
            self._free_since = self._clock()

    def _measured(self, batch: list[Job], seconds: float) -> None:
        """Update the throughput from a batch: full batches say what the model does under load; a smaller one
        only ever raises the estimate (it may be pessimistic: a start-up measurement, or a slower search)."""
        rate = sum(j.chars for j in batch) / max(seconds, 1e-6)
        full = len(batch) * max(self._cost_of(j) for j in batch) >= self.max_cost / 2
        if self.rate is None:
            self.rate = rate
        elif full or rate > self.rate:
            self.rate = 0.8 * self.rate + 0.2 * rate

    def _process(self, batch: list[Job]) -> None:
        started = self._clock()
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
        self._measured(batch, self._clock() - started)
        self.batches += 1
        self.sentences += len(batch)
        for job, result in zip(batch, results):
            job.future.set_result(result)
