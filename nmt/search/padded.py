"""Decoders whose search steps run as whole programs over a bucket of rows: an AOTInductor package on a CPU
(nmt.search.compiled, `--compile`) or a CUDA graph on a GPU (nmt.search.graphed). Both run the same step modules
(`StepProgram`: greedy search's decoder step; `BeamStepProgram`: a whole beam step) on the same inputs, built here.

A search of N rows runs in a bucket of the next power of two (`rows_bucket`): a program's rows are fixed. Its extra
sentences are padding: token 0 against a one-position source, scores -inf, done at once, their outputs dropped."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from nmt.int8 import packed_as_inputs
from nmt.search import static
from nmt.search.beam import Beam, Chosen, beam_rule
from nmt.search.scoring import Move, impossible_tokens, length_penalty_divisor, step_logits
from nmt.search.settings import SearchSettings
from nmt.search.static import StaticCache, StaticDecoder, decoder_step, next_lineage, static_step

# a step's inputs -> its outputs (a list of tensors)
StepRunner = Callable[..., list[Tensor]]


def rows_bucket(sentences: int, per: int = 1) -> int:
    """The rows of the program that serves `sentences` sentences of `per` rows each: `per` times the next power of
    two."""
    return per << max(0, sentences - 1).bit_length()


def padded(x: Tensor, size: int, value: float, dim: int = 0) -> Tensor:
    """x along dimension `dim` up to `size`, filled with `value`, contiguous: a program reads its inputs in the
    layout it was built for and checks none (a row limit expanded from one value has stride 0)."""
    if x.size(dim) == size:
        return x.contiguous()
    return torch.cat([x, x.new_full((*x.shape[:dim], size - x.size(dim), *x.shape[dim + 1:]), value)], dim=dim)


class Program(nn.Module):
    """What a program runs of `model`. For torch.export (nmt.search.compiled) its weights are the program's
    constants, except the packed weights of its int8 layers (nmt.int8.FbgemmInt8Linear), handles to this process's
    memory, which are the program's last inputs (`*packed`, in the order of nmt.int8.fbgemm_layers); a CUDA graph
    passes none."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model


class StepProgram(Program):
    """static_step as a module: the decoder's step, its keys/values written into self_kv at pos; (logits,)."""

    def forward(self, tokens: Tensor, pos: Tensor, self_kv: Tensor, cross_kv: Tensor, memory_mask: Tensor,
                *packed: Tensor) -> tuple[Tensor]:
        with packed_as_inputs(packed):
            return (static_step(self.model, tokens, pos, self_kv, cross_kv, memory_mask)[0],)


class BeamStepProgram(Program):
    """One whole step of beam search, K beams per sentence: the decoder's step (decoder_step), the next-token
    log-probabilities (step_logits), the beam rule (beam_rule) and the cache's reorder, with nothing in between on
    the host. Its self_kv and lineage are the positions of the cache's the step reads (StaticCache.prefix): it writes
    this step's keys/values into self_kv in place, each row's into its own place, and the next step's lineage over
    the lineage (nmt.search.static.next_lineage: the reorder copies no keys or values), and returns beam_rule's
    Chosen as a tuple."""

    def __init__(self, model: nn.Module, K: int, bos: int, eos: int, pad: int):
        super().__init__(model)
        self.K, self.eos = K, eos
        self.register_buffer("impossible", impossible_tokens(model.tgt_embed.num_embeddings, bos, eos, pad))

    def forward(self, tokens: Tensor, pos: Tensor, self_kv: Tensor, cross_kv: Tensor, memory_mask: Tensor,
                lineage: Tensor, scores: Tensor, best: Tensor, limit: Tensor, row_limit: Tensor, t: Tensor,
                divisor: Tensor, min_len: Tensor, *packed: Tensor) -> tuple[Tensor, ...]:
        with packed_as_inputs(packed):
            logits, _, new = decoder_step(self.model, tokens, pos, self_kv, cross_kv, memory_mask, lineage=lineage)
        # the beam rule over logit + (score - lse): logprob + score, the log-probabilities never written
        masked, lse = step_logits(logits, row_limit.le(t), t < min_len, self.impossible)
        chosen = beam_rule(masked, scores - lse, best, limit, t, divisor, self.K, self.K, self.eos)[0]
        self_kv.index_copy_(0, pos[None], new)  # one position of each row: written in place, nothing else copied
        lineage.copy_(next_lineage(lineage, chosen.parent_rows, pos))  # in place: the positions the step read
        return tuple(chosen)


def step_program(model: nn.Module, K: int | None, special: Any) -> Program:
    """Greedy search's step (K None) or a beam step of K beams (with the tokenizer's `special` ids)."""
    return StepProgram(model) if K is None else BeamStepProgram(model, K, special.bos, special.eos, special.pad)


