"""What a decoder step with static shapes costs, eager and compiled (issue 45, items 2-3): the measurement that
decides whether a compiled step can reach CTranslate2 at batch 1 on a CPU.

    python bench/compiled_step.py --configs tiny,base --rows 4,128 --steps 26 --rounds 5

Per config (random weights, as bench/translate.py) and rows (batch x beam 4: 4 = one sentence, 128 = 32), four
ways to run the same decoder steps over a 20-token source, timed per step (median of --rounds, each --steps steps
from position 0, interleaved):
  - eager:    nmt's own step today, `Transformer.decode_step` over its growing `DecoderCache`;
  - static:   the same layers over a fixed-capacity cache (`StaticCache`: keys/values of every position written at
              the step's index, the positions after it masked; the step's position a tensor), eager;
  - compiled: that static step through `torch.compile(fullgraph=True, dynamic=False)` (Inductor), one graph
              serving every step of the call;
  - cpp:      the same with Inductor's C++ wrapper (`cpp_wrapper=True`: the kernels called from C++, not Python).
Compile seconds are printed for the two compiled ones. Outputs are checked against the eager step (max |diff| of
the log-probabilities). No search runs here: a beam step's topk and reorder come on top in every column.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
import types
from pathlib import Path

import common  # noqa: F401  (before torch: it imports nmt, which sets OpenMP's wait policy as `nmt` does)
import torch
from common import OtherLoad, interleaved, median, model_config, ours, random_batch
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from nmt.model import Transformer  # noqa: E402

SOURCE_LEN = 20


class StaticCache:
    """A fixed-capacity decoder cache: self_kv [L, 2, N, H, T, Dh] for T positions, cross_kv [L, 2, N, H, S, Dh]
    (one copy per row), the step's position `pos` a 0-d tensor. Duck-types the `LayerCache` a DecoderLayer
    reads (`self_mask`, `memory_kv`, `append`)."""

    def __init__(self, self_kv: Tensor, cross_kv: Tensor, pos: Tensor):
        self.self_kv, self.cross_kv, self.pos = self_kv, cross_kv, pos
        T = self_kv.size(4)
        self.self_mask = (torch.arange(T, device=pos.device) <= pos)[None, None, None, :]  # [1, 1, 1, T]
        self.index = 0

    def layer(self, i: int) -> StaticCache:
        self.index = i
        return self

    @property
    def memory_kv(self) -> Tensor:
        return self.cross_kv[self.index]

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """k, v [N, H, 1, Dh] written at position pos; every position's keys/values returned, [N, H, T, Dh]."""
        kv = self.self_kv[self.index]
        kv[0].index_copy_(2, self.pos[None], k)
        kv[1].index_copy_(2, self.pos[None], v)
        return kv[0], kv[1]


def static_step(model: Transformer, tokens: Tensor, pos: Tensor, self_kv: Tensor, cross_kv: Tensor,
                memory_mask: Tensor) -> Tensor:
    """tokens [N] at position pos (0-d) -> log-probabilities [N, V]; writes self_kv at pos in place."""
    x = model.tgt_embed(tokens)[:, None] * model.embed_scale + model.positions.index_select(0, pos[None])  # [N,1,D]
    cache = StaticCache(self_kv, cross_kv, pos)
    for i, layer in enumerate(model.decoder_layers):
        x, _ = layer(x, None, memory_mask, cache=cache.layer(i))
    logits = model.output(model.decoder_norm(x[:, 0]))  # [N, V]
    return logits.log_softmax(-1)


def static_state(model: Transformer, src: Tensor, rows: int, capacity: int) -> tuple[Tensor, Tensor, Tensor]:
    """self_kv (zeros), cross_kv and the key mask for `rows` rows (each source repeated rows / batch times)."""
    memory, pad = model.encode(src)
    per = rows // src.size(0)
    cross_kv = torch.stack([torch.stack(layer.cross_attn.memory_kv(memory)) for layer in model.decoder_layers])
    cross_kv = cross_kv.repeat_interleave(per, dim=2).contiguous()  # [L, 2, N, H, S, Dh]
    L, _, N, H, S, Dh = cross_kv.shape
    self_kv = cross_kv.new_zeros(L, 2, N, H, capacity, Dh)
    return self_kv, cross_kv, (~pad[:, None, None, :]).repeat_interleave(per, dim=0)


