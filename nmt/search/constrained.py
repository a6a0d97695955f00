"""Lexically constrained beam search (Post & Vilar 2018, "dynamic beam allocation"): the output must contain every
term of a glossary (nmt.translation.glossary), each given as one or more alternative token sequences.

One sentence at a time (src [1, S]), over the same model interface as nmt.search.beam. Each step, for every beam:
- candidates: its `beam` best next tokens, plus the token that continues the term it is writing or, when it is in
  none, the first token of every term it has not met (so a term can always be started where the model likes it);
- state: the terms met and how far into one it is; a token that leaves a half-written term resets that progress;
  a term must end a word (a met "▁Hund" followed by "e" is unmet again: "Hunde" is another word), unless it ends in
  a script without spaces (`ends_word` False: Chinese, Japanese);
- EOS only once every term is met, except at the length limit, where EOS is forced as in nmt.search.beam.
Forcing a term costs log-probability for a few steps, so the beams would drop it at once: the beam is shared out
between "banks" of equal progress (tokens of terms written), the best of each bank in turn, most progress first.
Finished hypotheses are ranked by the length-normalized score and the search stops as beam_search does (`beam`
finished that the best active one cannot beat, or the limit). A hypothesis ended at the limit without all its
terms comes after every one that met them all (n-best lists stay full)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F
from torch import Tensor

from nmt.search.beam import Hypothesis, length_normalized, max_lengths, step_attention, step_log_probs

Constraint = list[list[int]]  # one term: its alternative token sequences


@dataclass(frozen=True)
class State:
    """A hypothesis's progress through the terms."""

    met: frozenset[int] = frozenset()
    term: int = -1  # the term being written (-1: none), by alternative `alt`, `k` tokens of it so far
    alt: int = 0
    k: int = 0
    just_met: int = -1  # the term the last token completed: unmet again if the next token continues the word
    just_len: int = 0  # its tokens
    progress: int = 0  # tokens of met terms + k: the bank

    def complete(self, n_terms: int) -> bool:
        return len(self.met) == n_terms and self.term < 0


def advance(state: State, token: int, constraints: list[Constraint], continues_word: bool,
            ends_word: list[bool] | None = None) -> State:
    """The state after appending `token` (`continues_word`: it does not start a new word); `ends_word[c]`: term c
    must end a word (default: every term)."""
    met, progress = state.met, state.progress
    if state.just_met >= 0 and continues_word:
        met, progress = met - {state.just_met}, progress - state.just_len
    if state.term >= 0:
        seq = constraints[state.term][state.alt]
        if token == seq[state.k]:
            if state.k + 1 == len(seq):
                return _met(met, state.term, len(seq), progress + 1, ends_word)
            return replace(state, met=met, k=state.k + 1, just_met=-1, progress=progress + 1)
        progress -= state.k  # left the term half-written
    for c, alternatives in enumerate(constraints):
        if c in met:
            continue
        for a, seq in enumerate(alternatives):
            if token == seq[0]:
                if len(seq) == 1:
                    return _met(met, c, 1, progress + 1, ends_word)
                return State(met, term=c, alt=a, k=1, progress=progress + 1)
    return State(met, progress=progress)


def _met(met: frozenset[int], term: int, length: int, progress: int, ends_word: list[bool] | None) -> State:
    """Term `term` (of `length` tokens) just met: watched for a word boundary when it must end a word."""
    if ends_word is None or ends_word[term]:
        return State(met | {term}, just_met=term, just_len=length, progress=progress)
    return State(met | {term}, progress=progress)


def wanted(state: State, constraints: list[Constraint]) -> set[int]:
    """The tokens that make progress: the next of the term being written, else the first of each unmet term."""
    if state.term >= 0:
        return {constraints[state.term][state.alt][state.k]}
    return {seq[0] for c, alts in enumerate(constraints) if c not in state.met for seq in alts}


@dataclass
class _Beam:
    tokens: list[int]
    logprob: float
    state: State
    attention: list[Tensor] = field(default_factory=list)  # [S] per step, when wanted


def allocate(candidates: list[tuple[float, int, int, State]], width: int) -> list[tuple[float, int, int, State]]:
    """Dynamic beam allocation: candidates (score, parent, token, state) grouped in banks by progress, then the best
    of each bank in turn, most progress first, until `width` are chosen."""
    banks: dict[int, list[tuple[float, int, int, State]]] = {}
    for c in sorted(candidates, key=lambda c: -c[0]):
        banks.setdefault(c[3].progress, []).append(c)
    order = [banks[p] for p in sorted(banks, reverse=True)]
    chosen: list[tuple[float, int, int, State]] = []
    rank = 0
    while len(chosen) < width and any(len(bank) > rank for bank in order):
        chosen.extend(bank[rank] for bank in order if len(bank) > rank)
        rank += 1
    return sorted(chosen[:width], key=lambda c: -c[0])


