"""Greedy search as a strategy of nmt.search.loop: the most likely token at every step, one row per sentence. The
length penalty only sets Hypothesis.score, so that it matches the beam rule's score of the same output.

A step never waits for the device: the tokens go to a History (nmt.search.history) and each step's EOS rows to a
log, both read once at the end, where a sentence's output is what its row wrote up to its first EOS. A row that wrote
EOS goes on (what it writes after is never read) until the loop's next poll, where it leaves the batch and the cache
(`poll`: the one host wait)."""

from __future__ import annotations

import torch
from torch import Tensor

from nmt.search.history import History, entries
from nmt.search.scoring import Hypothesis, Move, length_normalized
from nmt.search.settings import SearchSettings


class Greedy:
    start_rows = 1  # rows per sentence at step 0

    def __init__(self, src: Tensor, limit: Tensor, settings: SearchSettings, eos: int, pad: int,
                 fixed_rows: bool = False):
        B, device = src.size(0), src.device
        self.fixed_rows = fixed_rows  # nmt.search.static: a row that wrote EOS stays to the end, masked
        self.settings, self.limit, self.eos, self.src_len = settings, limit, eos, src.ne(pad).sum(dim=1)
        self.poll_every = settings.poll_interval(device)
        self.sentence = torch.arange(B, device=device)  # the sentence of each row in the batch
        self.logprob = torch.zeros(B, device=device)  # each row's cumulative log-probability
        self.ended = torch.zeros(B, dtype=torch.bool, device=device)  # each row: it has written EOS
        self.history = History()
        self.log: list[tuple[int, Tensor, Tensor, Tensor]] = []  # each step: (t, sentence, wrote EOS, logprob)

    def at_limit(self, t: int) -> Tensor:
        return self.limit.le(t)

    def step(self, t: int, logprobs: Tensor, step_attn: Tensor | None) -> Move:
        """Each row's most likely token, on the device: nothing here waits for it."""
        best, tokens = logprobs.max(dim=-1)
        self.logprob = self.logprob + best
        eos = tokens.eq(self.eos)
        self.ended = self.ended | eos
        self.history.add(tokens, None, step_attn)
        self.log.append((t, self.sentence, eos, self.logprob))
        return Move(tokens)

    def poll(self, move: Move) -> Move | None:
        """The one host wait: the rows that have written EOS leave the batch (with fixed rows they stay). None: every
        one has."""
        if self.fixed_rows:
            return None if bool(self.ended.all()) else move
        searching = (~self.ended).nonzero().squeeze(1)
        if searching.numel() == self.ended.numel():
            return move
        if searching.numel() == 0:
            return None
        self.sentence, self.limit = self.sentence[searching], self.limit[searching]
        self.logprob, self.ended = self.logprob[searching], self.ended[searching]
        self.history.narrow(searching, 1)
        return move.only(searching, 1)

    def results(self) -> list[list[Hypothesis]]:
        s, src_len, ends = self.settings, self.src_len.tolist(), self._first_eos()
        return [[Hypothesis(
            tokens=self.history.output(step, row),
            score=length_normalized(logprob, step + 1, s.length_penalty, s.length_penalty_type),
            logprob=logprob,
            attention=self.history.attention_rows(step, row, src_len[b]),
        )] for b, (step, row, logprob) in enumerate(ends)]

    def _first_eos(self) -> list[tuple[int, int, float]]:
        """Each sentence's first EOS: (step, row, cumulative log-probability). Every row writes one by its limit."""
        steps, sentences, eos, logprobs = zip(*self.log, strict=True)
        wrote = torch.cat(eos).nonzero().squeeze(1)
        table = torch.stack([wrote.double(), torch.cat(sentences)[wrote].double(),  # one copy to the host
                             torch.cat(logprobs)[wrote].double()]).tolist()
        first: dict[int, tuple[int, int, float]] = {}
        at = entries([int(i) for i in table[0]], [len(b) for b in sentences])
        for (entry, row), b, logprob in zip(at, *table[1:], strict=True):
            first.setdefault(int(b), (steps[entry], row, logprob))
        return [first[b] for b in range(len(self.src_len))]
