"""Greedy search as a strategy of nmt.search.loop: the most likely token at every step, one row per sentence; a
sentence's row leaves the batch (and the cache) when it writes EOS. The length penalty only sets
Hypothesis.score, so that it matches the beam rule's score of the same output."""

from __future__ import annotations

import torch
from torch import Tensor

from nmt.search.scoring import Hypothesis, Move, length_normalized
from nmt.search.settings import SearchSettings


class Greedy:
    def __init__(self, src: Tensor, limit: Tensor, settings: SearchSettings, eos: int, pad: int):
        B, S = src.shape
        T = int(limit.max())
        self.settings, self.limit, self.eos, self.src = settings, limit, eos, src
        self.pad = pad
        self.rows = torch.arange(B, device=src.device)  # sentence of each active row (one row per sentence)
        self.out = src.new_full((B, T + 1), pad)
        self.logprob = torch.zeros(B, device=src.device)
        self.lengths = torch.zeros(B, dtype=torch.long, device=src.device)
        self.attn = torch.zeros(B, T + 1, S, device=src.device) if settings.need_attention else None

    def at_limit(self, t: int) -> Tensor:
        return t >= self.limit[self.rows]

    def step(self, t: int, logprobs: Tensor, step_attn: Tensor | None) -> Move | None:
        """Each row's most likely token; the rows that wrote EOS leave. None: every row has ended."""
        rows = self.rows
        best, tokens = logprobs.max(dim=-1)
        self.logprob[rows] = self.logprob[rows] + best
        self.out[rows, t] = tokens
        if self.attn is not None:
            self.attn[rows, t] = step_attn
        done = tokens.eq(self.eos)
        self.lengths[rows[done]] = t
        if bool(done.all()):
            return None
        if not bool(done.any()):
            return Move(tokens)
        keep = (~done).nonzero().squeeze(1)
        self.rows = rows[keep]
        return Move(tokens[keep], keep, torch.zeros_like(keep)[:, None])

    def results(self) -> list[list[Hypothesis]]:
        s = self.settings
        out_l, lp_l, len_l = self.out.tolist(), self.logprob.tolist(), self.lengths.tolist()
        src_len = self.src.ne(self.pad).sum(dim=1).tolist()
        attn = self.attn.cpu() if self.attn is not None else None
        return [
            [Hypothesis(
                tokens=out_l[i][: len_l[i]],
                score=length_normalized(lp_l[i], len_l[i] + 1, s.length_penalty, s.length_penalty_type),
                logprob=lp_l[i],
                attention=attn[i, : len_l[i] + 1, : src_len[i]].clone() if attn is not None else None,
            )]
            for i in range(len(out_l))
        ]
