"""The training objective: label-smoothed cross-entropy (Szegedy et al. 2016; the paper's §5.4)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def label_smoothed_loss(
    logits: torch.Tensor, target: torch.Tensor, epsilon: float, pad: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sum over non-pad tokens of the label-smoothed loss and of the plain NLL.

    Smoothing spreads `epsilon` uniformly over the vocabulary (as in the paper):
    loss = (1 - eps) * nll + eps * mean_v(-log p_v).
    """
    vocab = logits.size(-1)
    lprobs = F.log_softmax(logits.float(), dim=-1).view(-1, vocab)
    target = target.reshape(-1)
    # masks instead of boolean indexing: no [tokens, vocab] copies in forward or backward
    nll = F.nll_loss(lprobs, target, ignore_index=pad, reduction="sum")
    smooth = -(lprobs.sum(dim=-1) * (target != pad)).sum() / vocab
    return (1.0 - epsilon) * nll + epsilon * smooth, nll
