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

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from nmt.kernels import top_k_rows


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


def step_log_probs(logits: Tensor, at_limit: Tensor, bos: int, eos: int, pad: int) -> Tensor:
    """float32 log-probabilities [N, V] (normalised over the whole vocabulary) with PAD and BOS made
    impossible and, in rows at their length limit (at_limit [N]), everything but EOS, which keeps its
    real log-probability. One log_softmax kernel: on CPU faster than subtracting a logsumexp from the
    logits."""
    logprobs = F.log_softmax(logits.float(), dim=-1)
    logprobs[:, pad] = float("-inf")
    logprobs[:, bos] = float("-inf")
    if bool(at_limit.any()):
        eos_logprobs = logprobs[:, eos].clone()
        logprobs[at_limit] = float("-inf")
        logprobs[:, eos] = eos_logprobs
    return logprobs


def step_attention(attention: Tensor | None, layer: int) -> Tensor | None:
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
        best, tokens = step_log_probs(logits, t >= limit[rows], bos, eos, pad).max(dim=-1)
        logprob[rows] = logprob[rows] + best
        out[rows, t] = tokens
        if attn is not None:
            attn[rows, t] = step_attention(step_attn, attention_layer)
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

    def cannot_improve(self, sentence: Tensor, best_active: Tensor, length: int) -> Tensor:
        """[N]: the sentences whose best active beam (cumulative log-probability `best_active` at `length`) cannot
        beat their worst kept hypothesis."""
        worst = self.worst[sentence]
        return worst.isfinite() & worst.ge(best_active / length_penalty_divisor(length, self.alpha, self.kind))

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


@torch.no_grad()
def beam_search(model, src: Tensor, *, bos: int, eos: int, pad: int, beam: int = 4, length_penalty: float = 0.6,
                max_len_a: float = 1.0, max_len_b: int = 50, nbest: int = 1, need_attention: bool = False,
                attention_layer: int = -1, length_penalty_type: str = "gnmt",
                trace: Callable[[BeamStep], None] | None = None) -> list[list[Hypothesis]]:
    """Batched beam search; per sentence the `nbest` best finished hypotheses, best first.

    Each step scores beam x V continuations per sentence by cumulative log-probability and keeps the
    best 2*beam (`best_continuations`). EOS candidates among the top `beam` become finished hypotheses,
    scored with the length penalty (`length_penalty_type`); the best `beam` non-EOS candidates continue. Early stop: a
    sentence is done once it has `beam` finished hypotheses and its best active beam, scored at its
    current length, cannot beat the worst of them (fairseq stops at `beam` finished alone, which with a
    confident model lets junk beams that end early crowd out the real translation), or when it reaches
    its length limit, where EOS is forced on every beam. With beam=1 this is exactly greedy search.
    The cache learns each step's outcome from one `cache.reorder(sentences kept, parent beams)`.
    `trace`, when given, receives each step's candidates and what became of them (a BeamStep).
    """
    B, S = src.shape
    if _checked(beam, nbest) and B == 0:
        return []
    K, device = beam, src.device
    limit = max_lengths(model, src, pad, max_len_a, max_len_b)
    T = int(limit.max())
    memory, src_pad_mask = model.encode(src)
    cache = model.init_cache(memory, src_pad_mask, T + 1)
    # Step 0 runs one row per sentence (all beams would hold the same empty prefix); its reorder widens
    # each sentence to K rows. Row n * beams + k is beam k of the n-th sentence still searching.
    sentence = torch.arange(B, device=device)  # the sentence of each group still searching
    scores = torch.zeros(B, device=device)  # cumulative log-probability of each row
    tokens = src.new_full((B,), bos)
    history = src.new_full((B, T + 1), pad)  # tokens emitted so far by each row
    attn = torch.zeros(B, T + 1, S, device=device) if need_attention else None
    finished = Finished(B, K, length_penalty, length_penalty_type, src.ne(pad).sum(dim=1).tolist(), device)

    for t in range(T + 1):
        beams = 1 if t == 0 else K  # rows per sentence at this step
        logits, step_attn = model.decode_step(tokens, cache, need_attention)
        at_limit = t >= limit[sentence]
        logprobs = step_log_probs(logits, at_limit.repeat_interleave(beams), bos, eos, pad)
        top = best_continuations(logprobs, scores, beams, 2 * K)
        top_rows = top.parents + torch.arange(sentence.numel(), device=device)[:, None] * beams  # [N, 2K]
        is_eos = top.tokens.eq(eos)
        step_attn = step_attention(step_attn, attention_layer)

        ending = is_eos[:, :K] & top.scores[:, :K].isfinite()
        if bool(ending.any()):
            _finish(finished, t, ending, top, top_rows, sentence, history, attn, step_attn)

        # The best K non-EOS candidates of each sentence (a stable sort keeps their rank order).
        continuing = is_eos.to(torch.int8).sort(dim=1, stable=True).indices[:, :K]
        done = at_limit | finished.cannot_improve(sentence, top.scores.gather(1, continuing[:, :1]).squeeze(1), t + 1)
        if trace is not None:
            trace(_beam_step(t, sentence, top, ending, continuing, done))
        if bool(done.all()):
            break
        keep = (~done).nonzero().squeeze(1)
        continuing = continuing[keep]
        cache.reorder(keep, parents=top.parents[keep].gather(1, continuing))
        rows = top_rows[keep].gather(1, continuing).flatten()
        tokens = top.tokens[keep].gather(1, continuing).flatten()
        scores = top.scores[keep].gather(1, continuing).flatten()
        history, attn = _extend(history, attn, rows, t, tokens, step_attn)
        sentence = sentence[keep]

    return [hyps[:nbest] for hyps in finished.hypotheses]


def _finish(finished: Finished, t: int, ending: Tensor, top: Candidates, top_rows: Tensor, sentence: Tensor,
            history: Tensor, attn: Tensor | None, step_attn: Tensor | None) -> None:
    """The candidates `ending` [N, K] (EOS among each sentence's best K) become finished hypotheses."""
    slot, rank = ending.nonzero(as_tuple=True)
    rows = top_rows[slot, rank]
    ended_attn = None
    if attn is not None and step_attn is not None:
        ended_attn = torch.cat([attn[rows, :t], step_attn[rows, None]], dim=1).cpu()
    finished.add(sentence[slot].tolist(), top.scores[slot, rank].tolist(), history[rows, :t].tolist(), ended_attn)


def _extend(history: Tensor, attn: Tensor | None, rows: Tensor, t: int, tokens: Tensor, step_attn: Tensor | None
            ) -> tuple[Tensor, Tensor | None]:
    """The token histories (and attention) of the rows kept, with step t's tokens (and attention) written."""
    history = history[rows]
    history[:, t] = tokens
    if attn is not None:
        attn = attn[rows]
        attn[:, t] = step_attn[rows]
    return history, attn


def _checked(beam: int, nbest: int) -> bool:
    if beam < 1 or not 1 <= nbest <= beam:
        raise ValueError(f"need beam >= 1 and 1 <= nbest <= beam, got beam={beam}, nbest={nbest}")
    return True
