"""The teacher of `nmt distill`: a checkpoint that translates the cleaned training sources with nmt's batched beam
search, chunk by chunk, or a file of translations made by any system.

Each chunk of `distill.chunk_lines` sources is translated (translate_chunk sorts and batches it by length) and
written whole (nmt.io: temp file, then rename) before pipeline.json counts it: a kill loses at most the chunk in
progress, and the next run starts at the first chunk without its file. The chunks are joined into teacher/train.TGT
when all are there.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nmt import checkpoint, text
from nmt.checkpoint import Checkpoint
from nmt.config.experiment import Config, ModelConfig
from nmt.distill.state import Pipeline
from nmt.errors import NmtError
from nmt.io import atomic_output, atomic_write_text
from nmt.log import console, progress_bar
from nmt.rundir import checkpoint_file
from nmt.translation.translator import ModelOptions, Translator


def load_checkpoint(path: str) -> Checkpoint:
    """The teacher's checkpoint: a file, or a run dir's (averaged.pt, else best.pt, else last.pt)."""
    return checkpoint.load(checkpoint_file(Path(path)))


def translator(cfg: Config) -> Translator:
    """The teacher checkpoint opened for translation with its own search settings (distill.teacher_beam aside)."""
    d = cfg.distill
    loaded = Translator.load(load_checkpoint(d.teacher or ""), None, ModelOptions(device=d.teacher_device,
                                                                                  config_given=False))
    loaded.decode = loaded.decode_with(nbest=1, **({"beam": d.teacher_beam} if d.teacher_beam else {}))
    return loaded


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


def translate(cfg: Config, pipe: Pipeline, progress: bool) -> dict[str, Any]:
    """The teacher stage with a checkpoint: teacher/train.TGT, one translation per cleaned source line."""
    tgt = cfg.data.tgt_lang
    sources = pipe.path / "clean" / f"train.{cfg.data.src_lang}"
    chunks = pipe.folder("teacher") / "chunks"
    chunks.mkdir(exist_ok=True)
    size, total = cfg.distill.chunk_lines, count_lines(sources)
    n_chunks = -(-total // size)
    model: Translator | None = None  # loaded only when a chunk is missing
    seconds, done_before, translated = 0.0, 0, 0
    with progress_bar("lines", enabled=progress) as bar:
        task = bar.add_task("teacher: translating", total=total, note="")
        for k, chunk in enumerate(line_chunks(sources, size)):
            out = chunks / f"{k:06d}.{tgt}"
            if out.is_file() and count_lines(out) == len(chunk):  # written whole by an earlier run
                done_before += 1
            else:
                model = model or translator(cfg)
                started = time.monotonic()
                results = model.translate_chunk(chunk, first_line=k * size + 1)
                atomic_write_text(out, "".join(r.text[0] + "\n" for r in results))
                seconds += time.monotonic() - started
                translated += len(chunk)
                pipe.progress("teacher", chunks_done=k + 1, chunks=n_chunks)
                if not progress:  # a log (no bar) still says how far a long translation is
                    console.print(f"teacher: chunk {k + 1}/{n_chunks} written ({translated / seconds:,.0f} lines/s)")
            bar.update(task, completed=min((k + 1) * size, total))
    if done_before:
        console.print(f"teacher: {done_before} of {n_chunks} chunks were translated by an earlier run")
    with atomic_output(pipe.path / "teacher" / f"train.{tgt}", text=True) as f:
        for k in range(n_chunks):
            f.write((chunks / f"{k:06d}.{tgt}").read_text(encoding="utf-8"))
    return {"lines": total, "chunks": n_chunks, "chunks_done": n_chunks, "chunks_resumed": done_before,
            "beam": model.decode.beam if model else None,
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
