"""What greedy and beam search keep on the device while they run, read by the host once, at the end, so that no step
waits for the device (nmt.search.loop polls for finished sentences every few steps instead).

- History: per step, the token each row of the next step appends and the row of this step it continues (its
  parent), and, when wanted, each row's attention. A hypothesis's tokens are read back along these links from the row
  it ended on (back-pointers, as Marian and OpenNMT-py keep them): no token history is copied while searching.
- Finished: each beam step's hypotheses that ended with EOS (score, log-probability, the row they ended on), logged
  as they are, and each sentence's `beam` best scores so far, merged on the device: all the stop rule reads
  (nmt.search.scoring.cannot_improve). The n best are picked at the end among all that ended: the same hypotheses,
  in the same order, as a list cut to the best `beam` at every step held (a hypothesis that falls out of the best
  `beam` never comes back: those ahead of it stay ahead).

Rows: row i of step t is the i-th row decoded at step t. Between the host's polls a finished sentence keeps its rows
(masked); at a poll they leave, and `narrow` keeps the last step's links of the rows that stay."""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate

import torch
from torch import Tensor


class History:
    def __init__(self) -> None:
        # Step t's entries: the token each row of step t + 1 appended, the row of step t it continues (None: row i
        # continues row i), and, when wanted, each row of step t's attention [rows, S].
        self.tokens: list[Tensor] = []
        self.parents: list[Tensor | None] = []
        self.attention: list[Tensor] = []
        self._host: tuple[list[list[int]], list[list[int] | None]] | None = None  # tokens and parents, read
        self._attention: tuple[Tensor, list[int]] | None = None  # every step's in one tensor, and each step's first

    def add(self, tokens: Tensor, parents: Tensor | None, attention: Tensor | None) -> None:
        self.tokens.append(tokens)
        self.parents.append(parents)
        if attention is not None:
            self.attention.append(attention)

    def narrow(self, keep: Tensor, group: int) -> None:
        """Only the groups (sentences) `keep` of the last step's rows go on, `group` rows each."""
        rows = (keep[:, None] * group + torch.arange(group, device=keep.device)).flatten()
        self.tokens[-1] = self.tokens[-1][rows]
        self.parents[-1] = rows if self.parents[-1] is None else self.parents[-1][rows]

    def rows(self, step: int, row: int) -> list[int]:
        """The row at each step 0..step of the hypothesis that is `row` at `step`, read back along the parents."""
        parents = self._on_host()[1]
        rows = [row]
        for links in reversed(parents[:step]):
            row = row if links is None else links[row]
            rows.append(row)
        return rows[::-1]

    def output(self, step: int, row: int) -> list[int]:
        """The tokens written before `row` at `step` (a hypothesis ending there: all but its EOS)."""
        tokens, path = self._on_host()[0], self.rows(step, row)
        return [tokens[s][path[s + 1]] for s in range(step)]

    def attention_rows(self, step: int, row: int, src_len: int) -> Tensor | None:
        """Attention [step + 1, src_len] on the CPU of the hypothesis that is `row` at `step`: row s is step s's."""
        if not self.attention:
            return None
        if self._attention is None:
            starts = list(accumulate((a.size(0) for a in self.attention), initial=0))
            self._attention = torch.cat(self.attention), starts
        every, starts = self._attention
        return every[[starts[s] + r for s, r in enumerate(self.rows(step, row))], :src_len].cpu()

    def _on_host(self) -> tuple[list[list[int]], list[list[int] | None]]:
        """Tokens and parents as lists: one copy of all of them, once."""
        if self._host is None:
            linked = [p for p in self.parents if p is not None]
            parts = iter(split(torch.cat([*self.tokens, *linked]).tolist(), [t.numel() for t in self.tokens + linked]))
            tokens = [next(parts) for _ in self.tokens]
            self._host = tokens, [None if p is None else next(parts) for p in self.parents]
        return self._host


def split(flat: list, sizes: list[int]) -> list[list]:
    """`flat` cut into consecutive parts of these sizes."""
    starts = list(accumulate(sizes, initial=0))
    return [flat[a:b] for a, b in zip(starts, starts[1:])]


def entries(index: list[int], sizes: list[int]) -> list[tuple[int, int]]:
    """(entry, position in it) of each of these indices into the concatenation of entries of these sizes."""
    starts = list(accumulate(sizes, initial=0))
    found = [bisect_right(starts, i) - 1 for i in index]
    return [(e, i - starts[e]) for e, i in zip(found, index, strict=True)]


class Finished:
    """Beam search's finished hypotheses: each step's, logged, and each sentence's `beam` best scores."""

    def __init__(self, sentences: int, beam: int, device: torch.device):
        self.sentences = sentences
        self.best = torch.full((sentences, beam), float("-inf"), dtype=torch.float64, device=device)
        self.log: list[tuple[int, Tensor, Tensor, Tensor, Tensor]] = []  # (step, sentence, score, logprob, row)

    def record(self, t: int, sentence: Tensor, score: Tensor, logprob: Tensor, rows: Tensor, best: Tensor) -> None:
        """Step t's candidates logprob [N, K] (cumulative log-probability, EOS included) on rows [N, K] of the
        sentences `sentence` [N], scored `score` by the length penalty where they finish (-inf where they do not),
        and each sentence's best scores after them (nmt.search.beam.beam_rule computes both)."""
        self.best = best
        self.log.append((t, sentence, score, logprob, rows))

    def keep(self, sentences: Tensor) -> None:
        """Only these sentences go on searching."""
        self.best = self.best[sentences]

    def ranked(self, n: int) -> list[list[tuple[float, float, int, int]]]:
        """Each sentence's n best (score, logprob, step, row), best first; among equal scores the earlier one."""
        each: list[list[tuple[float, float, int, int]]] = [[] for _ in range(self.sentences)]
        if not self.log:
            return each
        steps, sentences, scores, logprobs, rows = zip(*self.log, strict=True)
        score = torch.cat(scores)  # [all steps' N, K]
        columns = [score, torch.cat(logprobs).double(), torch.cat(rows).double(),
                   torch.cat(sentences).double()[:, None].expand_as(score)]
        ended = score.flatten().isfinite().nonzero().squeeze(1)
        table = torch.stack([ended.double(), *(c.flatten()[ended] for c in columns)]).tolist()  # one copy
        K = score.size(1)
        at = entries([int(i) // K for i in table[0]], [s.size(0) for s in scores])
        for (entry, _), score_, logprob, row, b in zip(at, *table[1:], strict=True):
            each[int(b)].append((score_, logprob, steps[entry], int(row)))
        return [sorted(records, key=lambda r: r[0], reverse=True)[:n] for records in each]
