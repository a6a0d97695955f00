"""Bounded work: every document and every request is measured against a `WorkBudget` while it is read, parsed and
translated, so that no single input of the sizes the limits allow can hold a core for minutes or grow memory past a
stated bound. Refusals are one line (`OverBudget`, a NmtError); a deadline passed or a client gone stops the work
where it is (`TimedOut`, `Cancelled`), inside the parse and translate loops, not only between them.

The budget in force is a context variable (`current()`), set by whoever starts the work (`nmt translate -i`, the
server's file and HTML handlers) with `bounded(budget)`: the format readers deep below charge it without every
signature carrying it. Threads do not inherit it (a ThreadPoolExecutor job sets its own); `asyncio.to_thread` does.

Counted kinds (`LIMITS` names them and their defaults): parsed XML bytes over all a document's parts, paragraphs,
runs (inline formatting pieces), sentences, and the nesting depth of inline containers (Go's html parser stops at
512)."""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from nmt.errors import NmtError

# kind -> (default limit, what it counts, as a message says it)
LIMITS: dict[str, tuple[int, str]] = {
    "xml_bytes": (50 * 2**20, "bytes of XML"),
    "paragraphs": (100_000, "paragraphs"),
    "runs": (400_000, "formatted runs"),
    "sentences": (50_000, "sentences"),
}
MAX_NESTING = 512  # nested inline containers (elements, formatting) below a paragraph
CHECK_EVERY = 1024  # charges between two looks at the clock


class OverBudget(NmtError):
    """An input larger than a stated limit: refused before more work is done."""


class TimedOut(NmtError):
    """The work's deadline passed (serve.file_timeout, a request's deadline)."""


class Cancelled(NmtError):
    """Whoever waited for the work is gone."""


@dataclass
class WorkBudget:
    """Counters against limits, a deadline (time.monotonic(), None: none) and a cancel event. `what` names the input
    in messages ("report.docx", "the request")."""

    what: str = "the input"
    limits: dict[str, int] = field(default_factory=lambda: {kind: n for kind, (n, _) in LIMITS.items()})
    deadline: float | None = None
    cancel: threading.Event | None = None
    timeout_message: str = "not done within its time limit"
    used: dict[str, int] = field(default_factory=dict)
    _ticks: int = 0

    @classmethod
    def within(cls, what: str, seconds: float | None = None, cancel: threading.Event | None = None,
               **limits: int) -> WorkBudget:
        """A budget for `what` that ends `seconds` from now, with some limits changed."""
        unknown = set(limits) - set(LIMITS)
        if unknown:
            raise ValueError(f"unknown work limits: {', '.join(sorted(unknown))}")
        budget = cls(what, cancel=cancel, deadline=None if seconds is None else time.monotonic() + seconds)
        budget.limits.update(limits)
        return budget

    def charge(self, kind: str, n: int = 1) -> None:
        """Count `n` more of `kind`; past its limit: OverBudget. Every CHECK_EVERY charges the clock is read too."""
        total = self.used[kind] = self.used.get(kind, 0) + n
        if total > self.limits[kind]:
            raise OverBudget(f"{self.what}: over {self.limits[kind]:,} {LIMITS[kind][1]}, the limit for one input: "
                             "refused (split it into smaller files)")
        self._ticks += 1
        if self._ticks >= CHECK_EVERY:
            self.check()

    def nest(self, depth: int) -> None:
        """An inline container `depth` levels deep: past MAX_NESTING, OverBudget."""
        if depth > MAX_NESTING:
            raise OverBudget(f"{self.what}: inline formatting nested over {MAX_NESTING} levels deep: refused")

    def check(self) -> None:
        """Stop here when the client is gone or the deadline passed (cheap: a loop may call it every item)."""
        self._ticks = 0
        if self.cancel is not None and self.cancel.is_set():
            raise Cancelled(f"{self.what}: cancelled (the client closed the request)")
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise TimedOut(f"{self.what}: {self.timeout_message}")

    def tick(self) -> None:
        """One step of a loop with nothing to count: the clock is read every CHECK_EVERY steps."""
        self._ticks += 1
        if self._ticks >= CHECK_EVERY:
            self.check()


_CURRENT: contextvars.ContextVar[WorkBudget | None] = contextvars.ContextVar("nmt_work_budget", default=None)


def current() -> WorkBudget:
    """The budget in force here; without one (a caller that opened none), a fresh default budget each call: a
    single charge over a limit is still refused, but nothing accumulates. nmt.translation.documents always opens one."""
    budget = _CURRENT.get()
    return budget if budget is not None else WorkBudget()


@contextlib.contextmanager
def bounded(budget: WorkBudget) -> Iterator[WorkBudget]:
    """`budget` in force for the block (in this thread or task)."""
    token = _CURRENT.set(budget)
    try:
        yield budget
    finally:
        _CURRENT.reset(token)
