"""A small random Transformer and a padded batch for it (the model, kernel and precision tests)."""

from __future__ import annotations

import torch

from nmt.model import Transformer

V = 23
PAD, BOS, EOS = 0, 2, 3


def make_model(pre_norm: bool = False, **kwargs) -> Transformer:
    torch.manual_seed(0)
    src_vocab_size, tgt_vocab_size = kwargs.pop("src_vocab_size", V), kwargs.pop("tgt_vocab_size", V)
    args = dict(d_model=32, n_heads=4, d_ff=64, encoder_layers=2, decoder_layers=2, pre_norm=pre_norm)
    args.update(kwargs)
    return Transformer(src_vocab_size, tgt_vocab_size, **args, pad_id=PAD,
                       joint_vocab=src_vocab_size == tgt_vocab_size).eval()


def padded(rows: list[list[int]], width: int | None = None) -> torch.Tensor:
    width = width or max(map(len, rows))
    return torch.tensor([r + [PAD] * (width - len(r)) for r in rows])


# Source sentences of different lengths (EOS appended) and BOS-prefixed targets, right-padded.
SRC = padded([[5, 6, 7, 8, 9, EOS], [10, 11, EOS], [12, EOS]])
TGT = padded([[BOS, 4, 5, 6, 7], [BOS, 8, 9], [BOS, 10, 11, 12, 13, 14, 15]])
