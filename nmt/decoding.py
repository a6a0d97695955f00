"""Incremental decoding state: the decoder's key/value cache and its reorder contract (beams reordered,
finished sentences dropped, with as little copying as possible), and new sentences joining a running search
(`admit`, in-flight batching). Built by `Transformer.init_cache`, advanced by `Transformer.decode_step`,
reordered by the search."""

from __future__ import annotations

from dataclasses import dataclass

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
                 to the `max_len` hint, further only if needed); see `Transformer.init_cache`.
    slots:       [G, group, capacity] which slot holds position p of row q's own history. A beam reorder
                 only rewrites this small index (a beam inherits its parent's history by reference), so
                 the keys/values are copied only when sentences leave the batch or the group widens.
    max_len:     expected number of steps.
    step:        steps decoded so far = the cache time of the next token.
    start:       [G] the step at which each group joined (`admit`), or None when all joined at step 0. A
                 group's next token is at position step - start[g]; its times before start[g] hold
                 slot -1 in `slots`, so its rows never attend to them. Keys do not depend on their cache
                 time (positions are added to the embeddings), so a sentence decodes exactly as if alone.
    """

    cross_kv: Tensor
    memory_mask: Tensor
    self_kv: Tensor
    slots: Tensor
    max_len: int
    step: int = 0
    group: int = 1
    start: Tensor | None = None

    @property
    def batch_size(self) -> int:
        return self.slots.size(0) * self.group

    def positions(self) -> Tensor | int:
        """Position of each row's next token [N], or one int when every group joined at step 0."""
        if self.start is None:
            return self.step
        return (self.step - self.start).repeat_interleave(self.group)

    def first_seen(self) -> int:
        """The earliest cache time any group attends to (the times before are masked for every group, as all
        joined later: a step need not attend over them)."""
        return 0 if self.start is None else int(self.start.min())

    def begin_step(self, dtype: torch.dtype, first: int = 0) -> Tensor | None:
        """Record that each row writes its own slot at this step; return the additive self-attention mask
        [G, 1, group, (step + 1 - first) * W] over the group's keys from time `first` on (None while every group
        has one slot and joined at step 0)."""
        step, W = self.step, self.self_kv.size(5)
        self.slots[:, :, step] = torch.arange(self.group, device=self.slots.device)
        if W == 1 and self.start is None:
            return None
        G, Q = self.slots.shape[:2]
        own = self.slots[:, :, first : step + 1, None] == torch.arange(W, device=self.slots.device)
        mask = torch.zeros(G, 1, Q, (step + 1 - first) * W, dtype=dtype, device=self.self_kv.device)
        return mask.masked_fill_(~own.view(G, 1, Q, -1), float("-inf"))

    def reorder(self, keep: Tensor, parents: Tensor) -> None:
        """The search's decision, stated explicitly: the groups (sentences) `keep` [G'] stay, in that order
        (a repeat copies a group), and row q of new group g continues the history of row parents[g, q]
        of old group keep[g] (parents [G', Q'], Q' the new group size: beam search's first step widens
        1 -> beam). Within groups only `slots` is gathered; the keys/values are copied only when groups
        are dropped, repeated or reordered, or widen (and then without the times no kept group sees)."""
        keep = keep.to(self.slots.device)
        parents = parents.to(self.slots.device)
        slots = self.slots[keep[:, None], parents]
        W, group = self.self_kv.size(5), parents.size(1)
        if _is_identity(keep, self.cross_kv.size(2)) and group <= W:
            self.slots, self.group = slots, group
            return
        start = None if self.start is None else self.start.index_select(0, keep)
        first = 0 if start is None else int(start.min())  # the earliest time a kept group attends to
        steps = self.step - first
        kv = self._empty(keep.numel(), steps, max(W, group))
        kv[:, :, :, :, :steps, :W] = self.self_kv[:, :, :, :, first : self.step].index_select(2, keep)
        kv[:, :, :, :, :steps, W:] = 0  # new slots: masked, and must not hold NaN garbage
        self._set_self(kv, slots[:, :, first : self.step], start, first)
        self.cross_kv = self.cross_kv.index_select(2, keep)
        self.memory_mask = self.memory_mask.index_select(0, keep)
        self.group = group

    def release(self, groups: Tensor) -> None:
        """The sentences of `groups` have left, their groups stay in the batch (no copy) until `admit` fills them
        or a `reorder` drops them: from now on their rows see nothing they wrote before."""
        self.slots[groups] = -1
        self.start = (self.start if self.start is not None else self.slots.new_zeros(self.slots.size(0))).clone()
        self.start[groups] = self.step

    def admit(self, new: DecoderCache, into: Tensor | None = None) -> None:
        """New sentences (`new`, a cache from init_cache, nothing decoded yet) join at this step with this cache's
        group size: the first ones into released groups `into` (their keys/values are not copied), the others
        appended as new groups. Their rows attend only to what they write from now on. The source axis grows to
        the longer source (padding is masked)."""
        S = max(self.cross_kv.size(4), new.cross_kv.size(4))
        if S > self.cross_kv.size(4):
            self.cross_kv, self.memory_mask = _pad_to(self.cross_kv, 4, S, 0), _pad_to(self.memory_mask, 3, S, False)
        cross, mask = _pad_to(new.cross_kv, 4, S, 0), _pad_to(new.memory_mask, 3, S, False)
        self.max_len = max(self.max_len, self.step + new.max_len)
        reused = 0 if into is None else into.numel()
        if reused:
            self.release(into)
            self.cross_kv[:, :, into] = cross[:, :, :reused]
            self.memory_mask[into] = mask[:reused]
        if reused < mask.size(0):
            self._append(cross[:, :, reused:], mask[reused:])

    def _append(self, cross_kv: Tensor, memory_mask: Tensor) -> None:
        """New groups (their cross-attention keys/values and source mask) starting at this step: one copy of the
        keys/values, without the times no group sees."""
        G, n, W = self.slots.size(0), memory_mask.size(0), self.self_kv.size(5)
        start = self.start if self.start is not None else self.slots.new_zeros(G)
        first = int(start.min()) if G else self.step
        steps = self.step - first
        kv = self._empty(G + n, steps, W)
        kv[:, :, :G, :, :steps] = self.self_kv[:, :, :, :, first : self.step]
        kv[:, :, G:, :, :steps] = 0  # before they join: masked, and must not hold NaN garbage
        slots = self.slots.new_full((G + n, self.group, steps), -1)
        slots[:G] = self.slots[:, :, first : self.step]
        self._set_self(kv, slots, torch.cat([start, start.new_full((n,), self.step)]), first)
        self.cross_kv = torch.cat([self.cross_kv, cross_kv], dim=2)
        self.memory_mask = torch.cat([self.memory_mask, memory_mask])

    def _empty(self, groups: int, steps: int, slots: int) -> Tensor:
        """Uninitialised keys/values for `groups` groups: room for `steps` decoded steps and the next ones."""
        L, _, _, H, _, _, Dh = self.self_kv.shape
        return self.self_kv.new_empty(L, 2, groups, H, self._capacity(steps + 1), slots, Dh)

    def _set_self(self, kv: Tensor, slots: Tensor, start: Tensor | None, first: int) -> None:
        """The new self-attention cache: kv holding slots.size(2) decoded steps, cache time `first` of the old
        one becoming time 0; `start` the groups' start times in the old one's time."""
        steps = slots.size(2)
        self.self_kv, self.step = kv, steps
        self.slots = torch.cat([slots, slots.new_zeros(*slots.shape[:2], kv.size(4) - steps)], dim=2)
        self.start = None if start is None or not bool(start.ne(first).any()) else start - first

    def _capacity(self, positions: int) -> int:
        """Capacity for `positions`: the current one while it suffices, else doubled (up to max_len)."""
        capacity = self.self_kv.size(4)
        return capacity if positions <= capacity else max(positions, min(2 * capacity, self.max_len))

    def reserve(self, positions: int) -> None:
        """Make room for `positions` target positions: when the capacity runs out, drop the times no group sees
        any more (`first_seen`), doubling the capacity only if that is not enough."""
        if positions <= self.self_kv.size(4):
            return
        first = self.first_seen()
        steps = self.step - first
        kv = self._empty(self.slots.size(0), steps, self.self_kv.size(5))
        kv[:, :, :, :, :steps] = self.self_kv[:, :, :, :, first : self.step]
        self._set_self(kv, self.slots[:, :, first : self.step], self.start, first)


def _pad_to(x: Tensor, dim: int, size: int, value: float | bool) -> Tensor:
    """x padded with `value` at the end of `dim` to `size`."""
    if x.size(dim) == size:
        return x
    shape = list(x.shape)
    shape[dim] = size - x.size(dim)
    return torch.cat([x, x.new_full(shape, value)], dim=dim)


def _is_identity(keep: Tensor, groups: int) -> bool:
    """Whether `keep` keeps all `groups` groups in their order (then no key/value moves)."""
    return keep.numel() == groups and bool(keep.eq(torch.arange(groups, device=keep.device)).all())
