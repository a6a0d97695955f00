"""Beam search with static shapes, eager and compiled (issue 45, items 2-3), beside nmt's own decoding: what a
compiled step buys on this machine, and what compiling costs.

    python bench/compiled_step.py --configs tiny,base --batches 1,32 --rounds 5

Per config (random weights, as bench/translate.py) and batch (random 15-20-token sources), beam 4, every hypothesis
forced to --length tokens (EOS impossible before), four ways to run `nmt.search.run`, interleaved, medians:
  - eager:    nmt's decoding today (nmt.cache.DecoderCache: grows, drops finished sentences);
  - static:   nmt.search.static.StaticDecoder: fixed rows and a fixed-capacity cache, eager;
  - compiled: the same step through torch.compile (Inductor, Python wrapper);
  - cpp:      the same with Inductor's C++ wrapper (`cpp_wrapper=True`: the kernels called from C++).
Printed: generated tokens/s of each, compile seconds (the first call; Inductor's on-disk cache makes a second run of
this script, a new process, cheaper: run it twice to see both), whether the hypotheses equal the eager ones, and the
share of the CPU other processes took meanwhile.
"""

from __future__ import annotations

import argparse
import functools
import time
import types

import common  # noqa: F401  (before torch: it imports nmt, which sets OpenMP's wait policy as `nmt` does)
import torch
from common import EOS, FixedLength, OtherLoad, interleaved, median, model_config, ours, random_batch

from nmt import search
from nmt.precision import Precision, prepare
from nmt.search import SearchSettings
from nmt.search.static import StaticDecoder, static_step
from nmt.tokenizer import NMT_IDS as IDS

BEAM = 4


def compiled_decoder(model, cpp_wrapper: bool) -> StaticDecoder:
    """A StaticDecoder whose step is compiled on its first call, from a copy of static_step's code (Dynamo keeps
    one cache per code object: the two compiled ways must not share a graph). `model` has plain nn.Linear layers:
    Inductor's freezing takes the weights as constants and lays them out for oneDNN itself (it cannot compile
    nmt.kernels' prepacked ones)."""
    import torch._inductor.config as inductor

    inductor.cpp_wrapper, inductor.freezing = cpp_wrapper, True
    decoder = StaticDecoder(model)
    code = static_step.__code__.replace(co_name=f"static_step_{'cpp' if cpp_wrapper else 'py'}")
    compiled = torch.compile(types.FunctionType(code, static_step.__globals__))

    def step(model, tokens, pos, self_kv, *rest):
        torch._dynamo.mark_dynamic(self_kv, 0, min=2)  # the positions read (StaticCache.prefix): one graph for all
        return compiled(model, tokens, pos, self_kv, *rest)

    decoder.step_fn = step
    return decoder


def measure(model, plain, batch: int, args: argparse.Namespace) -> tuple[dict[str, float], dict[str, float], bool]:
    """Tokens/s of each way, the compiled ways' first-call seconds, and whether all found the eager hypotheses."""
    src = random_batch(batch, 15, 20, args.vocab, 0) if batch > 1 else random_batch(1, 20, 20, args.vocab, 0)
    settings = SearchSettings(beam=BEAM, length_penalty=0.6, max_len_a=0.0, max_len_b=args.length)
    models = {"eager": model, "static": StaticDecoder(model)}
    first_call = {}
    for label, cpp in (("compiled", False), ("cpp", True)):
        start = time.perf_counter()
        models[label] = compiled_decoder(plain, cpp)
        search.run(FixedLength(models[label], args.length, EOS), src, settings, IDS)
        first_call[label] = time.perf_counter() - start
    outputs = {k: search.run(FixedLength(m, args.length, EOS), src, settings, IDS) for k, m in models.items()}
    same = len({str([[h.tokens for h in hyps] for hyps in out]) for out in outputs.values()}) == 1
    ways = {k: functools.partial(search.run, FixedLength(m, args.length, EOS), src, settings, IDS)
            for k, m in models.items()}
    times = interleaved(ways, args.rounds, progress=False, pause=0.05)
    return {k: batch * args.length / median(v) for k, v in times.items()}, first_call, same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default="tiny,base")
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--length", type=int, default=25)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=8000)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} threads, beam {BEAM}, {args.length} tokens; generated tokens/s "
          f"(median of {args.rounds}), in brackets / eager")
    print("| config | batch | eager | static | compiled | cpp | first call s (compiled, cpp) | same | other load |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.configs.split(","):
        plain = ours(model_config(name), args.vocab).eval()  # the same weights (seeded)
        model = prepare(ours(model_config(name), args.vocab), torch.device("cpu"), Precision("fp32"), training=False)
        for batch in map(int, args.batches.split(",")):
            with torch.inference_mode(), OtherLoad() as load:
                speed, first_call, same = measure(model.eval(), plain, batch, args)
            cells = " | ".join(f"{speed[k]:,.0f} ({speed[k] / speed['eager']:.2f})"
                               for k in ("eager", "static", "compiled", "cpp"))
            print(f"| {name} | {batch} | {cells} | {first_call['compiled']:.0f}, {first_call['cpp']:.0f} | {same} "
                  f"| {load} |", flush=True)


if __name__ == "__main__":
    main()
