"""A CUDA graph's warm-up and recording stood in for on the CPU (nmt.search.graphed's `warm_up` and `record`)."""

from __future__ import annotations

import torch


class StandIn:
    """Counted: the warm-up runs the step; the recording runs nothing and gives the tensors its replays write, each
    replay running the step again over the recorded inputs (what a CUDA graph's replay computes)."""

    def __init__(self) -> None:
        self.warm_ups = self.replays = 0

    def warm_up(self, fn, inputs):
        self.warm_ups += 1
        return fn(*inputs)

    def record(self, fn, inputs, outputs):
        with torch.inference_mode(False):  # a replay writes them whatever mode it runs in, as a graph's do
            mine = [torch.empty_like(x) for x in outputs]

        def replay() -> None:
            self.replays += 1
            for out, x in zip(mine, fn(*inputs), strict=True):
                out.copy_(x)

        return replay, mine
