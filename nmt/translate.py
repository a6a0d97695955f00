"""Translation: lines in -> encode -> sort by length -> batch -> search -> restore order -> lines out.

Streams in chunks of `decode.chunk_lines` lines, so memory does not grow with the input, and
writes exactly one output line per input line (K lines with --nbest K).
"""

from __future__ import annotations

import contextlib
import io
import os
import select
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import torch

from nmt import checkpoint
from nmt.batching import collate, source_batches
from nmt.config import Config, DecodeConfig, apply_dict, config_from_dict, parse_overrides
from nmt.device import cpu_native_bf16, pick_device
from nmt.errors import CheckpointError, NmtError, first_line
from nmt.io import atomic_output
from nmt.log import console, progress_bar, show_progress
from nmt.model import Transformer
from nmt.rundir import checkpoint_to_translate
from nmt.search import Hypothesis, beam_search, greedy_search
from nmt.tokenizer import Tokenizer

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class TranslateOptions:
    checkpoint: Path | None = None
    device: str = "auto"
    dtype: str = "auto"
    threads: int = 0
    quantize: str | None = None
    scores: bool = False
    attention_dir: Path | None = None
    attention_layer: int = -1
    all_heads: bool = False
    encoder_attention: bool = False
    alignment: Path | None = None
    progress: bool | None = None
    # Where the search settings come from: with --config, the loaded config's decode section; without,
    # the checkpoint's own (the beam and length penalty it was tuned with) with the user's decode
    # settings (--set and options, as section.key=value) on top.
    config_given: bool = True
    decode_overrides: list[str] = field(default_factory=list)


@dataclass
class Translation:
    """One input line's result: n-best hypotheses (empty for an empty line) and what was fed in."""

    source: str
    src_ids: list[int]
    hypotheses: list[Hypothesis]
    text: list[str]


def load_model(state: dict[str, Any], tokenizer: Tokenizer, device: torch.device, dtype: torch.dtype) -> Transformer:
    cfg = config_from_dict(state["config"])
    model = Transformer.from_config(cfg.model, state["vocab"]["src"], state["vocab"]["tgt"],
                                    pad_id=tokenizer.special_ids.pad, joint_vocab=tokenizer.joint)
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as e:
        raise CheckpointError(f"checkpoint weights do not fit its model config ({first_line(e)})") from None
    return model.to(device=device, dtype=dtype).eval()


def quantize_int8(model: Transformer) -> Transformer:
    """`--quantize int8`: PyTorch dynamic int8 quantization of the Linear layers (weights int8, activations
    quantized per batch). The output projection is the tied embedding matrix, not an nn.Linear: an int8 copy
    of it takes its place, as HF's lm_head and CTranslate2's output layer are quantized (with a 58k
    vocabulary it is most of a decoding step's work)."""
    quantize_dynamic = getattr(getattr(torch.ao, "quantization", None), "quantize_dynamic", None)
    if quantize_dynamic is None:
        raise NmtError("--quantize int8 needs torch.ao.quantization, which this torch build lacks")
    head = torch.nn.Linear(model.d_model, model.output_weight.size(0), bias=model.output_bias is not None)
    with torch.no_grad():
        head.weight.copy_(model.output_weight)
        if model.output_bias is not None:
            head.bias.copy_(model.output_bias)
    model.output_layer = head
    with warnings.catch_warnings():  # torch marks eager quantization deprecated in favour of torchao
        warnings.simplefilter("ignore")
        return quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)


def auto_dtype(device: torch.device, quantize: str | None) -> str:
    """--dtype auto: bf16 on CPUs that compute it natively (the Multi30k model: 1.34x faster, BLEU -0.15,
    bench/precision.py), fp32 elsewhere (CUDA included, for now) and under --quantize (int8 wants fp32)."""
    return "bf16" if device.type == "cpu" and quantize is None and cpu_native_bf16() else "fp32"


