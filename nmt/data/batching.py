"""Token-budget batching: length-bucketed, DDP-sharded, exactly resumable (fairseq style).

Examples are sorted by (tgt_len, src_len) so a batch holds similar lengths (little padding), cut greedily
so that ``len(batch) * longest padded side <= max_tokens``, and the ORDER of batches is shuffled per epoch.
Because examples with equal (tgt_len, src_len) are interchangeable for the budget, the cut points are the
same in every epoch; only the tie-break inside equal lengths and the batch order change with the epoch.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch

from nmt.errors import NmtError
from nmt.loss import target_positions
from nmt.packed import Packed

# Below this many examples per batch (budget / median size) the per-batch numpy overhead exceeds a plain loop.
_SMALL_BATCH = 24


def _as_lengths(lens: Sequence[int] | np.ndarray, name: str) -> np.ndarray:
    arr = np.asarray(lens, dtype=np.int64).reshape(-1)
    if arr.size and arr.min() < 0:
        raise NmtError(f"{name} contains a negative length ({int(arr.min())})")
    return arr


def round_up(n: int | np.ndarray, multiple: int) -> int | np.ndarray:
    """n (a length, or an array of them) rounded up to a multiple of `multiple` (>= 1)."""
    return -(-n // multiple) * multiple


def cut_loop(sizes: np.ndarray, max_tokens: int) -> np.ndarray:
    """Reference greedy cut (one Python step per example): boundaries [0, ..., n]."""
    bounds = [0]
    count = longest = 0
    for i, size in enumerate(sizes.tolist()):
        if count and (count + 1) * max(longest, size) > max_tokens:
            bounds.append(i)
            count = longest = 0
        count += 1
        longest = max(longest, size)
    if count:
        bounds.append(len(sizes))
    return np.asarray(bounds, dtype=np.int64)


def cut_windows(sizes: np.ndarray, max_tokens: int) -> np.ndarray:
    """Same greedy cut, one numpy pass per batch: padded cost of a prefix = running max * count,
    which never decreases, so the batch length is a searchsorted on that cost."""
    n = len(sizes)
    bounds = [0]
    start, window = 0, 16
    while start < n:
        width = min(window, n - start)
        while True:
            cost = np.maximum.accumulate(sizes[start : start + width]) * np.arange(1, width + 1)
            take = int(np.searchsorted(cost, max_tokens, side="right"))
            if take < width or start + width >= n:
                break
            width = min(2 * width, n - start)  # every example fitted: look further
        take = max(take, 1)  # an oversize example still forms a batch of its own
        start += take
        bounds.append(start)
        window = 2 * take + 1  # neighbours have similar lengths, so the next batch is about as long
    return np.asarray(bounds, dtype=np.int64)


def cut_batches(sizes: np.ndarray, max_tokens: int) -> np.ndarray:
    """Greedy cut of a length-sorted size sequence into batches under ``max_tokens`` padded tokens.

    Returns boundaries ``b`` (batch i = positions ``b[i]:b[i+1]``). An example larger than the budget
    by itself becomes a batch of one: examples are never dropped silently."""
    sizes = np.asarray(sizes, dtype=np.int64)
    if len(sizes) == 0:
        return np.zeros(1, dtype=np.int64)
    if max_tokens / max(float(np.median(sizes)), 1.0) < _SMALL_BATCH:
        return cut_loop(sizes, max_tokens)
    return cut_windows(sizes, max_tokens)


def cut_packed(src_sizes: np.ndarray, tgt_sizes: np.ndarray, max_tokens: int) -> np.ndarray:
    """Greedy cut of examples (in sorted order) into batches whose source and target lengths each SUM to
    <= max_tokens (an example larger than that alone is a batch of one): boundaries [0, ..., n]."""
    ends = [np.cumsum(sizes) for sizes in (src_sizes, tgt_sizes)]
    bounds, start = [0], 0
    while start < len(src_sizes):
        fits = [int(np.searchsorted(e, (e[start - 1] if start else 0) + max_tokens, side="right")) for e in ends]
        start = max(min(fits), start + 1)
        bounds.append(start)
    return np.asarray(bounds, dtype=np.int64)


def _rng(seed: int, epoch: int) -> np.random.Generator:
    # A (seed, epoch) pair, not seed + epoch, so (1, 2) and (2, 1) give different streams.
    return np.random.default_rng([int(seed) % 2**64, int(epoch) % 2**64])


class TokenBatchSampler:
    """Iterable of batches (lists of example indices) under a padded-token budget.

    ``src_lens``/``tgt_lens`` are token counts without BOS/EOS; each side counts ``extra_tokens`` more
    (the EOS on the source, BOS/EOS on the target). A batch satisfies
    ``len(batch) * max(max(src_len + extra), max(tgt_len + extra)) <= max_tokens``, except that an
    example longer than ``max_tokens`` on its own forms a batch of one (never dropped).

    ``multiple``: every padded length is rounded up to a multiple of it (fairseq's
    ``--required-seq-len-multiple``, Hugging Face's ``pad_to_multiple_of``), in the budget as in the batch's
    tensors (``collate``): on a GPU, matrix shapes that tensor cores take whole, and under ``torch.compile``
    an eighth of the distinct lengths. The extra columns are padding, masked like any other.

    ``packed``: the budget is each side's SUM of lengths instead (``cut_packed``), for batches laid end to end in one
    row (nmt.data.packing); the multiple then rounds that row's width, not the sentences' lengths.

    DDP: every rank builds the same global batch list for the epoch, padded to a multiple of
    ``num_replicas`` by repeating its first batches; rank r takes global batches r, r+W, r+2W, ...
    So one process with update_freq=W sees the same groups of batches as W ranks.

    Epoch and position: ``__iter__`` yields the current epoch's batches from ``position`` on and counts
    each batch as consumed when it is yielded. A pass that runs to the end moves the sampler to the
    start of the next epoch, so ``state_dict()`` taken after the loop resumes correctly and iterating
    again gives a fresh epoch. ``set_epoch(e)`` jumps to the start of epoch ``e`` unless ``e`` is already
    the current epoch (so a restored sampler can be set to its own epoch without losing its place).
    Use one iterator at a time. With a multi-worker DataLoader the sampler runs ahead of training by the
    prefetch depth; ``nmt.data.batches.batches_from_dataset`` fetches synchronously and keeps ``position`` exact.
    """

    def __init__(
        self,
        src_lens: Sequence[int] | np.ndarray,
        tgt_lens: Sequence[int] | np.ndarray,
        max_tokens: int,
        *,
        shuffle: bool = True,
        seed: int = 1,
        num_replicas: int = 1,
        rank: int = 0,
        extra_tokens: int = 1,
        multiple: int = 1,
        packed: bool = False,
    ) -> None:
        src = _as_lengths(src_lens, "src_lens")
        tgt = _as_lengths(tgt_lens, "tgt_lens")
        if len(src) != len(tgt):
            raise NmtError(f"src_lens has {len(src)} entries but tgt_lens has {len(tgt)}")
        if int(max_tokens) < 1:
            raise NmtError(f"max_tokens must be >= 1, got {max_tokens}")
        if int(num_replicas) < 1 or not 0 <= int(rank) < int(num_replicas):
            raise NmtError(f"invalid DDP rank {rank} of num_replicas {num_replicas}")
        if int(extra_tokens) < 0:
            raise NmtError(f"extra_tokens must be >= 0, got {extra_tokens}")
        if int(multiple) < 1:
            raise NmtError(f"multiple must be >= 1, got {multiple}")
        self.max_tokens = int(max_tokens)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.num_replicas = int(num_replicas)
        self.rank = int(rank)
        self.extra_tokens = int(extra_tokens)
        self.multiple = int(multiple)
        self.packed = bool(packed)
        self.epoch = 1
        self._position = 0
        self._src = src + self.extra_tokens
        self._tgt = tgt + self.extra_tokens
        # Sort key (tgt, src) as one integer; the sorted size sequence is the same whatever the tie-break.
        self._key = self._tgt * (int(self._src.max(initial=0)) + 1) + self._src
        order = np.argsort(self._key, kind="stable")
        if self.packed:  # the budget is each side's sum of lengths (nmt.data.packing lays them out)
            self._bounds = cut_packed(self._src[order], self._tgt[order], self.max_tokens)
        else:
            sorted_sizes = round_up(np.maximum(self._src, self._tgt)[order], self.multiple)  # as collate pads
            self._bounds = cut_batches(sorted_sizes, self.max_tokens)
        n_global = len(self._bounds) - 1
        self._n_padded = -(-n_global // self.num_replicas) * self.num_replicas
        self._cache: tuple[int, np.ndarray, np.ndarray] | None = None

    @classmethod
    def from_dataset(cls, dataset: Any, max_tokens: int, **kwargs: Any) -> TokenBatchSampler:
        """Build from a dataset with ``src_len``/``tgt_len`` columns (HF ``datasets.Dataset`` or dict)."""
        return cls(_column(dataset, "src_len"), _column(dataset, "tgt_len"), max_tokens, **kwargs)

    # -- epoch layout ---------------------------------------------------------------------------------
    def _layout(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """(example order, padded global batch ids) for an epoch; cached for the last epoch asked."""
        if self._cache is not None and self._cache[0] == epoch:
            return self._cache[1], self._cache[2]
        n_batches = len(self._bounds) - 1
        if self.shuffle:
            rng = _rng(self.seed, epoch)
            perm = rng.permutation(len(self._key))
            order = perm[np.argsort(self._key[perm], kind="stable")]
            batch_ids = rng.permutation(n_batches)
        else:
            order = np.argsort(self._key, kind="stable")
            batch_ids = np.arange(n_batches)
        padded = np.resize(batch_ids, self._n_padded)  # repeats the first batches cyclically
        order.flags.writeable = False  # batches are views of it
        self._cache = (epoch, order, padded)
        return order, padded

    def _batch(self, order: np.ndarray, batch_id: int) -> np.ndarray:
        return order[self._bounds[batch_id] : self._bounds[batch_id + 1]]

    def batches_for_epoch(self, epoch: int) -> list[np.ndarray]:
        """The global (all ranks, padded) batch list of an epoch, as read-only index arrays."""
        order, padded = self._layout(epoch)
        return [self._batch(order, int(b)) for b in padded]

    def rank_batches(self, epoch: int) -> list[np.ndarray]:
        """This rank's batches for an epoch: ``batches_for_epoch(epoch)[rank::num_replicas]``."""
        order, padded = self._layout(epoch)
        return [self._batch(order, int(b)) for b in padded[self.rank :: self.num_replicas]]

    # -- iteration ------------------------------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        if int(epoch) != self.epoch:
            self.epoch = int(epoch)
            self._position = 0

    def __len__(self) -> int:
        return self._n_padded // self.num_replicas

    def __iter__(self) -> Iterator[list[int]]:
        order, padded = self._layout(self.epoch)
        mine = padded[self.rank :: self.num_replicas]
        while self._position < len(mine):
            batch = self._batch(order, int(mine[self._position]))
            self._position += 1
            yield batch.tolist()
        self.epoch += 1
        self._position = 0

    # -- resume ---------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, int]:
        return {
            "epoch": self.epoch,
            "position": self._position,
            "seed": self.seed,
            "max_tokens": self.max_tokens,
            "num_replicas": self.num_replicas,
            "multiple": self.multiple,
            "packed": int(self.packed),
        }

    def load_state_dict(self, state: dict[str, int], *, strict: bool = True) -> None:
        """Continue exactly where ``state`` was taken.

        A different seed, max_tokens, multiple or packing changes the batches, so exact resume is impossible: with
        ``strict`` that is an NmtError; otherwise a started epoch is abandoned for the start of the next.
        A different num_replicas keeps the global progress (to within num_replicas batches)."""
        epoch, position = int(state["epoch"]), int(state["position"])
        old_w = int(state.get("num_replicas", self.num_replicas))
        before = {"multiple": 1, "packed": 0, **state}  # states from before rounding and packing: 1, unpacked
        changed = [k for k in ("seed", "max_tokens", "multiple", "packed")
                   if int(before.get(k, getattr(self, k))) != getattr(self, k)]
        if changed:
            if strict:
                diffs = ", ".join(f"{k} {before[k]} -> {int(getattr(self, k))}" for k in changed)
                raise NmtError(f"cannot resume the batch order exactly: {diffs} changed since the checkpoint")
            # Other batches now: replaying part of an epoch would overweight it, so start the next one.
            self.epoch, self._position = (epoch + 1, 0) if position > 0 else (epoch, 0)
            return
        consumed_global = position * old_w
        self.epoch = epoch
        self._position = min(-(-consumed_global // self.num_replicas), len(self))


def _column(dataset: Any, name: str) -> np.ndarray:
    if hasattr(dataset, "with_format"):  # HF datasets: the numpy format avoids a slow per-row conversion
        return np.asarray(dataset.with_format("numpy")[name][:])
    return np.asarray(dataset[name])


# ---------------------------------------------------------------------------------------------------
@dataclass
class Batch:
    """A padded batch. ``src`` = ids + EOS; ``tgt_in`` = BOS + ids; ``tgt_out`` = ids + EOS; right-padded. Or a
    packed one (nmt.data.packing): one row [1, width] per side, the sentences' segments in ``packed``."""

    src: torch.Tensor  # [B, S] long
    tgt_in: torch.Tensor  # [B, T] long
    tgt_out: torch.Tensor  # [B, T] long
    n_src_tokens: int  # non-pad tokens in src (EOS included)
    n_tgt_tokens: int  # non-pad tokens in tgt_out (EOS included)
    index: torch.Tensor  # [B] long, dataset indices
    tgt_positions: torch.Tensor | None = None  # [n_tgt_tokens] long, flat positions of tgt_out's non-pad tokens
    packed: Packed | None = None

    def __len__(self) -> int:
        """Sentences."""
        return self.index.shape[0]

    def _map(self, fn: Any) -> Batch:
        def one(v: Any) -> Any:
            return fn(v) if isinstance(v, torch.Tensor) else v.map(fn) if isinstance(v, Packed) else v
        return Batch(**{f.name: one(getattr(self, f.name)) for f in fields(self)})

    def to(self, device: torch.device | str) -> Batch:
        """A copy on ``device``; from pinned memory (`pin_memory`) the copy to a GPU overlaps its compute."""
        return self._map(lambda t: t.to(device, non_blocking=True))

    def pin_memory(self) -> Batch:
        """A copy in page-locked memory, which a GPU copies from asynchronously."""
        return self._map(lambda t: t.pin_memory())


def split_batch(batch: Batch, pad: int, multiple: int = 1) -> list[Batch]:
    """The two halves (by sentences) of a padded batch of >= 2 sentences, each trimmed to its own padding (its lengths
    rounded up to `multiple`, as the batch's were)."""
    half = len(batch) // 2
    pieces = []
    for rows in (slice(0, half), slice(half, len(batch))):
        src, tgt_in, tgt_out = batch.src[rows], batch.tgt_in[rows], batch.tgt_out[rows]
        src_width = round_up(int((src != pad).sum(1).max()), multiple)
        tgt_width = round_up(int((tgt_out != pad).sum(1).max()), multiple)
        pieces.append(Batch(
            src=src[:, :src_width], tgt_in=tgt_in[:, :tgt_width], tgt_out=tgt_out[:, :tgt_width],
            n_src_tokens=int((src != pad).sum()), n_tgt_tokens=int((tgt_out != pad).sum()),
            index=batch.index[rows], tgt_positions=target_positions(tgt_out[:, :tgt_width], pad),
        ))
    return pieces


def _pad_rows(seqs: Sequence[Sequence[int]], width_extra: int, offset: int, pad: int, multiple: int = 1) -> tuple:
    """Rows of ``seqs`` in a [B, max_len + width_extra] array (the width rounded up to ``multiple``) starting at
    column ``offset``."""
    lens = np.fromiter((len(s) for s in seqs), dtype=np.int64, count=len(seqs))
    width = round_up(int(lens.max(initial=0)) + width_extra, multiple)
    out = np.full((len(seqs), width), pad, dtype=np.int64)
    flat = np.fromiter(itertools.chain.from_iterable(seqs), dtype=np.int64, count=int(lens.sum()))
    cols = np.arange(width - offset)
    out[:, offset:][cols[None, :] < lens[:, None]] = flat  # row-major fill = concatenation order
    return out, lens


def collate(
    src_ids: Sequence[Sequence[int]],
    tgt_ids: Sequence[Sequence[int]],
    indices: Sequence[int] | np.ndarray | torch.Tensor | None = None,
    *,
    pad: int,
    bos: int,
    eos: int,
    multiple: int = 1,
) -> Batch:
    """Pad a list of (src, tgt) id sequences (without BOS/EOS) into a Batch, right-padded with ``pad``, each
    side's length a multiple of ``multiple`` (TokenBatchSampler)."""
    if len(src_ids) != len(tgt_ids):
        raise ValueError(f"collate: {len(src_ids)} sources but {len(tgt_ids)} targets")
    rows = np.arange(len(src_ids))
    src, src_lens = _pad_rows(src_ids, 1, 0, pad, multiple)
    src[rows, src_lens] = eos
    tgt_in, tgt_lens = _pad_rows(tgt_ids, 1, 1, pad, multiple)
    tgt_in[:, 0] = bos
    tgt_out = np.empty_like(tgt_in)  # tgt_in shifted left by one, EOS after the ids
    tgt_out[:, :-1] = tgt_in[:, 1:]
    tgt_out[:, -1] = pad
    tgt_out[rows, tgt_lens] = eos
    if indices is None:
        index = torch.arange(len(src_ids), dtype=torch.long)
    else:
        index = torch.as_tensor(np.asarray(indices, dtype=np.int64))
    target = torch.from_numpy(tgt_out)
    return Batch(
        src=torch.from_numpy(src),
        tgt_in=torch.from_numpy(tgt_in),
        tgt_out=target,
        n_src_tokens=int(src_lens.sum()) + len(src_ids),
        n_tgt_tokens=int(tgt_lens.sum()) + len(tgt_ids),
        index=index,
        tgt_positions=target_positions(target, pad),
    )


def source_batches(sources: Sequence[Sequence[int]], max_tokens: int,
                   special: Any) -> Iterator[tuple[list[int], Batch]]:
    """Sources alone (translation, validation BLEU: no targets) in length-sorted batches of at most
    ``max_tokens`` padded tokens; yields (positions in ``sources``, batch)."""
    sampler = TokenBatchSampler([len(s) for s in sources], [0] * len(sources), max_tokens, shuffle=False)
    for idx in sampler:
        rows = [int(i) for i in idx]
        yield rows, collate([sources[i] for i in rows], [[] for _ in rows], pad=special.pad, bos=special.bos,
                            eos=special.eos)
