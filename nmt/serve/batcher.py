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
- fair: sentences are taken in fair-queueing order (nmt.serve.fairqueue): a small request (a paragraph at most)
  as a client of its own, so it is in the next batch however much is queued; larger ones over their clients
  (addresses), so one flooding the queue is served first come first served, requests finishing in turn, while
  another client's requests are served alongside;
- bounded: the queue holds at most `max_queue_seconds` of work at the measured throughput (`rate`, characters
  per second), and as much again for small requests; past it `submit` raises Full, which says when to retry;
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
SMALL_REQUEST = 1024  # characters: requests this small have a queue bound of their own (see Batcher.refusal)


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
                 max_queue_seconds: float = math.inf, max_batch_seconds: float = math.inf):
        self._run, self._cost, self._clock = run, cost, clock
        self.max_cost, self.max_delay, self.batching = max_cost, max_delay, batching
        self.max_queue_seconds, self.max_batch_seconds = max_queue_seconds, max_batch_seconds
        self._limited = False  # the last batch taken left work behind that could have joined it
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
        chars = sum(len(t) + 1 for t in texts)  # Job.chars: checked before any Job (and its Future) is made
        with self._cond:
            if self._closed:
                raise Closed("the server is shutting down")
            if (full := self.refusal(chars)) is not None:
                raise full
            request, now, small = next(self._request_ids), self._clock(), self.small(chars)
            jobs = [Job(t, options, request, now, small=small) for t in texts]
            self._queue.add(jobs, None if small else client)
            self._cond.notify()
        return [j.future for j in jobs]

    def refusal(self, chars: int) -> Full | None:
        """Full if a request of `chars` characters would take the queue past max_queue_seconds of work (a request
        alone may: it would otherwise never be served). Small requests (a paragraph, or 1/64 of the bound) have a
        bound of their own as large: fair queueing answers them in the next batches, so large requests flooding
        the queue do not lock out a client sending a sentence. Also asked before a request is read."""
        if self.rate is None:
            return None
        bound = self.rate * self.max_queue_seconds
        if self.small(chars):
            queued = self._queue.small_chars
        else:
            queued = self._queue.chars - self._queue.small_chars
        if not queued or queued + chars <= bound:
            return None
        wait = self._queue.chars / self.rate
        return Full(f"the server is busy: {wait:.0f} s of work queued, the limit serve.max_queue_seconds="
                    f"{self.max_queue_seconds:g}", retry_after=wait)

    def small(self, chars: int) -> bool:
        return chars <= (max(self.rate * self.max_queue_seconds / 64, SMALL_REQUEST) if self.rate else SMALL_REQUEST)

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
        """The first job in fair order and every later one that may share its batch and fits the budget: padded
        tokens, and max_batch_seconds of work at the measured rate (a request arriving waits for the batch in
        progress; when the model is slowed down, batches shrink with it)."""
        batch: list[Job] = []
        rest: list[Job] = []
        longest, chars, self._limited = 0, 0, False
        max_chars = self.rate * self.max_batch_seconds if self.rate else math.inf
        for job in self._queue.jobs():
            if job.future.cancelled():  # a client that left: its sentences go
                continue
            first = batch[0] if batch else job
            fits = job.options == first.options and (self.batching or job.request == first.request)
            cost = self._cost_of(job)
            room = (len(batch) + 1) * max(longest, cost) <= self.max_cost and chars + job.chars <= max_chars
            self._limited |= fits and bool(batch) and not room
            if fits and (not batch or room):
                if job.future.set_running_or_notify_cancel():  # from now on its client cannot cancel it
                    batch.append(job)
                    longest, chars = max(longest, cost), chars + job.chars
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
        """Update the throughput from a batch: one that left work behind says what the model does under load; a
        smaller one only ever raises the estimate (it may be pessimistic: a start-up measurement, a slow search)."""
        rate = sum(j.chars for j in batch) / max(seconds, 1e-6)
        if self.rate is None:
            self.rate = rate
        elif self._limited or rate > self.rate:
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
