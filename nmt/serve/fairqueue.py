"""The queue of `nmt serve`'s batcher: the sentences waiting, in start-time fair queueing order (Goyal, Vin &
Cheng 1996) over clients, each sentence costing its characters. A client's next sentence starts where its previous
one finished, or at the virtual time (the largest start taken so far) if the client was idle: clients share the
model, each client's requests are served in turn, and one cannot get ahead by splitting its work. The batcher
makes each small request (a paragraph at most) a client of its own that starts now: whatever is queued, it is
in the next batch. Not thread-safe: the batcher holds its lock around every call."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass, field


@dataclass
class Job:
    text: str
    options: Hashable  # only jobs with equal options share a batch (one search setting per batch)
    request: int  # the request it came from: with batching off, a batch is one request's sentences
    arrived: float
    tag: float = 0.0  # fair-queueing start tag: jobs are taken in its order
    small: bool = False  # from a small request: bounded apart (nmt.serve.batcher.Batcher.refusal)
    future: Future = field(default_factory=Future)
    cost: int | None = None  # source tokens + EOS; the batch's padded cost is counted against the budget

    @property
    def chars(self) -> int:  # the work measure of fairness and of the queue bound (known without tokenizing)
        return len(self.text) + 1


class FairQueue:
    def __init__(self) -> None:
        self._jobs: list[Job] = []
        self._in_order = True
        self.chars = 0  # of the jobs queued
        self.small_chars = 0  # of those from small requests
        self._virtual = 0.0
        self._finish: dict[Hashable, float] = {}  # per client: where its next sentence starts

    def __len__(self) -> int:
        return len(self._jobs)

    def add(self, jobs: list[Job], client: Hashable | None) -> None:
        """Queue one request's jobs (in their order) for `client`; None: a small request, its own client, all of
        it starting now (small requests keep their order among themselves)."""
        start = max(self._virtual, self._finish.get(client, 0.0))
        for job in jobs:
            job.tag, start = start, start + (job.chars if client is not None else 0)
        if client is not None:
            self._finish[client] = start
        self._jobs.extend(jobs)
        self.chars += sum(j.chars for j in jobs)
        self.small_chars += sum(j.chars for j in jobs if j.small)
        self._in_order = False

    def jobs(self) -> list[Job]:
        """The queued jobs in fair order: the queue's own list, not a copy (the batcher reads it on the model thread
        at every wake-up, under its lock); never change it, give back what stays with `keep`."""
        if not self._in_order:
            self._jobs.sort(key=lambda j: j.tag)  # stable: equal tags stay in arrival order
            self._in_order = True
        return self._jobs

    def keep(self, rest: list[Job], started: list[Job]) -> None:
        """`rest` (in the order `jobs` gave) stays queued; `started` went into a batch; anything else was dropped."""
        self._jobs = rest
        self.chars = sum(j.chars for j in rest)
        self.small_chars = sum(j.chars for j in rest if j.small)
        if started:
            self._virtual = max(self._virtual, max(j.tag for j in started))
            if len(self._finish) > 2 * len(rest) + 1000:  # forget idle clients: they would start at _virtual
                self._finish = {c: f for c, f in self._finish.items() if f > self._virtual}

    def fitting(self, chars: float) -> set[int]:
        """The queued requests whose sentences fit in `chars`, taken whole, in fair order."""
        totals: dict[int, int] = {}
        for job in self.jobs():
            totals[job.request] = totals.get(job.request, 0) + job.chars
        kept = set()
        for request, total in totals.items():  # dicts keep insertion order: the order of first sentences
            if total <= chars:
                kept.add(request)
                chars -= total
        return kept

    def fail(self, which: Callable[[Job], bool], error: Exception) -> None:
        """Fail the queued jobs `which` picks with `error`; the others stay queued."""
        rest = []
        for job in self.jobs():
            if not which(job):
                rest.append(job)
            elif job.future.set_running_or_notify_cancel():
                job.future.set_exception(error)
        self.keep(rest, [])
