"""In-flight batching for `nmt serve`: requests queue their sentences; one model thread runs a search that the
sentences join between its decoder steps and leave as soon as they are translated.

The asyncio side only submits and awaits; every model call happens on the thread that runs `serve_forever`.
Before each step the model thread takes the sentences waiting (those that share the running search's options,
up to a token budget for the sentences in flight) into the search, steps it, and resolves the futures of the
sentences that step finished. A sentence thus waits at most one step to start, never for the slowest sentence
of a batch, and the search stays full while clients come and go. Sentences with other search options wait until
the running search has drained. Futures cancelled before their sentence joins (their client left) are dropped
unrun. With batching off, one request at a time is searched alone (the OpenNMT-py server's way).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol


class Session(Protocol):
    """A running search over one search setting (nmt.translator.InFlight)."""

    @property
    def active(self) -> int: ...  # sentences searching or about to join

    def keys(self) -> list[Any]: ...  # the keys added and not yet returned

    def add(self, texts: list[str], keys: list[Any]) -> list[tuple[Any, Any]]: ...  # (key, result) done at once

    def step(self) -> list[tuple[Any, Any]]: ...  # (key, result) of the sentences this step finished


class Closed(RuntimeError):
    """Work submitted after close()."""


@dataclass(eq=False)
class Job:
    text: str
    options: Hashable  # only jobs with equal options share a search
    request: int  # the request it came from: with batching off, a search holds one request's sentences
    future: Future = field(default_factory=Future)
    cost: int = 0  # source tokens, counted against the budget while in flight (by the model thread)


class Batcher:
    def __init__(self, open_session: Callable[[Hashable], Session], cost: Callable[[str], int], max_cost: int,
                 batching: bool = True):
        self._open, self._cost = open_session, cost
        self.max_cost, self.batching = max_cost, batching
        self._pending: list[Job] = []
        self._cond = threading.Condition()
        self._closed = False
        self._request_ids = itertools.count()
        self._session: Session | None = None
        self._options: Hashable = None  # the running session's
        self._in_flight_cost = 0
        # served on /health: how well requests are merged
        self.joins = 0  # times sentences joined the search (one or more at a time)
        self.sentences = 0  # sentences answered
        self.steps = 0  # decoder steps run
        self.sentence_steps = 0  # sentences searching, summed over the steps

    @property
    def queued(self) -> int:
        return len(self._pending)

    def submit(self, texts: Sequence[str], options: Hashable) -> list[Future]:
        """Queue one request's sentences; returns a future per sentence, in order."""
        request = next(self._request_ids)
        jobs = [Job(t, options, request) for t in texts]
        with self._cond:
            if self._closed:
                raise Closed("the server is shutting down")
            self._pending.extend(jobs)
            self._cond.notify()
        return [j.future for j in jobs]

    def close(self) -> None:
        """No more submissions; serve_forever finishes what is queued and in flight, then returns."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def serve_forever(self) -> None:
        """The model thread's loop: let what waits join, step, answer what finished."""
        while True:
            joining = self._next_joining()
            if joining is None:
                return
            if joining:
                self._join(joining)
            if self._session is not None and self._session.active:
                self._step()

    def _next_joining(self) -> list[Job] | None:
        """The jobs to join the search before its next step; blocks while there is nothing to do; None when closed
        and drained."""
        with self._cond:
            while True:
                running = self._session is not None and self._session.active > 0
                self._pending = [j for j in self._pending if not j.future.cancelled()]  # clients that left
                if not running and self._pending:
                    self._options = self._pending[0].options
                    self._session = self._open(self._options)
                joining = self._take() if self._pending else []
                if joining or running:
                    return joining
                if self._closed and not self._pending:
                    return None
                if not self._pending:
                    self._cond.wait()

    def _take(self) -> list[Job]:
        """Jobs for the running search, oldest first: with its options while the oldest waiting job has them too
        (else it drains, and that job's options come next), within the budget (a job over it alone joins an empty
        search). Without batching: one request's jobs, into an empty search."""
        first = self._pending[0]
        if first.options != self._options:
            return []
        empty = self._in_flight_cost == 0
        if not self.batching and not empty:
            return []
        taken: list[Job] = []
        for job in self._pending:
            if job.options != first.options or (not self.batching and job.request != first.request):
                continue
            job.cost = job.cost or self._cost_of(job.text)
            if self._in_flight_cost + job.cost > self.max_cost and not (empty and not taken):
                break
            if job.future.set_running_or_notify_cancel():  # from now on its client cannot cancel it
                taken.append(job)
                self._in_flight_cost += job.cost
        chosen = set(map(id, taken))
        self._pending = [j for j in self._pending if id(j) not in chosen]
        return taken

    def _cost_of(self, text: str) -> int:
        """Counted here, on the model thread: tokenizing on the event loop slowed every request there."""
        try:
            return max(1, self._cost(text))
        except Exception:  # the model thread must live on: joining the search will report what is wrong
            return 1

    def _join(self, jobs: list[Job]) -> None:
        try:
            done = self._session.add([j.text for j in jobs], jobs)
        except Exception as e:  # e.g. a sentence the tokenizer fails on: it fails alone, the search lives on
            if len(jobs) > 1:
                for job in jobs:
                    self._join([job])
            else:
                self._fail(jobs[0], e)
            return
        self.joins += 1
        self._answer(done)

    def _step(self) -> None:
        searching = self._session.active
        try:
            done = self._session.step()
        except Exception as e:  # a failed step fails the sentences in the search, never the model thread
            for job in self._session.keys():
                self._fail(job, e)
            self._session, self._in_flight_cost = None, 0
            return
        self.steps += 1
        self.sentence_steps += searching
        self._answer(done)

    def _answer(self, done: list[tuple[Job, Any]]) -> None:
        for job, result in done:
            self._in_flight_cost -= job.cost
            self.sentences += 1
            job.future.set_result(result)

    def _fail(self, job: Job, error: Exception) -> None:
        self._in_flight_cost -= job.cost
        if not job.future.done():
            job.future.set_exception(error)
