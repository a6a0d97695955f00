"""The stages of `nmt distill` besides the teacher's and the report's: clean the corpus, build the student's data,
train the student, fine-tune it for int8, score teacher and student (fp32, int8, int8 after the fine-tune). Each
takes the config and the pipeline and returns its figures (what pipeline.json and `nmt info` show); each is made of
nmt's own pieces (corpus reading, prepare, train, Translator, score), so the student is exactly what `nmt prepare` +
`nmt train` would make of the same text.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.table import Table

from nmt import checkpoint, text
from nmt.config.experiment import Config
from nmt.data import corpus
from nmt.data.prepare import prepare
from nmt.distill import teacher
from nmt.distill.filters import FILTERS, Cleaner
from nmt.distill.state import INT8_STAGE, Pipeline
from nmt.errors import NmtError
from nmt.io import atomic_output, atomic_write_text
from nmt.log import console
from nmt.rundir import RunDir
from nmt.score import bleu_tokenizer, score
from nmt.train.optim import learning_rate
from nmt.translation.translator import ModelOptions, Translator

INT8_DIR = INT8_STAGE  # the fine-tune's run dir in the pipeline dir: the stage's folder


def corpus_pairs(cfg: Config, split: str) -> Iterator[tuple[str, str]]:
    """The (source, target) pairs of data.train or data.test, cleaned and normalized as `nmt prepare` reads them."""
    d = cfg.data
    spec, hf_split = (d.train, d.hf_train_split) if split == "train" else (d.test, d.hf_test_split)
    pairs = corpus.read_pairs(spec or "", d.src_lang, d.tgt_lang, hf_config=d.hf_config, hf_split=hf_split,
                              src_column=d.src_column, tgt_column=d.tgt_column)
    return ((text.normalize(s, d.normalize), text.normalize(t, d.normalize)) for s, t in pairs)


def clean(cfg: Config, pipe: Pipeline, progress: bool) -> dict[str, Any]:
    """clean/train.SRC, train.TGT and lines.txt (the kept pairs' corpus line numbers), and clean/report.json: each
    filter's count and first dropped pairs. An empty result is an error, after the report is written."""
    src, tgt = cfg.data.src_lang, cfg.data.tgt_lang
    folder = pipe.folder("clean")
    cleaner = Cleaner(cfg.distill, src, tgt)
    with (atomic_output(folder / f"train.{src}", text=True) as fs, atomic_output(folder / f"train.{tgt}", text=True)
          as ft, atomic_output(folder / "lines.txt", text=True) as fl):
        for number, (s, t) in enumerate(corpus_pairs(cfg, "train"), 1):
            if cleaner.keep(number, s, t):
                fs.write(s + "\n")
                ft.write(t + "\n")
                fl.write(f"{number}\n")
    report = cleaner.report()
    atomic_write_text(folder / "report.json", json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    show_report(report)
    if report["kept"] == 0:
        what = "is empty" if report["read"] == 0 else f"has no pair left after cleaning ({report['read']:,} read)"
        raise NmtError(f"the corpus data.train {cfg.data.train} {what}; what each filter dropped: "
                       f"{folder / 'report.json'}")
    return {"read": report["read"], "kept": report["kept"], "dropped": report["dropped"]}


def show_report(report: dict[str, Any], stage: str = "clean") -> None:
    """The cleaning on the terminal: each filter's count and its first dropped pair."""
    table = Table(title=f"{stage}: read {report['read']:,}, kept {report['kept']:,}", title_justify="left")
    for name in ("filter", "dropped", "first dropped (line: source ||| target)"):
        table.add_column(name, justify="right" if name == "dropped" else "left", overflow="fold")
    for name in FILTERS:
        first = (report["samples"].get(name) or [None])[0]
        shown = f"{first['line']}: {first['src'][:60]} ||| {first['tgt'][:60]}" if first else ""
        if first and "why" in first:
            shown += f" ({first['why']})"
        table.add_row(name, f"{report['dropped'][name]:,}", shown)
    console.print(table)
    for note in report["notes"]:
        console.print(f"note: {note}")


def data(cfg: Config, pipe: Pipeline, progress: bool) -> dict[str, Any]:
    """distilled/train.*: the pairs of `distilled_pairs` (teacher, n-best, references share, back-translated), then
    the student's data dir by nmt prepare, with data.valid/test as they are (the student is validated and tested on
    references). Its figures count the pairs of each kind."""
    d, src, tgt = cfg.distill, cfg.data.src_lang, cfg.data.tgt_lang
    out = pipe.folder("distilled")
    counts = dict.fromkeys(PAIR_KINDS, 0)
    with atomic_output(out / f"train.{src}", text=True) as os_, atomic_output(out / f"train.{tgt}", text=True) as ot:
        for s, t, kind in distilled_pairs(cfg, pipe):
            counts[kind] += 1
            if t is not None:
                os_.write(s)
                ot.write(t)
    data_cfg = replace(cfg.data, dir=str(pipe.path / "data"), train=str(out / "train"))
    meta = prepare(data_cfg, progress=progress)
    output = "translations file" if not d.teacher else "sampled" if d.teacher_sampling else "beam search"
    return {**counts, "teacher_output": output, "pairs": meta["splits"]["train"]["pairs"],
            "filters": meta.get("filters"), "vocab_size": meta["src_vocab_size"],
            "splits": {k: v["pairs"] for k, v in meta["splits"].items()}}


# the kinds of the student's training pairs, as the data stage counts them; the two with None as the target are not
# added: an n-best translation equal to an earlier one of its source (or empty), a reference picked for the
# references share that equals one of the teacher's translations
PAIR_KINDS = ("teacher_pairs", "nbest_pairs", "nbest_repeats", "reference_pairs", "references_as_teacher",
              "backtranslated_pairs")


def distilled_pairs(cfg: Config, pipe: Pipeline) -> Iterator[tuple[str, str | None, str]]:
    """(source line, target line or None, kind) of every cleaned source: its teacher translation, its 2nd to
    distill.teacher_nbest-th ones (teacher/train.TGT holds them source by source, best first) that differ from the
    ones before, and for a `distill.references` share of the sources (seeded) its original reference where it
    differs from them; then the back-translation stage's (synthetic source, target) pairs."""
    d, src, tgt = cfg.distill, cfg.data.src_lang, cfg.data.tgt_lang
    rng, n = random.Random(d.seed), d.teacher_nbest if d.teacher else 1
    clean = pipe.path / "clean"
    with (open(clean / f"train.{src}", encoding="utf-8") as fs, open(clean / f"train.{tgt}", encoding="utf-8") as fr,
          open(pipe.path / "teacher" / f"train.{tgt}", encoding="utf-8") as fh):
        for s, ref in zip(fs, fr, strict=True):
            hyps = [next(fh) for _ in range(n)]
            yield s, hyps[0], "teacher_pairs"
            for i, hyp in enumerate(hyps[1:], 1):
                fresh = bool(hyp.strip()) and hyp not in hyps[:i]
                yield s, hyp if fresh else None, "nbest_pairs" if fresh else "nbest_repeats"
            if rng.random() < d.references:
                yield (s, None, "references_as_teacher") if ref in hyps else (s, ref, "reference_pairs")
    if d.monolingual:
        synthetic = pipe.path / "backtranslate"
        with open(synthetic / f"train.{src}", encoding="utf-8") as bs, open(synthetic / f"train.{tgt}",
                                                                            encoding="utf-8") as bt:
            yield from ((s, t, "backtranslated_pairs") for s, t in zip(bs, bt, strict=True))


def student_config(cfg: Config, pipe: Pipeline) -> Config:
    """The config the student trains with: the given one, its data dir and run dir inside the pipeline dir."""
    student = replace(cfg, data=replace(cfg.data, dir=str(pipe.path / "data")),
                      train=replace(cfg.train, run_dir=str(pipe.path / "student")))
    student.given = set(cfg.given)
    return student


def student(cfg: Config, pipe: Pipeline, progress: bool) -> dict[str, Any]:
    """nmt's own training of the student (it resumes at the update where a kill stopped it)."""
    from nmt.train.loop import train

    summary = train(student_config(cfg, pipe), progress=progress)
    chosen = RunDir(pipe.path / "student").for_translation()
    return {"updates": summary["step"], "stopped": summary["stopped"], "best": summary.get("best"),
            "train_s": round(summary["elapsed"], 1), "checkpoint": chosen.name,
            "parameters": parameters(checkpoint.load(chosen))}


def int8_config(cfg: Config, pipe: Pipeline) -> Config:
    """The config of the int8-aware fine-tune: the student's, its run dir student-int8/, starting from the student's
    checkpoint (train.init_from: fresh optimizer), distill.int8_finetune_updates updates at a lower learning rate.
    No averaging: a mean of weights each tuned to int8's grid is not tuned to it."""
    d, student = cfg.distill, student_config(cfg, pipe)
    updates = d.int8_finetune_updates
    peak = d.int8_finetune_lr or learning_rate(max(student.train.warmup, 1), student) / 50
    training = replace(student.train, run_dir=str(pipe.path / INT8_DIR), max_updates=updates, lr=peak,
                       schedule="inverse_sqrt", warmup=max(1, updates // 10), warmup_init_lr=min(1e-7, peak),
                       average_last=0, init_from=str(RunDir(pipe.path / "student").for_translation()))
    tuned = replace(student, train=training)
    tuned.given = set(student.given)
    return tuned


def student_int8(cfg: Config, pipe: Pipeline, progress: bool) -> dict[str, Any]:
    """The int8-aware fine-tune: nmt's training loop continues the student with every Linear layer fake-quantized
    (nmt.train.fakequant), so that its weights learn to lose little when `--quantize int8` rounds them. Its
    checkpoints are ordinary ones (and it resumes at the update of its newest, as nmt train does)."""
    from nmt.train.fakequant import fake_quantize
    from nmt.train.loop import train

    if cfg.distill.int8_finetune_updates == 0:
        return {"skipped": "distill.int8_finetune_updates=0"}
    tuned = int8_config(cfg, pipe)
    summary = train(tuned, progress=progress, model_transform=fake_quantize)
    return {"updates": summary["step"], "stopped": summary["stopped"], "best": summary.get("best"),
            "lr": tuned.train.lr, "train_s": round(summary["elapsed"], 1),
            "from": Path(tuned.train.init_from or "").name,
            "checkpoint": RunDir(pipe.path / INT8_DIR).for_translation().name}


def parameters(ckpt: checkpoint.Checkpoint) -> int:
    """Distinct weights of a checkpoint (a tied matrix counts once)."""
    weights = ckpt.weights
    return sum(weights[name].numel() for name in checkpoint.tensors_by_storage(weights))


def score_stage(cfg: Config, pipe: Pipeline, progress: bool) -> dict[str, Any]:
    """Teacher and student on data.test: their translations in score/, BLEU and chrF (nmt score's sacreBLEU, BLEU's
    tokenizer chosen for the target language) and with distill.comet COMET in score/scores.json, the references in
    score/test.ref.TGT. The student three times: fp32, int8 as `nmt translate --quantize int8` makes it of the fp32
    checkpoint (post-training quantization), and int8 after the int8-aware fine-tune (when it ran)."""
    if not cfg.data.test:
        return {"skipped": "no data.test"}
    tgt = cfg.data.tgt_lang
    pairs = list(corpus_pairs(cfg, "test"))
    sources, refs = [s for s, _ in pairs], [t for _, t in pairs]
    folder = pipe.folder("score")
    write_references(cfg, pipe, refs)
    tokenize = bleu_tokenizer(tgt).name
    systems: dict[str, Any] = {}
    outputs: dict[str, list[str]] = {}
    hyps = {"teacher": teacher_test(cfg, sources), **student_systems(cfg, pipe)}
    for name, system in hyps.items():
        if system is None:
            continue
        started = time.monotonic()
        lines = system if isinstance(system, list) else [r.text[0] for r in system.translate_chunk(sources)]
        seconds = time.monotonic() - started
        atomic_write_text(folder / f"test.{name}.{tgt}", "".join(line + "\n" for line in lines))
        outputs[name] = lines
        result = score(lines, [refs], metrics=("bleu", "chrf"), tokenize=tokenize,
                       ref_names=[f"data.test ({cfg.data.test})"])
        systems[name] = {"bleu": round(result["bleu"]["score"], 2), "chrf": round(result["chrf"]["score"], 2),
                         "signature": result["bleu"]["signature"]}
        if not isinstance(system, list):
            systems[name].update(translate_s=round(seconds, 2), parameters=parameters(checkpoint.load(system.path)))
    figures = {"lines": len(pairs), "tokenize": tokenize, **systems}
    if cfg.distill.comet and outputs:
        figures["comet"] = comet_scores(cfg, pipe, sources, refs, outputs, progress)
        for name, value in figures["comet"].pop("systems").items():
            systems[name]["comet"] = value
    atomic_write_text(folder / "scores.json", json.dumps(figures, indent=1) + "\n")
    return figures


def comet_scores(cfg: Config, pipe: Pipeline, sources: list[str], refs: list[str], outputs: dict[str, list[str]],
                 progress: bool) -> dict[str, Any]:
    """Each system's COMET on data.test (the mean of its segment scores, 4 decimals) with the model distill.comet,
    every source and reference embedded once for all systems; the sources in score/test.src.SRC, so that `nmt score
    --comet` of the files gives the same numbers."""
    from nmt.comet import Comet
    from nmt.device import pick_device

    d = cfg.distill
    started = time.monotonic()
    atomic_write_text(pipe.folder("score") / f"test.src.{cfg.data.src_lang}", "".join(s + "\n" for s in sources))
    model = Comet(d.comet or "", pick_device(d.comet_device, "distill.comet_device"))
    segments = model.score_systems(sources, outputs, refs, batch_size=d.comet_batch_size, progress=progress)
    return {"model": d.comet, "signature": model.signature(), "seconds": round(time.monotonic() - started, 2),
            "systems": {name: round(sum(s) / len(s), 4) if s else 0.0 for name, s in segments.items()}}


def write_references(cfg: Config, pipe: Pipeline, refs: list[str] | None = None) -> Path:
    """score/test.ref.TGT: data.test's references as the score stage scores them (read from data.test when not
    given), so that `nmt score --ref` of this file and a system's output gives the stage's numbers again."""
    path = pipe.folder("score") / f"test.ref.{cfg.data.tgt_lang}"
    lines = refs if refs is not None else [t for _, t in corpus_pairs(cfg, "test")]
    atomic_write_text(path, "".join(line + "\n" for line in lines))
    return path


def student_systems(cfg: Config, pipe: Pipeline) -> dict[str, Translator | None]:
    """The student's checkpoints as the score stage translates with them: fp32, int8 (CPU: the int8 kernels are
    CPU ones), and the int8-aware fine-tune's in int8 (None when the fine-tune was skipped)."""
    student = student_config(cfg, pipe)
    fp32 = RunDir(pipe.path / "student").for_translation()
    int8 = ModelOptions(device="cpu", quantize="int8", config_given=True)
    tuned = pipe.path / INT8_DIR
    return {"student": Translator.load(fp32, student), "student_int8": Translator.load(fp32, student, int8),
            "student_int8_tuned": Translator.load(RunDir(tuned).for_translation(), student, int8)
            if cfg.distill.int8_finetune_updates and pipe.done(INT8_STAGE) else None}


def teacher_test(cfg: Config, sources: list[str]) -> Translator | list[str] | None:
    """What the teacher's score comes from: the checkpoint, else distill.teacher_test_translations, else nothing."""
    d = cfg.distill
    if d.teacher:
        return teacher.translator(cfg)
    if not d.teacher_test_translations:
        return None
    path = Path(d.teacher_test_translations)
    if not path.is_file():
        raise NmtError(f"distill.teacher_test_translations: no such file: {path}")
    lines = [text.normalize(text.clean_text(line), cfg.data.normalize)
             for line in path.read_text(encoding="utf-8").splitlines()]
    if len(lines) != len(sources):
        raise NmtError(f"distill.teacher_test_translations {path} has {len(lines):,} lines but data.test has "
                       f"{len(sources):,}")
    return lines
