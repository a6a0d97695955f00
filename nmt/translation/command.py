"""The `nmt translate` command: lines from a file or stdin -> `Translator.stream` -> lines out (plus scores,
attention pictures, alignments).

Streams in chunks of `decode.chunk_lines` lines, so memory does not grow with the input, and
writes exactly one output line per input line (K lines with --nbest K).
"""

from __future__ import annotations

import contextlib
import io
import os
import select
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import torch

from nmt.config.experiment import Config
from nmt.data.batching import collate
from nmt.device import keep_freed_memory
from nmt.errors import NmtError
from nmt.io import atomic_output, check_outputs
from nmt.log import console, progress_bar, show_progress
from nmt.rundir import checkpoint_to_translate
from nmt.tokenizer import Tokenizer
from nmt.translation import documents, glossary
from nmt.translation.alignment import aligned, format_pharaoh, link_pairs
from nmt.translation.glossary import Glossary
from nmt.translation.translator import ModelOptions, Translation, Translator


@dataclass
class TranslateOptions(ModelOptions):
    scores: bool = False
    attention_dir: Path | None = None
    attention_layer: int = -1
    all_heads: bool = False
    encoder_attention: bool = False
    alignment: Path | None = None
    progress: bool | None = None
    format: str | None = None  # --format: a document format, "lines", or None: by the input's extension
    glossary: Path | None = None  # --glossary terms.tsv (nmt.translation.glossary)
    force: bool = False  # --force: --output may be the --input file (replaced by its translation at the end)


# --------------------------------------------------------------------------- files


class InputLines:
    """The lines of a binary input, split on '\\n' only (CR stripped; invalid UTF-8 replaced, with a warning
    naming the line). Read straight from the file descriptor so that `waiting()` can tell whether another
    line is already there without blocking: a file or a busy pipe always has one, a terminal or a pipe
    that sends a line and waits does not."""

    def __init__(self, stream: IO[bytes], name: str, warn: Callable[[str], None]):
        self.stream, self.name, self.warn = stream, name, warn
        try:
            self.fd: int | None = stream.fileno()
        except (OSError, AttributeError, io.UnsupportedOperation):
            self.fd = None  # an in-memory stream: all of it is there already
        self.buffer, self.pos = b"", 0  # bytes read, and where the next line starts in them

    def waiting(self) -> bool:
        if self.fd is None or self.buffer.find(b"\n", self.pos) >= 0:
            return True
        try:  # a regular file is always "ready"; a pipe or terminal only when bytes (or EOF) are there
            return bool(select.select([self.fd], [], [], 0)[0])
        except (OSError, ValueError):
            return True

    def _raw_lines(self) -> Iterator[bytes]:
        if self.fd is None:
            yield from self.stream
            return
        eof = False
        while True:
            end = self.buffer.find(b"\n", self.pos)
            if end >= 0:
                line, self.pos = self.buffer[self.pos:end + 1], end + 1
                yield line
            elif eof:
                if self.pos < len(self.buffer):
                    yield self.buffer[self.pos:]
                return
            else:
                data = os.read(self.fd, 1 << 16)
                self.buffer, self.pos, eof = self.buffer[self.pos:] + data, 0, not data

    def __iter__(self) -> Iterator[str]:
        return read_input(self._raw_lines(), self.name, self.warn)


def read_input(raw_lines: Iterable[bytes], name: str, warn: Any) -> Iterator[str]:
    """Lines split on '\\n' only (CR stripped); invalid UTF-8 is replaced, with a warning naming the line."""
    for number, raw in enumerate(raw_lines, 1):
        raw = raw.rstrip(b"\n").rstrip(b"\r")
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError:
            warn(f"{name}:{number}: invalid UTF-8, undecodable bytes replaced")
            yield raw.decode("utf-8", errors="replace")


