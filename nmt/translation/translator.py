"""The translation core: a loaded model + tokenizer + default search settings (`Translator`), opened one way
(`Translator.load`) by `nmt translate`, `nmt serve` and the benches. Lines in -> source ids (one rule:
`source_ids`) -> sort by length -> batch -> search (nmt.search.run) -> restore order -> results. The settings may
change per call (`decode=translator.decode_with(beam=1)`).

`SentenceTranslator` is the interface every caller translates through (the CLI, documents, `nmt serve`'s plain,
HTML and file paths, explain): `Translator` implements it, and so does the server's queued translator, which hands
the same call to the model's thread.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from nmt import checkpoint, int8
from nmt.checkpoint import Checkpoint
from nmt.config.experiment import Config, DecodeConfig, check_decode
from nmt.data.batching import source_batches
from nmt.device import pick_device
from nmt.errors import NmtError
from nmt.log import console
from nmt.precision import for_inference, prepare
from nmt.search import Hypothesis, SearchSettings, generated_tokens, run
from nmt.search.compiled import CompiledDecoder
from nmt.search.graphed import GraphedDecoder
from nmt.search.package_store import package_dir
from nmt.search.padded import PaddedDecoder
from nmt.threads import FreeCores
from nmt.tokenizer import Tokenizer
from nmt.translation import terminology
from nmt.translation.glossary import Glossary


@dataclass
class ModelOptions:
    """Which checkpoint to translate with and how to run it: the options `nmt translate` and `nmt serve` share."""

    checkpoint: Path | None = None
    device: str = "auto"
    dtype: str = "auto"
    threads: int = 0
    quantize: str | None = None
    compile: bool = False  # greedy and beam search's steps compiled (CPU: nmt.search.compiled) or graphed (GPU)
    # Where the search settings come from (`Translator.load`): with --config, the loaded config's decode
    # section; without, the checkpoint's own (the beam and length penalty it was tuned with) with the decode keys
    # the user set (--set decode.KEY=VALUE, --beam 5: the config's `given` keys) on top.
    config_given: bool = True


@dataclass
class Translation:
    """One input line's result: n-best hypotheses (empty for an empty line) and what was fed in."""

    source: str
    src_ids: list[int]
    hypotheses: list[Hypothesis]
    text: list[str]
    truncated_from: int = 0  # the line's source tokens when they were more than max_input_tokens


def output_tokens(results: Iterable[Translation]) -> int:
    """The tokens the search generated for these lines (each line's best hypothesis, EOS not counted): what decoding
    tokens/s counts (nmt.search.generated_tokens)."""
    return generated_tokens(r.hypotheses for r in results)


class SentenceTranslator(Protocol):
    """Translate these sentences: results in input order (see Translator.translate_chunk); `tokenizer` reads the
    results' ids (alignment)."""

    tokenizer: Tokenizer

    def translate_chunk(self, lines: list[str], *, decode: DecodeConfig | None = None, need_attention: bool = False,
                        glossary: Glossary | None = None, first_line: int = 1) -> list[Translation]: ...


