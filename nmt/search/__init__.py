"""Search over the model's incremental decoder: one loop (loop.run) whose strategies are greedy (greedy), the beam
rule (beam), lexically constrained beam search (constrained) and sampling (sampling), with one settings object
(settings) and what they share (scoring: the hypothesis, the length penalty, the length limit, the stop rule; history:
what greedy and beam search keep on the device, read once at the end); a given output scored the same way (forced).
It knows the model and the kernels only: no files, configs or tokenizers.

Callers use the names below: `run(model, src, SearchSettings(...), special_ids, constraints=..., trace=...)`."""

from nmt.search.beam import BeamStep
from nmt.search.constrained import Terms
from nmt.search.forced import forced
from nmt.search.loop import run
from nmt.search.scoring import Hypothesis, generated_tokens, length_penalty_divisor, max_lengths
from nmt.search.settings import SearchSettings

__all__ = ["BeamStep", "Hypothesis", "SearchSettings", "Terms", "forced", "generated_tokens",
           "length_penalty_divisor", "max_lengths", "run"]