def tokens_of(rows: int, steps: int, vocab: int) -> Tensor:
    return torch.randint(10, vocab, (steps, rows), generator=torch.Generator().manual_seed(1))


def run_eager(model, src, toks) -> list[Tensor]:
    memory, pad = model.encode(src)
    per = toks.size(1) // src.size(0)
    cache = model.init_cache(memory.repeat_interleave(per, 0), pad.repeat_interleave(per, 0), toks.size(0))
    return [model.decode_step(t, cache)[0].log_softmax(-1) for t in toks]


def run_static(step, model, src, toks, capacity) -> list[Tensor]:
    self_kv, cross_kv, mask = static_state(model, src, toks.size(1), capacity)
    out = []
    for p, t in enumerate(toks):
        out.append(step(model, t, torch.tensor(p), self_kv, cross_kv, mask))
    return out


def compiled(cpp_wrapper: bool):
    """A compiler of static_step: a copy of its code (Dynamo caches graphs per code object, so the two variants do
    not share one), compiled on its first call with Inductor's C++ wrapper on or off."""
    import torch._inductor.config as inductor

    def compile_step():
        inductor.cpp_wrapper = cpp_wrapper
        code = static_step.__code__.replace(co_name=f"static_step_{'cpp' if cpp_wrapper else 'py'}")
        return torch.compile(types.FunctionType(code, static_step.__globals__), fullgraph=True, dynamic=False)
    return compile_step


def measure(model: Transformer, rows: int, args: argparse.Namespace) -> tuple[dict, dict, float]:
    """ms per step of each way (interleaved rounds, medians), compile seconds, and the largest difference of the
    static ways' log-probabilities from the eager step's."""
    src = random_batch(max(1, rows // 4), SOURCE_LEN, SOURCE_LEN, args.vocab, 0)
    toks = tokens_of(rows, args.steps, args.vocab)
    steps, compile_s = {"static": static_step}, {}
    for label, make in (("compiled", compiled(False)), ("cpp", compiled(True))):
        start = time.perf_counter()
        steps[label] = make()
        run_static(steps[label], model, src, toks, args.steps)  # compiles on the first call
        compile_s[label] = time.perf_counter() - start
    ref = run_eager(model, src, toks)
    diff = max((a - b).abs().max().item() for step in steps.values()
               for a, b in zip(ref, run_static(step, model, src, toks, args.steps)))
    ways = {"eager": lambda: run_eager(model, src, toks)}
    ways.update({label: functools.partial(run_static, step, model, src, toks, args.steps)
                 for label, step in steps.items()})
    times = interleaved(ways, args.rounds, progress=False, pause=0.05)
    return {k: median(v) * 1e3 / args.steps for k, v in times.items()}, compile_s, diff


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default="tiny,base")
    parser.add_argument("--rows", default="4,128", help="decoder rows: batch x beam (4 = one sentence at beam 4)")
    parser.add_argument("--steps", type=int, default=26)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=8000)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} threads; ms per decoder step (median of {args.rounds})")
    print("| config | rows | eager | static | compiled | cpp | compile s | cpp compile s | max diff | other load |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in args.configs.split(","):
        model = ours(model_config(name), args.vocab).eval()
        for rows in map(int, args.rows.split(",")):
            with torch.inference_mode(), OtherLoad() as load:
                ms, compile_s, diff = measure(model, rows, args)
            cells = " | ".join(f"{ms[k]:.2f}" for k in ("eager", "static", "compiled", "cpp"))
            print(f"| {name} | {rows} | {cells} | {compile_s['compiled']:.0f} | {compile_s['cpp']:.0f} | {diff:.1e} "
                  f"| {load} |", flush=True)


if __name__ == "__main__":
    main()
