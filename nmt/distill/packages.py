"""The export stage of `nmt distill`: the final student (the int8-aware fine-tune's checkpoint when it ran, else the
student's) written as deployable packages by `nmt export` itself (nmt.interop.export.export: the same checks, the
same temporary path renamed into place when complete), one per target of `distill.export`, into
PIPELINE_DIR/export/TARGET/: ct2 and argos with int8 weights, hf in float32 (a Hugging Face directory has no int8).

Figures per package: its size on disk, and for ct2 the test set translated by the package itself in CTranslate2's
int8, scored as the score stage scores nmt's systems (nmt.score), so the report shows what int8 costs in the engine
people deploy beside nmt's own int8 rows. A target whose library is missing (the export extra: ctranslate2, onnx,
safetensors) or that nmt export refuses for this model is a one-line note in the figures and the report, not a crash
after hours of training. Redone whole after a kill (export/ is removed first).
"""

from __future__ import annotations

import dataclasses
import importlib
import shutil
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from rich.markup import escape

from nmt import checkpoint
from nmt.config.experiment import Config, DecodeConfig
from nmt.distill import stages
from nmt.distill.state import INT8_STAGE, Pipeline
from nmt.errors import NmtError
from nmt.interop.export import ct2 as export_ct2
from nmt.interop.export import export
from nmt.interop.modelspec import describe
from nmt.io import atomic_write_text
from nmt.log import console
from nmt.rundir import RunDir
from nmt.score import bleu_tokenizer, score

FOLDER = "export"
# what each target's exporter imports beyond nmt's own dependencies (pyproject's `export` extra)
REQUIRES = {"ct2": ("ctranslate2",), "argos": ("ctranslate2", "onnx"), "hf": ("safetensors",)}
PRECISION = {"ct2": "int8", "argos": "int8", "hf": "fp32"}
CT2_BATCH = 32  # sentences per CTranslate2 call of the test translation


def export_stage(cfg: Config, pipe: Pipeline, progress: bool) -> dict[str, Any]:
    """Each target of distill.export exported from the final student; its figures (the module docstring)."""
    targets = list(cfg.distill.export)
    if not targets:
        return {"skipped": "distill.export=[]"}
    shutil.rmtree(pipe.path / FOLDER, ignore_errors=True)  # redone whole: no package of an earlier try is kept
    source, system = final_student(cfg, pipe)
    packages = {target: package(cfg, pipe, source, target) for target in targets}
    for target, figures in packages.items():
        if "note" in figures:
            console.print(f"[yellow]export {target}:[/yellow] {escape(figures['note'])}")  # its [export]: text
    return {"from": str(source), "system": system, "packages": packages}


def final_student(cfg: Config, pipe: Pipeline) -> tuple[Path, str]:
    """The checkpoint the packages are made of, and the score stage's system that is it in nmt's int8."""
    if cfg.distill.int8_finetune_updates and pipe.done(INT8_STAGE):
        return RunDir(pipe.path / INT8_STAGE).for_translation(), "student_int8_tuned"
    return RunDir(pipe.path / "student").for_translation(), "student_int8"


def missing_library(target: str) -> str | None:
    """The first library `target`'s exporter needs that does not import here, else None."""
    for name in REQUIRES[target]:
        try:
            importlib.import_module(name)
        except ImportError:
            return name
    return None


def package(cfg: Config, pipe: Pipeline, source: Path, target: str) -> dict[str, Any]:
    """One target's package (through `nmt export`) and its figures, or a note saying why there is none."""
    out = package_path(cfg, pipe, target)
    again = (f"nmt export --checkpoint {source} --to {target} -o {out}"
             + (" --quantization int8" if target == "ct2" else ""))
    library = missing_library(target)
    if library is not None:
        return {"precision": PRECISION[target],
                "note": f"not exported: {library} is not installed (pip install 'nmt[export]'; then: {again})"}
    options = {"quantization": "int8"} if PRECISION[target] == "int8" else {}
    try:
        export(source, target, out, force=True, **options)
    except NmtError as e:  # a model this engine cannot run as nmt does (argos: separate vocabularies...)
        return {"precision": PRECISION[target], "note": f"not exported: {e}"}
    figures: dict[str, Any] = {"path": str(out.relative_to(pipe.path)), "precision": PRECISION[target],
                               "bytes": size_on_disk(out)}
    if target == "ct2":
        figures.update(score_ct2(cfg, pipe, source, out))
    return figures


