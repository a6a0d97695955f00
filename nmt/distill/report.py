"""The report of `nmt distill`, its last stage: the systems the score stage scored (teacher, student fp32, student
int8 by post-training quantization, student int8 after the int8-aware fine-tune) side by side, with their decoding
speed on this machine, their size, and the gaps between them; as report.html in the pipeline dir (nmt.distill.page
writes it) and as a table on the terminal at the end of `nmt distill`. The export stage's packages follow them.

Decoding speed: each system that is a model (a teacher given as a file of translations is not) translates the first
`distill.speed_lines` test sources in batches of 32 (one search batch per call) and the first
`distill.speed_lines_single` one at a time, with its own search settings (beam...), int8 ones on the CPU. One
untimed round, then `distill.speed_rounds` timed ones; in each round every system runs once, in turn, the order
reversed every other round (bench/common.py's interleaving), so that other load on the machine hits all alike; the
median round counts. Tokens are counted as the benches count them (nmt.translation.translator.output_tokens: each
line's best translation, EOS not counted).
"""

from __future__ import annotations

import functools
import itertools
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch
from rich.console import Console
from rich.table import Table
from rich.text import Text

from nmt import checkpoint
from nmt.config.distill import DistillConfig
from nmt.config.experiment import Config
from nmt.distill import page, stages, teacher
from nmt.distill.state import INT8_STAGE, SYSTEMS, Pipeline
from nmt.io import atomic_write_text
from nmt.log import console
from nmt.rundir import RunDir, checkpoint_file
from nmt.translation.translator import Translation, Translator, output_tokens

REPORT_FILE = "report.html"
SPEED_BATCH = 32  # sentences per call of the wide measurement (the other is 1)
ONE_BATCH = 1 << 30  # decode.max_tokens that keeps a call's lines in one search batch
Key = TypeVar("Key")


def report_stage(cfg: Config, pipe: Pipeline, progress: bool) -> dict[str, Any]:
    """report.html, and the figures it adds to the scores (pipeline.json): each model's decoding speed at batch 32
    and 1, its checkpoint and the bytes of its weights and of the file. Redone whole after a kill."""
    d = cfg.distill
    scores = pipe.stage("score")["figures"]
    names = [name for name in SYSTEMS if name in scores]
    paths = checkpoints(cfg, pipe, names)
    figures: dict[str, Any] = {"html": REPORT_FILE}
    speed: dict[str, dict[str, Any]] = {}
    if d.speed_rounds and paths and (d.speed_lines or d.speed_lines_single):
        lines = max(d.speed_lines, d.speed_lines_single)
        sources = [s for s, _ in itertools.islice(stages.corpus_pairs(cfg, "test"), lines)]
        speed = measure_speed(translators(cfg, pipe, list(paths)), sources, d)
        figures["speed"] = {"rounds": d.speed_rounds, "batch": SPEED_BATCH, "threads": torch.get_num_threads(),
                            "lines": min(d.speed_lines, len(sources)),
                            "lines_single": min(d.speed_lines_single, len(sources))}
    for name in names:
        figures[name] = {**(sizes(paths[name]) if name in paths else {}), **speed.get(name, {})}
    refs = pipe.path / "score" / f"test.ref.{cfg.data.tgt_lang}"
    if names and not refs.is_file():  # a score stage from before the references were written there
        stages.write_references(cfg, pipe)
    atomic_write_text(pipe.path / REPORT_FILE, page.render(pipe.path, pipe.record, figures, cfg.data.tgt_lang))
    return figures


def checkpoints(cfg: Config, pipe: Pipeline, names: list[str]) -> dict[str, Path]:
    """The checkpoint each scored system translates with (a teacher given as translations has none)."""
    if not names:
        return {}
    student = RunDir(pipe.path / "student").for_translation()
    paths = {"student": student, "student_int8": student}
    if "student_int8_tuned" in names:
        paths["student_int8_tuned"] = RunDir(pipe.path / INT8_STAGE).for_translation()
    if cfg.distill.teacher:
        paths["teacher"] = checkpoint_file(Path(cfg.distill.teacher))
    return {name: paths[name] for name in names if name in paths}


def translators(cfg: Config, pipe: Pipeline, names: list[str]) -> dict[str, Translator]:
    """The systems `names` loaded as the score stage loads them (int8 ones on the CPU)."""
    loaded = {"teacher": teacher.translator(cfg)} if "teacher" in names else {}
    loaded.update({name: t for name, t in stages.student_systems(cfg, pipe).items() if t is not None})
    return {name: loaded[name] for name in names if name in loaded}


