"""Greedy and beam search over the model's incremental decoder.

The model is used only through `encode(src)`, `init_cache(memory, src_pad_mask, max_len)` and
`decode_step(tokens, cache, need_attention) -> (logits, attention | None)` (see nmt/model.py), plus its
optional `max_positions` attribute.

Both searches are batched: each step is one `decode_step` over all active rows, and the rows of
finished sentences leave the cache (`cache.reorder`), so the batch shrinks as sentences finish.
`src` [B, S] already ends in EOS and is right-padded with `pad`. The caller puts the model in eval().

Maximum output length per sentence = floor(max_len_a * src_len + max_len_b) tokens, EOS not counted,
where src_len counts the non-pad source tokens (its EOS included); capped at `max_positions - 1` so
every decoder position exists. At that length EOS is forced.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor


@dataclass
class Hypothesis:
    tokens: list[int]  # output ids, without BOS and EOS
    score: float  # logprob / length penalty: what hypotheses are ranked by
    logprob: float  # sum of the token log-probabilities, EOS included
    # Only when asked: float32 [len(tokens) + 1, src_len] on CPU, the cross-attention of decoder layer
    # `attention_layer` (default: the last) averaged over heads; row i is the step that produced output
    # token i (the last one EOS), columns are the non-pad source tokens. Each row sums to 1.
    attention: Tensor | None = None


def length_penalty_divisor(length: int, alpha: float, kind: str = "gnmt") -> float:
    """What a hypothesis's log-probability is divided by; `length` counts its tokens, EOS included.
    gnmt (Wu et al. 2016): ((5 + length) / 6) ** alpha. average: length ** alpha, the form of Hugging Face
    `generate` and Marian (alpha = 1: the mean token log-probability)."""
    if kind == "average":
        return float(length) ** alpha
    return ((5.0 + length) / 6.0) ** alpha


def length_normalized(logprob: float, length: int, alpha: float, kind: str = "gnmt") -> float:
    """A hypothesis's score: logprob / length_penalty_divisor(length, alpha, kind)."""
    return logprob / length_penalty_divisor(length, alpha, kind)


def max_lengths(model, src: Tensor, pad: int, max_len_a: float, max_len_b: int) -> Tensor:
    """Per-sentence output length limit [B] (EOS not counted)."""
    src_len = src.ne(pad).sum(dim=1)
    limit = (max_len_a * src_len.double() + max_len_b).floor().long()
    max_positions = getattr(model, "max_positions", None)
    return limit.clamp(0, max_positions - 1 if max_positions else None)


def _log_probs(logits: Tensor, at_limit: Tensor, bos: int, eos: int, pad: int) -> Tensor:
    """float32 log-probabilities [N, V] (normalised over the whole vocabulary) with PAD and BOS made
    impossible and, in rows at their length limit (at_limit [N]), everything but EOS, which keeps its
    real log-probability. One log_softmax kernel: 3x faster on CPU than logsumexp, which the search
    used to subtract from the logits instead."""
    logprobs = F.log_softmax(logits.float(), dim=-1)
    logprobs[:, pad] = float("-inf")
    logprobs[:, bos] = float("-inf")
    if bool(at_limit.any()):
        eos_logprobs = logprobs[:, eos].clone()
        logprobs[at_limit] = float("-inf")
        logprobs[:, eos] = eos_logprobs
    return logprobs


def _step_attention(attention: Tensor | None, layer: int) -> Tensor | None:
    """[L, N, H, S] from decode_step -> one layer averaged over heads [N, S]."""
    return None if attention is None else attention[layer].float().mean(dim=1)


