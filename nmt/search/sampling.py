"""Sampling as a strategy of nmt.search.loop: each output token is drawn at random from the model's distribution
instead of chosen as the most likely, as fairseq's `--sampling` and CTranslate2's `sampling_topk` do. It gives the
varied outputs that back-translation and sequence-level distillation want (Edunov et al. 2018: sampled
back-translations train better models than beam ones).

Like fairseq, `beam` independent samples are drawn per sentence (`beam` 1: one sample) and the best `nbest` of them
are returned, ranked by the same length-normalized score as beam search. The distribution is narrowed the usual ways
(settings.sampling_*): divided by a temperature (below 1 sharper, above 1 flatter), cut to the `topk` most likely
tokens (0: all) and to the smallest set whose probability reaches `topp` (nucleus sampling, Holtzman et al. 2020;
1: all). A hypothesis's log-probability is the model's own (untempered), so scores compare with beam search's.

Rows: step 0 runs one row per sentence; its reorder widens each sentence to `beam` rows, one per sample, which all
continue their own history. A sample that wrote EOS is finished: its row keeps stepping (its tokens ignored) until
every sample of its sentence is finished, when the sentence's rows leave the batch and the cache. The draws come
from one torch.Generator seeded with `sampling_seed`, so a run repeats exactly; they depend on which sentences are
batched together, as fairseq's do."""

from __future__ import annotations

import torch
from torch import Tensor

from nmt.search.scoring import Hypothesis, Move, length_normalized
from nmt.search.settings import SearchSettings


def narrowed(logprobs: Tensor, topk: int, topp: float, temperature: float) -> Tensor:
    """logprobs [N, V] -> the logits to sample from: divided by `temperature`, everything outside the `topk` most
    likely tokens (0: no cut) and outside the smallest most-likely set holding `topp` of the probability
    (1: no cut) made -inf. The most likely token always stays."""
    logits = logprobs / temperature
    if 0 < topk < logits.size(-1):
        kth = logits.topk(topk, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if topp < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        before = probs.cumsum(dim=-1) - probs  # probability of the tokens ranked above each one
        cut = sorted_logits.masked_fill(before >= topp, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, cut)
    return logits


class Sample:
    def __init__(self, src: Tensor, limit: Tensor, settings: SearchSettings, eos: int, pad: int):
        B, S = src.shape
        T, n, device = int(limit.max()), settings.beam, src.device
        self.settings, self.limit, self.eos, self.pad, self.n = settings, limit, eos, pad, n
        self.src_len = src.ne(pad).sum(dim=1).tolist()
        self.sentence = torch.arange(B, device=device)  # the sentence of each group still sampling
        self.out = src.new_full((B * n, T + 1), pad)  # sample q of sentence b is row b * n + q
        self.logprob = torch.zeros(B * n, device=device)
        self.lengths = torch.full((B * n,), -1, dtype=torch.long, device=device)  # -1: not finished
        self.attn = torch.zeros(B * n, T + 1, S, device=device) if settings.need_attention else None
        self.generator = torch.Generator(device=device).manual_seed(settings.sampling_seed)
        self.poll_every = 1  # the draws depend on the rows in the batch: the same rows, the same samples

    def rows(self) -> Tensor:
        """The buffer row of each search row (after step 0: every sample of the sentences still sampling)."""
        return (self.sentence[:, None] * self.n + torch.arange(self.n, device=self.sentence.device)).flatten()

    def at_limit(self, t: int) -> Tensor:
        return (t >= self.limit[self.sentence]).repeat_interleave(1 if t == 0 else self.n)

    def step(self, t: int, logprobs: Tensor, step_attn: Tensor | None) -> Move:
        """Each row's sampled token."""
        if t == 0:  # one row per sentence so far: each of its samples draws from it
            logprobs = logprobs.repeat_interleave(self.n, dim=0)
            step_attn = step_attn.repeat_interleave(self.n, dim=0) if step_attn is not None else None
        s = self.settings
        logits = narrowed(logprobs, s.sampling_topk, s.sampling_topp, s.sampling_temperature)
        tokens = torch.multinomial(logits.softmax(dim=-1), 1, generator=self.generator).squeeze(1)
        rows = self.rows()
        active = self.lengths[rows].lt(0)
        tokens = tokens.masked_fill(~active, self.eos)  # a finished sample's row only waits for its sentence
        self.logprob[rows] += torch.where(active, logprobs.gather(1, tokens[:, None]).squeeze(1), 0.0)
        self.out[rows, t] = torch.where(active, tokens, self.out[rows, t])
        if self.attn is not None:
            self.attn[rows, t] = torch.where(active[:, None], step_attn, self.attn[rows, t])
        self.lengths[rows] = torch.where(active & tokens.eq(self.eos), t, self.lengths[rows])
        self.done = tokens.eq(self.eos).view(-1, self.n).all(dim=1)
        if t == 0:  # every sample continues the sentence's one row
            return Move(tokens, parents=torch.zeros(self.done.numel(), self.n, dtype=torch.long, device=tokens.device))
        return Move(tokens)

    def poll(self, move: Move) -> Move | None:
        """A sentence leaves once all its samples are finished. None: all are."""
        searching = (~self.done).nonzero().squeeze(1)
        if searching.numel() == self.done.numel():
            return move
        if searching.numel() == 0:
            return None
        self.sentence = self.sentence[searching]
        return move.only(searching, self.n)

    def results(self) -> list[list[Hypothesis]]:
        s = self.settings
        out_l, lp_l, len_l = self.out.tolist(), self.logprob.tolist(), self.lengths.tolist()
        attn = self.attn.cpu() if self.attn is not None else None
        results = []
        for b, src_len in enumerate(self.src_len):
            samples = [Hypothesis(
                tokens=out_l[r][: len_l[r]],
                score=length_normalized(lp_l[r], len_l[r] + 1, s.length_penalty, s.length_penalty_type),
                logprob=lp_l[r],
                attention=attn[r, : len_l[r] + 1, :src_len].clone() if attn is not None else None,
            ) for r in range(b * self.n, (b + 1) * self.n)]
            results.append(sorted(samples, key=lambda h: h.score, reverse=True)[: s.nbest])
        return results
