"""The batches training reads, padded or packed: a sampler's examples fetched from the dataset and collated in the
sampler's layout (nmt.data.batching: padded, nmt.data.packing: packed), and a batch split in two for an
out-of-memory retry in the layout it has."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from nmt.data.batching import Batch, collate, split_batch
from nmt.data.packing import collate_packed, split_packed


def batches_from_dataset(dataset: Any, sampler: Any, special: Any) -> Iterator[Batch]:
    """Fetch each batch of ``sampler`` from ``dataset`` (``dataset[list] -> {column: [rows]}``) and collate
    with the ``special`` ids (``.pad/.bos/.eos``, the tokenizer's), to the sampler's length multiple, packed if the
    sampler packs. Training reads it ahead on a thread (nmt.data.prefetch), which records the sampler's position
    with each batch."""
    multiple = getattr(sampler, "multiple", 1)
    for idx in sampler:
        cols = dataset[idx]
        if getattr(sampler, "packed", False):
            yield collate_packed(cols["src_ids"], cols["tgt_ids"], idx, pad=special.pad, bos=special.bos,
                                 eos=special.eos, max_tokens=sampler.max_tokens, multiple=multiple)
        else:
            yield collate(cols["src_ids"], cols["tgt_ids"], idx, pad=special.pad, bos=special.bos, eos=special.eos,
                          multiple=multiple)


def split(batch: Batch, pad: int, multiple: int = 1) -> list[Batch]:
    """The two halves (by sentences) of a batch of >= 2 sentences, in its layout, lengths to `multiple`."""
    return split_packed(batch, pad, multiple) if batch.packed is not None else split_batch(batch, pad, multiple)
