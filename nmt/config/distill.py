"""The `distill` section of the config: where `nmt distill` keeps its pipeline, which teacher it distils (its n-best
or sampled translations too), the back-translation of target-language text by a reverse model, how it cleans the
corpus, how much of the original references the student sees, how long its int8-aware fine-tune is, how the report
measures decoding speed, the COMET model the test set is also scored with, and which packages the export stage
makes. The corpus itself is the `data` section's train/valid/test (read as `nmt prepare` reads them), and the student
is the config's `model`, `train` and `decode` sections: a distillation config is an ordinary config with this section
added. A module of its own for its size; nmt.config.experiment loads and type-checks it like any section."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from nmt.errors import ConfigError

# what distill.export may name: nmt.interop.export.TARGETS (config imports nothing of interop; a test keeps them equal)
EXPORT_TARGETS = ("ct2", "argos", "hf")


@dataclass
class DistillConfig:
    """`nmt distill`: the pipeline dir, the teacher, the cleaning filters, the student's data mix, the int8-aware
    fine-tune, the report's speed measurement, COMET, the exported packages."""

    dir: str = "runs/distill"  # the pipeline dir: pipeline.json and one folder per stage
    # The teacher, one of: an nmt checkpoint or run dir (an imported OPUS-MT / Marian checkpoint too), or a file of
    # translations made by any system, one line per line of data.train (as given, before cleaning)
    teacher: str | None = None
    teacher_translations: str | None = None
    # the teacher's translations of data.test's sources (a translations file teacher: its test score), optional
    teacher_test_translations: str | None = None
    teacher_beam: int = 0  # beam of the teacher's forward translation (0: the teacher checkpoint's own)
    teacher_device: str = "auto"  # auto | cpu | cuda | cuda:N
    chunk_lines: int = 2000  # training sources translated (and saved) per chunk: a killed run resumes at the next
    # Translations per training source, each a training pair of the student (sequence-level distillation with the
    # n-best list, Kim & Rush 2016): the N best of the beam (the beam must be >= N), or the N best of the samples
    teacher_nbest: int = 1
    # Sample the teacher's translations instead of searching for the best (Edunov et al. 2018): varied outputs,
    # drawn as decode.sampling_* draws them (distill.teacher_beam samples per source, 0: teacher_nbest), repeatable
    # for the same distill.seed. The reverse teacher samples too
    teacher_sampling: bool = False
    teacher_sampling_topk: int = 0  # from the k most likely tokens only (0: from all)
    teacher_sampling_topp: float = 1.0  # from the fewest most likely tokens holding this probability (1: all)
    teacher_sampling_temperature: float = 1.0  # < 1 sharper, > 1 flatter
    # Back-translation: target-language text, one sentence a line, translated into synthetic sources by a reverse
    # (target->source) model, nmt checkpoint or run dir; each (synthetic source, real target) pair is cleaned by the
    # filters and added to the student's training data
    monolingual: str | None = None
    reverse_teacher: str | None = None
    # Cleaning filters, applied to data.train in this order; each pair counts under the first filter that drops it
    # lengths in characters: words say little where compounds are one word (German) or there are no spaces (Chinese)
    max_chars: int = 1000  # either side longer (the `too_long` filter; 0 = off)
    # len(longer)/len(shorter), judged from 20 characters on the longer side; off when a language of the pair is
    # written without spaces (its characters are words)
    max_ratio: float = 3.0
    dedup: bool = True  # exact repeats of a (source, target) pair
    copies: bool = True  # the target is the source again (case and spacing aside): untranslated text
    # both sides write numbers in digits, and not the same ones (separators aside: 1,000.5 = 1.000,5; 2.00 = 2)
    digits: bool = True
    # letters in the script of the side's language (Latin for most, Cyrillic for ru/uk/bg..., Han/kana for zh/ja),
    # as a share of the side's letters, at least this (0 = off)
    script_share: float = 0.5
    # language identification (py3langid): drop a pair when either side is identified as another language with at
    # least this probability (a confident mistake; short lines are rarely identified confidently). 0 = off
    langid_min_prob: float = 0.9
    sample: int = 10  # dropped pairs kept per filter as evidence, in clean/report.json and on the terminal
    # Share of the cleaned pairs whose original (source, reference) pair is added to the student's training data
    # beside the teacher's (source, translation) one: 0 = the teacher's output only, 1 = every reference too
    references: float = 0.0
    seed: int = 1  # which pairs the references share picks, and the teachers' samples
    # The int8-aware fine-tune, after the student's training: the student trained on for this many updates with its
    # Linear layers computed as `nmt translate --quantize int8` computes them (fake quantization, nmt.train.fakequant),
    # so that int8 loses less of its quality. 0 = skip (the score stage still shows plain int8)
    int8_finetune_updates: int = 200
    # its peak learning rate (linear warmup over the first tenth of the updates, then inverse_sqrt); 0 = a fiftieth
    # of the peak learning rate of the student's own training (a tenth moved the demo model 2 BLEU off its averaged
    # weights, docs/distill.md)
    int8_finetune_lr: float = 0.0
    # The report's decoding speed (report.html, docs/distill.md): each system that is a model translates the first
    # speed_lines test sources in batches of 32 and the first speed_lines_single one at a time; one untimed round,
    # then speed_rounds timed ones, the systems taking turns; the median round counts. speed_rounds 0 = no speed
    speed_rounds: int = 3
    speed_lines: int = 64
    speed_lines_single: int = 16
    # The export stage: the final student (the int8-aware fine-tune's when it ran) as `nmt export --to TARGET` makes
    # it, into PIPELINE_DIR/export/TARGET/: ct2 and argos with int8 weights, hf in float32 (it has no int8). A list or
    # a comma string ("ct2,argos"); [] = no export. Default ct2 alone: its package is the one the stage scores (the
    # int8 gap in the engine people deploy), and argos/hf add their extras for packages not everyone wants
    export: list[str] | str = field(default_factory=lambda: ["ct2"])
    # COMET (nmt.comet, docs/distill.md): a local COMET model dir (hparams.yaml and checkpoints/model.ckpt as Unbabel
    # publishes them, e.g. wmt22-comet-da; its encoder, e.g. xlm-roberta-large, in it or in the Hugging Face cache).
    # The score stage then adds each system's COMET on data.test (`nmt distill --comet DIR`). None = no COMET
    comet: str | None = None
    comet_batch_size: int = 16  # segments per COMET forward pass (how fast, not what: a change redoes nothing)
    comet_device: str = "cpu"  # where COMET runs: cpu | cuda | cuda:N | auto


