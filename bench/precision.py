"""Quality and speed of a trained model at each CPU precision: fp32, bf16 and dynamic int8.

Usage (from the repository root, after `make multi30k`):

    python bench/precision.py --checkpoint runs/multi30k-en-de/averaged.pt \
        --src ../shared/data/multi30k/test2016.en --ref ../shared/data/multi30k/test2016.de
    python bench/precision.py ... --modes fp32,int8 --threads 1 --repeats 3

Each mode loads the checkpoint through `nmt.translation.translator.Translator` exactly as `nmt translate --dtype X` /
`--quantize int8` does, translates the whole --src file with the checkpoint's decode settings (beam,
length penalty, batching), and is scored with sacreBLEU (BLEU, chrF). Reported: sentences/s and
generated tokens/s (EOS not counted, as bench/translate.py and `nmt distill`'s report count them:
`nmt.translation.translator.output_tokens`; median over --repeats, the modes interleaved so other load hits all
alike), the speed-up over fp32, and the score change. bf16 uses oneDNN's bfloat16 kernels (AMX / AVX512-BF16 where
the CPU has them, much slower emulation where it does not); int8 is `--quantize int8` (nmt.int8.to_int8: weights int8
with a scale per output channel, activations quantized per call: fbgemm's product with 8-bit activations on a CPU with
AVX512-VNNI, PyTorch's quantize_dynamic with 7-bit ones elsewhere); int8-dynamic is the latter on any CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from unittest import mock

import torch
from common import OtherLoad, interleaved, median, table

from nmt import checkpoint, int8
from nmt.score import bleu_tokenizer, language_of_file, score
from nmt.translation.translator import ModelOptions, Translator, output_tokens

MODES = {"fp32": {"dtype": "fp32"}, "bf16": {"dtype": "bf16"}, "int8": {"dtype": "fp32", "quantize": "int8"},
         "int8-dynamic": {"dtype": "fp32", "quantize": "int8"}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", type=Path, required=True, help="a trained checkpoint (e.g. averaged.pt)")
    p.add_argument("--src", type=Path, required=True, help="source sentences, one per line")
    p.add_argument("--ref", type=Path, required=True, help="reference translations, one per line")
    p.add_argument("--modes", default="fp32,bf16,int8", help=f"comma-separated, of: {', '.join(MODES)}")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3, help="timed passes over --src per mode")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    modes = args.modes.split(",")
    if unknown := [m for m in modes if m not in MODES]:
        raise SystemExit(f"unknown mode(s) {unknown}; choose from {', '.join(MODES)}")
    state = checkpoint.load(args.checkpoint)
    decode = state.config.decode
    lines = args.src.read_text(encoding="utf-8").splitlines()
    refs = args.ref.read_text(encoding="utf-8").splitlines()
    translators = {m: translator_for(state, m) for m in modes}
    outputs: dict[str, list] = {}

    def runner(mode: str):
        def run() -> None:
            outputs[mode] = list(translators[mode].stream(lines))
        return run

    with OtherLoad() as load:
        times = interleaved({m: runner(m) for m in modes}, args.repeats, warmup=0)
    rows, base = [], None
    for m in modes:
        hyps = [t.text[0] for t in outputs[m]]
        tokens = output_tokens(outputs[m])
        s = score(hyps, [refs], metrics="bleu,chrf", tokenize=bleu_tokenizer(language_of_file(args.ref)).name)
        sec = median(times[m])
        base = base or (sec, s["bleu"]["score"], s["chrf"]["score"])
        rows.append([m, f"{len(lines) / sec:,.1f}", f"{tokens / sec:,.0f}", f"{base[0] / sec:.2f}x",
                     f"{s['bleu']['score']:.2f}", f"{s['bleu']['score'] - base[1]:+.2f}", f"{s['chrf']['score']:.2f}",
                     f"{s['chrf']['score'] - base[2]:+.2f}"])
    print(f"\n{args.checkpoint} on {args.src} ({len(lines)} lines), beam {decode.beam}, {args.threads} threads, "
          f"median of {args.repeats}, torch {torch.__version__}, other processes' CPU share: {load}; BLEU "
          f"{s['bleu']['signature']}", file=sys.stderr)
    print(table(["mode", "sent/s", "tok/s", "speed-up", "BLEU", "dBLEU", "chrF", "dchrF"], rows))


def translator_for(state, mode: str) -> Translator:
    """The translator of a mode; int8-dynamic: `--quantize int8` as on a CPU without fbgemm's own int8 product."""
    dynamic = mode == "int8-dynamic"
    with mock.patch.object(int8, "fbgemm_int8", lambda: False) if dynamic else contextlib.nullcontext():
        return Translator.load(state, opts=ModelOptions(device="cpu", config_given=False, **MODES[mode]))


if __name__ == "__main__":
    main()