def sizes(path: Path) -> dict[str, Any]:
    """A checkpoint's file size on disk and the bytes of its distinct weights (a tied matrix once)."""
    weights = checkpoint.load(path, mmap=True).weights
    distinct = checkpoint.tensors_by_storage(weights)
    return {"checkpoint": str(path), "checkpoint_bytes": path.stat().st_size,
            "weight_bytes": sum(weights[n].numel() * weights[n].element_size() for n in distinct)}


def in_batches(translator: Translator, lines: list[str], size: int) -> list[Translation]:
    """`lines` translated `size` at a time, each call one batch of the search."""
    decode = translator.decode_with(max_tokens=ONE_BATCH)
    return [r for k in range(0, len(lines), size) for r in translator.translate_chunk(lines[k:k + size],
                                                                                      decode=decode)]


def take_turns(runs: dict[Key, Callable[[], list[Translation]]], rounds: int
               ) -> tuple[dict[Key, list[float]], dict[Key, list[Translation]]]:
    """Seconds of each run in each of `rounds` timed rounds, after one untimed round (first-call allocations and
    caches), and each run's output. Every round calls each run once, the order reversed every other round."""
    keys = list(runs)
    seconds: dict[Key, list[float]] = {k: [] for k in keys}
    outputs: dict[Key, list[Translation]] = {}
    for r in range(rounds + 1):
        for k in keys if r % 2 == 0 else keys[::-1]:
            started = time.perf_counter()
            outputs[k] = runs[k]()
            if r:
                seconds[k].append(time.perf_counter() - started)
    return seconds, outputs


def measure_speed(systems: dict[str, Translator], sources: list[str], d: DistillConfig) -> dict[str, dict[str, Any]]:
    """Per system: where and how it decodes, and at batch 32 and 1 the lines, the tokens generated, the median
    seconds and tokens/s (the module docstring says how)."""
    slices = {"batch32": (sources[:d.speed_lines], SPEED_BATCH), "batch1": (sources[:d.speed_lines_single], 1)}
    runs = {(name, key): functools.partial(in_batches, t, lines, size)
            for name, t in systems.items() for key, (lines, size) in slices.items() if lines}
    seconds, outputs = take_turns(runs, d.speed_rounds)
    out: dict[str, dict[str, Any]] = {name: {"device": str(t.device), "beam": t.decode.beam, "quantize": t.quantize}
                                      for name, t in systems.items()}
    for (name, key), times in seconds.items():
        tokens, median = output_tokens(outputs[name, key]), statistics.median(times)
        out[name][key] = {"lines": len(slices[key][0]), "tokens": tokens, "seconds": round(median, 6),
                          "tokens_per_s": round(tokens / median, 1)}
    return out


def systems_table(record: dict[str, Any]) -> Table:
    """The systems table for the terminal (the one report.html shows)."""
    stage = record["stages"]
    out = Table(title="teacher and student on data.test", title_justify="left")
    for name in page.columns(stage["score"]["figures"]):
        out.add_column(name, justify="left" if name == "system" else "right", overflow="fold")
    for row in page.system_rows(stage["score"]["figures"], stage["report"]["figures"]):
        out.add_row(*(Text(cell) for cell in row))
    return out


def packages_table(path: Path, record: dict[str, Any]) -> Table | None:
    """The packages table for the terminal (the one report.html shows); None when the export stage made none."""
    rows = page.package_rows(path, (record["stages"].get("export") or {}).get("figures") or {})
    if not rows:
        return None
    out = Table(title="the exported packages", title_justify="left")
    for name in page.PACKAGE_COLUMNS:
        out.add_column(name, justify="right" if name in ("size", "BLEU", "chrF") else "left", overflow="fold")
    for row in rows:
        out.add_row(*(Text(cell) for cell in row))
    return out


def show_packages(out: Console, path: Path, record: dict[str, Any]) -> None:
    """The packages table and the CTranslate2 package's gap, when there are packages."""
    packages = packages_table(path, record)
    if packages is not None:
        out.print(packages)
    gap = page.package_gap(record["stages"]["score"]["figures"], record["stages"].get("export", {}).get("figures", {}))
    if gap:
        console.print(gap)


def show(path: Path, record: dict[str, Any]) -> None:
    """The end of `nmt distill`: the systems table, the gaps, the packages, where the report is."""
    scores, report = record["stages"]["score"]["figures"], record["stages"]["report"]["figures"]
    if not any(name in scores for name in SYSTEMS):
        show_packages(console, path, record)
        return
    # a log (not a terminal) gets the table unfolded: rich would fit it to 80 columns there
    wide = console if console.is_terminal else Console(file=console.file, width=max(console.width, 120),
                                                       highlight=False)
    wide.print(systems_table(record))
    for line in page.gap_sentences(scores, report):
        console.print(line)
    show_packages(wide, path, record)
    if report.get("html"):
        console.print(f"report: {path / report['html']}")
