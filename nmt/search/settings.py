"""How to search: one typed object from wherever the settings come from (the config's `decode` section, the
command line's --beam/--nbest/--length-penalty, a server request, `nmt explain`, validation) to the search loop.
Adding a search option means adding its field here and reading it where it acts, nothing in between.

What is not a search setting stays with its owner: batching (`decode.max_tokens`, `decode.chunk_lines`) and the
source side (`decode.prefix`, `decode.max_input_tokens`) are the translator's; the ids of BOS, EOS and PAD are the
tokenizer's (`SpecialIds`, passed beside the settings)."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any


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

    def __post_init__(self) -> None:
        if self.beam < 1 or not 1 <= self.nbest <= self.beam:
            raise ValueError(f"need beam >= 1 and 1 <= nbest <= beam, got beam={self.beam}, nbest={self.nbest}")
        if self.min_len < 0 or self.sampling_topk < 0 or not 0 < self.sampling_topp <= 1 \
                or not self.sampling_temperature > 0:
            raise ValueError("need min_len >= 0, sampling_topk >= 0, 0 < sampling_topp <= 1 and "
                             "sampling_temperature > 0")

    @classmethod
    def of(cls, source: Any, **changes: Any) -> SearchSettings:
        """The settings held by `source` (any object with some of these fields by name: the config's
        DecodeConfig), with `changes` on top."""
        held = {f.name: getattr(source, f.name) for f in fields(cls) if hasattr(source, f.name)}
        return cls(**{**held, **changes})

    def but(self, **changes: Any) -> SearchSettings:
        """These settings with `changes`."""
        return replace(self, **changes) if changes else self
