"""A given output scored as the searches score their own: teacher-forced through the incremental decoder (what
nmt.translation.terminology compares its candidates by)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from nmt.search.scoring import Hypothesis, length_normalized, step_attention
from nmt.search.settings import SearchSettings


@torch.no_grad()
def forced(model, src: Tensor, tokens: list[int], settings: SearchSettings, *, bos: int, eos: int) -> Hypothesis:
    """`tokens` (then EOS) as the output of the one sentence src [1, S], scored as the searches score a hypothesis
    (its log-probability, length-normalized), with its attention rows when `settings.need_attention`."""
    memory, src_pad_mask = model.encode(src)
    cache = model.init_cache(memory, src_pad_mask, len(tokens) + 1)
    logprob, rows = 0.0, []
    for previous, token in zip([bos, *tokens], [*tokens, eos]):
        logits, step_attn = model.decode_step(src.new_full((1,), previous), cache, settings.need_attention)
        logprob += float(F.log_softmax(logits[0].float(), dim=-1)[token])
        if step_attn is not None:
            rows.append(step_attention(step_attn, settings.attention_layer)[0].cpu())
    attention = torch.stack(rows).float() if rows else None
    score = length_normalized(logprob, len(tokens) + 1, settings.length_penalty, settings.length_penalty_type)
    return Hypothesis(list(tokens), score, logprob, attention)
