"""A search's steps as CUDA graphs (`nmt translate --compile` on a GPU): on a GPU a decoder step is ~250 small
kernels, each a launch from Python of a few microseconds, so a step at 4 rows costs what one at 128 rows does and
the GPU waits for the host. Recorded once as a CUDA graph, a step is replayed by one call.

What a graph needs, and how it is given:
- Fixed shapes and addresses. A step reads the whole cache (`GraphCache.prefix`: every position, those after the
  step's own masked, as in decoder_step), not the positions up to its own as a compiled CPU step does. The source
  length and the cache's capacity are rounded up to multiples of ROUND, the rows to a bucket (nmt.search.padded).
  The cache's tensors of one such shape are allocated once and reused by every later search of that shape
  (`GraphCache.load` writes a batch's source into them), so a graph recorded over them replays in every search.
- Inputs in place. A step's other inputs (tokens, scores, the beam's best scores, limits, t) are copied into the
  graph's own tensors before a replay, and its outputs copied out after it: the next replay writes over them.
- Nothing waits for the device inside a step (nmt.search.loop; tests/gpu/test_gpu_search.py), and no tensor is
  made from host values inside one: the programs are nmt.search.padded's, which torch.export also traces.

The first step of a shape runs for real (a warm-up, on a side stream as CUDA graphs need) and gives that step's
result; its recording runs nothing. Later steps replay. Caches (and their graphs) are kept per thread, as a graph's
tensors serve one search at a time, up to BUDGET bytes, the least recently used freed first."""

from __future__ import annotations

import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from nmt.search.padded import PaddedCache, PaddedDecoder, StepRunner, rows_bucket, step_program

ROUND = 16  # source lengths and cache capacities rounded up to a multiple: fewer shapes, fewer graphs
# bytes of keys/values kept per thread in caches of the shapes searches met, the least recently used freed first
# (their graphs' own memory comes on top): a base model's 128-row cache of 128 positions is ~200 MB in fp16, a
# 4-row one ~6 MB, so a server keeps the shapes it meets most
BUDGET = 1 << 30
MAX_ROWS = 128  # the most rows a search runs as graphs (32 sentences at beam 4)

# (fn, inputs) -> fn's outputs, run for real; (fn, inputs, their outputs) -> (replay, the outputs it writes)
WarmUp = Callable[[nn.Module, Sequence[Tensor]], Sequence[Tensor]]
Record = Callable[[nn.Module, Sequence[Tensor], Sequence[Tensor]], tuple[Callable[[], None], Sequence[Tensor]]]


def cuda_warm_up(fn: nn.Module, inputs: Sequence[Tensor]) -> Sequence[Tensor]:
    """fn run on a side stream, as before a capture (libraries set up per stream there, not inside it)."""
    side, current = torch.cuda.Stream(inputs[0].device), torch.cuda.current_stream(inputs[0].device)
    side.wait_stream(current)
    with torch.cuda.stream(side):
        outputs = fn(*inputs)
    current.wait_stream(side)
    for x in outputs:
        x.record_stream(current)  # read on the current stream: not reused before that
    return outputs