@torch.no_grad()
def constrained_search(model, src: Tensor, constraints: list[Constraint], continues_word: Tensor, *, bos: int,
                       eos: int, pad: int, beam: int = 5, nbest: int = 1, length_penalty: float = 0.6,
                       length_penalty_type: str = "gnmt", max_len_a: float = 1.0, max_len_b: int = 50,
                       need_attention: bool = False, attention_layer: int = -1,
                       ends_word: list[bool] | None = None, deadline: float | None = None) -> list[Hypothesis]:
    """The `nbest` best hypotheses of the one sentence src [1, S] that contain every constraint (see the module
    docstring). `continues_word` [V] bool: tokens that do not start a word; `ends_word`: as for `advance`. The beam
    widens with the terms (beam x (terms + 1), at most 32): each bank of progress needs room."""
    width = min(beam * (len(constraints) + 1), max(32, beam))
    limit = int(max_lengths(model, src, pad, max_len_a, max_len_b)[0])
    memory, src_pad_mask = model.encode(src)
    cache = model.init_cache(memory, src_pad_mask, limit + 1)
    beams = [_Beam([], 0.0, State())]
    tokens = src.new_full((1,), bos)
    finished: list[Hypothesis] = []
    unfinished: list[Hypothesis] = []  # ended at the limit without every term
    wordish = continues_word.tolist()
    for t in range(limit + 1):
        logits, step_attn = model.decode_step(tokens, cache, need_attention)
        at_limit = torch.full((len(beams),), t >= limit, device=src.device)
        logprobs = step_log_probs(logits, at_limit, bos, eos, pad)
        rows_attn = step_attention(step_attn, attention_layer)
        if t < limit:
            incomplete = [i for i, b in enumerate(beams) if not b.state.complete(len(constraints))]
            logprobs[incomplete, eos] = float("-inf")
        best = logprobs.topk(min(beam, logprobs.size(1)), dim=1).indices.tolist()
        candidates = []
        for i, b in enumerate(beams):
            toks = sorted(set(best[i]) | wanted(b.state, constraints))
            for tok, lp in zip(toks, logprobs[i, toks].tolist()):
                score = b.logprob + lp
                if score == float("-inf"):
                    continue
                if tok == eos:
                    hyp = _ended(b, score, rows_attn, i, length_penalty, length_penalty_type)
                    (finished if b.state.complete(len(constraints)) else unfinished).append(hyp)
                else:
                    candidates.append((score, i, tok, advance(b.state, tok, constraints, wordish[tok], ends_word)))
        finished = sorted(finished, key=lambda h: -h.score)[:beam]
        chosen = allocate(candidates, width) if t < limit else []
        if not chosen or _cannot_improve(finished, chosen, beam, t, length_penalty, length_penalty_type):
            break
        if deadline is not None and time.monotonic() > deadline:
            break
        parents = [c[1] for c in chosen]
        beams = [_Beam(beams[p].tokens + [tok], score, state,
                       beams[p].attention + ([rows_attn[p].cpu()] if rows_attn is not None else []))
                 for score, p, tok, state in chosen]
        cache.reorder(src.new_zeros(1), parents=torch.tensor([parents], device=src.device))
        tokens = torch.tensor([c[2] for c in chosen], device=src.device)
    return (finished + sorted(unfinished, key=lambda h: -h.score))[:nbest]  # those with every term first


def _ended(b: _Beam, logprob: float, rows_attn: Tensor | None, i: int, alpha: float, kind: str) -> Hypothesis:
    attention = None
    if rows_attn is not None:
        attention = torch.stack(b.attention + [rows_attn[i].cpu()]).float()
    return Hypothesis(list(b.tokens), length_normalized(logprob, len(b.tokens) + 1, alpha, kind), logprob, attention)


def _cannot_improve(finished: list[Hypothesis], chosen: list, beam: int, t: int, alpha: float, kind: str) -> bool:
    """beam_search's early stop: `beam` finished and the best active, scored at its length, does not beat the worst."""
    if len(finished) < beam:
        return False
    return length_normalized(chosen[0][0], t + 1, alpha, kind) <= finished[-1].score


@torch.no_grad()
def forced(model, src: Tensor, tokens: list[int], *, bos: int, eos: int, length_penalty: float = 0.6,
           length_penalty_type: str = "gnmt", need_attention: bool = False, attention_layer: int = -1) -> Hypothesis:
    """`tokens` (then EOS) as the output of the one sentence src [1, S], scored as the searches score a hypothesis
    (its log-probability, length-normalized), with its attention rows when asked."""
    memory, src_pad_mask = model.encode(src)
    cache = model.init_cache(memory, src_pad_mask, len(tokens) + 1)
    logprob, rows = 0.0, []
    for previous, token in zip([bos, *tokens], [*tokens, eos]):
        logits, step_attn = model.decode_step(src.new_full((1,), previous), cache, need_attention)
        logprob += float(F.log_softmax(logits[0].float(), dim=-1)[token])
        if step_attn is not None:
            rows.append(step_attention(step_attn, attention_layer)[0].cpu())
    attention = torch.stack(rows).float() if rows else None
    score = length_normalized(logprob, len(tokens) + 1, length_penalty, length_penalty_type)
    return Hypothesis(list(tokens), score, logprob, attention)