def format_translation(t: Translation, line_no: int, nbest: int, scores: bool) -> str:
    """One output line (`text`, with --scores `text<TAB>log-prob`), or with nbest > 1 one line per hypothesis:
    `line_no<TAB>text<TAB>score` (score = log-prob / GNMT length penalty, what the beam ranks by), with
    --scores also `<TAB>log-prob`."""
    if nbest > 1:
        rows = [(text, h.score, h.logprob) for h, text in zip(t.hypotheses, t.text)] or [("", 0.0, 0.0)]
        return "".join(f"{line_no}\t{text}\t{score:.4f}" + (f"\t{logprob:.4f}" if scores else "") + "\n"
                       for text, score, logprob in rows)
    if scores:
        return f"{t.text[0]}\t{t.hypotheses[0].logprob:.4f}\n" if t.hypotheses else "\t0.0000\n"
    return t.text[0] + "\n"


def translate_file(cfg: Config, opts: TranslateOptions, input: Path | None, output: Path | None) -> int:
    """The `nmt translate` command. Returns the number of lines translated."""
    keep_freed_memory()
    if opts.threads > 0:
        torch.set_num_threads(opts.threads)
    if input is not None and not input.is_file():
        raise NmtError(f"input file not found: {input}")
    check_outputs({"--output": output, "--alignment": opts.alignment}, input, force=opts.force)
    fmt = documents.detect_format(input, opts.format)
    terms = glossary.load(opts.glossary) if opts.glossary else None
    if fmt is not None:
        return translate_document_file(cfg, opts, fmt, input, output, terms)
    translator = _load(cfg, opts)
    decode = translator.decode
    need_attention = opts.attention_dir is not None or opts.alignment is not None
    typing = input is None and sys.stdin.isatty()  # someone types lines: a bar would only get in the way
    show_bar = show_progress(opts.progress) and (opts.progress is not None or not typing)
    started = time.perf_counter()
    warn = translator.warn
    with contextlib.ExitStack() as stack:
        stream = stack.enter_context(open(input, "rb")) if input is not None else sys.stdin.buffer
        out = stack.enter_context(atomic_output(output, text=True)) if output is not None else sys.stdout
        align = stack.enter_context(atomic_output(opts.alignment, text=True)) if opts.alignment else None
        visuals = _Visuals(opts, translator.tokenizer, align) if need_attention else None
        bar = stack.enter_context(_progress(show_bar, _count_lines(input) if show_bar and input else None))
        count = 0
        lines = InputLines(stream, str(input or "<stdin>"), warn)
        results = translator.stream(lines, need_attention=need_attention, waiting=lines.waiting, glossary=terms)
        for count, result in enumerate(results, 1):
            out.write(format_translation(result, count, decode.nbest, opts.scores))
            if visuals is not None:
                visuals.add(count, result, translator)
            if count % 256 == 0 or not lines.waiting():  # nothing more to read yet: show what is done
                out.flush()
                bar(count)
        out.flush()
    seconds = time.perf_counter() - started
    console.print(f"translated {count} lines in {seconds:.1f}s ({count / max(seconds, 1e-9):,.1f} lines/s)")
    return count


def _load(cfg: Config, opts: TranslateOptions) -> Translator:
    ckpt = checkpoint_to_translate(opts.checkpoint, cfg.train.run_dir, opts.config_given)
    console.print(f"loading {ckpt}")
    translator = Translator.load(ckpt, cfg, opts, attention_layer=opts.attention_layer)
    console.print(f"translating on {translator.device} in {translator.precision}")
    return translator


def translate_document_file(cfg: Config, opts: TranslateOptions, fmt: str, input: Path | None,
                            output: Path | None, terms: Glossary | None = None) -> int:
    """`nmt translate` of a document (nmt.translation.documents): its format kept; without --output a text format goes
    to stdout. Returns the number of paragraphs translated."""
    if input is None:
        raise NmtError(f"--format {fmt} translates a document: give it with --input")
    unsupported = [name for name, given in (("--scores", opts.scores), ("--attention", opts.attention_dir),
                                            ("--alignment", opts.alignment)) if given]
    if unsupported:
        raise NmtError(f"{', '.join(unsupported)} work line by line, not with documents ({fmt})")
    if output is None and fmt in documents.BINARY:
        raise NmtError(f"a {fmt} document needs --output FILE (it is not text for stdout)")
    documents.check_document(input, fmt)
    translator = _load(cfg, opts)
    with contextlib.ExitStack() as stack:
        target = output
        if target is None:
            target = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="nmt-"))) / input.name
        report = documents.translate_document(translator, input, target, fmt, glossary=terms)
        if output is None:
            sys.stdout.buffer.write(target.read_bytes())
            sys.stdout.flush()
    console.print(f"translated {report.paragraphs} paragraphs ({report.sentences} sentences) of {fmt} in "
                  f"{report.seconds:.1f}s")
    return report.paragraphs