def cuda_record(fn: nn.Module, inputs: Sequence[Tensor], _: Sequence[Tensor]) -> tuple[Callable[[], None],
                                                                                    Sequence[Tensor]]:
    """fn recorded as a CUDA graph (nothing runs): its replay and the outputs each replay writes."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):  # a server's other threads may use CUDA
        outputs = fn(*inputs)
    return graph.replay, outputs


class Recorded:
    """One step program over fixed tensors: the cache's (`owned`, passed as they are) and copies of the rest. If the
    recording fails (an operator a CUDA graph cannot hold, in some torch), `announce` is told and the program runs
    as it is at every step, over the same tensors: slower, the same results."""

    def __init__(self, fn: nn.Module, owned: Sequence[Tensor], warm_up: WarmUp, record: Record,
                 announce: Callable[[str], None]):
        self.fn, self.warm_up, self.record, self.announce = fn, warm_up, record, announce
        self.owned = {x.data_ptr() for x in owned}
        self.inputs: list[Tensor] | None = None
        self.replay: Callable[[], None] | None = None
        self.outputs: Sequence[Tensor] = ()

    def __call__(self, *tensors: Tensor) -> list[Tensor]:
        if self.inputs is None:
            with torch.inference_mode(False):  # written in place by later searches, in inference mode or not
                self.inputs = [x if x.data_ptr() in self.owned else x.clone() for x in tensors]
            outputs = list(self.warm_up(self.fn, self.inputs))
            try:
                self.replay, self.outputs = self.record(self.fn, self.inputs, outputs)
            except RuntimeError as e:
                reason = next(iter(str(e).strip().splitlines()), type(e).__name__)
                self.announce(f"a decoding step could not be recorded as a CUDA graph, so it runs without one: "
                              f"{reason}")
            return outputs
        for mine, x in zip(self.inputs, tensors, strict=True):
            if mine.data_ptr() != x.data_ptr():
                mine.copy_(x)
        if self.replay is None:
            return list(self.fn(*self.inputs))
        self.replay()
        return [x.clone() for x in self.outputs]


class GraphCache(PaddedCache):
    """A PaddedCache of one shape, its tensors allocated once and a batch's source loaded into them per search;
    every step reads all of it (`prefix`). `graphs`: the steps recorded over it, by kind."""

    def __init__(self, self_kv: Tensor, cross_kv: Tensor, memory_mask: Tensor):
        super().__init__(self_kv, cross_kv, memory_mask, 0)
        self.lineage = torch.empty(self_kv.size(0), self_kv.size(3), dtype=torch.long, device=self_kv.device)
        self.graphs: dict[Any, Recorded] = {}

    def prefix(self, x: Tensor | None = None) -> Tensor:
        return self.self_kv if x is None else x  # the whole of it, the same tensor at every step

    def load(self, cross_kv: Tensor, real: Tensor, rows: int) -> GraphCache:
        """A search's start: cross_kv [L, 2, B, H, S, Dh] and real [B, S] (True: a source token) of its B
        sentences, `rows` of its rows in use; the rest is padding (sentences with one zero source position)."""
        B, S = real.shape
        self.cross_kv.zero_()
        self.cross_kv[:, :, :B, :, :S].copy_(cross_kv)
        self.memory_mask.zero_()
        self.memory_mask[:B, 0, 0, :S].copy_(real)
        self.memory_mask[B:, 0, 0, 0] = True
        self.self_kv.zero_()  # read whole, masked: zeros, not garbage (NaN times a zero weight is NaN)
        self.lineage.copy_(torch.arange(self.lineage.size(1), device=self.lineage.device).expand_as(self.lineage))
        self.pos.zero_()
        self.step, self.rows = 0, rows  # scalars kept: nmt.search.padded.beam_scalars
        return self


class CacheShape(NamedTuple):
    """A GraphCache's shape: capacity T (rounded up to ROUND), layers L, rows (a bucket, `per` rows per sentence),
    heads H, source length S (rounded up to ROUND), head width Dh, dtype."""

    T: int
    L: int
    rows: int
    per: int
    H: int
    S: int
    Dh: int
    dtype: torch.dtype

    @classmethod
    def of(cls, cross_kv: Tensor, rows: int, per: int, max_len: int) -> CacheShape:
        """The shape for a search of cross_kv [L, 2, B, H, S, Dh] in `rows` rows, `per` per sentence, up to max_len
        positions."""
        L, _, _, H, S, Dh = cross_kv.shape
        return cls(-(-max(max_len, 2) // ROUND) * ROUND, L, rows, per, H, -(-S // ROUND) * ROUND, Dh, cross_kv.dtype)

    @property
    def nbytes(self) -> int:
        """The bytes of its keys/values: the rows' own and their sentences' sources'."""
        entries = self.L * 2 * self.H * self.Dh * (self.T * self.rows + self.rows // self.per * self.S)
        return entries * self.dtype.itemsize

    def allocate(self, device: torch.device) -> GraphCache:
        """A GraphCache of this shape; its tensors are not inference tensors, as searches in inference mode and
        out of it write them in place."""
        like, sentences = {"dtype": self.dtype, "device": device}, self.rows // self.per
        with torch.inference_mode(False):
            return GraphCache(torch.zeros(self.T, self.L, 2, self.rows, self.H, self.Dh, **like),
                              torch.zeros(self.L, 2, sentences, self.H, self.S, self.Dh, **like),
                              torch.zeros(sentences, 1, 1, self.S, dtype=torch.bool, device=device))


class GraphedDecoder(PaddedDecoder):
    """`model` on a CUDA GPU (any dtype it has) as nmt.search.loop.run uses a model: its encoder eager, its
    steps CUDA graphs over GraphCache's tensors. `warm_up` and `record`: how a step runs first and is recorded
    (CUDA's; a CPU test stands in for them); `announce(message)`: told when a step cannot be recorded."""

    def __init__(self, model: nn.Module, warm_up: WarmUp = cuda_warm_up, record: Record = cuda_record,
                 announce: Callable[[str], None] = lambda message: warnings.warn(message, stacklevel=2)):
        super().__init__(model)
        self.warm_up, self.record, self.announce = warm_up, record, announce
        self.local = threading.local()

    def pays(self, sentences: int, per: int) -> bool:
        """Whether a search of `sentences` sentences of `per` rows each runs as graphs (MAX_ROWS)."""
        return rows_bucket(sentences, per) <= MAX_ROWS

    def init_cache(self, memory: Tensor, src_pad_mask: Tensor, max_len: int, rows: int = 1) -> GraphCache:
        """This thread's cache of the search's shape (CacheShape), the batch's source loaded into it."""
        cross_kv = self.cross_kv(memory)  # [L, 2, B, H, S, Dh]
        shape = CacheShape.of(cross_kv, rows_bucket(src_pad_mask.size(0), rows), rows, max_len)
        caches: OrderedDict[CacheShape, GraphCache] = getattr(self.local, "caches", None) or OrderedDict()
        self.local.caches = caches
        if shape not in caches:
            while caches and sum(s.nbytes for s in caches) + shape.nbytes > BUDGET:
                caches.popitem(last=False)  # the least recently used: its graphs and tensors freed with it
            caches[shape] = shape.allocate(cross_kv.device)
        caches.move_to_end(shape)
        return caches[shape].load(cross_kv, ~src_pad_mask, src_pad_mask.size(0) * rows)

    def step_runner(self, cache: PaddedCache, K: int | None, special: Any) -> StepRunner:
        assert isinstance(cache, GraphCache)
        kind = None if K is None else (K, special.bos, special.eos, special.pad)
        if kind not in cache.graphs:
            program = step_program(self.model, K, special).to(cache.self_kv.device)
            owned = (cache.pos, cache.self_kv, cache.cross_kv, cache.memory_mask, cache.lineage)
            cache.graphs[kind] = Recorded(program, owned, self.warm_up, self.record, self.announce)
        return cache.graphs[kind]