class Translator:
    """A loaded model + tokenizer + search settings."""

    def __init__(self, state: dict[str, Any], decode: DecodeConfig, *, device: str = "auto",
                 dtype: str = "fp32", quantize: str | None = None, attention_layer: int = -1):
        if dtype not in (*DTYPES, "auto"):
            raise NmtError(f"--dtype must be one of auto, {', '.join(DTYPES)}, got '{dtype}'")
        self.device = pick_device(device, "--device")
        if dtype == "auto":
            dtype = auto_dtype(self.device, quantize)
        self.dtype = dtype
        if dtype == "fp16" and self.device.type != "cuda":
            raise NmtError("--dtype fp16 needs a CUDA device (use bf16 or fp32 on CPU)")
        self.decode = decode
        self.tokenizer = Tokenizer.from_state(state["tokenizer"])
        self.special = self.tokenizer.special_ids
        self.model = load_model(state, self.tokenizer, self.device, DTYPES[dtype])
        if quantize is not None:
            self._quantize(quantize)
        self.prefix = self._prefix_id(decode.prefix)
        self.max_src = min(decode.max_input_tokens, self.model.max_positions - 1)
        layers = config_from_dict(state["config"]).model.decoder_layers
        if not -layers <= attention_layer < layers:
            raise NmtError(f"--attention-layer {attention_layer} out of range: the model has {layers} decoder layers")
        self.attention_layer = attention_layer
        self.warn = lambda message: console.print(f"[yellow]warning:[/yellow] {message}")

    def _prefix_id(self, prefix: str | None) -> list[int]:
        """decode.prefix as the ids put before every source line: one vocabulary entry, never cut into pieces."""
        if not prefix:
            return []
        i = self.tokenizer.src_piece_id(prefix)
        if i is None:
            codes = self.tokenizer.language_codes()
            known = f" (its language codes: {', '.join(codes)})" if codes else " (it has no language codes)"
            raise NmtError(f"decode.prefix '{prefix}' is not in the model's source vocabulary{known}")
        return [i]

    def _quantize(self, kind: str) -> None:
        if kind != "int8":
            raise NmtError(f"--quantize supports 'int8', got '{kind}'")
        if self.device.type != "cpu":
            raise NmtError("--quantize int8 runs on CPU only (use --dtype bf16/fp16 on GPU)")
        self.model = quantize_int8(self.model)

    @classmethod
    def from_checkpoint(cls, path: str | Path, decode: DecodeConfig, **kwargs: Any) -> Translator:
        return cls(checkpoint.load(path), decode, **kwargs)

    # ---- one chunk
    def _search(self, src: torch.Tensor, need_attention: bool) -> list[list[Hypothesis]]:
        d, ids = self.decode, self.special
        common = dict(max_len_a=d.max_len_a, max_len_b=d.max_len_b, bos=ids.bos, eos=ids.eos, pad=ids.pad,
                      need_attention=need_attention, attention_layer=self.attention_layer)
        penalty = dict(length_penalty=d.length_penalty, length_penalty_type=d.length_penalty_type)
        if d.beam == 1:
            return greedy_search(self.model, src, **penalty, **common)
        return beam_search(self.model, src, beam=d.beam, nbest=d.nbest, **penalty, **common)

    @torch.inference_mode()
    def translate_chunk(self, lines: list[str], *, first_line: int = 1,
                        need_attention: bool = False) -> list[Translation]:
        """Translate a list of lines; results come back in input order."""
        sources = list(lines)
        ids = [self.prefix + seq for seq in self.tokenizer.encode_src(sources)]  # cleaned like the training data
        for i, seq in enumerate(ids):
            if len(seq) > self.max_src:
                self.warn(f"input line {first_line + i}: {len(seq)} tokens, truncated to {self.max_src}")
                ids[i] = seq[: self.max_src]
        results = [Translation(s, seq, [], [""]) for s, seq in zip(sources, ids)]
        todo = [i for i, seq in enumerate(ids) if len(seq) > len(self.prefix)]  # an empty line stays empty
        if not todo:
            return results
        for positions, batch in source_batches([ids[i] for i in todo], self.decode.max_tokens, self.special):
            rows = [todo[j] for j in positions]
            for r, hyps in zip(rows, self._search(batch.src.to(self.device), need_attention)):
                results[r].hypotheses = hyps
                results[r].text = self.tokenizer.decode_tgt([h.tokens for h in hyps])
        return results

    def stream(self, lines: Iterable[str], *, need_attention: bool = False,
               waiting: Callable[[], bool] = lambda: True) -> Iterator[Translation]:
        """Translate an iterable of lines chunk by chunk (bounded memory). A chunk is cut early when
        `waiting()` says no further line is there yet: what has arrived is answered now, never held back
        waiting for more (an interactive user, a pipe that sends a line and waits)."""
        chunk: list[str] = []
        first = 1
        for line in lines:
            chunk.append(line)
            if len(chunk) >= self.decode.chunk_lines or not waiting():
                yield from self.translate_chunk(chunk, first_line=first, need_attention=need_attention)
                first += len(chunk)
                chunk = []
        if chunk:
            yield from self.translate_chunk(chunk, first_line=first, need_attention=need_attention)


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


