"""Search on models whose probabilities are known: a stub model whose next-token probabilities are a table over the
prefix (TableModel), the copy task a tiny Transformer is trained on (tests/conftest.py's copy_model), and
nmt.search.run's strategies called as the search and glossary tests call them."""

from __future__ import annotations

import math

import torch

from nmt import search
from nmt.model import Transformer
from nmt.search import SearchSettings
from nmt.search.scoring import Hypothesis
from nmt.tokenizer import SpecialIds

PAD, BOS, EOS = 0, 2, 3
IDS = SpecialIds(pad=PAD, unk=1, bos=BOS, eos=EOS)
V = 14  # 4 specials + 10 symbols


def greedy_search(model, src: torch.Tensor, **settings) -> list[list[Hypothesis]]:
    """nmt.search.run's greedy strategy."""
    return search.run(model, src, SearchSettings(beam=1, **settings), IDS)


def beam_search(model, src: torch.Tensor, *, trace=None, **settings) -> list[list[Hypothesis]]:
    """nmt.search.run's beam rule, beam 1 included (a traced search is always the beam rule)."""
    return search.run(model, src, SearchSettings(**settings), IDS, trace=trace or (lambda step: None))


def batch(seqs: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Copy task: src = seq + EOS, decoder input = BOS + seq, labels = seq + EOS; right-padded."""
    width = max(map(len, seqs)) + 1

    def pad(rows):
        return torch.tensor([r + [PAD] * (width - len(r)) for r in rows])

    return pad([s + [EOS] for s in seqs]), pad([[BOS] + s for s in seqs]), pad([s + [EOS] for s in seqs])


def teacher_forced_logprob(model: Transformer, src_row: torch.Tensor, tokens: list[int]) -> float:
    src = src_row[src_row.ne(PAD)][None]
    with torch.no_grad():
        lprobs = model(src, torch.tensor([[BOS] + tokens])).float().log_softmax(-1)[0]
    return lprobs.gather(1, torch.tensor(tokens + [EOS])[:, None]).sum().item()


# ---- a stub model: next-token probabilities are a table over the prefix --------------------------


class TableCache:
    def __init__(self, prefix: torch.Tensor, src_real: torch.Tensor):
        self.prefix, self.src_real = prefix, src_real
        self.group = 1  # rows per group

    def reorder(self, keep: torch.Tensor | None, parents: torch.Tensor) -> None:
        """DecoderCache's contract: groups `keep` stay (None: all); row q of new group g continues row parents[g, q]."""
        keep = torch.arange(self.prefix.size(0) // self.group) if keep is None else keep
        index = (keep[:, None] * self.group + parents).flatten()
        self.prefix, self.src_real, self.group = self.prefix[index], self.src_real[index], parents.size(1)


class TableModel:
    """Implements only what search may use: encode / init_cache / decode_step / max_positions."""

    max_positions = 100

    def __init__(self, table: dict[tuple[int, ...], dict[int, float]], default: dict[int, float]):
        self.table, self.default = table, default

    def encode(self, src):
        return src.float()[..., None], src.eq(PAD)

    def init_cache(self, memory, src_pad_mask, max_len):
        B = memory.size(0)
        return TableCache(torch.zeros(B, 0, dtype=torch.long), (~src_pad_mask).float())

    def decode_step(self, tokens, cache, need_attention=False):
        cache.prefix = torch.cat([cache.prefix, tokens[:, None]], dim=1)
        logits = torch.full((tokens.numel(), V), -30.0)
        for row, prefix in enumerate(cache.prefix[:, 1:].tolist()):
            for token, p in self.table.get(tuple(prefix), self.default).items():
                logits[row, token] = math.log(p)
        attention = None
        if need_attention:  # uniform over the real source tokens: [L=1, B, H=1, S]
            attention = (cache.src_real / cache.src_real.sum(1, keepdim=True))[None, :, None]
        return logits, attention


def random_model(**kwargs) -> Transformer:
    """A small untrained Transformer over the copy task's vocabulary (eval mode, seeded)."""
    torch.manual_seed(1)
    dims = dict(d_model=16, n_heads=2, d_ff=32, encoder_layers=1, decoder_layers=2)
    return Transformer(V, V, **dims, **kwargs, pad_id=PAD, joint_vocab=True).eval()


def random_inputs(n: int = 6) -> torch.Tensor:
    """n random sources of 1-8 symbols (+ EOS), right-padded, seeded."""
    g = torch.Generator().manual_seed(3)
    lengths = torch.randint(1, 9, (n,), generator=g).tolist()
    return batch([torch.randint(4, V, (k,), generator=g).tolist() for k in lengths])[0]
