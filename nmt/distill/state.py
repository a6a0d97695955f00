"""The pipeline dir of `nmt distill` and its record, pipeline.json: each stage's state and figures.

```
PIPELINE_DIR/
  .lock            held by the one `nmt distill` that runs here
  pipeline.json    the settings the pipeline was made with; per stage: state, figures, seconds
  clean/           train.SRC, train.TGT (the pairs kept), lines.txt (their corpus line numbers), report.json
  teacher/         chunks/NNNNNN.TGT (one per distill.chunk_lines sources, each written whole), train.TGT
  backtranslate/   mono.TGT, chunks/NNNNNN.SRC, synthetic.SRC, report.json, train.SRC, train.TGT (the cleaned pairs)
  distilled/       train.SRC, train.TGT: the student's training text (teacher output + the references share +
                   the back-translated pairs)
  data/            the student's data dir (nmt prepare)
  student/         the student's run dir (nmt train)
  student-int8/    the run dir of its int8-aware fine-tune (nmt train from the student, fake-quantized)
  score/           test.SYSTEM.TGT (teacher, student, student_int8, student_int8_tuned), test.ref.TGT, scores.json,
                   test.src.SRC (with distill.comet: the sources COMET reads)
  export/          the final student as packages (distill.export): ct2/ (a CTranslate2 model dir, int8),
                   argos/SRC_TGT.argosmodel (int8), hf/ (float32); test.ct2.TGT: the ct2 package's test translations
  report.html      the report: scores, speed, sizes, the filters' evidence, stage times (nmt.distill.report)
```
pipeline.json is replaced atomically after every change (a stage started, a teacher chunk done, a stage finished):
a kill leaves the last record, whose unfinished stage the next run resumes. This module is the only one that knows
these names.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from nmt.config.distill import DistillConfig
from nmt.errors import NmtError
from nmt.io import atomic_write_text
from nmt.rundir import RunLock

INT8_STAGE = "student-int8"  # the int8-aware fine-tune of the student
STAGES = ("clean", "teacher", "backtranslate", "data", "student", INT8_STAGE, "score", "export", "report")
# the systems the score stage translates data.test with (scores.json's keys), as people read them: the student in
# fp32, in int8 by post-training quantization (PTQ: `--quantize int8` of the fp32 checkpoint), and in int8 after the
# int8-aware fine-tune
SYSTEMS = {"teacher": "teacher", "student": "student", "student_int8": "student int8 (PTQ)",
           "student_int8_tuned": "student int8 (fine-tuned)"}
PIPELINE_FILE = "pipeline.json"
# the distill section's defaults: a key added to nmt since a pipeline dir was made, at its default, changes nothing
DEFAULTS = asdict(DistillConfig())
VERSION = 1


def is_pipeline_dir(path: Path) -> bool:
    return (path / PIPELINE_FILE).is_file()


def read_record(path: Path) -> dict[str, Any]:
    """pipeline.json of the pipeline dir `path`; a damaged one is a one-line NmtError."""
    file = path / PIPELINE_FILE
    try:
        record = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise NmtError(f"{file} is unreadable ({type(e).__name__}); remove the pipeline dir to start over") from None
    if not isinstance(record, dict) or not isinstance(record.get("stages"), dict):
        raise NmtError(f"{file} is not a pipeline record; remove the pipeline dir to start over")
    return record


def differences(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[tuple[str, Any, Any]]:
    """(section.key, old value, new value) of each key whose value differs between two nested settings dicts."""
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append((f"{prefix}{key}", a, b))
    return out


# The first stage each setting changes the output of (the later stages follow from it); a key not named here changes
# the student's data (the vocabulary, valid/test, the references share) and a model key only the student
FIRST_AFFECTED = {
    **dict.fromkeys(("data.train", "data.src_lang", "data.tgt_lang", "data.normalize", "data.hf_config",
                     "data.hf_train_split", "data.src_column", "data.tgt_column", "distill.max_chars",
                     "distill.max_ratio", "distill.dedup", "distill.copies", "distill.digits", "distill.script_share",
                     "distill.langid_min_prob"), "clean"),
    **dict.fromkeys(("distill.teacher", "distill.teacher_translations", "distill.teacher_beam",
                     "distill.chunk_lines"), "teacher"),
    **dict.fromkeys(("distill.teacher_nbest", "distill.teacher_sampling", "distill.teacher_sampling_topk",
                     "distill.teacher_sampling_topp", "distill.teacher_sampling_temperature"), "teacher"),
    **dict.fromkeys(("distill.monolingual", "distill.reverse_teacher"), "backtranslate"),
    **dict.fromkeys(("distill.int8_finetune_updates", "distill.int8_finetune_lr"), "student-int8"),
    **dict.fromkeys(("distill.teacher_test_translations", "distill.comet"), "score"),
    "distill.export": "export",
    **dict.fromkeys(("distill.speed_rounds", "distill.speed_lines", "distill.speed_lines_single"), "report"),
}
# what each stage writes in the pipeline dir (folders, and the report's page): removed when --force redoes it
FOLDERS = {"clean": ["clean"], "teacher": ["teacher"], "data": ["distilled", "data"], "student": ["student"],
           "student-int8": ["student-int8"], "score": ["score"], "export": ["export"],
           "report": ["report.html"]}
FOLDERS["backtranslate"] = ["backtranslate"]


def first_affected(key: str, settings: dict[str, Any] | None = None) -> str:
    if key == "distill.seed" and ((settings or {}).get("distill") or {}).get("teacher_sampling"):
        return "teacher"  # it picks the teachers' samples too
    return FIRST_AFFECTED.get(key, "student" if key.startswith("model.") else "data")


def added_since(old_settings: dict[str, Any], record: dict[str, Any], key: str, value: Any = None) -> bool:
    """Whether `key` (section.key) is a setting the record does not have at all, added to nmt since it was written,
    and either at its default `value` (what nmt did before the key existed: the teacher's n-best, sampling and
    back-translation keys) or with no stage run yet from its first on (the report's speed keys in a pipeline dir
    from before the report): nothing made with it is there to redo."""
    section, _, name = key.partition(".")
    if name in (old_settings.get(section) or {}):
        return False
    if section == "distill" and name in DEFAULTS and value == DEFAULTS[name]:
        return True
    first = STAGES.index(first_affected(key))
    return all(record["stages"][stage]["state"] == "pending" for stage in STAGES[first:])


class Pipeline:
    """One pipeline dir: its lock, its record and its stage folders."""

    def __init__(self, path: str | Path, settings: dict[str, Any], *, force: bool = False):
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise NmtError(f"distill.dir {self.path} exists and is not a directory")
        self.lock = RunLock(self.path, "pipeline dir {} is in use by another `nmt distill`")
        try:
            self.record = self._open(settings, force)
        except BaseException:
            self.lock.release()
            raise

    def _open(self, settings: dict[str, Any], force: bool) -> dict[str, Any]:
        """The record of this dir, or a new one. Other settings than the record's are refused unless `force`, which
        redoes the stages from the first one they change (a new student keeps the teacher's translations)."""
        if not is_pipeline_dir(self.path):
            record = {"version": VERSION, "settings": settings,
                      "stages": {name: {"state": "pending", "figures": {}} for name in STAGES}}
            self._save(record)
            return record
        record = read_record(self.path)
        added = [name for name in STAGES if name not in record["stages"]]
        # a stage added since the record was written (student-int8, report) is still to run, in its place among the
        # others
        record["stages"] = {name: record["stages"].get(name, {"state": "pending", "figures": {}}) for name in STAGES}
        if added:  # the report shows every stage: redone to show the added one's figures (export: the packages)
            record["stages"]["report"] = {"state": "pending", "figures": {}}
        old_settings = record.get("settings") or {}
        diffs = [d for d in differences(old_settings, settings) if not added_since(old_settings, record, d[0], d[2])]
        if not diffs:
            if old_settings != settings:  # keys nmt added since, their stage still to run: recorded, nothing redone
                record["settings"] = settings
                self._save(record)
            return record
        start = min((first_affected(key, settings) for key, _, _ in diffs), key=STAGES.index)
        if not force:
            key, old, new = diffs[0]
            more = f" and {len(diffs) - 1} more" if len(diffs) > 1 else ""
            raise NmtError(f"pipeline dir {self.path} was made with other settings ({key}: {old!r} vs {new!r}{more}); "
                           f"use --force to redo it from the {start} stage on, or choose another distill.dir")
        for name in STAGES[STAGES.index(start):]:
            for folder in FOLDERS[name]:
                if (self.path / folder).is_file():
                    (self.path / folder).unlink()
                shutil.rmtree(self.path / folder, ignore_errors=True)
            record["stages"][name] = {"state": "pending", "figures": {}}
        record["settings"] = settings
        self._save(record)
        return record

    def release(self) -> None:
        self.lock.release()

    def folder(self, name: str) -> Path:
        folder = self.path / name
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def stage(self, name: str) -> dict[str, Any]:
        return self.record["stages"][name]

    def done(self, name: str) -> bool:
        return self.stage(name)["state"] == "done"

    def start(self, name: str) -> None:
        """Mark a stage running: a kill leaves it so, and the next run resumes it (`resumed` says it did)."""
        stage = self.stage(name)
        stage["resumed"] = stage["state"] == "running"
        stage["state"] = "running"
        stage.setdefault("started", time.time())
        self._save(self.record)

    def progress(self, name: str, **figures: Any) -> None:
        """Figures of a running stage so far (a teacher chunk done), recorded at once."""
        self.stage(name)["figures"].update(figures)
        self._save(self.record)

    def finish(self, name: str, figures: dict[str, Any], seconds: float) -> None:
        stage = self.stage(name)
        stage.update(state="done", finished=time.time(), seconds=round(seconds, 3))
        stage["figures"].update(figures)
        self._save(self.record)

    def _save(self, record: dict[str, Any]) -> None:
        atomic_write_text(self.path / PIPELINE_FILE, json.dumps(record, indent=1, ensure_ascii=False) + "\n")
