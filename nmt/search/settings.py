"""How to search: one typed object from wherever the settings come from (the config's `decode` section, the
command line's --beam/--nbest/--length-penalty, a server request, `nmt explain`, validation) to the search loop.
Adding a search option means adding its field here and reading it where it acts, nothing in between.

What is not a search setting stays with its owner: batching (`decode.max_tokens`, `decode.chunk_lines`) and the
source side (`decode.prefix`, `decode.max_input_tokens`) are the translator's; the ids of BOS, EOS and PAD are the
tokenizer's (`SpecialIds`, passed beside the settings)."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

import torch

# Steps between checks for finished sentences, by device. A check costs a host wait, which stalls a GPU's queue of
# launched kernels (4: a guess until measured); on a CPU nothing is queued, while a finished sentence's rows left
# in the batch cost a whole decoder step each (at batch 1 every step past the end is wasted): check every step.
POLL_EVERY = {"cpu": 1, "other": 4}


@dataclass(frozen=True)
class SearchSettings:
    beam: int = 4  # 1: greedy search (the most likely token at every step)
    nbest: int = 1  # hypotheses returned per sentence, best first (at most `beam`)
    length_penalty: float = 0.6  # alpha of the length penalty
    length_penalty_type: str = "gnmt"  # gnmt: ((5 + L) / 6) ** alpha | average: L ** alpha (checked by the config)
    max_len_a: float = 1.0  # output length limit: floor(a * source tokens + b)
    max_len_b: int = 50
    min_len: int = 0  # output tokens (EOS not counted) before EOS may be written; the length limit still ends it
    # Sampling (nmt.search.sampling) instead of search: `beam` samples per sentence, the best `nbest` returned
    sampling: bool = False
    sampling_topk: int = 0  # draw from the k most likely tokens only (0: from all)
    sampling_topp: float = 1.0  # ... and from the smallest most-likely set holding this probability (1: all)
    sampling_temperature: float = 1.0  # the distribution's temperature: < 1 sharper, > 1 flatter
    sampling_seed: int = 0  # the draws repeat exactly for the same seed and the same batch
    need_attention: bool = False  # each hypothesis keeps its cross-attention rows (alignments, pictures, glossaries)
    attention_layer: int = -1  # the decoder layer those rows come from
    deadline: float | None = None  # time.monotonic() past which a constrained search returns what it has
    # Steps between the host's checks for finished sentences (greedy and beam search; 0: POLL_EVERY of the device).
    # In between no step waits for the device; a finished sentence's rows stay in the batch, masked, until checked.
    poll_every: int = 0

    def __post_init__(self) -> None:
        if self.beam < 1 or not 1 <= self.nbest <= self.beam:
            raise ValueError(f"need beam >= 1 and 1 <= nbest <= beam, got beam={self.beam}, nbest={self.nbest}")
        if self.min_len < 0 or self.poll_every < 0 or self.sampling_topk < 0 or not 0 < self.sampling_topp <= 1 \
                or not self.sampling_temperature > 0:
            raise ValueError("need min_len >= 0, poll_every >= 0, sampling_topk >= 0, 0 < sampling_topp <= 1 and "
                             "sampling_temperature > 0")

    def poll_interval(self, device: torch.device) -> int:
        """`poll_every`, or the device's default."""
        return self.poll_every or POLL_EVERY.get(device.type, POLL_EVERY["other"])

    @classmethod
    def of(cls, source: Any, **changes: Any) -> SearchSettings:
        """The settings held by `source` (any object with some of these fields by name: the config's
        DecodeConfig), with `changes` on top."""
        held = {f.name: getattr(source, f.name) for f in fields(cls) if hasattr(source, f.name)}
        return cls(**{**held, **changes})

    def but(self, **changes: Any) -> SearchSettings:
        """These settings with `changes`."""
        return replace(self, **changes) if changes else self