class PaddedCache(StaticCache):
    """A StaticCache of `bucket` rows of which the first `rows` are the search's; `lineage` [T, bucket]: where a
    beam step's rows read their positions (nmt.search.static.next_lineage)."""

    def __init__(self, self_kv: Tensor, cross_kv: Tensor, memory_mask: Tensor, rows: int):
        super().__init__(self_kv, cross_kv, memory_mask)
        self.rows = rows
        self.lineage: Tensor | None = None  # made by the first beam step: greedy needs none
        # beam_scalars': the settings they were made for, and every step's t and length penalty, and min_len
        self.scalars: tuple[tuple, tuple[Tensor, Tensor, Tensor]] | None = None

    def rows_after(self, parents: Tensor) -> Tensor:
        """The search's rows as StaticCache has them, the padding rows after them staying where they are."""
        spare = torch.arange(self.rows, self.self_kv.size(3), device=parents.device)
        return torch.cat([super().rows_after(parents), spare])


class PaddedDecoder(StaticDecoder):
    """`model` as nmt.search.loop.run uses a model, its steps run by programs of a bucket's rows: `decode_step` the
    decoder's step alone (greedy search), `beam_step` a whole beam search step. A subclass says what runs a step
    (`step_runner`)."""

    def step_runner(self, cache: PaddedCache, K: int | None, special: Any) -> StepRunner:
        """What runs a step over `cache`'s bucket: the decoder's step (K None) or a beam step of K beams."""
        raise NotImplementedError

    def init_cache(self, memory: Tensor, src_pad_mask: Tensor, max_len: int, rows: int = 1) -> PaddedCache:
        """The static cache of `rows` rows per sentence, in a bucket's rows (nmt.search.static)."""
        B, bucket = src_pad_mask.size(0), rows_bucket(src_pad_mask.size(0), rows)
        cross_kv = padded(self.cross_kv(memory), bucket // rows, 0.0, dim=2)  # [L, 2, B, H, S, Dh]
        return PaddedCache(static.self_cache(cross_kv, max_len, bucket), cross_kv,
                           padded(~src_pad_mask[:, None, None], bucket // rows, True), B * rows)

    def decode_step(self, tokens: Tensor, cache: PaddedCache, need_attention: bool = False
                    ) -> tuple[Tensor, Tensor | None]:
        if need_attention:
            raise ValueError("a compiled step gives no attention: decode with the model itself")
        self._check_room(cache)
        run = self.step_runner(cache, None, None)
        bucket = cache.self_kv.size(3)
        logits = run(padded(tokens, bucket, 0), cache.pos, cache.prefix(), cache.cross_kv, cache.memory_mask)[0]
        cache.pos += 1
        cache.step += 1
        return logits[: tokens.numel()], None

    def beam_step(self, beam: Beam, cache: PaddedCache, tokens: Tensor, t: int, settings: SearchSettings,
                  special: Any) -> Move:
        """Step t of `beam` (fixed rows, no trace, no attention) as one call of its program: the decoder's step,
        the beam rule, the cache's reorder. Its sentences are padded to the bucket's (scores -inf, done at once)."""
        self._check_room(cache)
        K, B, bucket = beam.K, beam.limit.numel(), cache.self_kv.size(3)
        run = self.step_runner(cache, K, special)
        steps, divisors, min_len = beam_scalars(cache, settings)
        if cache.lineage is None:
            cache.lineage = torch.arange(bucket, device=tokens.device).expand(cache.self_kv.size(0), -1).contiguous()
        out = run(
            padded(tokens, bucket, 0), cache.pos, cache.prefix(), cache.cross_kv, cache.memory_mask,
            cache.prefix(cache.lineage),
            padded(beam.scores, bucket, float("-inf")), padded(beam.finished.best, bucket // K, float("-inf")),
            padded(beam.limit, bucket // K, 0), padded(beam.row_limit, bucket, 0), steps[t], divisors[t], min_len)
        cache.pos += 1
        cache.step += 1
        if B * K < bucket:  # the padded sentences' part dropped
            out = [x[: B * K] if x.dim() == 1 and x.size(0) == bucket else x[:B] for x in out]
        return beam.take(t, Chosen(*out), None)


def beam_scalars(cache: PaddedCache, settings: SearchSettings) -> tuple[Tensor, Tensor, Tensor]:
    """Every step's t and length penalty divisor, and min_len, as tensors on the cache's device: made at a search's
    first step (a tensor costs ~10 us to make, and on a GPU one made from the host's values is a copy that waits),
    and kept by a cache that later searches reuse (nmt.search.graphed) while their settings are the same."""
    key = (settings.length_penalty, settings.length_penalty_type, settings.min_len)
    if cache.scalars is None or cache.scalars[0] != key:
        T, device = cache.self_kv.size(0), cache.self_kv.device
        divisors = [length_penalty_divisor(i + 1, settings.length_penalty, settings.length_penalty_type)
                    for i in range(T)]
        cache.scalars = key, (torch.arange(T, device=device),
                              torch.tensor(divisors, dtype=torch.float64, device=device),
                              torch.tensor(settings.min_len, device=device))
    return cache.scalars[1]
