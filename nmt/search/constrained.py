"""Lexically constrained beam search (Post & Vilar 2018, "dynamic beam allocation"): the output must contain every
term of a glossary (nmt.translation.glossary), each given as one or more alternative token sequences.

A strategy of nmt.search.loop, one sentence at a time (src [1, S]). Each step, for every beam:
- candidates: its `beam` best next tokens, plus the token that continues the term it is writing or, when it is in
  none, the first token of every term it has not met (so a term can always be started where the model likes it);
- state: the terms met and how far into one it is; a token that leaves a half-written term resets that progress;
  a term must end a word (a met "▁Hund" followed by "e" is unmet again: "Hunde" is another word), unless it ends in
  a script without spaces (`ends_word` False: Chinese, Japanese);
- EOS only once every term is met, except at the length limit, where EOS is forced as in nmt.search.beam.
Forcing a term costs log-probability for a few steps, so the beams would drop it at once: the beam is shared out
between "banks" of equal progress (tokens of terms written), the best of each bank in turn, most progress first.
Finished hypotheses are ranked by the length-normalized score and the search stops by the one stop rule
(nmt.search.scoring.cannot_improve), at the limit, or past `SearchSettings.deadline`. A hypothesis ended at the limit
without all its terms comes after every one that met them all (n-best lists stay full). The beam widens with the
terms (beam x (terms + 1), at most 32): each bank of progress needs room."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from nmt.search.scoring import Hypothesis, Move, cannot_improve, length_normalized, length_penalty_divisor
from nmt.search.settings import SearchSettings

Constraint = list[list[int]]  # one term: its alternative token sequences


@dataclass
class Terms:
    """The constraints of one sentence: each term's alternative token sequences, which target tokens do not start a
    word (`continues_word` [V] bool), and which terms must end a word (`ends_word`, default: all; see `advance`)."""

    sequences: list[Constraint]
    continues_word: Tensor
    ends_word: list[bool] | None = None
    initial: frozenset[tuple[int, int]] = frozenset()  # (term, alternative)s that may only begin the output

    def later(self) -> list[Constraint]:
        """The sequences a term may begin with after the first output token: each `initial` alternative (a
        capitalised form, for a sentence's first word) made impossible, so indices stay."""
        return [[[-1] if (c, a) in self.initial else seq for a, seq in enumerate(alts)]
                for c, alts in enumerate(self.sequences)]


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
            ends_word: list[bool] | None = None, startable: list[Constraint] | None = None) -> State:
    """The state after appending `token` (`continues_word`: it does not start a new word); `ends_word[c]`: term c
    must end a word (default: every term); `startable`: the alternatives a term may begin with here (default:
    `constraints`; an alternative that may not begin here is an impossible sequence in it)."""
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
    for c, alternatives in enumerate(startable or constraints):
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


def wanted(state: State, constraints: list[Constraint], startable: list[Constraint] | None = None) -> set[int]:
    """The tokens that make progress: the next of the term being written, else the first of each unmet term (of
    its `startable` alternatives, as for `advance`)."""
    if state.term >= 0:
        return {constraints[state.term][state.alt][state.k]}
    return {seq[0] for c, alts in enumerate(startable or constraints) if c not in state.met for seq in alts
            if seq[0] >= 0}


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


class Constrained:
    def __init__(self, src: Tensor, limit: Tensor, settings: SearchSettings, eos: int, terms: Terms):
        if src.size(0) != 1:
            raise ValueError(f"constrained search takes one sentence at a time, got {src.size(0)}")
        self.settings, self.eos, self.terms, self.device = settings, eos, terms, src.device
        self.limit = int(limit[0])
        self.width = min(settings.beam * (len(terms.sequences) + 1), max(32, settings.beam))
        self.beams = [_Beam([], 0.0, State())]
        self.finished: list[Hypothesis] = []
        self.unfinished: list[Hypothesis] = []  # ended at the limit without every term
        self.wordish = terms.continues_word.tolist()
        self.later = terms.later()
        self.poll_every = 0  # never polled: each step decides on the host (its states are Python objects)

    def at_limit(self, t: int) -> Tensor:
        return torch.full((len(self.beams),), t >= self.limit, device=self.device)

    def step(self, t: int, logprobs: Tensor, rows_attn: Tensor | None) -> Move | None:
        """Candidates, their states, the finished and the beams by dynamic beam allocation; None when done."""
        s, n_terms = self.settings, len(self.terms.sequences)
        if t < self.limit:
            incomplete = [i for i, b in enumerate(self.beams) if not b.state.complete(n_terms)]
            logprobs[incomplete, self.eos] = float("-inf")
        candidates = self._candidates(logprobs, rows_attn)
        self.finished = sorted(self.finished, key=lambda h: -h.score)[:s.beam]
        chosen = allocate(candidates, self.width) if t < self.limit else []
        worst = self.finished[-1].score if len(self.finished) >= s.beam else float("-inf")
        divisor = length_penalty_divisor(t + 1, s.length_penalty, s.length_penalty_type)
        if not chosen or cannot_improve(worst, chosen[0][0], divisor):
            return None
        if s.deadline is not None and time.monotonic() > s.deadline:
            return None
        parents = [c[1] for c in chosen]
        self.beams = [_Beam(self.beams[p].tokens + [tok], score, state,
                            self.beams[p].attention + ([rows_attn[p].cpu()] if rows_attn is not None else []))
                      for score, p, tok, state in chosen]
        return Move(torch.tensor([c[2] for c in chosen], device=self.device), None,
                    torch.tensor([parents], device=self.device))

    def _candidates(self, logprobs: Tensor, rows_attn: Tensor | None) -> list[tuple[float, int, int, State]]:
        """Each beam's `beam` best tokens and those that make progress, as (score, parent, token, state); an EOS
        among them ends a hypothesis (finished when it met every term, else unfinished)."""
        s, terms, n_terms = self.settings, self.terms, len(self.terms.sequences)
        best = logprobs.topk(min(s.beam, logprobs.size(1)), dim=1).indices.tolist()
        candidates = []
        for i, b in enumerate(self.beams):
            startable = self.later if b.tokens else terms.sequences
            toks = sorted(set(best[i]) | wanted(b.state, terms.sequences, startable))
            for tok, lp in zip(toks, logprobs[i, toks].tolist()):
                score = b.logprob + lp
                if score == float("-inf"):
                    continue
                if tok == self.eos:
                    hyp = _ended(b, score, rows_attn, i, s.length_penalty, s.length_penalty_type)
                    (self.finished if b.state.complete(n_terms) else self.unfinished).append(hyp)
                else:
                    state = advance(b.state, tok, terms.sequences, self.wordish[tok], terms.ends_word, startable)
                    candidates.append((score, i, tok, state))
        return candidates

    def results(self) -> list[list[Hypothesis]]:
        """The sentence's n-best, those with every term first."""
        return [(self.finished + sorted(self.unfinished, key=lambda h: -h.score))[:self.settings.nbest]]


def _ended(b: _Beam, logprob: float, rows_attn: Tensor | None, i: int, alpha: float, kind: str) -> Hypothesis:
    attention = None
    if rows_attn is not None:
        attention = torch.stack(b.attention + [rows_attn[i].cpu()]).float()
    return Hypothesis(list(b.tokens), length_normalized(logprob, len(b.tokens) + 1, alpha, kind), logprob, attention)
