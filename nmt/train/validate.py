"""Validation during training: loss and perplexity on the valid split, greedy BLEU on its first sentences."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from nmt.config.experiment import TrainConfig
from nmt.data.batches import batches_from_dataset
from nmt.data.batching import TokenBatchSampler, source_batches
from nmt.data.datadir import DataDir, lengths
from nmt.loss import label_smoothed_loss
from nmt.model import Transformer
from nmt.score import bleu_tokenizer, corpus_bleu
from nmt.search import SearchSettings, run
from nmt.tokenizer import SpecialIds, Tokenizer

Autocast = Callable[[], contextlib.AbstractContextManager]


@torch.no_grad()
def validation_loss(model: Transformer, dataset, max_tokens: int, label_smoothing: float, special: SpecialIds,
                    device: torch.device, autocast: Autocast) -> dict[str, float]:
    """Per-token label-smoothed loss, NLL and perplexity over a whole split (model in eval mode)."""
    lens = lengths(dataset)
    sampler = TokenBatchSampler(lens["src_len"], lens["tgt_len"], max_tokens, shuffle=False)
    sums, ntok = torch.zeros(2, dtype=torch.float64, device=device), 0  # on the device: no wait per batch
    for batch in batches_from_dataset(dataset, sampler, special):
        batch = batch.to(device)
        with autocast():
            logits = model(batch.src, batch.tgt_in)
        sums += torch.stack(label_smoothed_loss(logits, batch.tgt_out, label_smoothing, special.pad))
        ntok += batch.n_tgt_tokens
    loss_sum, nll_sum = sums.tolist()
    return {"loss": loss_sum / ntok, "nll": nll_sum / ntok, "ppl": math.exp(min(nll_sum / ntok, 50))}


@torch.no_grad()
def greedy_bleu(model: Transformer, sources: Sequence[Sequence[int]], references: list[str], tokenizer: Tokenizer,
                max_tokens: int, max_len_a: float, max_len_b: int, device: torch.device, autocast: Autocast,
                tokenize: str = "13a") -> float:
    """Corpus BLEU (sacreBLEU tokenizer `tokenize`) of greedy translations of `sources` (ids) against `references`
    (model in eval mode)."""
    special = tokenizer.special_ids
    hyps: list[str] = [""] * len(sources)
    for rows, batch in source_batches(sources, max_tokens, special):
        with autocast():
            out = run(model, batch.src.to(device), SearchSettings(beam=1, max_len_a=max_len_a, max_len_b=max_len_b),
                      special)
        for i, hyp in zip(rows, tokenizer.decode_tgt([h[0].tokens for h in out])):
            hyps[i] = hyp
    return corpus_bleu(hyps, [references], tokenize)


def bleu_sample(data: DataDir, valid: Any, n: int) -> tuple[list[list[int]], list[str]]:
    """The first `n` validation sentences (fewer if the split is smaller; none without one) whose greedy BLEU is
    measured at each validation: their source ids and reference texts."""
    n = min(n, len(valid)) if valid is not None else 0
    if n <= 0:
        return [], []
    return list(valid.select(range(n))["src_ids"]), data.references("valid", n)


def choose_bleu_tokenize(train: TrainConfig, tgt_lang: str, info: Callable[[str], None]) -> None:
    """train.bleu_tokenize made concrete (auto: sacreBLEU's choice for the target language), so that config.yaml
    and every checkpoint record what validation BLEU, best.pt and early stopping were measured with."""
    if train.bleu_tokenize == "auto" and train.valid_bleu_sentences > 0:
        chosen = bleu_tokenizer(tgt_lang)
        train.bleu_tokenize = chosen.name
        if chosen.note:
            info(chosen.note)


def keep_bleu_tokenize(train: TrainConfig, saved_config: dict, warn: Callable[[str], None]) -> None:
    """A resumed run's validation BLEU stays the one its best.pt was chosen by (13a before it was recorded)."""
    saved = (saved_config.get("train") or {}).get("bleu_tokenize", "13a")
    if saved not in ("auto", train.bleu_tokenize):
        warn(f"validation BLEU keeps this run's tokenizer {saved} (train.bleu_tokenize={train.bleu_tokenize} would "
             "change what best.pt was chosen by: start a new run dir for it)")
        train.bleu_tokenize = saved
