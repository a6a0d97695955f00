"""What long jobs tell the user on stderr: the one look of a progress bar (`progress_bar`, used by
prepare and translate), and training's output: a rich bar (terminal) or plain log lines (files/CI), the
records of metrics.jsonl (kept by nmt.rundir) and, with train.tensorboard, the same numbers as
TensorBoard scalars in RUN_DIR/tensorboard."""

from __future__ import annotations

import math
import sys
import time
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from nmt.errors import NmtError
from nmt.rundir import RunDir

console = Console(stderr=True, highlight=False, soft_wrap=True)


def show_progress(asked: bool | None) -> bool:
    """--progress/--no-progress, or by default: only when stderr is a terminal (never in logs or CI)."""
    return sys.stderr.isatty() if asked is None else asked


class _Count(ProgressColumn):
    """`1,234 pairs`, or `1,234/5,000 lines` when the total is known."""

    def __init__(self, unit: str):
        super().__init__()
        self.unit = unit

    def render(self, task: Task) -> Text:
        total = f"/{task.total:,.0f}" if task.total is not None else ""
        return Text(f"{task.completed:,.0f}{total} {self.unit}")


def _average_speed(task: Task) -> float | None:
    """Items per second since the start. Not rich's recent-window speed: translate's output arrives a
    sorted chunk at a time, and a window that sees one jump reads as a million lines/s."""
    return task.completed / task.elapsed if task.elapsed and task.completed else None


class _Rate(ProgressColumn):
    def __init__(self, unit: str):
        super().__init__()
        self.unit = unit

    def render(self, task: Task) -> Text:
        speed = _average_speed(task)
        return Text(f"{speed:,.0f} {self.unit}/s" if speed else f"- {self.unit}/s", style="progress.data.speed")


class _TimeLeft(ProgressColumn):
    """Time left at the average speed; -:--:-- while the total or the speed is unknown."""

    def render(self, task: Task) -> Text:
        speed = _average_speed(task)
        if task.total is None or not speed:
            return Text("-:--:--", style="progress.remaining")
        seconds = int(max(task.total - task.completed, 0) / speed)
        return Text(f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}", style="progress.remaining")


def progress_bar(unit: str, *, enabled: bool, transient: bool = False) -> Progress:
    """A stage of a long job on stderr: `what ━━━ 1,234/5,000 lines 410 lines/s 0:00:03 0:00:09`. With no
    total the bar pulses and the time left shows as -:--:--. `{task.fields[note]}` adds a remark
    (e.g. how many pairs the filters kept)."""
    return Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), _Count(unit), _Rate(unit),
                    TextColumn("{task.fields[note]}"), TimeElapsedColumn(), _TimeLeft(),
                    console=console, disable=not enabled, transient=transient,
                    redirect_stdout=False)  # stdout carries results (translations), never the bar's output


class Reporter:
    """Everything the trainer tells the user. Silent on non-zero DDP ranks."""

    def __init__(self, run_dir: RunDir, *, enabled: bool = True, progress: bool | None = None,
                 tensorboard: bool = False):
        self.enabled = enabled
        self.run_dir = run_dir
        self.writer_class: Any = _summary_writer() if enabled and tensorboard else None
        self.writer: Any = None  # created on first use, so that a resume can purge the steps it redoes
        self.purge_step: int | None = None
        self.use_bar = enabled and (sys.stderr.isatty() if progress is None else progress)
        self.bar: Progress | None = None
        self.task: Any = None
        self.tokens = 0.0
        self.window_start = time.monotonic()
        self.window_updates = 0
        self.sums = {"loss": 0.0, "nll": 0.0}

    # ---- plain messages
    def info(self, message: str) -> None:
        if self.enabled:
            console.print(message)

    def warn(self, message: str) -> None:
        if self.enabled:
            console.print(f"[yellow]warning:[/yellow] {message}")

    # ---- metrics file
    def _write(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        self.run_dir.append_metrics(record)
        if self.writer_class is not None:
            self._scalars(record)

    def _scalars(self, record: dict[str, Any]) -> None:
        """train/loss, valid/bleu, ... against the update number."""
        if self.writer is None:
            self.writer = self.writer_class(str(self.run_dir.tensorboard), purge_step=self.purge_step)
        for key, value in record.items():
            if key not in ("type", "step", "epoch", "time") and isinstance(value, (int, float)):
                self.writer.add_scalar(f"{record['type']}/{key}", value, record["step"])
        self.writer.flush()

    def truncate_metrics(self, step: int) -> None:
        """After a resume, forget records logged after the checkpoint we resumed from."""
        self.purge_step = step + 1
        if self.enabled:
            self.run_dir.truncate_metrics(step)

    # ---- progress
    def start(self, total: int, done: int) -> None:
        self.window_start = time.monotonic()
        if self.use_bar:
            self.bar = Progress(
                TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[stats]}"),
                TimeRemainingColumn(), console=console, transient=False,
            )
            self.bar.start()
            self.task = self.bar.add_task("train", total=total, completed=done, stats="")

    def update(self, step: int, epoch: int, stats: dict[str, float], seconds: float, log_every: int,
               at: float | None = None) -> None:
        """Update `step` taken; `at`: when it ended (time.monotonic), if it is reported later (nmt.train.late)."""
        if not self.enabled:
            return
        now = time.monotonic() if at is None else at
        self.tokens += stats["tokens"]
        self.window_updates += 1
        self.sums["loss"] += stats["loss"]
        self.sums["nll"] += stats["nll"]
        if self.bar is not None:
            speed = stats["tokens"] / max(seconds, 1e-9)
            self.bar.update(self.task, completed=step,
                            stats=f"loss {stats['loss']:.3f} lr {stats['lr']:.2e} {speed:,.0f} tok/s")
        if step % log_every:
            return
        span = max(now - self.window_start, 1e-9)
        n = self.window_updates
        record = {
            "type": "train", "step": step, "epoch": epoch, "loss": self.sums["loss"] / n,
            "nll": self.sums["nll"] / n, "ppl": math.exp(min(self.sums["nll"] / n, 50)),
            "lr": stats["lr"], "gnorm": stats["gnorm"], "updates_per_s": n / span,
            "tgt_tokens_per_s": self.tokens / span, "time": time.time(),
        }
        self._write(record)
        line = (f"update {step:>7} | epoch {epoch:>3} | loss {record['loss']:.3f} | ppl {record['ppl']:8.2f} | "
                f"lr {record['lr']:.2e} | {record['updates_per_s']:.2f} upd/s | "
                f"{record['tgt_tokens_per_s']:,.0f} tgt tok/s")
        if self.bar is not None:
            self.bar.console.print(line)
        else:
            console.print(line)
        self.tokens, self.window_updates, self.window_start = 0.0, 0, now
        self.sums = {"loss": 0.0, "nll": 0.0}

    def valid(self, step: int, result: dict[str, float]) -> None:
        self._write({"type": "valid", "step": step, **result, "time": time.time()})
        bleu = f" | bleu {result['bleu']:.2f}" if "bleu" in result else ""
        self.info(f"[bold cyan]valid[/bold cyan]  update {step:>7} | loss {result['loss']:.3f} | "
                  f"ppl {result['ppl']:.2f}{bleu}")

    def finish(self, step: int, reason: str) -> None:
        self.close()
        self.info(f"training stopped at update {step} ({reason})")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def _summary_writer() -> Any:
    """The SummaryWriter class (the tensorboard package is optional: `pip install tensorboard`)."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as e:
        raise NmtError("train.tensorboard needs the tensorboard package: pip install tensorboard") from e
    return SummaryWriter