def checkpoint_decode(state: dict[str, Any], overrides: list[str], ckpt: Path) -> DecodeConfig:
    """The checkpoint's decode settings (those of the config it was trained with), then `overrides`."""
    if not isinstance(state["config"], dict):
        raise CheckpointError(f"{ckpt}: the checkpoint's config is not a mapping")
    cfg = Config()
    apply_dict(cfg, {"decode": state["config"].get("decode") or {}}, origin=str(ckpt))
    decode_only = [o for o in overrides if o.strip().startswith("decode.")]
    if decode_only:
        apply_dict(cfg, parse_overrides(decode_only), origin="--set")
    return cfg.decode


def translate_file(cfg: Config, opts: TranslateOptions, input: Path | None, output: Path | None) -> int:
    """The `nmt translate` command. Returns the number of lines translated."""
    if opts.threads > 0:
        torch.set_num_threads(opts.threads)
    if input is not None and not input.is_file():
        raise NmtError(f"input file not found: {input}")
    ckpt = checkpoint_to_translate(opts.checkpoint, cfg.train.run_dir, opts.config_given)
    console.print(f"loading {ckpt}")
    state = checkpoint.load(ckpt)
    decode = cfg.decode if opts.config_given else checkpoint_decode(state, opts.decode_overrides, ckpt)
    translator = Translator(state, decode, device=opts.device, dtype=opts.dtype, quantize=opts.quantize,
                            attention_layer=opts.attention_layer)
    console.print(f"translating on {translator.device} in {translator.dtype}"
                  + (" with int8 weights" if opts.quantize else ""))
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
        results = translator.stream(lines, need_attention=need_attention, waiting=lines.waiting)
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
    """Attention heatmaps (`--attention DIR`) and hard word alignments (`--alignment FILE`).

    The cross-attention comes from the search's own forward pass (Hypothesis.attention: the chosen
    decoder layer averaged over heads). The optional every-head grid and encoder self-attention are
    extra teacher-forced passes of the same model over the chosen translation, made only when asked.
    """

    def __init__(self, opts: TranslateOptions, tokenizer: Tokenizer, align: IO[str] | None):
        self.opts = opts
        self.tokenizer = tokenizer
        self.align = align
        if opts.attention_dir is not None:
            from nmt.plot import require_matplotlib

            require_matplotlib()
            opts.attention_dir.mkdir(parents=True, exist_ok=True)

    def add(self, line_no: int, result: Translation, translator: Translator) -> None:
        from nmt import plot

        if not result.hypotheses:
            if self.align:
                self.align.write("\n")
            return
        hyp = result.hypotheses[0]
        src_pieces = self.tokenizer.src_id_pieces(result.src_ids)
        tgt_pieces = self.tokenizer.tgt_pieces(hyp.tokens)
        if self.align:
            self.align.write(plot.format_pharaoh(plot.word_alignment(hyp.attention, src_pieces, tgt_pieces)) + "\n")
        out = self.opts.attention_dir
        if out is None:
            return
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
