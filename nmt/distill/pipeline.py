"""`nmt distill`: a big teacher into a small student, one resumable stage after another in one pipeline dir
(nmt.distill.state): clean -> teacher -> backtranslate -> data -> student -> student-int8 -> score -> export -> report.

Before any stage runs, the inputs are checked (a teacher given, its language pair the corpus', its beam as wide as
distill.teacher_nbest, a translations file of the corpus' length, a reverse teacher of the opposite pair), so a
mistake is one line at once, not after an hour of translation. A finished stage is not run again; the unfinished one
resumes: the teacher and the back-translation at their first untranslated chunk, the student's training and its
int8-aware fine-tune at the update of their newest checkpoint (nmt train's own resume); the cheap stages (clean,
data, score, export, report) are redone whole.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from nmt import comet
from nmt.config.experiment import Config
from nmt.distill import backtranslate, packages, report, stages, teacher
from nmt.distill.state import INT8_STAGE, STAGES, Pipeline
from nmt.errors import NmtError
from nmt.log import console, show_progress

Stage = Callable[[Config, Pipeline, bool], dict[str, Any]]


def teacher_stage(cfg: Config, pipe: Pipeline, progress: bool) -> dict[str, Any]:
    return teacher.translate(cfg, pipe, progress) if cfg.distill.teacher else teacher.from_file(cfg, pipe)


RUNNERS: dict[str, Stage] = {"clean": stages.clean, "teacher": teacher_stage,
                             "backtranslate": backtranslate.backtranslate, "data": stages.data,
                             "student": stages.student, INT8_STAGE: stages.student_int8,
                             "score": stages.score_stage, "export": packages.export_stage,
                             "report": report.report_stage}
assert tuple(RUNNERS) == STAGES


def settings(cfg: Config) -> dict[str, Any]:
    """What the pipeline's outputs depend on, recorded in pipeline.json: a rerun with other values is refused
    (unless --force) rather than mixing two pipelines' stages. The student's training keys are left to nmt train's
    own rule (only its model must match), so a longer max_updates can be asked of an unfinished student."""
    # where, and how fast: not what (distill.comet is what: another model gives other scores)
    ignored = {"dir", "sample", "teacher_device", "num_proc", "comet_batch_size", "comet_device"}
    return {section: {k: v for k, v in asdict(getattr(cfg, section)).items() if k not in ignored}
            for section in ("data", "distill", "model")}


def preflight(cfg: Config) -> None:
    """The one-line errors (and the warning) that need no stage run: see the module docstring."""
    d = cfg.distill
    if not cfg.data.train:
        raise NmtError("no corpus: data.train is not set (a file prefix, a .tsv/.tmx file or a datasets name, as "
                       "nmt prepare reads it)")
    if not (d.teacher or d.teacher_translations):
        raise NmtError("no teacher: set distill.teacher (an nmt checkpoint or run dir, an imported OPUS-MT model) "
                       "or distill.teacher_translations (a file of translations, one per line of data.train)")
    if d.comet:  # its files and its encoder, not after an hour of training
        comet.open_dir(d.comet)
    if d.teacher:
        ckpt = teacher.load_checkpoint(d.teacher)
        langs, pair = ckpt.langs, (cfg.data.src_lang, cfg.data.tgt_lang)
        if langs is not None and langs != ("src", "tgt") and langs != pair:
            raise NmtError(f"the teacher {d.teacher} translates {langs[0]}->{langs[1]} but the corpus is "
                           f"{pair[0]}->{pair[1]} (data.src_lang/data.tgt_lang)")
        teacher.output_search(d, teacher.own_beam(ckpt), d.teacher_nbest)  # a beam below teacher_nbest: refused
        mine, theirs = (teacher.non_embedding_parameters(m) for m in (cfg.model, ckpt.model_config))
        if mine >= theirs:
            console.print(f"[yellow]warning:[/yellow] the student (model section: {mine:,} layer weights) is not "
                          f"smaller than the teacher ({theirs:,}): distillation is meant to make a smaller model")
    else:
        lines = sum(1 for _ in stages.corpus_pairs(cfg, "train"))
        teacher.check_translations_file(cfg, lines)
    backtranslate.preflight(cfg)


def run(cfg: Config, *, force: bool = False, progress: bool | None = None) -> dict[str, Any]:
    """The `nmt distill` command: every unfinished stage in order; returns pipeline.json's record."""
    preflight(cfg)
    bars = show_progress(progress)
    pipe = Pipeline(cfg.distill.dir, settings(cfg), force=force)
    try:
        for name, runner in RUNNERS.items():
            if pipe.done(name):
                console.print(f"{name}: done by an earlier run")
                continue
            console.print(f"[bold]{name}[/bold]" + (" (resumed)" if pipe.stage(name)["state"] == "running" else ""))
            pipe.start(name)
            started = time.monotonic()
            pipe.finish(name, runner(cfg, pipe, bars), time.monotonic() - started)
        report.show(pipe.path, pipe.record)
        return pipe.record
    finally:
        pipe.release()