@torch.no_grad()
def greedy_search(model, src: Tensor, *, bos: int, eos: int, pad: int, max_len_a: float = 1.0,
                  max_len_b: int = 50, need_attention: bool = False, attention_layer: int = -1,
                  length_penalty: float = 0.6, length_penalty_type: str = "gnmt") -> list[list[Hypothesis]]:
    """The most likely token at every step; one Hypothesis per sentence. The length penalty only sets
    Hypothesis.score, so that it matches beam_search(beam=1)."""
    B, S = src.shape
    if B == 0:
        return []
    limit = max_lengths(model, src, pad, max_len_a, max_len_b)
    T = int(limit.max())
    memory, src_pad_mask = model.encode(src)
    cache = model.init_cache(memory, src_pad_mask, T + 1)
    rows = torch.arange(B, device=src.device)  # sentence of each active row (one row per sentence)
    tokens = src.new_full((B,), bos)
    out = src.new_full((B, T + 1), pad)
    logprob = torch.zeros(B, device=src.device)
    lengths = torch.zeros(B, dtype=torch.long, device=src.device)
    attn = torch.zeros(B, T + 1, S, device=src.device) if need_attention else None
    for t in range(T + 1):
        logits, step_attn = model.decode_step(tokens, cache, need_attention)
        best, tokens = _log_probs(logits, t >= limit[rows], bos, eos, pad).max(dim=-1)
        logprob[rows] = logprob[rows] + best
        out[rows, t] = tokens
        if attn is not None:
            attn[rows, t] = _step_attention(step_attn, attention_layer)
        done = tokens.eq(eos)
        lengths[rows[done]] = t
        if bool(done.all()):
            break
        if bool(done.any()):
            keep = (~done).nonzero().squeeze(1)
            cache.reorder(keep, parents=torch.zeros_like(keep)[:, None])
            rows, tokens = rows[keep], tokens[keep]
    out_l, lp_l, len_l = out.tolist(), logprob.tolist(), lengths.tolist()
    src_len = src.ne(pad).sum(dim=1).tolist()
    attn = attn.cpu() if attn is not None else None
    return [
        [Hypothesis(
            tokens=out_l[i][: len_l[i]],
            score=length_normalized(lp_l[i], len_l[i] + 1, length_penalty, length_penalty_type),
            logprob=lp_l[i],
            attention=attn[i, : len_l[i] + 1, : src_len[i]].clone() if attn is not None else None,
        )]
        for i in range(B)
    ]


@dataclass
class Candidates:
    """The beam rule's choice for one step: each sentence's 2K best continuations, best first."""

    scores: Tensor  # [N, 2K] cumulative log-probability
    parents: Tensor  # [N, 2K] the beam (row of the sentence's group) each one continues
    tokens: Tensor  # [N, 2K] the token it appends


def best_continuations(logprobs: Tensor, scores: Tensor, beams: int, k: int) -> Candidates:
    """The beam rule (fairseq's BeamSearch.step): logprobs [N * beams, V] of each row's next token and
    scores [N * beams] (each row's cumulative log-probability) -> the k best continuations of each of
    the N sentences. They are among the best k tokens of each of its rows: take those per row, add the
    row's score, and keep the best k of the beams x k."""
    V = logprobs.size(-1)
    if V < k:  # tiny vocabulary: fill up with impossible candidates (of a real token id)
        logprobs = F.pad(logprobs, (0, k - V), value=float("-inf"))
    row_logprobs, row_tokens = logprobs.topk(k, dim=1)
    row_tokens.clamp_(max=V - 1)
    N = scores.numel() // beams
    best, index = (row_logprobs + scores[:, None]).view(N, beams * k).topk(k, dim=1)
    return Candidates(best, index.div(k, rounding_mode="floor"), row_tokens.view(N, beams * k).gather(1, index))


class Finished:
    """The finished hypotheses of each group of the search: its sentence's best `beam` (best first) and, once it has
    that many, the score a new one has to beat (`worst` [G], -inf before). Follows the search's groups: `select`
    when some are dropped, `extend` when groups are added, `reset` when a group takes a new sentence."""

    def __init__(self, beam: int, alpha: float, kind: str):
        self.hypotheses: list[list[Hypothesis]] = []
        self.src_len: list[int] = []
        self.worst = torch.empty(0)
        self.beam, self.alpha, self.kind = beam, alpha, kind

    def extend(self, src_len: list[int], device: torch.device) -> None:
        self.hypotheses += [[] for _ in src_len]
        self.src_len += src_len
        self.worst = torch.cat([self.worst.to(device), torch.full((len(src_len),), float("-inf"), device=device)])

    def reset(self, groups: list[int], src_len: list[int]) -> None:
        for g, n in zip(groups, src_len, strict=True):
            self.hypotheses[g], self.src_len[g] = [], n
        self.worst[groups] = float("-inf")

    def select(self, groups: list[int]) -> None:
        self.hypotheses = [self.hypotheses[g] for g in groups]
        self.src_len = [self.src_len[g] for g in groups]
        self.worst = self.worst[groups]

    def add(self, groups: list[int], logprobs: list[float], prefixes: list[list[int]],
            attention: Tensor | None) -> None:
        """Hypotheses ending (with EOS) at this step: their groups, prefixes, total log-probabilities and, when
        wanted, attention [n, >= len + 1, S] (CPU)."""
        for i, (g, logprob, prefix) in enumerate(zip(groups, logprobs, prefixes, strict=True)):
            score = length_normalized(logprob, len(prefix) + 1, self.alpha, self.kind)
            self.hypotheses[g].append(Hypothesis(
                tokens=prefix, score=score, logprob=logprob,
                attention=attention[i, : len(prefix) + 1, : self.src_len[g]].clone() if attention is not None else None,
            ))
        for g in set(groups):
            self.hypotheses[g] = sorted(self.hypotheses[g], key=lambda h: h.score, reverse=True)[: self.beam]
            if len(self.hypotheses[g]) == self.beam:
                self.worst[g] = self.hypotheses[g][-1].score


