"""The translation core: a loaded model + tokenizer + search settings (`Translator`), used by `nmt translate`,
`nmt serve` and the benches. Lines in -> encode -> sort by length -> batch -> search -> restore order -> results.
"""

from __future__ import annotations

import copy
import dataclasses
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from nmt import checkpoint
from nmt.batching import source_batches
from nmt.config import Config, DecodeConfig, apply_dict, config_from_dict, parse_overrides
from nmt.device import cpu_bf16_pays, pick_device
from nmt.errors import CheckpointError, NmtError, first_line
from nmt.log import console
from nmt.model import Transformer, for_cpu
from nmt.search import Hypothesis, beam_search, greedy_search
from nmt.tokenizer import Tokenizer

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class ModelOptions:
    """Which checkpoint to translate with and how to run it: the options `nmt translate` and `nmt serve` share."""

    checkpoint: Path | None = None
    device: str = "auto"
    dtype: str = "auto"
    threads: int = 0
    quantize: str | None = None
    # Where the search settings come from (`search_settings`): with --config, the loaded config's decode
    # section; without, the checkpoint's own (the beam and length penalty it was tuned with) with the
    # user's decode settings (--set and options, as section.key=value) on top.
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
    """`--quantize int8`: `linears_to_int8`, the tied output projection included. That projection is the
    embedding matrix, not an nn.Linear: an int8 copy of it takes its place, as HF's lm_head and CTranslate2's
    output layer are quantized (with a 58k vocabulary it is most of a decoding step's work)."""
    head = torch.nn.Linear(model.d_model, model.output_weight.size(0), bias=model.output_bias is not None)
    with torch.no_grad():
        head.weight.copy_(model.output_weight)
        if model.output_bias is not None:
            head.bias.copy_(model.output_bias)
    model.output_layer = head
    return linears_to_int8(model)


def linears_to_int8(model: torch.nn.Module) -> torch.nn.Module:
    """PyTorch dynamic int8 quantization of every nn.Linear: weights int8 with a scale per output channel (as
    CTranslate2 quantizes), activations quantized per batch. One scale per matrix lost 0.44 BLEU on Multi30k
    test2016, one per channel 0.20. bench/translate.py quantizes HF's model with it too (equal work)."""
    quantization = getattr(torch.ao, "quantization", None)
    quantize_dynamic = getattr(quantization, "quantize_dynamic", None)
    if quantize_dynamic is None:
        raise NmtError("--quantize int8 needs torch.ao.quantization, which this torch build lacks")
    with warnings.catch_warnings():  # torch marks eager quantization deprecated in favour of torchao
        warnings.simplefilter("ignore")
        return quantize_dynamic(model, {torch.nn.Linear: quantization.per_channel_dynamic_qconfig}, dtype=torch.qint8)


def auto_dtype(device: torch.device, quantize: str | None, d_model: int) -> str:
    """--dtype auto: bf16 where it pays on CPU, as for training (`cpu_bf16_pays`: native bf16 and d_model >= 256;
    base-size decoding 1.9x faster at batch 32); fp32 for smaller models (the d128 Multi30k model: bf16 1.12x
    faster offline but 0.75-0.85x in nmt serve's batches of <= 32 sentences, and BLEU -0.15), on CUDA (for
    now) and under --quantize (int8 wants fp32)."""
    return "bf16" if device.type == "cpu" and quantize is None and cpu_bf16_pays(d_model) else "fp32"


class Translator:
    """A loaded model + tokenizer + search settings."""

    def __init__(self, state: dict[str, Any], decode: DecodeConfig, *, device: str = "auto",
                 dtype: str = "fp32", quantize: str | None = None, attention_layer: int = -1):
        if dtype not in (*DTYPES, "auto"):
            raise NmtError(f"--dtype must be one of auto, {', '.join(DTYPES)}, got '{dtype}'")
        self.device = pick_device(device, "--device")
        model_config = config_from_dict(state["config"]).model
        if dtype == "auto":
            dtype = auto_dtype(self.device, quantize, model_config.d_model)
        self.dtype, self.quantize = dtype, quantize
        if dtype == "fp16" and self.device.type != "cuda":
            raise NmtError("--dtype fp16 needs a CUDA device (use bf16 or fp32 on CPU)")
        self.decode = decode
        self.tokenizer = Tokenizer.from_state(state["tokenizer"])
        self.special = self.tokenizer.special_ids
        self.model = load_model(state, self.tokenizer, self.device, DTYPES[dtype])
        if quantize is not None:
            self._quantize(quantize)
        elif self.device.type == "cpu":  # Linear layers and output projection through oneDNN, weights prepacked
            for_cpu(self.model, pack=True)
        self.prefix = self._prefix_id(decode.prefix)
        layers = model_config.decoder_layers
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

    def with_decode(self, **changes: Any) -> Translator:
        """The same loaded model and tokenizer with other search settings (e.g. beam=4): a shallow copy whose
        DecodeConfig is a replaced copy, so this one's is never mutated."""
        view = copy.copy(self)
        view.decode = dataclasses.replace(self.decode, **changes)
        view.prefix = view._prefix_id(view.decode.prefix)
        return view

    @property
    def precision(self) -> str:
        """e.g. 'fp32', 'fp32 with int8 weights' (for the start-up line)."""
        return self.dtype + (" with int8 weights" if self.quantize else "")

    @property
    def max_src(self) -> int:
        """Source tokens kept per line (longer lines are truncated, with a warning)."""
        return min(self.decode.max_input_tokens, self.model.max_positions - 1)

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


def search_settings(cfg: Config, opts: ModelOptions, state: dict[str, Any], ckpt: Path) -> DecodeConfig:
    """The decode settings to translate with: the config's with --config, else the checkpoint's own + overrides."""
    return cfg.decode if opts.config_given else checkpoint_decode(state, opts.decode_overrides, ckpt)


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
