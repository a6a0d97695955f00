"""What every search strategy shares (nmt.search.loop runs them): a hypothesis, how it is scored (the length
penalty), how long an output may grow, the step's log-probabilities with the impossible tokens masked, and the one
stop rule.

Maximum output length per sentence = floor(max_len_a * src_len + max_len_b) tokens, EOS not counted, where src_len
counts the non-pad source tokens (its EOS included); capped at `max_positions - 1` so every decoder position exists.
At that length EOS is forced."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

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



def generated_tokens(nbests: Iterable[Sequence[Hypothesis]]) -> int:
    """The output tokens of each sentence's best hypothesis, EOS not counted (a sentence without hypotheses, an
    empty line, counts 0): the tokens of decoding tokens/s, as bench/translate.py, bench/precision.py and the report
    of `nmt distill` count them."""
    return sum(len(nbest[0].tokens) for nbest in nbests if nbest)


class Move(NamedTuple):
    """What a strategy's step decided: the next input token of each row, and how the cache follows (`keep`: the
    sentences still searching, None: all of them; `parents` [kept, rows per sentence]: the row of that sentence each
    new row continues, None: each row continues itself)."""

    tokens: Tensor
    keep: Tensor | None = None
    parents: Tensor | None = None

    def only(self, keep: Tensor, group: int) -> Move:
        """This move for the sentences `keep` (of those it moves, `group` rows each) alone: the others leave."""
        parents = self.parents
        if parents is None:
            parents = torch.arange(group, device=keep.device).expand(self.tokens.numel() // group, group)
        return Move(self.tokens.view(-1, group)[keep].flatten(), keep, parents[keep])


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


def cannot_improve(worst: Tensor | float, best_active: Tensor | float, divisor: float | Tensor) -> Tensor | bool:
    """The stop rule of beam and constrained search: a sentence is done once it holds `beam` finished hypotheses
    (the worst of them scored `worst`; -inf before) and its best active one, cumulative log-probability
    `best_active`, scored at its current length (the length penalty's `divisor` there), cannot beat that worst.
    (fairseq stops at `beam` finished alone, which with a confident model lets junk beams that end early crowd out
    the real translation.)"""
    best = best_active / divisor
    if isinstance(worst, Tensor):  # a score is finite or -inf: > -inf is isfinite in 1 operator, not 4
        return worst.gt(float("-inf")) & worst.ge(best)
    return worst > float("-inf") and worst >= best


def max_lengths(model, src: Tensor, pad: int, max_len_a: float, max_len_b: int) -> Tensor:
    """Per-sentence output length limit [B] (EOS not counted)."""
    src_len = src.ne(pad).sum(dim=1)
    limit = (max_len_a * src_len.double() + max_len_b).floor().long()
    max_positions = getattr(model, "max_positions", None)
    return limit.clamp(0, max_positions - 1 if max_positions else None)


def step_log_probs(logits: Tensor, at_limit: Tensor | None, bos: int, eos: int, pad: int,
                   too_short: bool | Tensor = False) -> Tensor:
    """float32 log-probabilities [N, V] (normalised over the whole vocabulary) with PAD and BOS made
    impossible, EOS too while the output is `too_short` (shorter than min_len) and, in rows at their length
    limit (at_limit [N]; None: no row is), everything but EOS, which keeps its real log-probability: the limit
    wins over min_len. `too_short` may be a 0-d bool tensor (with at_limit given), as in a compiled step
    (nmt.search.compiled). Masks, not boolean indexing, so that no step waits for the device. One log_softmax
    kernel: on CPU faster than subtracting a logsumexp from the logits."""
    logprobs = F.log_softmax(logits.float(), dim=-1)
    logprobs[:, pad] = float("-inf")
    logprobs[:, bos] = float("-inf")
    if isinstance(too_short, Tensor) or (too_short and at_limit is not None):
        logprobs[:, eos] = logprobs[:, eos].masked_fill(too_short & ~at_limit, float("-inf"))
    elif too_short:
        logprobs[:, eos] = float("-inf")
    if at_limit is not None:
        eos_logprobs = logprobs[:, eos].clone()
        logprobs.masked_fill_(at_limit[:, None], float("-inf"))
        logprobs[:, eos] = eos_logprobs
    return logprobs


# the rows of impossible_tokens: a row's kind at a step
STEP, TOO_SHORT, AT_LIMIT = 0, 1, 2


def impossible_tokens(vocab: int, bos: int, eos: int, pad: int) -> Tensor:
    """[3, vocab] float32, 0 where a token is possible and -inf where it is not, per kind of row (STEP: PAD and BOS
    impossible; TOO_SHORT: EOS too; AT_LIMIT: all but EOS): the masks of step_log_probs as a table that a compiled
    step adds to its logits (step_logits)."""
    table = torch.zeros(3, vocab)
    table[:, [pad, bos]] = float("-inf")
    table[TOO_SHORT, eos] = float("-inf")
    table[AT_LIMIT] = float("-inf")
    table[AT_LIMIT, eos] = 0.0
    return table


def step_logits(logits: Tensor, at_limit: Tensor, too_short: Tensor, impossible: Tensor) -> tuple[Tensor, Tensor]:
    """step_log_probs in two parts, for a compiled step: the float32 logits [N, V] with the same tokens impossible
    (-inf), and each row's log-normaliser [N] (the logsumexp over the whole vocabulary), so that step_log_probs
    equals `masked - lse[:, None]`. Beam search ranks `masked + (score - lse)` as it ranks `logprobs + score` (the
    same sum, rounded in another order), and Inductor then reads the logits three times (max, sum of exp, the beam
    rule's group maxima) and writes no [N, V] log-probabilities. The mask is a row of `impossible`
    (impossible_tokens) added: one load per entry, where masks built from token ids cost a compiled program ~30
    vector operations per 16 entries. at_limit [N], too_short a 0-d bool tensor."""
    logits = logits.float()
    kind = torch.where(at_limit, AT_LIMIT, too_short.long())  # [N]: TOO_SHORT is 1
    return logits + impossible[kind], logits.logsumexp(dim=-1)


def step_attention(attention: Tensor | None, layer: int) -> Tensor | None:
    """[L, N, H, S] from decode_step -> one layer averaged over heads [N, S]."""
    return None if attention is None else attention[layer].float().mean(dim=1)