class BeamSearch:
    """Batched beam search that sentences can join between steps (in-flight batching): `add` sources with a key
    each, call `step` while `active`; each step returns the sentences it finished, as (key, their `nbest` best
    finished hypotheses, best first).

    Each step scores beam x V continuations per sentence by cumulative log-probability and keeps the best 2*beam
    (`best_continuations`). EOS candidates among the top `beam` become finished hypotheses, scored with the
    length penalty (`length_penalty_type`); the best `beam` non-EOS candidates continue. Early stop: a sentence
    is done once it has `beam` finished hypotheses and its best active beam, scored at its current length,
    cannot beat the worst of them (fairseq stops at `beam` finished alone, which with a confident model lets
    junk beams that end early crowd out the real translation), or when it reaches its length limit, where EOS
    is forced on every beam. With beam=1 this is exactly greedy search.

    Row g * rows + k is beam k of group g; a group holds one sentence (`keys[g]`) or, once its sentence is done,
    none (`keys[g]` None: a free group, its rows at score -inf). The cache learns each step's outcome from one
    `cache.reorder(groups kept, parent beams)`. A done sentence's group stays in the batch, released, for a
    sentence joining later to take without copying the cache (`cache.admit(..., into=)`); free groups are
    dropped once they are more than a quarter of the batch. Sentences added to an empty search take their first
    step with one row each (all beams would hold the same empty prefix), widened to `beam` rows by its reorder;
    sentences joining a running one come with `beam` rows at once, all but the first at score -inf, which gives
    the same candidates. Each sentence counts its own steps (`length`) and decodes exactly as if alone.
    """

    def __init__(self, model, *, bos: int, eos: int, pad: int, beam: int = 4, length_penalty: float = 0.6,
                 max_len_a: float = 1.0, max_len_b: int = 50, nbest: int = 1, need_attention: bool = False,
                 attention_layer: int = -1, length_penalty_type: str = "gnmt"):
        if beam < 1 or not 1 <= nbest <= beam:
            raise ValueError(f"need beam >= 1 and 1 <= nbest <= beam, got beam={beam}, nbest={nbest}")
        self.model, self.bos, self.eos, self.pad = model, bos, eos, pad
        self.beam, self.nbest, self.alpha, self.penalty = beam, nbest, length_penalty, length_penalty_type
        self.max_len_a, self.max_len_b = max_len_a, max_len_b
        self.need_attention, self.attention_layer = need_attention, attention_layer
        self._waiting: list[tuple[Tensor, list]] = []  # added, joining at the next step
        self._reset()

    def _reset(self) -> None:
        self.keys: list = []  # each group's sentence (the caller's key), None for a free group
        self.finished = Finished(self.beam, self.alpha, self.penalty)
        self.cache = None

    @property
    def active(self) -> int:
        """Sentences searching or waiting to join."""
        return sum(k is not None for k in self.keys) + sum(len(keys) for _, keys in self._waiting)

    def add(self, src: Tensor, keys: list) -> None:
        """Sentences src [n, S] (ending in EOS, right-padded with pad) join at the next step."""
        if len(keys) != src.size(0):
            raise ValueError(f"{len(keys)} keys for {src.size(0)} sentences")
        if keys:
            self._waiting.append((src, list(keys)))

    def step(self) -> list[tuple[object, list[Hypothesis]]]:
        """One decoder step over every sentence searching; returns the ones it finished."""
        if self._waiting:
            self._join()
        if not self.keys:
            return []
        K, rows, G = self.beam, self.rows, len(self.keys)
        logits, step_attn = self.model.decode_step(self.tokens, self.cache, self.need_attention)
        at_limit = self.length >= self.limit
        logprobs = _log_probs(logits, at_limit.repeat_interleave(rows), self.bos, self.eos, self.pad)
        top = best_continuations(logprobs, self.scores, rows, 2 * K)
        top_rows = top.parents + torch.arange(G, device=logits.device)[:, None] * rows  # [G, 2K]
        is_eos = top.tokens.eq(self.eos)
        step_attn = _step_attention(step_attn, self.attention_layer)

        ending = is_eos[:, :K] & top.scores[:, :K].isfinite()  # never in a free group: its scores are -inf
        if bool(ending.any()):
            self._finish_hypotheses(ending, top, top_rows, step_attn)

        # The best K non-EOS candidates of each sentence (a stable sort keeps their rank order).
        continuing = is_eos.to(torch.int8).sort(dim=1, stable=True).indices[:, :K]
        best_active = top.scores.gather(1, continuing[:, :1]).squeeze(1) / self._divisor(self.length + 1)
        worst = self.finished.worst
        done = (at_limit | (worst.isfinite() & worst.ge(best_active))) & self.alive
        results = []
        if bool(done.any()):
            for g in done.nonzero().squeeze(1).tolist():
                results.append((self.keys[g], self.finished.hypotheses[g][: self.nbest]))
                self.keys[g] = None
            self.alive = self.alive & ~done
        alive = int(self.alive.sum())
        if alive == 0:
            self._reset()
            return results
        if G - alive > alive // 4:  # too many free groups: drop them (one copy of the cache)
            keep = self.alive.nonzero().squeeze(1)
        else:
            keep = torch.arange(G, device=logits.device)
            if bool(done.any()):
                self.cache.release(done.nonzero().squeeze(1))
        self._advance(keep, continuing[keep], top, top_rows, step_attn)
        return results

    def _advance(self, keep: Tensor, continuing: Tensor, top: Candidates, top_rows: Tensor,
                 step_attn: Tensor | None) -> None:
        """Groups `keep` go on with their `continuing` candidates (free groups with -inf scores)."""
        K = self.beam
        self.cache.reorder(keep, parents=top.parents[keep].gather(1, continuing))
        chosen = top_rows[keep].gather(1, continuing).flatten()
        self.tokens = top.tokens[keep].gather(1, continuing).flatten()
        self.scores = top.scores[keep].gather(1, continuing).flatten()
        kept = keep.tolist()
        if len(kept) < len(self.keys):
            self.keys = [self.keys[g] for g in kept]
            self.finished.select(kept)
        self.alive, self.length, self.limit = self.alive[keep], self.length[keep], self.limit[keep]
        free_rows = (~self.alive).repeat_interleave(K)
        self.scores[free_rows] = float("-inf")
        self.length[~self.alive] = 0  # a free group writes nothing that is read: keep its position in range
        self.rows = K
        position = self.length.repeat_interleave(K)
        every = torch.arange(position.numel(), device=position.device)
        self.history = self.history[chosen]
        self.history[every, position] = self.tokens
        if self.attn is not None:
            self.attn = self.attn[chosen]
            self.attn[every, position] = step_attn[chosen]
        self.length = self.length + self.alive

    def _divisor(self, length: Tensor) -> Tensor:
        """length_penalty_divisor of each sentence's length, as float32 (what the scores are divided by)."""
        if self.penalty == "average":
            return length.double().pow(self.alpha).float()
        return ((5.0 + length.double()) / 6.0).pow(self.alpha).float()

    def _finish_hypotheses(self, ending: Tensor, top: Candidates, top_rows: Tensor, step_attn: Tensor | None) -> None:
        group, rank = ending.nonzero(as_tuple=True)
        rows = top_rows[group, rank]
        lengths = self.length[group].tolist()
        prefixes = [h[:n] for h, n in zip(self.history[rows].tolist(), lengths, strict=True)]
        ended_attn = None
        if self.attn is not None and step_attn is not None:
            ended_attn = self.attn[rows].clone()
            ended_attn[torch.arange(rows.numel()), self.length[group]] = step_attn[rows]
            ended_attn = ended_attn.cpu()
        self.finished.add(group.tolist(), top.scores[group, rank].tolist(), prefixes, ended_attn)

    def _join(self) -> None:
        """Encode the sentences waiting and take them into the search: into free groups, then as new groups."""
        width = max(src.size(1) for src, _ in self._waiting)
        src = torch.cat([F.pad(s, (0, width - s.size(1)), value=self.pad) for s, _ in self._waiting])
        keys = [k for _, ks in self._waiting for k in ks]
        self._waiting = []
        limit = max_lengths(self.model, src, self.pad, self.max_len_a, self.max_len_b)
        memory, src_pad_mask = self.model.encode(src)
        fresh = self.model.init_cache(memory, src_pad_mask, int(limit.max()) + 1)
        src_len = src.ne(self.pad).sum(dim=1).tolist()
        if not self.keys:
            self._start(src, keys, limit, fresh, src_len)
            return
        free = [g for g, k in enumerate(self.keys) if k is None][: len(keys)]
        n_new = len(keys) - len(free)
        K, device = self.beam, src.device
        T = max(self.history.size(1), int(limit.max()) + 1)
        self.history = F.pad(self.history, (0, T - self.history.size(1)), value=self.pad)
        self.history = torch.cat([self.history, self.history.new_full((n_new * K, T), self.pad)])
        if self.attn is not None:
            S = max(self.attn.size(2), width)
            self.attn = F.pad(self.attn, (0, S - self.attn.size(2), 0, T - self.attn.size(1)))
            self.attn = torch.cat([self.attn, self.attn.new_zeros(n_new * K, T, S)])
        self.keys += [None] * n_new
        self.length = torch.cat([self.length, self.length.new_zeros(n_new)])
        self.limit = torch.cat([self.limit, self.limit.new_zeros(n_new)])
        self.alive = torch.cat([self.alive, self.alive.new_zeros(n_new)])
        self.tokens = torch.cat([self.tokens, self.tokens.new_full((n_new * K,), self.bos)])
        self.scores = torch.cat([self.scores, self.scores.new_full((n_new * K,), float("-inf"))])
        self.finished.extend([0] * n_new, device)
        groups = free + list(range(len(self.keys) - n_new, len(self.keys)))
        self.cache.admit(fresh, into=torch.tensor(free, dtype=torch.long, device=device))
        self._place(groups, keys, limit, src_len)

    def _place(self, groups: list[int], keys: list, limit: Tensor, src_len: list[int]) -> None:
        """Sentences `keys` take `groups` (free, in the cache already): first beam at score 0, the rest -inf."""
        K = self.beam
        index = torch.tensor(groups, device=limit.device)
        rows = (index[:, None] * K + torch.arange(K, device=limit.device)).flatten()
        for g, key in zip(groups, keys, strict=True):
            self.keys[g] = key
        self.alive[index], self.length[index], self.limit[index] = True, 0, limit
        self.tokens[rows] = self.bos
        self.scores[rows] = float("-inf")
        self.scores[index * K] = 0.0
        self.history[rows] = self.pad
        if self.attn is not None:
            self.attn[rows] = 0
        self.finished.reset(groups, src_len)

    def _start(self, src: Tensor, keys: list, limit: Tensor, fresh, src_len: list[int]) -> None:
        """An empty search takes its sentences with one row each for the first step."""
        n, device = src.size(0), src.device
        self.cache, self.rows, self.keys = fresh, 1, list(keys)
        self.alive = torch.ones(n, dtype=torch.bool, device=device)
        self.length, self.limit = limit.new_zeros(n), limit
        self.tokens, self.scores = src.new_full((n,), self.bos), torch.zeros(n, device=device)
        self.history = src.new_full((n, int(limit.max()) + 1), self.pad)
        self.attn = torch.zeros(n, self.history.size(1), src.size(1), device=device) if self.need_attention else None
        self.finished.extend(src_len, device)


@torch.no_grad()
def beam_search(model, src: Tensor, *, bos: int, eos: int, pad: int, beam: int = 4, length_penalty: float = 0.6,
                max_len_a: float = 1.0, max_len_b: int = 50, nbest: int = 1, need_attention: bool = False,
                attention_layer: int = -1, length_penalty_type: str = "gnmt") -> list[list[Hypothesis]]:
    """BeamSearch over the sentences src [B, S] (ending in EOS, right-padded with pad); per sentence the
    `nbest` best finished hypotheses, best first."""
    search = BeamSearch(model, bos=bos, eos=eos, pad=pad, beam=beam, length_penalty=length_penalty,
                        max_len_a=max_len_a, max_len_b=max_len_b, nbest=nbest, need_attention=need_attention,
                        attention_layer=attention_layer, length_penalty_type=length_penalty_type)
    if src.size(0) == 0:
        return []
    search.add(src, list(range(src.size(0))))
    results: list[list[Hypothesis]] = [[] for _ in range(src.size(0))]
    while search.active:
        for i, hypotheses in search.step():
            results[i] = hypotheses
    return results
