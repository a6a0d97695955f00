"""The time budget of a run (`train.max_minutes`): training stops early enough that the final save and the
checkpoint averaging still fit, so the budget bounds the whole command, not just the updates.

The seconds kept in hand are re-measured as the run goes (the last update, validation and save), and
the clock continues across resumes (the counters carry the elapsed seconds).
"""

from __future__ import annotations

import time
from collections.abc import Callable


class TimeBudget:
    def __init__(self, minutes: float, elapsed: float, checkpoint_bytes: int, average_last: int,
                 agree: Callable[[bool], bool] = bool):
        """`elapsed`: seconds spent by earlier runs of this training; `checkpoint_bytes`: weights plus both
        Adam moments, for the first guess at a save (a conservative 100 MB/s); `agree`: makes every DDP rank
        decide alike (true on one rank -> true on all)."""
        self.seconds = minutes * 60
        self.average_last = average_last
        self.agree = agree
        self._before, self._started = elapsed, time.monotonic()
        self.update_seconds = self.valid_seconds = 0.0
        self.save_seconds = 0.05 + checkpoint_bytes / 100e6

    def elapsed(self) -> float:
        """Training seconds so far, earlier runs included."""
        return self._before + time.monotonic() - self._started

    def exhausted(self, validate_next: bool) -> bool:
        """Whether no room is left for one more update (and its validation when `validate_next`), the final
        save, and the averaging (which reads average_last checkpoints and writes one)."""
        if self.seconds <= 0:
            return False
        reserve = self.update_seconds + self.save_seconds * (self.average_last + 3) + 0.5
        if validate_next:
            reserve += self.valid_seconds
        return self.agree(self.elapsed() + reserve >= self.seconds)
