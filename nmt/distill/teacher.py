"""The teacher of `nmt distill`: a checkpoint that translates the cleaned training sources with nmt's batched beam
search (its n-best, or samples), chunk by chunk, or a file of translations made by any system.

Each chunk of `distill.chunk_lines` sources is translated (translate_chunk sorts and batches it by length) and
written whole (nmt.io: temp file, then rename) before pipeline.json counts it: a kill loses at most the chunk in
progress, and the next run starts at the first chunk without its file. A chunk file holds `distill.teacher_nbest`
lines per source, source by source, each source's best first. The chunks are joined into teacher/train.TGT when all
are there. Sampled chunks repeat exactly: chunk k draws from the seed `chunk_seed(distill.seed, k)`, so a resumed
run writes what an uninterrupted one would have. The back-translation stage (nmt.distill.backtranslate) translates
its monolingual text with the same code (`Job`, `translate_chunks`).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nmt import checkpoint, text
from nmt.checkpoint import Checkpoint
from nmt.config.distill import DistillConfig
from nmt.config.experiment import Config, ModelConfig
from nmt.distill.state import Pipeline
from nmt.errors import ConfigError, NmtError
from nmt.io import atomic_output, atomic_write_text
from nmt.log import console, progress_bar
from nmt.rundir import checkpoint_file
from nmt.translation.translator import ModelOptions, Translator


def load_checkpoint(path: str) -> Checkpoint:
    """The teacher's checkpoint: a file, or a run dir's (averaged.pt, else best.pt, else last.pt)."""
    return checkpoint.load(checkpoint_file(Path(path)))


def translator(cfg: Config, path: str | None = None) -> Translator:
    """The teacher checkpoint (or `path`: the reverse teacher) opened for translation with its own search settings,
    distill.teacher_beam aside, one translation per line: as the score stage translates the test set."""
    d = cfg.distill
    loaded = Translator.load(load_checkpoint(path or d.teacher or ""), None, ModelOptions(device=d.teacher_device,
                                                                                         config_given=False))
    loaded.decode = loaded.decode_with(nbest=1, **({"beam": d.teacher_beam} if d.teacher_beam else {}))
    return loaded


def output_search(d: DistillConfig, own_beam: int, nbest: int, who: str = "the teacher") -> dict[str, Any]:
    """The search settings a teacher makes the student's training data with: its `nbest` best of a beam search
    (distill.teacher_beam, else the checkpoint's `own_beam`), or of distill.teacher_beam samples (else `nbest`)
    with distill.teacher_sampling. A beam below `nbest` is a one-line ConfigError."""
    if d.teacher_sampling:
        return {"sampling": True, "beam": d.teacher_beam or nbest, "nbest": nbest,
                "sampling_topk": d.teacher_sampling_topk, "sampling_topp": d.teacher_sampling_topp,
                "sampling_temperature": d.teacher_sampling_temperature}
    beam = d.teacher_beam or own_beam
    if beam < nbest:
        raise ConfigError(f"distill.teacher_nbest {nbest} needs a beam of at least {nbest}, but {who} searches with "
                          f"beam {beam}: set distill.teacher_beam")
    return {"sampling": False, "beam": beam, "nbest": nbest}


def own_beam(ckpt: Checkpoint) -> int:
    """The beam a checkpoint was trained (and tuned) to search with."""
    return ckpt.decode_config().beam


def chunk_seed(seed: int, chunk: int) -> int:
    """The sampling seed of chunk `chunk`: its own per chunk (seed < 2**32), the same on every run."""
    return seed + (chunk << 32)


def non_embedding_parameters(m: ModelConfig) -> int:
    """Weights of the layers (attention and feed-forward, biases and norms aside): what sets a model's decoding cost,
    whatever its vocabulary. An encoder layer has 4 d^2 of attention, a decoder layer 8 d^2 (self and cross)."""
    ffn = 2 * m.d_model * m.d_ff
    return m.encoder_layers * (4 * m.d_model**2 + ffn) + m.decoder_layers * (8 * m.d_model**2 + ffn)


def line_chunks(path: Path, size: int) -> Iterator[list[str]]:
    with open(path, encoding="utf-8", newline="\n") as f:
        lines = (line.rstrip("\n") for line in f)
        while chunk := list(itertools.islice(lines, size)):
            yield chunk


def count_lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


@dataclass
class Job:
    """One chunked translation of a file of lines: the teacher's of the cleaned sources, the reverse teacher's of the
    monolingual text."""

    stage: str  # the pipeline stage whose figures count the chunks done
    sources: Path  # one sentence a line
    folder: Path  # chunks/NNNNNN.LANG inside it, and the joined NAME.LANG
    lang: str  # the translations' language
    load: Callable[[], Translator]  # the model with its search settings, loaded only when a chunk is missing
    nbest: int = 1  # translations per source line, best first
    seed: int | None = None  # sampling: chunk k draws from chunk_seed(seed, k)
    name: str = "train"  # the joined file's: NAME.LANG


def translate(cfg: Config, pipe: Pipeline, progress: bool) -> dict[str, Any]:
    """The teacher stage with a checkpoint: teacher/train.TGT, distill.teacher_nbest translations per cleaned source
    line."""
    d = cfg.distill

    def load() -> Translator:
        model = translator(cfg)
        model.decode = model.decode_with(**output_search(d, model.decode.beam, d.teacher_nbest))
        return model

    job = Job("teacher", pipe.path / "clean" / f"train.{cfg.data.src_lang}", pipe.folder("teacher"),
              cfg.data.tgt_lang, load, d.teacher_nbest, d.seed if d.teacher_sampling else None)
    return translate_chunks(job, pipe, d.chunk_lines, progress)


def translate_chunks(job: Job, pipe: Pipeline, size: int, progress: bool) -> dict[str, Any]:
    """FOLDER/NAME.LANG: `job.nbest` translations of each line of `job.sources`, made and kept chunk by chunk (the
    module docstring says how a kill is resumed)."""
    chunks = job.folder / "chunks"
    chunks.mkdir(exist_ok=True)
    total = count_lines(job.sources)
    n_chunks = -(-total // size)
    model: Translator | None = None
    seconds, done_before, translated = 0.0, 0, 0
    with progress_bar("lines", enabled=progress) as bar:
        task = bar.add_task(f"{job.stage}: translating", total=total, note="")
        for k, chunk in enumerate(line_chunks(job.sources, size)):
            out = chunks / f"{k:06d}.{job.lang}"
            if out.is_file() and count_lines(out) == len(chunk) * job.nbest:  # written whole by an earlier run
                done_before += 1
            else:
                model = model or job.load()
                started = time.monotonic()
                decode = model.decode_with(sampling_seed=chunk_seed(job.seed, k)) if job.seed is not None else None
                results = model.translate_chunk(chunk, decode=decode, first_line=k * size + 1)
                # n lines per source, best first (fewer hypotheses, as for an empty line: empty lines after them)
                atomic_write_text(out, "".join(line + "\n" for r in results
                                               for line in (r.text + [""] * job.nbest)[:job.nbest]))
                seconds += time.monotonic() - started
                translated += len(chunk)
                pipe.progress(job.stage, chunks_done=k + 1, chunks=n_chunks)
                if not progress:  # a log (no bar) still says how far a long translation is
                    console.print(f"{job.stage}: chunk {k + 1}/{n_chunks} written ({translated / seconds:,.0f} "
                                  f"lines/s)")
            bar.update(task, completed=min((k + 1) * size, total))
    if done_before:
        console.print(f"{job.stage}: {done_before} of {n_chunks} chunks were translated by an earlier run")
    with atomic_output(job.folder / f"{job.name}.{job.lang}", text=True) as f:
        for k in range(n_chunks):
            f.write((chunks / f"{k:06d}.{job.lang}").read_text(encoding="utf-8"))
    search = model.decode if model else None
    return {"lines": total, "chunks": n_chunks, "chunks_done": n_chunks, "chunks_resumed": done_before,
            "beam": search.beam if search else None, "nbest": job.nbest, "sampled": job.seed is not None,
            "lines_per_s": round(translated / seconds, 1) if seconds else None}


def from_file(cfg: Config, pipe: Pipeline) -> dict[str, Any]:
    """The teacher stage with a translations file: the lines of the kept pairs (clean/lines.txt), cleaned as the
    corpus was."""
    given = Path(cfg.distill.teacher_translations or "")
    kept = pipe.path / "clean" / "lines.txt"
    out = pipe.folder("teacher") / f"train.{cfg.data.tgt_lang}"
    with open(kept, encoding="utf-8") as numbers, open(given, "rb") as lines, atomic_output(out, text=True) as f:
        wanted = (int(n) for n in numbers)
        next_wanted = next(wanted, None)
        for number, raw in enumerate(lines, 1):
            if number == next_wanted:
                try:
                    line = text.clean_text(raw.rstrip(b"\r\n").decode("utf-8"))
                except UnicodeDecodeError as e:
                    raise NmtError(f"{given}:{number}: invalid UTF-8 (byte {e.start + 1} of the line)") from None
                f.write(text.normalize(line, cfg.data.normalize) + "\n")
                next_wanted = next(wanted, None)
    return {"lines": count_lines(out), "from_file": str(given)}


def check_translations_file(cfg: Config, corpus_lines: int) -> None:
    """A translations file must hold one line per line of data.train (before cleaning): a one-line NmtError."""
    path = Path(cfg.distill.teacher_translations or "")
    if not path.is_file():
        raise NmtError(f"distill.teacher_translations: no such file: {path}")
    n = count_lines(path)
    if n != corpus_lines:
        raise NmtError(f"distill.teacher_translations {path} has {n:,} lines but the corpus data.train "
                       f"({cfg.data.train}) has {corpus_lines:,}: it must hold one translation per corpus line")
