"""The one search loop: greedy, beam and lexically constrained search are strategies of it (fairseq's
`Search.step` and CTranslate2's `SearchStrategy` split the rule from the loop the same way). One prelude (length
limits, encode, cache), one step (the model's next-token log-probabilities, the impossible tokens masked, the
strategy's choice, the cache reordered to follow it), one ending (the strategy says when it is done).

The model is used only through `encode(src)`, `init_cache(memory, src_pad_mask, max_len)` and
`decode_step(tokens, cache, need_attention) -> (logits, attention | None)` (see nmt/model.py), plus its optional
`max_positions` attribute. `src` [B, S] already ends in EOS and is right-padded with PAD; the caller puts the model in
eval(). Rows of finished sentences leave the cache (`cache.reorder`), so the batch shrinks as sentences finish.

No step of greedy or beam search waits for the device (a GPU runs ahead of the host): which sentences are done is
asked every `strategy.poll_every` steps (`strategy.poll`, one host wait), and until then a done sentence's rows stay
in the batch, masked. Host waits that remain: two in the prelude (the longest and the shortest length limit) and a
few in the ending (the hypotheses read back); constrained search decides on the host at every step (its terms'
states are Python objects), and sampling polls at every step (its draws depend on which rows are in the batch: the
same rows as before keep a seed's samples)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from nmt.search.beam import Beam, BeamStep
from nmt.search.constrained import Constrained, Terms
from nmt.search.greedy import Greedy
from nmt.search.sampling import Sample
from nmt.search.scoring import Hypothesis, Move, max_lengths, step_attention, step_log_probs
from nmt.search.settings import SearchSettings


@torch.no_grad()
def run(model, src: Tensor, settings: SearchSettings, special: Any, *, constraints: Terms | None = None,
        trace: Callable[[BeamStep], None] | None = None) -> list[list[Hypothesis]]:
    """Per sentence of src [B, S], its `settings.nbest` best hypotheses, best first. `special`: the tokenizer's
    ids (.bos, .eos, .pad). The strategy: `constraints` (one sentence) -> constrained beam search; a `trace` -> the
    beam rule (its steps are what `trace` receives); `settings.sampling` -> sampling; beam 1 -> greedy; else the
    beam rule."""
    if src.size(0) == 0:
        return []
    limit = max_lengths(model, src, special.pad, settings.max_len_a, settings.max_len_b)
    T = int(limit.max())
    memory, src_pad_mask = model.encode(src)
    fixed = getattr(model, "fixed_rows", False)  # nmt.search.static: every row from step 0 to the end
    strategy = _strategy(src, limit, settings, special, constraints, trace, fixed)
    if fixed:
        cache = model.init_cache(memory, src_pad_mask, T + 1, rows=strategy.start_rows)
    else:
        cache = model.init_cache(memory, src_pad_mask, T + 1)
    tokens = src.new_full((src.size(0) * (strategy.start_rows if fixed else 1),), special.bos)
    first_limit = int(limit.min())  # before this step no row is at its limit: no per-step check
    every = strategy.poll_every
    # nmt.search.compiled: a whole beam step (the decoder's, the rule, the reorder) in one compiled call
    whole = getattr(model, "beam_step", None)
    whole = whole if isinstance(strategy, Beam) and strategy.trace is None and not settings.need_attention else None
    for t in range(T + 1):
        if whole is not None:
            move = whole(strategy, cache, tokens, t, settings, special)
        else:
            move = step(model, strategy, cache, tokens, t, first_limit, settings, special)
        if move is not None and every and (t + 1) % every == 0:
            move = strategy.poll(move)  # the one host wait: the sentences that are done leave the batch
        if move is None or t == T:  # every row reaches its limit, where EOS is forced, by step T
            break
        if whole is None and (move.keep is not None or move.parents is not None):  # a whole step reorders itself
            cache.reorder(move.keep, parents=move.parents)
        tokens = move.tokens
    return strategy.results()


def step(model, strategy: Any, cache: Any, tokens: Tensor, t: int, first_limit: int, settings: SearchSettings,
         special: Any) -> Move | None:
    """Search step t: the model's next-token log-probabilities after `tokens`, the impossible tokens masked, the
    strategy's choice. For greedy and beam search nothing here waits for the device."""
    logits, attention = model.decode_step(tokens, cache, settings.need_attention)
    at_limit = strategy.at_limit(t) if t >= first_limit else None
    logprobs = step_log_probs(logits, at_limit, special.bos, special.eos, special.pad,
                              too_short=t < settings.min_len)
    return strategy.step(t, logprobs, step_attention(attention, settings.attention_layer))


def _strategy(src: Tensor, limit: Tensor, settings: SearchSettings, special: Any, constraints: Terms | None,
              trace: Callable[[BeamStep], None] | None, fixed_rows: bool = False) -> Any:
    if fixed_rows and (constraints is not None or settings.sampling):
        raise ValueError("static shapes (nmt.search.static) serve greedy and beam search only")
    if constraints is not None:
        return Constrained(src, limit, settings, special.eos, constraints)
    if trace is not None:
        return Beam(src, limit, settings, special.eos, special.pad, trace, fixed_rows)
    if settings.sampling:
        return Sample(src, limit, settings, special.eos, special.pad)
    if settings.beam == 1:
        return Greedy(src, limit, settings, special.eos, special.pad, fixed_rows)
    return Beam(src, limit, settings, special.eos, special.pad, fixed_rows=fixed_rows)