class Translator:
    """A loaded model + tokenizer + default search settings (`decode`)."""

    def __init__(self, ckpt: Checkpoint, decode: DecodeConfig, *, device: str = "auto", dtype: str = "fp32",
                 quantize: str | None = None, attention_layer: int = -1, compile: bool = False):
        self.device = pick_device(device, "--device")
        model_config = ckpt.model_config
        self.precision = for_inference(dtype, quantize, self.device, model_config.d_model)
        self.dtype, self.quantize = self.precision.float_name, quantize
        self.decode = decode
        self.tokenizer = ckpt.tokenizer()
        self.special = self.tokenizer.special_ids
        self.model = prepare(ckpt.build_model(self.tokenizer), self.device, self.precision, training=False)
        self.prefix_ids(decode.prefix)  # a bad prefix is an error now, not at the first line
        layers = model_config.decoder_layers
        if not -layers <= attention_layer < layers:
            raise NmtError(f"--attention-layer {attention_layer} out of range: the model has {layers} decoder layers")
        self.attention_layer = attention_layer
        # what serving reports about the model
        self.path, self.langs, self.vocab_sizes = ckpt.path, ckpt.langs, ckpt.vocab_sizes
        self.trained_config = ckpt.saved_config
        self.warn = lambda message: console.print(f"[yellow]warning:[/yellow] {message}")
        # on a CPU, each batch runs on the cores other processes left free (the threads set before loading at most)
        self.threads = FreeCores(torch.get_num_threads()) if self.device.type == "cpu" else None
        self.compiled = self._compiled(ckpt) if compile else None

    def _compiled(self, ckpt: Checkpoint) -> PaddedDecoder:
        """The decoder whose steps run compiled (--compile): on a CUDA GPU as CUDA graphs (nmt.search.graphed), on
        a CPU as packages beside the checkpoint (nmt.search.compiled)."""
        if self.device.type == "cuda":
            return GraphedDecoder(self.model, announce=self.warn)
        if self.device.type != "cpu" or self.precision.float_name != "fp32":
            raise NmtError(f"--compile runs float32 (or --quantize int8) on a CPU, or on a CUDA GPU; this is "
                           f"{self.precision} on {self.device.type}: drop --compile, or use --device cpu --dtype fp32")
        if not any(map(shutil.which, (os.environ.get("CXX", "g++"), "g++", "clang++", "c++"))):
            raise NmtError("--compile needs a C++ compiler to build its packages (g++ or clang++, or one named by "
                           "CXX): install one, or drop --compile")
        if self.precision.name == "int8" and int8.fbgemm_int8():  # to_int8's layers are the ones compiled: one copy
            return CompiledDecoder(self.model, package_dir(ckpt.path), self.warn_compile)
        plain = ckpt.build_model(self.tokenizer).eval()  # float32 weights unpacked: the eager ones are oneDNN's
        if self.precision.name == "int8":  # int8 weights in an operator the compiler knows (to_int8's it does not)
            plain = int8.to_int8_weights(plain)
        return CompiledDecoder(plain, package_dir(ckpt.path), self.warn_compile)

    def warn_compile(self, message: str) -> None:
        console.print(f"[cyan]{message}[/cyan] (about a minute per row count on two cores; later runs load it)")

    @classmethod
    def load(cls, ckpt: str | Path | Checkpoint, cfg: Config | None = None, opts: ModelOptions | None = None,
             **kwargs: Any) -> Translator:
        """The one way to open a checkpoint for translation. Search settings: `cfg.decode` when the user gave a
        config (`opts.config_given`), else those the checkpoint was trained with, with the decode keys set in `cfg`
        (`cfg.given`: --set decode.KEY=VALUE, --beam ...) on top. `kwargs` (attention_layer) go to the
        constructor."""
        opts = opts or ModelOptions(config_given=cfg is not None)
        ckpt = ckpt if isinstance(ckpt, Checkpoint) else checkpoint.load(ckpt)
        if cfg is not None and opts.config_given:
            decode = cfg.decode
        else:
            cfg = cfg or Config()
            keys = sorted(k.removeprefix("decode.") for k in cfg.given if k.startswith("decode."))
            decode = ckpt.decode_config({k: getattr(cfg.decode, k) for k in keys})
        check_decode(decode)
        return cls(ckpt, decode, device=opts.device, dtype=opts.dtype, quantize=opts.quantize, compile=opts.compile,
                   **kwargs)

    def prefix_ids(self, prefix: str | None) -> list[int]:
        """decode.prefix as the ids put before every source line: one vocabulary entry, never cut into pieces."""
        if not prefix:
            return []
        i = self.tokenizer.src_piece_id(prefix)
        if i is None:
            codes = self.tokenizer.language_codes()
            known = f" (its language codes: {', '.join(codes)})" if codes else " (it has no language codes)"
            raise NmtError(f"decode.prefix '{prefix}' is not in the model's source vocabulary{known}")
        return [i]

    def decode_with(self, **changes: Any) -> DecodeConfig:
        """The default settings with `changes` (DecodeConfig fields: beam=1, nbest=3, ...) for some calls."""
        return dataclasses.replace(self.decode, **changes) if changes else self.decode

    def max_src(self, decode: DecodeConfig | None = None) -> int:
        """Source tokens kept per line (longer lines are truncated, with a warning)."""
        return min((decode or self.decode).max_input_tokens, self.model.max_positions - 1)

    def source_ids(self, lines: list[str], decode: DecodeConfig | None = None) -> list[tuple[list[int], int]]:
        """The source-ids rule: each line's ids as the model reads them (decode.prefix, then its pieces, cleaned
        like the training data, cut to `max_src`) and its token count when it was cut (else 0)."""
        d = decode or self.decode
        prefix, max_src = self.prefix_ids(d.prefix), self.max_src(d)
        ids = [prefix + seq for seq in self.tokenizer.encode_src(lines)]
        return [(seq[:max_src], len(seq) if len(seq) > max_src else 0) for seq in ids]

    # ---- one chunk
    def search_settings(self, decode: DecodeConfig, **changes: Any) -> SearchSettings:
        """The search settings of `decode` with this translator's attention layer, and `changes`."""
        return SearchSettings.of(decode, attention_layer=self.attention_layer, **changes)

    def _search(self, src: torch.Tensor, need_attention: bool, d: DecodeConfig) -> list[list[Hypothesis]]:
        settings = self.search_settings(d, need_attention=need_attention)
        compiled = (self.compiled is not None and not (need_attention or settings.sampling)  # it gives no attention
                    and self.compiled.pays(src.size(0), settings.beam))
        return run(self.compiled if compiled else self.model, src, settings, self.special)

    @functools.cached_property
    def continues_word(self) -> torch.Tensor:
        """[V] bool: target pieces that go on the word before them (no leading "▁", a letter or digit first); built
        when a glossary first needs it, not at load."""
        pieces = self.tokenizer.tgt_pieces(list(range(self.tokenizer.tgt_vocab_size)))
        return torch.tensor([not p.startswith("\u2581") and p[:1].isalnum() for p in pieces])

    @torch.inference_mode()
    def translate_chunk(self, lines: list[str], *, decode: DecodeConfig | None = None, need_attention: bool = False,
                        glossary: Glossary | None = None, first_line: int = 1) -> list[Translation]:
        """Translate a list of lines; results come back in input order. `decode`: the settings of this call
        (default: the translator's). `glossary`: terms the translations must hold (nmt.translation.glossary).
        `first_line`: the number of the first line, in warnings."""
        decode = decode or self.decode
        sources = list(lines)
        results = [Translation(line, seq, [], [""], cut)
                   for line, (seq, cut) in zip(sources, self.source_ids(sources, decode))]
        for i, r in enumerate(results):
            if r.truncated_from:
                self.warn(f"input line {first_line + i}: {r.truncated_from} tokens, truncated to "
                          f"{self.max_src(decode)}")
        ids, prefix = [r.src_ids for r in results], self.prefix_ids(decode.prefix)
        todo = [i for i, seq in enumerate(ids) if len(seq) > len(prefix)]  # an empty line stays empty
        if not todo:
            return results
        threads = torch.get_num_threads()
        try:  # each batch on the cores other programs leave free; the caller gets its thread count back
            for positions, batch in source_batches([ids[i] for i in todo], decode.max_tokens, self.special):
                rows = [todo[j] for j in positions]
                if self.threads is not None:
                    self.threads.fit()
                # a glossary places terms on the words aligned to their source words: the search's own attention
                found = self._search(batch.src.to(self.device), need_attention or bool(glossary), decode)
                for r, hyps in zip(rows, found):
                    results[r].hypotheses = hyps
                    results[r].text = self.tokenizer.decode_tgt([h.tokens for h in hyps])
        finally:
            torch.set_num_threads(threads)
        if glossary:
            terminology.obey(self, results, glossary, need_attention, decode)
        return results

    def stream(self, lines: Iterable[str], *, decode: DecodeConfig | None = None, need_attention: bool = False,
               waiting: Callable[[], bool] = lambda: True, glossary: Glossary | None = None) -> Iterator[Translation]:
        """Translate an iterable of lines chunk by chunk (bounded memory). A chunk is cut early when
        `waiting()` says no further line is there yet: what has arrived is answered now, never held back
        waiting for more (an interactive user, a pipe that sends a line and waits). `decode` as for
        translate_chunk."""
        chunk: list[str] = []
        decode = decode or self.decode
        first = 1
        for line in lines:
            chunk.append(line)
            if len(chunk) >= decode.chunk_lines or not waiting():
                yield from self.translate_chunk(chunk, decode=decode, need_attention=need_attention,
                                                glossary=glossary, first_line=first)
                first += len(chunk)
                chunk = []
        if chunk:
            yield from self.translate_chunk(chunk, decode=decode, need_attention=need_attention, glossary=glossary,
                                            first_line=first)