def _count_lines(path: Path) -> int:
    """Lines in a file (a last line without '\n' counts), read in 1 MiB blocks: the bar's total, so it can
    show an ETA. About a second per GB, paid only when the bar is shown."""
    lines, last = 0, b"\n"
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            lines += block.count(b"\n")
            last = block[-1:]
    return lines + (last != b"\n")


@contextlib.contextmanager
def _progress(enabled: bool, total: int | None) -> Iterator[Callable[[int], None]]:
    """A bar on stderr: lines done (of `total` for a file, with the time left) and lines/s."""
    with progress_bar("lines", enabled=enabled, transient=True) as bar:
        task = bar.add_task("translating", total=total, note="")
        yield lambda n: bar.update(task, completed=n)


class _Visuals:
    """Attention heatmaps (`--attention DIR`) and hard word alignments (`--alignment FILE`: nmt.translation.alignment's
    links of the best hypothesis, as Pharaoh "i-j" pairs of whitespace words, one line per input line).

    The cross-attention comes from the search's own forward pass (Hypothesis.attention: the chosen
    decoder layer averaged over heads). The optional every-head grid and encoder self-attention are
    extra teacher-forced passes of the same model over the chosen translation, made only when asked.
    """

    def __init__(self, opts: TranslateOptions, tokenizer: Tokenizer, align: IO[str] | None):
        self.opts = opts
        self.tokenizer = tokenizer
        self.align = align
        if opts.attention_dir is not None:
            from nmt.plot.charts import require_matplotlib

            require_matplotlib()
            opts.attention_dir.mkdir(parents=True, exist_ok=True)

    def add(self, line_no: int, result: Translation, translator: Translator) -> None:
        if self.align:  # the best hypothesis's links, the rule documents use; an empty line gets an empty line
            self.align.write(format_pharaoh(link_pairs(aligned(self.tokenizer, result).links)) + "\n")
        out = self.opts.attention_dir
        if out is None or not result.hypotheses:
            return
        from nmt.plot import charts as plot

        hyp = result.hypotheses[0]
        src_pieces = self.tokenizer.src_id_pieces(result.src_ids)
        tgt_pieces = self.tokenizer.tgt_pieces(hyp.tokens)
        layer = self.opts.attention_layer
        title = f"line {line_no}: decoder layer {layer} cross-attention (mean of heads)"
        plot.plot_attention(hyp.attention, src_pieces, tgt_pieces, out / f"{line_no:06d}.png", title=title)
        if not (self.opts.all_heads or self.opts.encoder_attention):
            return
        special = translator.special
        src = collate([result.src_ids], [hyp.tokens], pad=special.pad, bos=special.bos, eos=special.eos)
        model = translator.model
        with torch.inference_mode():
            if self.opts.all_heads:
                grid = model.decoder_attention(src.src.to(translator.device), src.tgt_in.to(translator.device))
                plot.plot_attention_grid(grid[:, 0], src_pieces, tgt_pieces, out / f"{line_no:06d}.heads.png",
                                         title=f"line {line_no}: cross-attention, every layer and head")
            if self.opts.encoder_attention:
                enc_all = model.encoder_attention(src.src.to(translator.device))
                enc = enc_all[layer if -len(enc_all) <= layer < len(enc_all) else -1, 0].mean(0)
                labels = src_pieces + ["</s>"]
                plot.plot_attention(enc, labels, labels, out / f"{line_no:06d}.encoder.png",
                                    title=f"line {line_no}: encoder layer {layer} self-attention (mean of heads)")
