"""Incremental decoding state: the decoder's key/value cache and its reorder contract (beams reordered,
finished sentences dropped, with as little copying as possible). Built by `Transformer.init_cache`,
advanced by `Transformer.decode_step` (each layer through its `LayerCache`), reordered by the search."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor


@dataclass
class DecoderCache:
    """Incremental decoding state of N rows (sentences, or sentences x beams) in G groups of `group` rows
    that share a source: row g * group + q is row q of group g. Beam search keeps the beams of a sentence
    in one group (group = beam size after its first step); greedy search has one row per group.

    cross_kv:    [L, 2, G, H, S, Dh] keys/values of the encoder output for every decoder layer, computed
                 once in `init_cache`: one copy per group, not per beam.
    memory_mask: [G, 1, 1, S] bool, True where the source token is real (SDPA convention).
    self_kv:     [L, 2, G, H, capacity, W, Dh] keys/values of target positions, W slots per group and
                 position: at position p, row q of a group wrote slot q. The capacity grows (doubling, up
                 to the `max_len` hint, further only if needed); see `start`.
    slots:       [G, group, capacity] which slot holds position p of row q's own history. A beam reorder
                 only rewrites this small index (a beam inherits its parent's history by reference), so
                 the keys/values are copied only when sentences leave the batch or the group widens.
    max_len:     expected number of steps.
    step:        positions decoded so far = position of the next token.
    self_mask:   this step's additive self-attention mask (`begin_step`).
    """

    cross_kv: Tensor
    memory_mask: Tensor
    self_kv: Tensor
    slots: Tensor
    max_len: int
    step: int = 0
    group: int = 1
    self_mask: Tensor | None = None

    INITIAL_CAPACITY = 16  # positions preallocated before doubling

    @classmethod
    def start(cls, cross_kv: Tensor, memory_mask: Tensor, max_len: int) -> DecoderCache:
        """The state before the first step, one row per group, from the source's keys and values of every
        layer, cross_kv [L, 2, B, H, S, Dh], and its key mask [B, 1, 1, S]. The capacity starts at
        INITIAL_CAPACITY positions and doubles (up to max_len) as decoding goes on: a cache reserving all
        max_len positions at once costs nothing extra only while its pages stay fresh, and with freed memory
        reused (`nmt.device.keep_freed_memory`) they are not."""
        L, _, B, H, _, Dh = cross_kv.shape
        capacity = max(1, min(max_len, cls.INITIAL_CAPACITY))
        self_kv = cross_kv.new_empty(L, 2, B, H, capacity, 1, Dh)
        slots = torch.zeros(B, 1, capacity, dtype=torch.long, device=cross_kv.device)
        return cls(cross_kv, memory_mask, self_kv, slots, max_len=max_len)

    @property
    def batch_size(self) -> int:
        return self.slots.size(0) * self.group

    def begin_step(self, dtype: torch.dtype) -> None:
        """Make room for this step's position and record that each row writes its own slot; `self_mask` is
        then the additive self-attention mask [G, 1, group, (step + 1) * W] over the group's keys (None while
        every group has one slot)."""
        self.reserve(self.step + 1)
        step, W = self.step, self.self_kv.size(5)
        self.slots[:, :, step] = torch.arange(self.group, device=self.slots.device)
        self.self_mask = None
        if W > 1:
            G, Q = self.slots.shape[:2]
            own = self.slots[:, :, : step + 1, None] == torch.arange(W, device=self.slots.device)
            mask = torch.zeros(G, 1, Q, (step + 1) * W, dtype=dtype, device=self.self_kv.device)
            self.self_mask = mask.masked_fill_(~own.view(G, 1, Q, -1), float("-inf"))

    def as_groups(self, x: Tensor) -> Tensor:
        """A step's rows [N, 1, D] as the layers see them, [G, group, D]: a group's rows (a sentence's beams)
        are one sequence of `group` query positions."""
        return x.view(-1, self.group, x.size(-1))

    def as_rows(self, x: Tensor) -> Tensor:
        """[G, group, D] -> [N, D], row g * group + q."""
        return x.reshape(-1, x.size(-1))

    def attention_rows(self, weights: Tensor) -> Tensor:
        """Every layer's cross-attention weights of a step, [L, G, H, group, S] -> [L, N, H, S]."""
        return weights.transpose(2, 3).flatten(1, 2)

    def layer(self, i: int) -> LayerCache:
        """What decoder layer i reads and writes at this step."""
        return LayerCache(self, i)

    def append(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store this step's self-attention keys and values k, v [G, H, group, Dh] of `layer` (row q of a group
        in slot q) and return all of the group's so far, [G, H, (step + 1) * W, Dh] each (views)."""
        kv, step, group = self.self_kv[layer], self.step, self.group
        kv[0, :, :, step, :group] = k
        kv[1, :, :, step, :group] = v
        if group < kv.size(4):  # unused slots are masked, but 0 * NaN garbage would still be NaN
            kv[:, :, :, step, group:] = 0
        k_all, v_all = kv[:, :, :, : step + 1].flatten(3, 4)
        return k_all, v_all

    def reorder(self, keep: Tensor | None, parents: Tensor) -> None:
        """The search's decision, stated explicitly: the groups (sentences) `keep` [G'] stay, in that order
        (a repeat copies a group; None: every group stays, in order), and row q of new group g continues the
        history of row parents[g, q] of old group keep[g] (parents [G', Q'], Q' the new group size: beam
        search's first step widens 1 -> beam). Within groups only `slots` is gathered; the keys/values are
        copied only when `keep` is given (groups dropped, repeated or reordered), or groups widen. Nothing here
        waits for the device (`keep` is not inspected: pass None when every group stays)."""
        parents = parents.to(self.slots.device)
        W, group = self.self_kv.size(5), parents.size(1)
        if keep is None:
            self.slots = self.slots.gather(1, parents[:, :, None].expand(-1, -1, self.slots.size(2)))
            if group > W:
                self._move_groups(None, group)
        else:
            keep = keep.to(self.slots.device)
            self.slots = self.slots[keep[:, None], parents]
            self._move_groups(keep, group)
        self.group = group

    def _move_groups(self, keep: Tensor | None, group: int) -> None:
        """Keys and values copied for the groups `keep` (None: all), with room for `group` slots."""
        L, _, G, H, capacity, W, Dh = self.self_kv.shape
        kv = self.self_kv.new_empty(L, 2, G if keep is None else keep.numel(), H, capacity, max(W, group), Dh)
        if self.step:
            old = self.self_kv[:, :, :, :, : self.step]
            kv[:, :, :, :, : self.step, :W] = old if keep is None else old.index_select(2, keep)
            kv[:, :, :, :, : self.step, W:] = 0  # new slots: masked, and must not hold NaN garbage
        self.self_kv = kv
        if keep is not None:
            self.cross_kv = self.cross_kv.index_select(2, keep)
            self.memory_mask = self.memory_mask.index_select(0, keep)

    def _capacity(self, positions: int) -> int:
        """Capacity for `positions`: the current one while it suffices, else doubled (up to max_len)."""
        capacity = self.self_kv.size(4)
        return capacity if positions <= capacity else max(positions, min(2 * capacity, self.max_len))

    def reserve(self, positions: int) -> None:
        """Make room for `positions` target positions, doubling the capacity when it runs out."""
        capacity = self._capacity(positions)
        if capacity == self.self_kv.size(4):
            return
        L, _, G, H, _, W, Dh = self.self_kv.shape
        grown = self.self_kv.new_empty(L, 2, G, H, capacity, W, Dh)
        grown[:, :, :, :, : self.step] = self.self_kv[:, :, :, :, : self.step]
        slots = self.slots.new_zeros(*self.slots.shape[:2], capacity)
        slots[:, :, : self.step] = self.slots[:, :, : self.step]
        self.self_kv, self.slots = grown, slots


class LayerCache(NamedTuple):
    """One decoder layer's view of the DecoderCache at a decoding step."""

    cache: DecoderCache
    index: int

    @property
    def memory_kv(self) -> Tensor:
        """The encoder output's keys and values for this layer: [2, G, H, S, Dh]."""
        return self.cache.cross_kv[self.index]

    @property
    def self_mask(self) -> Tensor | None:
        return self.cache.self_mask

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        return self.cache.append(self.index, k, v)
