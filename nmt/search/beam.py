"""Beam search as a strategy of nmt.search.loop: each step scores beam x V continuations per sentence by cumulative
log-probability and keeps the best 2*beam (`best_continuations`, fairseq's BeamSearch.step). EOS candidates among the
top `beam` become finished hypotheses, scored with the length penalty; the best `beam` non-EOS candidates continue.
A sentence is done by the one stop rule (nmt.search.scoring.cannot_improve) or at its length limit, where EOS is
forced on every beam; its rows then leave the batch and the cache. With beam=1 this is not quite greedy search: a
hypothesis may go on past an EOS it could beat. The cache learns each step's outcome from one
`cache.reorder(sentences kept, parent beams)`; a `trace` callback receives each step's candidates and what became of
them (a BeamStep: `nmt explain` draws them).

Rows: step 0 runs one row per sentence (all beams would hold the same empty prefix); its reorder widens each
sentence to `beam` rows. Row n * beams + k is beam k of the n-th sentence still searching."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from nmt.kernels import top_k_rows
from nmt.search.scoring import Hypothesis, Move, cannot_improve, length_normalized
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
    the N sentences. They are among the best k tokens of each of its rows: take those per row, add the
    row's score, and keep the best k of the beams x k."""
    V = logprobs.size(-1)
    if V < k:  # tiny vocabulary: fill up with impossible candidates (of a real token id)
        logprobs = F.pad(logprobs, (0, k - V), value=float("-inf"))
    row_logprobs, row_tokens = top_k_rows(logprobs, k)
    row_tokens.clamp_(max=V - 1)
    N = scores.numel() // beams
    best, index = (row_logprobs + scores[:, None]).view(N, beams * k).topk(k, dim=1)
    return Candidates(best, index.div(k, rounding_mode="floor"), row_tokens.view(N, beams * k).gather(1, index))


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


class Finished:
    """Each sentence's finished hypotheses: its best `beam` (best first) and, once it has that many, the
    score a new one has to beat (`worst` [B], -inf before)."""

    def __init__(self, sentences: int, beam: int, alpha: float, kind: str, src_len: list[int], device: torch.device):
        self.hypotheses: list[list[Hypothesis]] = [[] for _ in range(sentences)]
        self.worst = torch.full((sentences,), float("-inf"), device=device)
        self.beam, self.alpha, self.kind, self.src_len = beam, alpha, kind, src_len

    def add(self, sentences: list[int], logprobs: list[float], prefixes: list[list[int]],
            attention: Tensor | None) -> None:
        """Hypotheses ending (with EOS) at this step: their prefixes, total log-probabilities and, when
        wanted, attention [n, len + 1, S] (CPU)."""
        for i, (s, logprob, prefix) in enumerate(zip(sentences, logprobs, prefixes, strict=True)):
            score = length_normalized(logprob, len(prefix) + 1, self.alpha, self.kind)
            self.hypotheses[s].append(Hypothesis(
                tokens=prefix, score=score, logprob=logprob,
                attention=attention[i, :, : self.src_len[s]].clone() if attention is not None else None,
            ))
        for s in set(sentences):
            self.hypotheses[s] = sorted(self.hypotheses[s], key=lambda h: h.score, reverse=True)[: self.beam]
            if len(self.hypotheses[s]) == self.beam:
                self.worst[s] = self.hypotheses[s][-1].score


class Beam:
    def __init__(self, src: Tensor, limit: Tensor, settings: SearchSettings, eos: int, pad: int,
                 trace: Callable[[BeamStep], None] | None = None):
        B, S = src.shape
        T = int(limit.max())
        device, s = src.device, settings
        self.settings, self.limit, self.eos, self.trace, self.K = settings, limit, eos, trace, settings.beam
        self.sentence = torch.arange(B, device=device)  # the sentence of each group still searching
        self.scores = torch.zeros(B, device=device)  # cumulative log-probability of each row
        self.history = src.new_full((B, T + 1), pad)  # tokens emitted so far by each row
        self.attn = torch.zeros(B, T + 1, S, device=device) if s.need_attention else None
        self.finished = Finished(B, self.K, s.length_penalty, s.length_penalty_type, src.ne(pad).sum(dim=1).tolist(),
                                 device)

    def beams(self, t: int) -> int:
        """Rows per sentence at step t."""
        return 1 if t == 0 else self.K

    def at_limit(self, t: int) -> Tensor:
        return (t >= self.limit[self.sentence]).repeat_interleave(self.beams(t))

    def step(self, t: int, logprobs: Tensor, step_attn: Tensor | None) -> Move | None:
        """The beam rule for step t; None when every sentence is done."""
        K, beams, sentence, s = self.K, self.beams(t), self.sentence, self.settings
        top = best_continuations(logprobs, self.scores, beams, 2 * K)
        top_rows = top.parents + torch.arange(sentence.numel(), device=sentence.device)[:, None] * beams  # [N, 2K]
        is_eos = top.tokens.eq(self.eos)
        ending = is_eos[:, :K] & top.scores[:, :K].isfinite()
        if bool(ending.any()):
            self._finish(t, ending, top, top_rows, step_attn)
        # The best K non-EOS candidates of each sentence (a stable sort keeps their rank order).
        continuing = is_eos.to(torch.int8).sort(dim=1, stable=True).indices[:, :K]
        best_active = top.scores.gather(1, continuing[:, :1]).squeeze(1)
        done = (t >= self.limit[sentence]) | cannot_improve(self.finished.worst[sentence], best_active, t + 1,
                                                            s.length_penalty, s.length_penalty_type)
        if self.trace is not None:
            self.trace(_beam_step(t, sentence, top, ending, continuing, done))
        if bool(done.all()):
            return None
        keep = (~done).nonzero().squeeze(1) if bool(done.any()) else None  # None: every sentence goes on
        if keep is not None:
            top, top_rows, continuing = top.select(keep), top_rows[keep], continuing[keep]
            self.sentence = sentence[keep]
        rows = top_rows.gather(1, continuing).flatten()
        tokens = top.tokens.gather(1, continuing).flatten()
        self.scores = top.scores.gather(1, continuing).flatten()
        self._extend(rows, t, tokens, step_attn)
        return Move(tokens, keep, top.parents.gather(1, continuing))

    def _finish(self, t: int, ending: Tensor, top: Candidates, top_rows: Tensor, step_attn: Tensor | None) -> None:
        """The candidates `ending` [N, K] (EOS among each sentence's best K) become finished hypotheses."""
        slot, rank = ending.nonzero(as_tuple=True)
        rows = top_rows[slot, rank]
        ended_attn = None
        if self.attn is not None and step_attn is not None:
            ended_attn = torch.cat([self.attn[rows, :t], step_attn[rows, None]], dim=1).cpu()
        self.finished.add(self.sentence[slot].tolist(), top.scores[slot, rank].tolist(),
                          self.history[rows, :t].tolist(), ended_attn)

    def _extend(self, rows: Tensor, t: int, tokens: Tensor, step_attn: Tensor | None) -> None:
        """The token histories (and attention) of the rows kept, with step t's tokens (and attention) written."""
        self.history = self.history[rows]
        self.history[:, t] = tokens
        if self.attn is not None:
            self.attn = self.attn[rows]
            self.attn[:, t] = step_attn[rows]

    def results(self) -> list[list[Hypothesis]]:
        return [hyps[:self.settings.nbest] for hyps in self.finished.hypotheses]
