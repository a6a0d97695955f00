"""Beam search as a strategy of nmt.search.loop: each step scores beam x V continuations per sentence by cumulative
log-probability and keeps the best 2*beam (`best_continuations`, fairseq's BeamSearch.step). EOS candidates among the
top `beam` become finished hypotheses, scored with the length penalty; the best `beam` non-EOS candidates continue.
A sentence is done by the one stop rule (nmt.search.scoring.cannot_improve) or at its length limit, where EOS is
forced on every beam. With beam=1 this is not quite greedy search: a hypothesis may go on past an EOS it could beat.
The cache learns each step's outcome from one `cache.reorder(sentences kept, parent beams)`; a `trace` callback
receives each step's candidates and what became of them (a BeamStep: `nmt explain` draws them).

A step never waits for the device: the finished hypotheses and the token histories stay there (nmt.search.history),
and a done sentence's rows go on, scoring -inf so that they end nothing, until the loop's next poll, where the done
sentences leave the batch and the cache (`poll`: the one host wait).

Rows: step 0 runs one row per sentence (all beams would hold the same empty prefix); its reorder widens each
sentence to `beam` rows. Row n * beams + k is beam k of the n-th sentence in the batch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from nmt.kernels import top_k_beams
from nmt.search.history import Finished, History
from nmt.search.scoring import Hypothesis, Move, cannot_improve, length_penalty_divisor
from nmt.search.settings import SearchSettings


@dataclass
class Candidates:
    """The beam rule's choice for one step: each sentence's 2K best continuations, best first."""

    scores: Tensor  # [N, 2K] cumulative log-probability
    parents: Tensor  # [N, 2K] the beam (row of the sentence's group) each one continues
    tokens: Tensor  # [N, 2K] the token it appends

    def select(self, sentences: Tensor) -> Candidates:
        """The candidates of these sentences (rows) only."""
        return Candidates(self.scores[sentences], self.parents[sentences], self.tokens[sentences])


def best_continuations(logprobs: Tensor, scores: Tensor, beams: int, k: int) -> Candidates:
    """The beam rule (fairseq's BeamSearch.step): logprobs [N * beams, V] of each row's next token and
    scores [N * beams] (each row's cumulative log-probability) -> the k best continuations of each of
    the N sentences, over all its beams' rows: the k largest of each row's score plus a token's log-probability."""
    V = logprobs.size(-1)
    if V < k:  # tiny vocabulary: fill up with impossible candidates (of a real token id)
        logprobs = F.pad(logprobs, (0, k - V), value=float("-inf"))
    best, index = top_k_beams(logprobs, scores, beams, k)  # index into the sentence's [beams * V']
    width = logprobs.size(-1)
    return Candidates(best, index.div(width, rounding_mode="floor"), index.remainder(width).clamp_(max=V - 1))


class Chosen(NamedTuple):
    """What the beam rule chose at a step, tensors on the device (N sentences, K beams each)."""

    finished: Tensor  # [N, K] float64: the scores (by the length penalty) of the best K candidates that end, else -inf
    logprob: Tensor  # [N, K] the best K candidates' cumulative log-probability
    ending_rows: Tensor  # [N, K] the row (of the whole batch) each of them continues
    best: Tensor  # [N, K] float64: each sentence's K best finished scores so far
    done: Tensor  # [N] bool: the sentence's search ends here
    tokens: Tensor  # [N * K] the token each row of the next step appends
    parents: Tensor  # [N, K] the beam each row of the next step continues
    parent_rows: Tensor  # [N * K] the row of this step it continues
    scores: Tensor  # [N * K] its cumulative log-probability (-inf in a done sentence's rows)


def beam_rule(logprobs: Tensor, scores: Tensor, best: Tensor, limit: Tensor, t: int | Tensor,
              divisor: float | Tensor, beams: int, K: int, eos: int) -> tuple[Chosen, Candidates, Tensor, Tensor]:
    """One step of beam search, tensors in and out (nothing waits for the device): logprobs [N * beams, V] of each
    row's next token, scores [N * beams] each row's cumulative log-probability, best [N, K] each sentence's best
    finished scores, limit [N] its length limit, t the step, `divisor` the length penalty's at length t + 1.
    A done sentence's rows go on until the next poll takes them out, scoring -inf: they end nothing more.
    Returned with the choice, for a trace: the 2K candidates, which of the best K end, and the ranks that go on."""
    top = best_continuations(logprobs, scores, beams, 2 * K)
    first_rows = torch.arange(0, limit.numel() * beams, beams, device=top.parents.device)
    top_rows = top.parents + first_rows[:, None]  # [N, 2K] the row each candidate continues
    is_eos = top.tokens.eq(eos)
    # finite (of scores at most 0: > -inf); a done sentence's rows score -inf: none of them end
    ending = is_eos[:, :K] & top.scores[:, :K].gt(float("-inf"))
    # scored by the length penalty in float64 (the score a list of Python floats held)
    finished = torch.where(ending, top.scores[:, :K].double() / divisor, float("-inf"))
    best = torch.cat([best, finished], dim=1).topk(K, dim=1).values
    # The best K non-EOS candidates of each sentence (a stable sort keeps their rank order).
    continuing = is_eos.to(torch.int8).sort(dim=1, stable=True).indices[:, :K]
    best_active = top.scores.gather(1, continuing[:, :1]).squeeze(1)
    done = limit.le(t) | cannot_improve(best[:, -1].float(), best_active, divisor)
    next_scores = top.scores.gather(1, continuing).masked_fill(done[:, None], float("-inf")).flatten()
    tokens = top.tokens.gather(1, continuing).flatten()
    chosen = Chosen(finished, top.scores[:, :K], top_rows[:, :K], best, done, tokens, top.parents.gather(1, continuing),
                    top_rows.gather(1, continuing).flatten(), next_scores)
    return chosen, top, ending, continuing


@dataclass
class BeamStep:
    """What one step of beam search decided, for a `trace` callback (nmt/explain/command.py draws it). Row n is the
    n-th sentence still searching (`sentences[n]` its index in the batch); each has 2K candidates, best first."""

    step: int  # the output position decided (0 = the first token)
    sentences: list[int]
    parents: list[list[int]]  # the beam each candidate continues (its row in the sentence's group)
    tokens: list[list[int]]  # the token it appends
    scores: list[list[float]]  # its cumulative log-probability
    # finished: an EOS among the best K (a finished hypothesis); kept: one of the best K others, a beam of the
    # next step (in that order); stopped: would be kept, but the sentence's search ends here; pruned: the rest
    status: list[list[str]]
    done: list[bool]  # the sentence's search ends at this step


def _beam_step(t: int, sentence: Tensor, top: Candidates, ending: Tensor, continuing: Tensor,
               done: Tensor) -> BeamStep:
    """The BeamStep of this step (only built when search is traced)."""
    done_l = done.tolist()
    status = [["pruned"] * top.tokens.size(1) for _ in done_l]
    for row, rank in ending.nonzero().tolist():
        status[row][rank] = "finished"
    for row, ranks in enumerate(continuing.tolist()):
        for rank in ranks:
            status[row][rank] = "stopped" if done_l[row] else "kept"
    return BeamStep(t, sentence.tolist(), top.parents.tolist(), top.tokens.tolist(), top.scores.tolist(), status,
                    done_l)


class Beam:
    def __init__(self, src: Tensor, limit: Tensor, settings: SearchSettings, eos: int, pad: int,
                 trace: Callable[[BeamStep], None] | None = None, fixed_rows: bool = False):
        B, device, s = src.size(0), src.device, settings
        self.settings, self.eos, self.trace, self.K = settings, eos, trace, settings.beam
        self.fixed_rows = fixed_rows  # nmt.search.static: every beam from step 0, done sentences never leave
        self.poll_every = 1 if trace is not None else s.poll_interval(device)  # a trace shows each step's leavers
        self.sentence = torch.arange(B, device=device)  # the sentence of each group in the batch
        self.limit = self.row_limit = limit  # each group's length limit, and each row's
        self.scores = torch.zeros(B, device=device)  # cumulative log-probability of each row
        self.done = torch.zeros(B, dtype=torch.bool, device=device)  # each group: its search has ended
        self.finished = Finished(B, self.K, device)
        self.history = History()
        self.src_len = src.ne(pad).sum(dim=1)
        if fixed_rows:  # beams 1.. start at -inf: step 0 expands beam 0 alone, as it does with one row
            self.scores = torch.zeros(B, self.K, device=device).index_fill_(1, torch.arange(1, self.K, device=device),
                                                                            float("-inf")).flatten()
            self.row_limit = limit[:, None].expand(-1, self.K).flatten()

    @property
    def start_rows(self) -> int:
        """Rows per sentence at step 0."""
        return self.beams(0)

    def beams(self, t: int) -> int:
        """Rows per sentence at step t."""
        return 1 if t == 0 and not self.fixed_rows else self.K

    def at_limit(self, t: int) -> Tensor:
        return self.row_limit.le(t)

    def step(self, t: int, logprobs: Tensor, step_attn: Tensor | None) -> Move:
        """The beam rule for step t, on the device: nothing here waits for it."""
        s = self.settings
        chosen, top, ending, continuing = beam_rule(
            logprobs, self.scores, self.finished.best, self.limit, t,
            length_penalty_divisor(t + 1, s.length_penalty, s.length_penalty_type), self.beams(t), self.K, self.eos)
        if self.trace is not None:
            self.trace(_beam_step(t, self.sentence, top, ending, continuing, chosen.done))
        return self.take(t, chosen, step_attn)

    def take(self, t: int, chosen: Chosen, step_attn: Tensor | None) -> Move:
        """Step t's choice (beam_rule's, here or in a compiled step: nmt.search.compiled) becomes the search's state."""
        K = self.K
        self.finished.record(t, self.sentence, chosen.finished, chosen.logprob, chosen.ending_rows, chosen.best)
        self.history.add(chosen.tokens, chosen.parent_rows, step_attn)
        self.scores, self.done = chosen.scores, chosen.done
        if t == 0 and not self.fixed_rows:
            self.row_limit = self.limit[:, None].expand(-1, K).flatten()
        return Move(chosen.tokens, parents=chosen.parents)

    def poll(self, move: Move) -> Move | None:
        """The one host wait: the sentences whose search has ended leave the batch (with fixed rows they stay,
        masked). None: every one has ended."""
        if self.fixed_rows:
            return None if bool(self.done.all()) else move
        searching = (~self.done).nonzero().squeeze(1)
        if searching.numel() == self.done.numel():
            return move
        if searching.numel() == 0:
            return None
        self.sentence, self.limit, self.done = self.sentence[searching], self.limit[searching], self.done[searching]
        self.row_limit = self.limit[:, None].expand(-1, self.K).flatten()
        self.scores = self.scores.view(-1, self.K)[searching].flatten()
        self.finished.keep(searching)
        self.history.narrow(searching, self.K)
        return move.only(searching, self.K)

    def results(self) -> list[list[Hypothesis]]:
        src_len = self.src_len.tolist()
        return [[Hypothesis(self.history.output(step, row), score, logprob,
                            self.history.attention_rows(step, row, src_len[b]))
                 for score, logprob, step, row in ranked]
                for b, ranked in enumerate(self.finished.ranked(self.settings.nbest))]
