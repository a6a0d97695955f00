"""Decoding with static shapes (issue 45, item 2): the same decoder layers over a cache whose shapes never change
during a search, so that one step function, eager or compiled (`torch.compile`, a CUDA graph), serves every step.

- Rows are fixed: a sentence has `rows` rows from the first step on (beam search: its beams, all but the first
  starting at -inf so that step 0 expands the first one only), and a finished sentence's rows stay, masked, to the
  end of the search (the strategies' `fixed_rows`): nothing is removed, so nothing changes shape.
- The cache holds every position up to its capacity: keys/values [T, L, 2, N, H, Dh], written at the step's position,
  a 0-d tensor on the device (`pos`). Positions come first, so the positions a step reads, those up to its own, are
  one contiguous block (`StaticCache.prefix`), a dimension a compiled step leaves free: it reads no more of the
  cache than it needs (the whole cache read at every step would double the traffic of self-attention).
- A beam reorder copies the rows' keys/values (an index_select), where nmt.cache.DecoderCache rewrites a small index;
  the compiled beam step (nmt.search.compiled) copies nothing: its rows read their positions through a lineage.

`StaticDecoder(model)` is a model for nmt.search.loop.run (encode, init_cache, decode_step, max_positions): the loop
sees `fixed_rows` and gives each sentence its rows from the start."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class StaticCache:
    """Keys/values of N rows (`rows` per sentence) at T positions, and the source's, one copy per sentence.

    self_kv:     [T, L, 2, N, H, Dh] every position's keys/values (unwritten ones never read: self_cache).
    cross_kv:    [L, 2, B, H, S, Dh] the B sentences' sources', computed once (`StaticDecoder.init_cache`); a
                 sentence's rows read it together (nmt.model.MultiHeadAttention), from one copy.
    memory_mask: [B, 1, 1, S] True where the source token is real.
    pos:         0-d long tensor: the position of the next token (the device's step counter).
    step:        the same count on the host (nothing reads it back from the device)."""

    def __init__(self, self_kv: Tensor, cross_kv: Tensor, memory_mask: Tensor):
        self.self_kv, self.cross_kv, self.memory_mask = self_kv, cross_kv, memory_mask
        self.pos = torch.zeros((), dtype=torch.long, device=self_kv.device)
        self.step = 0

    def reorder(self, keep: Tensor | None, parents: Tensor) -> None:
        """Row q of sentence b continues row parents[b, q] of the same sentence (no sentence leaves: `keep` None)."""
        if keep is not None:
            raise ValueError("a static cache keeps every sentence's rows to the end of the search")
        self.self_kv = self.self_kv.index_select(3, self.rows_after(parents).to(self.self_kv.device))

    def prefix(self, x: Tensor | None = None) -> Tensor:
        """The first positions of x (self_kv by default, or a lineage [T, N]) that this step reads: those up to its
        own, and at least two (a compiled step's free dimension: export gives a dimension of one its own program)."""
        x = self.self_kv if x is None else x
        return x[: max(self.step + 1, 2)]

    def rows_after(self, parents: Tensor) -> Tensor:
        """The cache row each row continues: parents [B, rows] (a row of the same sentence) as rows of the cache."""
        B, rows = parents.shape
        return (parents + torch.arange(B, device=parents.device)[:, None] * rows).flatten()


class _Layer:
    """What DecoderLayer reads at a step (nmt.cache.LayerCache's interface) over a StaticCache's tensors, which it
    leaves as they are: the step's keys/values are kept in `new` for the caller to write. `lineage` (see
    decoder_step): the rows the positions are read from."""

    def __init__(self, self_kv: Tensor, memory_kv: Tensor, at_pos: Tensor, self_mask: Tensor,
                 lineage: Tensor | None = None):  # self_kv [P, 2, N, H, Dh]
        self.kv, self.memory_kv, self.at_pos, self.self_mask = self_kv, memory_kv, at_pos, self_mask
        self.lineage = lineage
        self.new: tuple[Tensor, Tensor] | None = None

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """k, v [N, H, 1, Dh] at position pos: the P positions' returned, [N, H, P, Dh] each, the cache's with these
        at pos. Not written in place: a compiled program that writes into a slice of its input copies all of it
        (every layer's cache, at every layer)."""
        self.new = k, v
        keys, values = self.kv[:, 0], self.kv[:, 1]  # [P, N, H, Dh]
        if self.lineage is not None:  # [P, N]: position p of row n from row lineage[p, n]
            rows = self.lineage[:, :, None, None].expand_as(keys)
            keys, values = keys.gather(1, rows), values.gather(1, rows)
        keys, values = keys.permute(1, 2, 0, 3), values.permute(1, 2, 0, 3)
        return torch.where(self.at_pos, k, keys), torch.where(self.at_pos, v, values)


def decoder_step(model: nn.Module, tokens: Tensor, pos: Tensor, self_kv: Tensor, cross_kv: Tensor,
                 memory_mask: Tensor, need_attention: bool = False,
                 lineage: Tensor | None = None) -> tuple[Tensor, Tensor | None, Tensor]:
    """tokens [N] at position pos -> logits [N, V], if asked the cross-attention [L, N, H, S], and this position's
    keys/values [1, L, 2, N, H, Dh], which the caller writes (self_kv [P, L, 2, N, H, Dh], the cache's first P
    positions, pos among them, is only read). Every shape is fixed by the arguments' (pos is a tensor). `lineage`
    [P, N]: row n's position p is read from the cache's row lineage[p, n] (the compiled beam step's cache, whose rows
    are never reordered: next_lineage); None: from row n."""
    x = model.tgt_embed(tokens)[:, None] * model.embed_scale + model.positions.index_select(0, pos[None])  # [N, 1, D]
    self_mask = (torch.arange(self_kv.size(0), device=pos.device) <= pos)[None, None, None, :]  # [1, 1, 1, P]
    at_pos = _at_position(pos, self_kv.size(0))
    weights, new = [], []
    for i, layer in enumerate(model.decoder_layers):
        view = _Layer(self_kv[:, i], cross_kv[i], at_pos, self_mask, lineage)
        x, w = layer(x, None, memory_mask, cache=view, need_weights=need_attention)  # w [N, H, 1, S]
        weights.append(w)
        new.append(torch.stack(view.new)[:, :, :, 0])  # [2, N, H, Dh]
    logits = model.output(model.decoder_norm(x[:, 0]))  # [N, V]
    return logits, torch.stack(weights)[:, :, :, 0] if need_attention else None, torch.stack(new)[None]


def static_step(model: nn.Module, tokens: Tensor, pos: Tensor, self_kv: Tensor, cross_kv: Tensor,
                memory_mask: Tensor, need_attention: bool = False) -> tuple[Tensor, Tensor | None]:
    """decoder_step, its keys/values written into self_kv at pos in place."""
    logits, attention, new = decoder_step(model, tokens, pos, self_kv, cross_kv, memory_mask, need_attention)
    self_kv.index_copy_(0, pos[None], new)
    return logits, attention


def next_lineage(lineage: Tensor, parent_rows: Tensor, pos: Tensor) -> Tensor:
    """A beam step's reorder without copying the cache: row n of the next step continues row parent_rows[n], so its
    positions are read where that row's were (lineage [P, N], see decoder_step), and position pos, which this step
    wrote into every row's own place, from the parent's row. A row's place at a position is written once, at that
    step, so what a lineage points to is never overwritten."""
    at_pos = _at_position(pos, lineage.size(0))  # [P, 1]
    return torch.where(at_pos, parent_rows[None, :], lineage.index_select(1, parent_rows))


def _at_position(pos: Tensor, capacity: int) -> Tensor:
    """[P, 1] True at position pos of a cache of `capacity` positions: where a step's keys/values go."""
    return (torch.arange(capacity, device=pos.device) == pos)[:, None]


def self_cache(cross_kv: Tensor, positions: int, rows: int) -> Tensor:
    """The keys/values of `rows` rows at `positions` positions (at least 2), [T, L, 2, N, H, Dh] (the layers, heads
    and dtype of cross_kv [L, 2, B, H, S, Dh]), uninitialised but for positions 0 and 1. A step reads the positions
    up to its own and at least two (StaticCache.prefix), so position 1 is the only one read, masked, before it is
    written: zeros there, as garbage times its zero weight could be NaN. (Zeros everywhere: a base model's cache at
    32 sentences is ~40 MB to write before the first step.)"""
    L, _, _, H, _, Dh = cross_kv.shape
    kv = cross_kv.new_empty(max(positions, 2), L, 2, rows, H, Dh)
    kv[:2].zero_()
    return kv


def cross_keys_values(model: nn.Module, memory: Tensor) -> Tensor:
    """Every decoder layer's cross-attention keys and values of memory [B, S, D]: [L, 2, B, H, S, Dh]."""
    return torch.stack([torch.stack(layer.cross_attn.memory_kv(memory)) for layer in model.decoder_layers])


class StaticDecoder:
    """`model` (an nmt.model.Transformer: search knows it by its attributes only) as nmt.search.loop.run uses a
    model, decoding with static shapes; its step is `step_fn` (static_step; compiled: nmt.search.compiled)."""

    fixed_rows = True

    def __init__(self, model: nn.Module):
        self.model, self.max_positions = model, model.max_positions
        self.step_fn = static_step

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        return self.model.encode(src)

    def init_cache(self, memory: Tensor, src_pad_mask: Tensor, max_len: int, rows: int = 1) -> StaticCache:
        """The cache for `rows` rows per sentence of memory [B, S, D], room for max_len positions."""
        cross_kv = self.cross_kv(memory)  # [L, 2, B, H, S, Dh]
        return StaticCache(self_cache(cross_kv, max_len, src_pad_mask.size(0) * rows), cross_kv,
                           ~src_pad_mask[:, None, None])

    def cross_kv(self, memory: Tensor) -> Tensor:
        """Every decoder layer's cross-attention keys and values of memory [B, S, D]: [L, 2, B, H, S, Dh]."""
        return cross_keys_values(self.model, memory)

    def decode_step(self, tokens: Tensor, cache: StaticCache, need_attention: bool = False
                    ) -> tuple[Tensor, Tensor | None]:
        self._check_room(cache)
        logits, attention = self.step_fn(self.model, tokens, cache.pos, cache.prefix(), cache.cross_kv,
                                         cache.memory_mask, need_attention)
        cache.pos += 1
        cache.step += 1
        return logits, attention

    @staticmethod
    def _check_room(cache: StaticCache) -> None:
        if cache.step >= cache.self_kv.size(0):
            raise ValueError(f"a static cache of {cache.self_kv.size(0)} positions is full")
