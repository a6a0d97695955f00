"""The model through torch.compile for training (train.compile, train.compile_mode), and the log of the graphs it
builds.

`reduce-overhead` (and `max-autotune`) add CUDA graphs: each forward and backward is recorded once per shape and
replayed as one launch, so the host's ~1,000 kernel launches per update leave the GPU's critical path. Packed
batches (train.packed) have one shape, so one recording serves the whole run; padded batches record one per
shape they meet. On a CPU there is no CUDA graph, and these modes compile as `default` does.

CUDA graph trees give a replay's gradient buffers to the parameters' `.grad` (the first micro-batch's gradient
is the buffer itself, not a copy), and the next replay writes the same buffers: with two micro-batches per update
(train.update_freq, or a batch split after running out of memory) the first one's gradient is overwritten instead
of summed (pytorch/pytorch#169545). Under those modes every parameter's gradient is therefore copied as it
arrives, before it is accumulated: one more read and write of the gradients per micro-batch, for sums that are
right however many micro-batches an update has.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import Tensor, nn

from nmt.data.batching import Batch

CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")  # torch.compile's modes that record CUDA graphs


def compile_for_training(forward: Callable, params: Iterable[nn.Parameter], mode: str) -> Callable:
    """`forward` (the model, or DDP around it) through torch.compile in `mode`; under a CUDA graph mode each of
    `params` gets its gradient as a copy of what the backward replay wrote (the module docstring says why)."""
    if mode in CUDA_GRAPH_MODES:
        for p in params:
            if p.requires_grad:
                p.register_hook(own_copy)
    return torch.compile(forward, mode=mode)


def own_copy(grad: Tensor) -> Tensor:
    """A gradient in memory of its own: what autograd accumulates into `.grad` instead of the replay's buffer."""
    return grad.clone()


def compiled_graphs() -> int:
    """The graphs torch.compile has built in this process: a new one means a batch of a shape (or a dynamic range)
    that the graphs before it did not serve."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


class CompileWatch:
    """Logs each graph torch.compile builds (`info`): a few while the shapes it serves become dynamic, more when
    batches' shapes keep surprising it (each a compile of seconds to a minute)."""

    def __init__(self, info: Callable[[str], None], multiple: int):
        self.info, self.multiple = info, multiple
        self.graphs = compiled_graphs()  # this process's before this run's (tests train several in one)

    def __call__(self, step: int, batch: Batch) -> None:
        graphs = compiled_graphs()
        if graphs > self.graphs:
            self.graphs = graphs
            self.info(f"torch.compile: graph {graphs} built at update {step} (a batch of {len(batch)} sentences, "
                      f"source {batch.src.size(1)}, target {batch.tgt_in.size(1)} tokens; lengths padded to a "
                      f"multiple of {self.multiple})")