def package_path(cfg: Config, pipe: Pipeline, target: str) -> Path:
    """Where `target`'s package goes: the export/TARGET directory itself, for argos a .argosmodel file in it."""
    folder = pipe.path / FOLDER / target
    if target == "argos":
        return folder / f"{cfg.data.src_lang}_{cfg.data.tgt_lang}.argosmodel"
    return folder


def size_on_disk(path: Path) -> int:
    """Bytes of a file, or of every file under a directory."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def score_ct2(cfg: Config, pipe: Pipeline, source: Path, directory: Path) -> dict[str, Any]:
    """data.test translated by the CTranslate2 package in int8 (export/test.ct2.TGT), its BLEU and chrF as the score
    stage computes them, and the seconds the translation took."""
    if not cfg.data.test:
        return {"note": "not scored: no data.test"}
    tgt = cfg.data.tgt_lang
    pairs = list(stages.corpus_pairs(cfg, "test"))
    refs = [t for _, t in pairs]
    started = time.monotonic()
    lines = ct2_translate(directory, source, cfg.decode, [s for s, _ in pairs])
    seconds = time.monotonic() - started
    output = pipe.path / FOLDER / f"test.ct2.{tgt}"
    atomic_write_text(output, "".join(line + "\n" for line in lines))
    result = score(lines, [refs], metrics=("bleu", "chrf"), tokenize=bleu_tokenizer(tgt).name,
                   ref_names=[f"data.test ({cfg.data.test})"])
    return {"bleu": round(result["bleu"]["score"], 2), "chrf": round(result["chrf"]["score"], 2),
            "signature": result["bleu"]["signature"], "lines": len(lines), "translate_s": round(seconds, 2),
            "output": str(output.relative_to(pipe.path))}


def ct2_translate(directory: Path, source: Path, decode: DecodeConfig, lines: list[str]) -> list[str]:
    """`lines` translated by the CTranslate2 model in `directory` (exported from the checkpoint `source`) on the CPU
    in int8, searching as `nmt translate` with `decode` does (the package README's call: CTranslate2 has only nmt's
    `average` length penalty), sources batched by length so that each gets nmt's own length limit."""
    import ctranslate2

    model = describe(checkpoint.load(source))
    decode = dataclasses.replace(decode, length_penalty_type="average")
    translator = ctranslate2.Translator(str(directory), device="cpu", compute_type="int8",
                                        intra_threads=torch.get_num_threads())
    cut = min(decode.max_input_tokens, model.config.max_positions - 1)
    prefix = [decode.prefix] if decode.prefix else []
    pieces = [(prefix + model.tokenizer.src_pieces(line))[:cut] for line in lines]
    by_length: dict[int, list[int]] = defaultdict(list)
    for i, p in enumerate(pieces):
        if p:  # an empty source: an empty translation, as nmt gives it
            by_length[len(p)].append(i)
    index = {piece: i for i, piece in enumerate(model.tgt_vocab)}
    eos = model.tgt_vocab[model.special.eos]
    ids: list[list[int]] = [[] for _ in lines]
    for length, rows in by_length.items():
        limit = export_ct2.max_decoding_length(decode, length, model.config.max_positions)
        results = translator.translate_batch([pieces[i] for i in rows], max_decoding_length=limit,
                                             max_batch_size=CT2_BATCH, **export_ct2.search_options(decode))
        for i, result in zip(rows, results, strict=True):
            ids[i] = [index[p] for p in export_ct2.output_tokens(result.hypotheses[0], eos)]
    return model.tokenizer.decode_tgt(ids)
