"""The translation core: a loaded model + tokenizer + default search settings (`Translator`), opened one way
(`Translator.load`) by `nmt translate`, `nmt serve` and the benches. Lines in -> encode -> sort by length ->
batch -> search -> restore order -> results. Search settings may change per call (`beam=4`, `nbest=4`, ...).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from nmt import checkpoint
from nmt.checkpoint import Checkpoint
from nmt.config.experiment import Config, DecodeConfig, check_decode
from nmt.data.batching import source_batches
from nmt.device import pick_device
from nmt.errors import NmtError
from nmt.log import console
from nmt.precision import for_inference, prepare
from nmt.search.beam import Hypothesis, beam_search, greedy_search
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
    # Where the search settings come from (`Translator.load`): with --config, the loaded config's decode
    # section; without, the checkpoint's own (the beam and length penalty it was tuned with) with the user's
    # --set section.key=value strings on top. Then, either way, the dedicated options (--beam 5 -> {"beam": 5}).
    config_given: bool = True
    decode_overrides: list[str] = field(default_factory=list)
    decode_changes: dict[str, Any] = field(default_factory=dict)


@dataclass
class Translation:
    """One input line's result: n-best hypotheses (empty for an empty line) and what was fed in."""

    source: str
    src_ids: list[int]
    hypotheses: list[Hypothesis]
    text: list[str]
    truncated_from: int = 0  # the line's source tokens when they were more than max_input_tokens


class Translator:
    """A loaded model + tokenizer + default search settings (`decode`)."""

    def __init__(self, ckpt: Checkpoint, decode: DecodeConfig, *, device: str = "auto", dtype: str = "fp32",
                 quantize: str | None = None, attention_layer: int = -1):
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

    @classmethod
    def load(cls, ckpt: str | Path | Checkpoint, cfg: Config | None = None, opts: ModelOptions | None = None,
             **kwargs: Any) -> Translator:
        """The one way to open a checkpoint for translation. Search settings: `cfg.decode` when the user gave a
        config (`opts.config_given`), else those the checkpoint was trained with, with `opts.decode_overrides`
        on top; then `opts.decode_changes`. `kwargs` (attention_layer) go to the constructor."""
        opts = opts or ModelOptions(config_given=cfg is not None)
        ckpt = ckpt if isinstance(ckpt, Checkpoint) else checkpoint.load(ckpt)
        decode = cfg.decode if cfg is not None and opts.config_given else ckpt.decode_config(opts.decode_overrides)
        try:
            decode = dataclasses.replace(decode, **opts.decode_changes)
        except TypeError:
            raise NmtError(f"not search settings: {', '.join(sorted(opts.decode_changes))}") from None
        check_decode(decode)
        return cls(ckpt, decode, device=opts.device, dtype=opts.dtype, quantize=opts.quantize, **kwargs)

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

    def settings(self, **changes: Any) -> DecodeConfig:
        """The default search settings with `changes` (DecodeConfig fields) for one call."""
        return dataclasses.replace(self.decode, **changes) if changes else self.decode

    def max_src(self, **search: Any) -> int:
        """Source tokens kept per line (longer lines are truncated, with a warning)."""
        return min(self.settings(**search).max_input_tokens, self.model.max_positions - 1)

    # ---- one chunk
    def _search(self, src: torch.Tensor, need_attention: bool, d: DecodeConfig) -> list[list[Hypothesis]]:
        ids = self.special
        common = dict(max_len_a=d.max_len_a, max_len_b=d.max_len_b, bos=ids.bos, eos=ids.eos, pad=ids.pad,
                      need_attention=need_attention, attention_layer=self.attention_layer)
        penalty = dict(length_penalty=d.length_penalty, length_penalty_type=d.length_penalty_type)
        if d.beam == 1:
            return greedy_search(self.model, src, **penalty, **common)
        return beam_search(self.model, src, beam=d.beam, nbest=d.nbest, **penalty, **common)

    @functools.cached_property
    def continues_word(self) -> torch.Tensor:
        """[V] bool: target pieces that go on the word before them (no leading "▁", a letter or digit first); built
        when a glossary first needs it, not at load."""
        pieces = self.tokenizer.tgt_pieces(list(range(self.tokenizer.tgt_vocab_size)))
        return torch.tensor([not p.startswith("\u2581") and p[:1].isalnum() for p in pieces])

    @torch.inference_mode()
    def translate_chunk(self, lines: list[str], *, first_line: int = 1, need_attention: bool = False,
                        glossary: Glossary | None = None, **search: Any) -> list[Translation]:
        """Translate a list of lines; results come back in input order. `search`: DecodeConfig fields that
        differ for this call (beam=4, nbest=4, ...). `glossary`: terms the translations must hold
        (nmt.translation.glossary)."""
        decode = self.settings(**search)
        prefix, max_src = self.prefix_ids(decode.prefix), self.max_src(**search)
        sources = list(lines)
        ids = [prefix + seq for seq in self.tokenizer.encode_src(sources)]  # cleaned like the training data
        results = [Translation(s, seq[:max_src], [], [""], len(seq) if len(seq) > max_src else 0)
                   for s, seq in zip(sources, ids)]
        for i, r in enumerate(results):
            if r.truncated_from:
                self.warn(f"input line {first_line + i}: {r.truncated_from} tokens, truncated to {max_src}")
        ids = [r.src_ids for r in results]
        todo = [i for i, seq in enumerate(ids) if len(seq) > len(prefix)]  # an empty line stays empty
        if not todo:
            return results
        for positions, batch in source_batches([ids[i] for i in todo], decode.max_tokens, self.special):
            rows = [todo[j] for j in positions]
            # a glossary places terms on the words aligned to their source words: the search's own attention
            found = self._search(batch.src.to(self.device), need_attention or bool(glossary), decode)
            for r, hyps in zip(rows, found):
                results[r].hypotheses = hyps
                results[r].text = self.tokenizer.decode_tgt([h.tokens for h in hyps])
        if glossary:
            terminology.obey(self, results, glossary, need_attention, decode)
        return results

    def stream(self, lines: Iterable[str], *, need_attention: bool = False,
               waiting: Callable[[], bool] = lambda: True, glossary: Glossary | None = None,
               **search: Any) -> Iterator[Translation]:
        """Translate an iterable of lines chunk by chunk (bounded memory). A chunk is cut early when
        `waiting()` says no further line is there yet: what has arrived is answered now, never held back
        waiting for more (an interactive user, a pipe that sends a line and waits). `search` as for
        translate_chunk."""
        chunk: list[str] = []
        first, chunk_lines = 1, self.settings(**search).chunk_lines
        for line in lines:
            chunk.append(line)
            if len(chunk) >= chunk_lines or not waiting():
                yield from self.translate_chunk(chunk, first_line=first, need_attention=need_attention,
                                                glossary=glossary, **search)
                first += len(chunk)
                chunk = []
        if chunk:
            yield from self.translate_chunk(chunk, first_line=first, need_attention=need_attention,
                                                glossary=glossary, **search)
