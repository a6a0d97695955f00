"""Each update's outcome, counted and reported: taken (the step counter, the log, torch.compile's watch) or skipped
(counted, warned, and the run stopped after train.max_bad_updates in a row); and the updates decided on the device
(nmt.train.late) settled that way once read."""

from __future__ import annotations

from collections.abc import Callable

from nmt.config.experiment import Config
from nmt.data.batching import Batch
from nmt.errors import NmtError
from nmt.log import Reporter
from nmt.rundir import RunDir
from nmt.train.budget import TimeBudget
from nmt.train.late import LateUpdates
from nmt.train.state import Counters


class Tally:
    """`late`: the updates decided on the device, `reason()` why one of them was not taken."""

    def __init__(self, cfg: Config, counters: Counters, report: Reporter, run_dir: RunDir,
                 watch: Callable[[int, Batch], None] | None, late: LateUpdates, reason: Callable[[], str]):
        self.cfg, self.counters, self.report, self.run_dir, self.watch = cfg, counters, report, run_dir, watch
        self.late, self.reason = late, reason

    def stepped(self, budget: TimeBudget, stats: dict[str, float], epoch: int, batch: Batch,
                at: float | None = None) -> None:
        """An update taken: counted and logged (`at`: when it ended, if that was before now)."""
        c = self.counters
        c.stepped()
        c.elapsed = budget.elapsed()
        self.report.update(c.step, epoch, stats, budget.update_seconds, self.cfg.train.log_every, at)
        if self.watch is not None:
            self.watch(c.step, batch)

    def skipped(self, reason: str) -> None:
        """An update not taken: counted and warned; NmtError after train.max_bad_updates in a row."""
        c = self.counters
        c.skipped()
        self.report.warn(f"{reason} at update {c.step + 1}: update skipped ({c.bad_updates} in a row)")
        if c.bad_updates >= self.cfg.train.max_bad_updates:
            what = "non-finite" if reason.startswith("non-finite") else "skipped"
            raise NmtError(f"{c.bad_updates} {what} updates in a row; stopping "
                           f"(last good checkpoint kept in {self.run_dir})")

    def settle(self, budget: TimeBudget, keep: int = 0) -> None:
        """Read the updates decided on the device but the last `keep`, oldest first, and count each: taken, or
        skipped (a loss or gradient norm that was not finite)."""
        for q, (loss, nll, norm, taken, lr, tokens) in self.late.read(keep):
            if not taken:
                self.skipped(self.reason())
                continue
            stats = {"loss": loss / tokens, "nll": nll / tokens, "lr": lr, "gnorm": norm, "tokens": tokens}
            self.stepped(budget, stats, q.epoch, q.batch, q.at)