def check_distill(d: DistillConfig) -> None:
    """One-line ConfigErrors naming the key (called by nmt.config.experiment.check_config)."""
    if d.teacher and d.teacher_translations:
        raise ConfigError("distill.teacher and distill.teacher_translations are both set: give one teacher")
    if not d.dir:
        raise ConfigError("distill.dir must name the pipeline dir")
    for key in ("chunk_lines", "comet_batch_size", "teacher_nbest"):
        if getattr(d, key) <= 0:
            raise ConfigError(f"distill.{key} must be > 0, got {getattr(d, key)}")
    for key in ("teacher_beam", "max_chars", "sample", "int8_finetune_updates", "speed_rounds", "speed_lines",
                "speed_lines_single"):
        if getattr(d, key) < 0:
            raise ConfigError(f"distill.{key} must be >= 0, got {getattr(d, key)}")
    if not (math.isfinite(d.int8_finetune_lr) and d.int8_finetune_lr >= 0):
        raise ConfigError(f"distill.int8_finetune_lr must be >= 0 (0: a fiftieth of the student's), got "
                          f"{d.int8_finetune_lr}")
    if not (math.isfinite(d.max_ratio) and d.max_ratio >= 1):
        raise ConfigError(f"distill.max_ratio must be >= 1, got {d.max_ratio}")
    for key in ("script_share", "langid_min_prob", "references"):
        value = getattr(d, key)
        if not 0 <= value <= 1:
            raise ConfigError(f"distill.{key} must be in [0, 1], got {value}")
    if not 0 <= d.seed < 2**32:
        raise ConfigError(f"distill.seed must be in [0, 2**32), got {d.seed}")
    check_outputs(d)
    d.export = export_targets(d.export)


def export_targets(value: list[str] | str) -> list[str]:
    """distill.export as a list of known targets, a comma string split, so that "ct2" and ["ct2"] are one setting in
    pipeline.json (a rerun with either is not "other settings")."""
    targets = [t.strip() for t in value.split(",") if t.strip()] if isinstance(value, str) else list(value)
    for target in targets:
        if target not in EXPORT_TARGETS:
            raise ConfigError(f"distill.export: unknown target {target!r} (choose from {', '.join(EXPORT_TARGETS)}; "
                              "[] exports nothing)")
    if len(set(targets)) < len(targets):
        raise ConfigError(f"distill.export names a target twice: {', '.join(targets)}")
    return targets


def check_outputs(d: DistillConfig) -> None:
    """The teacher's n-best, sampling and back-translation keys (a part of check_distill)."""
    if d.teacher_beam and d.teacher_beam < d.teacher_nbest:
        raise ConfigError(f"distill.teacher_beam {d.teacher_beam} is below distill.teacher_nbest {d.teacher_nbest}: "
                          f"a beam (or a draw) of B gives at most B translations per source")
    if d.teacher_translations and (d.teacher_nbest != 1 or d.teacher_sampling):
        raise ConfigError("distill.teacher_nbest and distill.teacher_sampling need a teacher model (distill.teacher): "
                          "a translations file holds one translation per line")
    if d.teacher_sampling_topk < 0:
        raise ConfigError(f"distill.teacher_sampling_topk must be >= 0, got {d.teacher_sampling_topk}")
    if not 0 < d.teacher_sampling_topp <= 1:
        raise ConfigError(f"distill.teacher_sampling_topp must be in (0, 1], got {d.teacher_sampling_topp}")
    if not (math.isfinite(d.teacher_sampling_temperature) and d.teacher_sampling_temperature > 0):
        raise ConfigError(f"distill.teacher_sampling_temperature must be > 0, got {d.teacher_sampling_temperature}")
    if bool(d.monolingual) != bool(d.reverse_teacher):
        given, missing = ("monolingual", "reverse_teacher") if d.monolingual else ("reverse_teacher", "monolingual")
        raise ConfigError(f"distill.{given} is set but distill.{missing} is not: back-translation needs both the "
                          f"target-language text and a target->source model")
