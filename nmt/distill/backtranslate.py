"""The back-translation stage of `nmt distill` (Sennrich et al. 2016): target-language text that has no source
(`distill.monolingual`, one sentence a line) is translated into synthetic sources by a reverse, target->source model
(`distill.reverse_teacher`), and each (synthetic source, real target) pair joins the student's training data. The
student then learns to write more real target text than the parallel corpus holds.

backtranslate/ holds mono.TGT (the lines as nmt prepare reads text: cleaned, normalized), the synthetic sources
synthetic.SRC, made in chunks/ exactly as the teacher's translations are (nmt.distill.teacher.translate_chunks:
resumed at the first chunk without its file), and train.SRC/train.TGT: the pairs that pass the cleaning filters,
with report.json saying what each filter dropped (as clean/report.json does for the corpus). All the filters
apply: the ratio and copy filters catch a reverse model that stopped early or left the line untranslated, the script
and langid filters a target line of another language. Every line is translated first (an empty line costs nothing)
and the pairs are cleaned after, so that each dropped line is counted under the filter that drops it.

The reverse teacher translates as the teacher does: distill.teacher_beam, sampled when distill.teacher_sampling is
set (Edunov et al. 2018: sampled back-translations train better students than beam ones); one synthetic source per
line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nmt import text
from nmt.config.experiment import Config
from nmt.distill import stages, teacher
from nmt.distill.filters import Cleaner
from nmt.distill.state import Pipeline
from nmt.errors import NmtError
from nmt.io import atomic_output, atomic_write_text
from nmt.translation.translator import Translator

STAGE = "backtranslate"
SEED_OFFSET = 1 << 31  # the reverse teacher's draws: another stream than the teacher's for the same distill.seed


def preflight(cfg: Config) -> None:
    """Back-translation's one-line errors before any stage: the monolingual file is there, the reverse teacher
    translates data.tgt_lang->data.src_lang, its beam is wide enough."""
    d = cfg.distill
    if not d.reverse_teacher:
        return
    mono = Path(d.monolingual or "")
    if not mono.is_file():
        raise NmtError(f"distill.monolingual: no such file: {mono}")
    if mono.stat().st_size == 0:
        raise NmtError(f"distill.monolingual {mono} is empty: give target-language text, one sentence a line")
    ckpt = teacher.load_checkpoint(d.reverse_teacher)
    src, tgt = cfg.data.src_lang, cfg.data.tgt_lang
    langs = ckpt.langs
    if langs is not None and langs != ("src", "tgt") and langs != (tgt, src):
        raise NmtError(f"the reverse teacher {d.reverse_teacher} translates {langs[0]}->{langs[1]} but "
                       f"back-translation needs {tgt}->{src} (data.tgt_lang->data.src_lang)")
    teacher.output_search(d, teacher.own_beam(ckpt), 1, who="the reverse teacher")


def backtranslate(cfg: Config, pipe: Pipeline, progress: bool) -> dict[str, Any]:
    """The stage: backtranslate/train.SRC and train.TGT, the cleaned (synthetic source, target) pairs; skipped when
    no distill.monolingual is given."""
    d = cfg.distill
    if not d.monolingual:
        return {"skipped": "no distill.monolingual"}
    src, tgt = cfg.data.src_lang, cfg.data.tgt_lang
    folder = pipe.folder(STAGE)
    mono = folder / f"mono.{tgt}"
    if not mono.is_file():  # written whole once: the chunks of a resumed run are of the same lines
        read_monolingual(Path(d.monolingual), mono, cfg.data.normalize)

    def load() -> Translator:
        model = teacher.translator(cfg, d.reverse_teacher)
        model.decode = model.decode_with(**teacher.output_search(d, model.decode.beam, 1, "the reverse teacher"))
        return model

    seed = d.seed + SEED_OFFSET if d.teacher_sampling else None
    job = teacher.Job(STAGE, mono, folder, src, load, seed=seed, name="synthetic")
    figures = teacher.translate_chunks(job, pipe, d.chunk_lines, progress)
    report = clean_pairs(cfg, folder / f"synthetic.{src}", mono, folder)
    return {**figures, "read": report["read"], "kept": report["kept"], "dropped": report["dropped"]}


def read_monolingual(given: Path, out: Path, normalize: str) -> None:
    """`given`'s lines as nmt prepare reads text (control characters out, data.normalize), into `out`."""
    with open(given, "rb") as lines, atomic_output(out, text=True) as f:
        for number, raw in enumerate(lines, 1):
            try:
                line = text.clean_text(raw.rstrip(b"\r\n").decode("utf-8"))
            except UnicodeDecodeError as e:
                raise NmtError(f"{given}:{number}: invalid UTF-8 (byte {e.start + 1} of the line)") from None
            f.write(text.normalize(line, normalize) + "\n")


def clean_pairs(cfg: Config, synthetic: Path, mono: Path, folder: Path) -> dict[str, Any]:
    """FOLDER/train.SRC, train.TGT: the (synthetic source, target) pairs the cleaning filters keep; report.json:
    what each filter dropped, with the monolingual line numbers."""
    src, tgt = cfg.data.src_lang, cfg.data.tgt_lang
    cleaner = Cleaner(cfg.distill, src, tgt)
    with (open(synthetic, encoding="utf-8") as fs, open(mono, encoding="utf-8") as ft,
          atomic_output(folder / f"train.{src}", text=True) as os_, atomic_output(folder / f"train.{tgt}", text=True)
          as ot):
        for number, (s, t) in enumerate(zip(fs, ft, strict=True), 1):
            if cleaner.keep(number, s.rstrip("\n"), t.rstrip("\n")):
                os_.write(s)
                ot.write(t)
    report = cleaner.report()
    atomic_write_text(folder / "report.json", json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    stages.show_report(report, STAGE)
    return report
