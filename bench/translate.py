"""Decoding throughput at beam 4: ours vs Hugging Face `generate()` vs CTranslate2, all in one run.

Usage (from the repository root):

    python bench/translate.py                                   # tiny and base, batch 32 and 1
    python bench/translate.py --configs tiny --batches 32 --repeats 7 --length 25 --threads 2
    python bench/translate.py --threads 1 --clock cpu   # CPU-time clock: steadier on a busy shared machine
    python bench/translate.py --configs opus-mt --batches 32,1  # an OPUS-MT-shaped Marian model, imported
    python bench/translate.py --marian-dir DIR          # a real one (a save_pretrained directory)
    python bench/translate.py --compile                 # ours through its compiled step (nmt translate --compile)

`opus-mt` and `--marian-dir` benchmark a Marian model as `nmt import` reads it: HF loads the directory
(`from_pretrained`), ours is the imported checkpoint (the same weights), CTranslate2 converts the directory
with its TransformersConverter. `opus-mt` writes such a directory first: random weights in the shape of
Helsinki-NLP/opus-mt-en-de (d_model 512, 6+6 layers, 8 heads, d_ff 2048, swish, vocabulary 58,101).

For each config a model of that shape gets random weights: ours (`nmt.search.run`, the beam rule, over
`nmt.model.Transformer`, eval, inference_mode), HF `MarianMTModel.generate()` (SDPA attention, KV cache),
and - if the `ctranslate2` package imports - that Marian model converted with
`ctranslate2.converters.TransformersConverter` (float32, `translate_batch` on token strings). All decode
the same random sources (15..20 tokens + EOS, right-padded; batch 1 = one 20-token sentence) with beam 4
and length penalty 0.6, and every hypothesis is forced to exactly `--length` tokens plus EOS, so all
three do the same `--length` + 1 decoder steps over batch x 4 rows:

  - ours:  min_len=L (EOS impossible before step L, as nmt's --set decode.min_len); search forces EOS at
           its length limit L (max_len_a=0, max_len_b=L);
  - HF:    min_new_tokens=L, max_new_tokens=L+1, forced_eos_token_id=EOS;
  - CT2:   min_decoding_length = max_decoding_length = L + 1: CT2 stops at its maximum without an EOS
           step, so this makes its L + 1 decoder steps too (it returns L + 1 tokens; L are counted).

A fourth contestant, `ct2-nmt`, is our own model exported by `nmt export --to ct2` (nmt.interop.export.ct2.convert:
CTranslate2's model-spec API, int8 weights with --dtype int8), run by CTranslate2 exactly as the `ct2` column:
what a user of the export gets, beside `nmt translate` on the same weights.

The script checks that every system returned the expected number of tokens per sentence. Reported:
generated tokens/s (batch x L per call, EOS not counted, as `nmt.search.generated_tokens` counts ours) and
sentences/s, medians over interleaved repeats, the ratios ours/HF and ours/CT2, and how much CPU other
processes took meanwhile. CT2 runs in a child process (intra_threads = --threads; see _ct2_worker for why), timed
there with the same clock, interleaved with the others. Goal: ours >= 2x HF generate() at batch 32.

--dtype bf16 runs ours and HF with bfloat16 weights and activations (on CPUs with AVX512-BF16/AMX, oneDNN's
bf16 matrix multiplies are several times faster than fp32); CTranslate2 has no bf16 on CPU and is left out.
--dtype int8 applies PyTorch dynamic int8 quantization to the nn.Linear layers of ours and of HF (ours through
`nmt.precision.prepare`, as `nmt translate --quantize int8`, which quantizes a copy of the tied output
projection too; HF's lm_head is an nn.Linear, quantized with the same `nmt.int8.to_int8`), and runs
CTranslate2 with compute_type int8. With --compile, ours compiled runs nmt translate --compile --quantize int8's int8
layers (nmt.int8.to_int8_weights: with VNNI the same fbgemm product as the eager column, called from the package;
without, int8 weights whose products take bf16 input), its eager column dynamic int8 as above.

--floor records the matrix multiplies of one call of ours (shapes, strides, dtype) and times them alone,
replayed on random tensors: "gemm share" is that floor / our time, and "ceiling vs hf" is HF's time / the
floor, the most that any implementation doing these multiplies in this dtype could gain over HF (ours does
no more multiplies than HF: HF also computes the source keys/values once per beam rather than per sentence).

--device cuda runs all three on the GPU: ours and HF moved there in --dtype (fp32, bf16 or fp16 weights, as
`nmt translate --device cuda --dtype X` prepares ours), CTranslate2 with device "cuda" and the matching
compute_type (float32, bfloat16, float16); calls timed between `torch.cuda.synchronize()` calls (CT2 returns
host results: its call ends when its GPU work does). `make gpu` runs base in fp16 at batch 32 and 1.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

# isort: off
import common  # noqa: F401  (before torch: it imports nmt, which sets OpenMP's wait policy as `nmt` does)
import torch
# isort: on
from common import (
    BOS,
    EOS,
    PAD,
    Neighbour,
    OtherLoad,
    interleaved,
    marian,
    median,
    model_config,
    opus_mt_dir,
    ours,
    random_batch,
    table,
)
from ct2_peer import ct2_export, ct2_fn, ct2_marian, ct2_model
from floor import gemm_floor
from gpu import check_dtype, device_from, device_label, synced

from nmt import (
    int8,
    kernels,
    search,  # noqa: E402
)
from nmt.precision import Precision, prepare
from nmt.search import SearchSettings, generated_tokens
from nmt.search.compiled import CompiledDecoder
from nmt.search.graphed import GraphedDecoder
from nmt.threads import FreeCores

BEAM, ALPHA = 4, 0.6
EAGER = ("eager",)  # with --compile: ours as it runs without
DTYPES = ("fp32", "bf16", "fp16", "int8")
CT2_TYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "int8": "int8"}


@dataclass(frozen=True)
class Ids:
    bos: int  # the decoder's start token (Marian: <pad>)
    eos: int
    pad: int


NMT = Ids(bos=BOS, eos=EOS, pad=PAD)


def ours_fn(model, src, length, ids: Ids, free_cores: bool = True):
    """Ours as nmt.translation.translator runs a batch: on a CPU, on the cores other threads leave free
    (nmt.threads.FreeCores; `free_cores` False: always --threads), the thread count set back afterwards for the
    peers that share this process."""
    cores = FreeCores(torch.get_num_threads()) if free_cores and src.device.type == "cpu" else None

    # EOS impossible before `length` (min_len), forced at it (the limit): every hypothesis has `length` tokens
    settings = SearchSettings(beam=BEAM, length_penalty=ALPHA, max_len_a=0.0, max_len_b=length, min_len=length)

    def run():
        wanted = torch.get_num_threads()
        if cores is not None:
            cores.fit()
        try:
            with torch.inference_mode():
                return search.run(model, src, settings, ids)
        finally:
            torch.set_num_threads(wanted)

    def check(result):  # the tokens/s below count batch x length: what nmt counts of the output (EOS aside)
        return all(len(h[0].tokens) == length for h in result) and generated_tokens(result) == len(result) * length

    return run, check


def hf_fn(model, src, length, ids: Ids):
    from transformers import GenerationConfig

    gen = GenerationConfig(num_beams=BEAM, do_sample=False, length_penalty=ALPHA, max_new_tokens=length + 1,
                           min_new_tokens=length, forced_eos_token_id=ids.eos, eos_token_id=ids.eos,
                           pad_token_id=ids.pad, decoder_start_token_id=ids.bos, bos_token_id=None,
                           num_return_sequences=1, use_cache=True)
    mask = src.ne(ids.pad)

    def run():
        with torch.inference_mode():
            return model.generate(input_ids=src, attention_mask=mask, generation_config=gen)

    def check(out):  # start token + L tokens + EOS
        return out.shape == (src.size(0), length + 2) and bool(out[:, -1].eq(ids.eos).all())

    return run, check


def sources(batch: int, vocab: int, ids: Ids) -> torch.Tensor:
    """Random sources (vocab - 1: CT2's vocabulary is one shorter), with the model's EOS and padding ids."""
    src = random_batch(batch, 20 if batch == 1 else 15, 20, vocab - 1, seed=3)
    return torch.where(src.eq(PAD), ids.pad, torch.where(src.eq(EOS), ids.eos, src))


def contestants(name: str, args, workdir: str, use_ct2: bool):
    """(ours, HF, CTranslate2 model or None, our export to CTranslate2 or None, special ids, vocabulary size,
    ModelConfig) for a config name, or for a Marian directory (`--marian-dir`, or `opus-mt`: one written with
    random weights)."""
    if name not in ("opus-mt", "marian-dir"):
        cfg = model_config(name)
        hf_model = marian(cfg, args.vocab).eval()
        ct2 = ct2_model(hf_model, f"{workdir}/{name}") if use_ct2 else None
        ours_model = ours(cfg, args.vocab).eval()
        exported = ct2_export(ours_model, cfg, args.vocab, None, f"{workdir}/{name}", args.dtype) if use_ct2 else None
        return ours_model, hf_model, ct2, exported, NMT, args.vocab, cfg
    from transformers import MarianMTModel

    from nmt import checkpoint
    from nmt.config.experiment import config_from_dict
    from nmt.interop.marian import import_model

    model_dir = Path(args.marian_dir) if name == "marian-dir" else opus_mt_dir(Path(workdir) / name)
    state = checkpoint.load(import_model(str(model_dir), Path(workdir) / f"{name}.pt"))
    tokenizer = state.tokenizer()
    ours_model = state.build_model(tokenizer).eval()
    hf_model = MarianMTModel.from_pretrained(model_dir, attn_implementation="sdpa").eval()
    ct2 = ct2_marian(model_dir, f"{workdir}/{name}") if use_ct2 else None
    special = tokenizer.special_ids
    ids = Ids(bos=special.bos, eos=special.eos, pad=special.pad)
    cfg = config_from_dict(state["config"]).model
    exported = ct2_export(ours_model, cfg, tokenizer.src_vocab_size, state, f"{workdir}/{name}",
                          args.dtype) if use_ct2 else None
    return ours_model, hf_model, ct2, exported, ids, tokenizer.src_vocab_size, cfg


def bench(name: str, args, workdir: str, device: torch.device, gpu: bool) -> list[list[str]]:
    """Rows of the table for a config; `gpu`: the GPU path (sync timing, CT2 on the GPU), on `device`."""
    precision = Precision(args.dtype)
    use_ct2 = not args.no_ct2 and (gpu or args.dtype != "bf16")  # CT2 has bf16 on GPUs only
    ours_model, hf_model, ct2, exported, ids, vocab, cfg = contestants(name, args, workdir, use_ct2)
    hf_model = hf_model.to(device=device, dtype=precision.dtype)
    if args.dtype == "int8":  # the same int8 scheme for HF (equal work)
        hf_model = int8.to_int8(hf_model)
    plain = copy.deepcopy(ours_model) if args.compile else None  # prepare() swaps its layers in place
    if args.mkl_linear or args.unpacked:
        ours_model = ours_model.to(precision.dtype)
        ours_model = kernels.swap_linears(ours_model) if args.unpacked else ours_model
    else:  # ours exactly as `nmt translate` runs it on this device
        ours_model = prepare(ours_model, device, precision, training=False)
    compiled = compiled_decoder(plain, ours_model, name, args, device) if plain is not None else None
    if ct2 is None and use_ct2:
        print("ctranslate2 is not installed: skipping it (pip install ctranslate2)", file=sys.stderr)
    rows = []
    for batch in map(int, args.batches.split(",")):
        src = sources(batch, vocab, ids).to(device)
        small = compiled is not None and compiled.pays(batch, BEAM)  # as nmt translate --compile decides
        fns = {"ours": ours_fn(compiled if small else ours_model, src, args.length, ids, not args.fixed_threads),
               "hf": hf_fn(hf_model, src, args.length, ids)}
        if small:  # ours as without --compile, for the ratio; compiled for every thread count first
            fns["eager"] = ours_fn(ours_model, src, args.length, ids, not args.fixed_threads)
            for threads in {1, args.threads} if isinstance(compiled, CompiledDecoder) else ():  # FreeCores: 1 too
                compiled.prepare(batch, BEAM, ids, threads)
        if ct2 is not None and (ct2_run := ct2_fn(ct2, src, args.length, device, CT2_TYPES[args.dtype],
                                                  args.threads, args.clock, ids.pad, (BEAM, ALPHA))):
            fns["ct2"] = ct2_run
        if exported is not None and (ct2_run := ct2_fn(exported, src, args.length, device, CT2_TYPES[args.dtype],
                                                       args.threads, args.clock, ids.pad, (BEAM, ALPHA), eos=ids.eos)):
            fns["ct2-nmt"] = ct2_run
        for label, (run, check) in fns.items():
            if not check(run()):
                raise SystemExit(f"{label}: hypotheses do not all have {args.length} tokens; the work is not equal")
        print(f"{name}, batch {batch}: d_model {cfg.d_model}, layers {cfg.encoder_layers}+{cfg.decoder_layers}, "
              f"src {tuple(src.shape)}, beam {BEAM}, {args.length} tokens per hypothesis", flush=True)
        # CT2 times itself in its process; ours and HF queue GPU work, so on a GPU they are timed between syncs
        timed = {k: synced(v[0], device) if gpu and k != "ct2" else v[0] for k, v in fns.items()}
        for machine in ("quiet", "busy") if args.busy else ("quiet",):
            with Neighbour() if machine == "busy" else contextlib.nullcontext(), OtherLoad() as load:
                times = interleaved(timed, args.repeats, args.warmup, clock=args.clock, pause=0.0 if gpu else 0.3)
            row = [name, str(batch), machine, str(load), *cells(times, batch, args.length, args.compile)]
            if args.floor and args.dtype != "int8":  # quantized linears are not aten matrix multiplies
                sec = {k: median(v) for k, v in times.items()}
                floor = gemm_floor(fns["ours"][0], args.repeats, args.clock, device, gpu)
                row += [f"{100 * floor / sec['ours']:.0f}%", f"{sec['hf'] / floor:.2f}"]
            rows.append(row)
    return rows


def compiled_decoder(plain, ours_model, name: str, args, device: torch.device):
    """Ours with --compile, as nmt translate --compile: on a GPU its steps as CUDA graphs over ours' model
    (nmt.search.graphed; recorded in the first, untimed, round), on the CPU through nmt.search.compiled (`plain`:
    ours' model before prepare), its packages in --compile-dir, compiled there on first use."""
    if device.type == "cuda":
        return GraphedDecoder(ours_model)
    if args.dtype not in ("fp32", "int8") or device.type != "cpu":
        raise SystemExit("error: --compile times float32 or int8 on the CPU, or any dtype on a CUDA GPU")
    if args.dtype == "int8":  # as nmt translate --compile --quantize int8
        plain = int8.to_int8_weights(plain)
    announce = lambda message: print(f"{name}: {message}", flush=True)  # noqa: E731
    return CompiledDecoder(plain.eval(), Path(args.compile_dir) / name, announce)  # a directory per model (prune)


def openmp_waiting() -> str:
    """The OpenMP wait settings this process runs with (nmt's choice, nmt.threads, unless the user set one)."""
    said = [f"{k}={os.environ[k]}" for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT") if k in os.environ]
    return " ".join(said) or "libgomp's default"


def cells(times: dict[str, list[float]], batch: int, length: int, eager: bool = False) -> list[str]:
    """A row's speeds (tokens/s, sentences/s per contestant) and ratios (ours / peer: of the medians, and in
    brackets the median of each round's ratio); `eager`: with the columns of ours without --compile ("-" where ours
    ran eagerly itself)."""
    sec = {k: median(v) for k, v in times.items()}
    paired = {k: median([p / o for o, p in zip(times["ours"], times[k], strict=True)]) for k in times}
    row = []
    for k in ("ours", "hf", "ct2", "ct2-nmt", *EAGER[:eager]):
        row += [f"{batch * length / sec[k]:,.0f}", f"{batch / sec[k]:,.1f}"] if k in sec else ["-", "-"]
    peers = ("hf", "ct2", "ct2-nmt", *EAGER[:eager])
    return row + [f"{sec[k] / sec['ours']:.2f} ({paired[k]:.2f})" if k in sec else "-" for k in peers]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--configs", default="tiny,base",
                   help="comma-separated config names or YAML paths, or opus-mt (an OPUS-MT-shaped Marian model)")
    p.add_argument("--marian-dir", help="benchmark this Marian directory (save_pretrained) instead of --configs")
    p.add_argument("--batches", default="32,1", help="comma-separated batch sizes (sentences per call)")
    p.add_argument("--length", type=int, default=25, help="tokens per hypothesis (EOS excluded)")
    p.add_argument("--repeats", type=int, default=5, help="timed calls per system")
    p.add_argument("--warmup", type=int, default=1, help="untimed calls per system first")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                   help="wall: elapsed time; cpu: this process's CPU time (robust to other load; use --threads 1)")
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--no-ct2", action="store_true", help="skip CTranslate2 even if installed")
    p.add_argument("--mkl-linear", action="store_true",
                   help="fp32/bf16: ours with torch's F.linear in its Linear layers (no nmt.kernels.swap_linears)")
    p.add_argument("--unpacked", action="store_true",
                   help="fp32/bf16: ours through oneDNN with plain-layout weights, as without prepacking")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--dtype", choices=DTYPES, default="fp32",
                   help="fp32, bf16 (CTranslate2 on GPUs only), fp16 (CUDA only) or int8 (CPU only: dynamic "
                        "quantization of all three)")
    p.add_argument("--floor", action="store_true",
                   help="also time our matrix multiplies alone: their share of our time, and HF's time / theirs "
                        "(the most any implementation doing these multiplies could gain over HF)")
    p.add_argument("--fixed-threads", action="store_true",
                   help="ours always on --threads threads, not on the cores other threads leave free (nmt.threads)")
    p.add_argument("--busy", action="store_true",
                   help="also time every cell beside one busy-loop process (a second row, 'busy'): what a shared "
                        "machine leaves of each contestant's speed")
    p.add_argument("--compile", action="store_true",
                   help="fp32 or int8 on CPU: ours through its compiled decoder step where nmt translate --compile "
                        "uses it (int8: --compile --quantize int8's layers, nmt.int8.to_int8_weights) "
                        "(up to nmt.search.compiled's MAX_ROWS rows), with ours as without it beside (eager); packages "
                        "compiled on first use into --compile-dir; on a CUDA GPU (any dtype) ours' steps as CUDA "
                        "graphs (nmt.search.graphed, as nmt translate --compile there)")
    p.add_argument("--compile-dir", default=str(Path.home() / ".cache" / "nmt" / "bench-compiled"),
                   help="where --compile keeps its packages (a second run loads them)")
    p.add_argument("--as-gpu", action="store_true", help=argparse.SUPPRESS)  # the GPU path on CPU: tests its logic
    args = p.parse_args()
    device = device_from(args.device)
    gpu = device.type == "cuda" or args.as_gpu
    check_dtype(args.dtype, device, args.as_gpu)
    if device.type == "cuda" and (args.mkl_linear or args.unpacked or args.clock == "cpu"):
        raise SystemExit("error: --mkl-linear, --unpacked and --clock cpu are CPU options")
    if args.marian_dir:
        args.configs = "marian-dir"
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as workdir, OtherLoad() as load:
        rows = [row for name in args.configs.split(",") for row in bench(name, args, workdir, device, gpu)]
    where = f"on {device_label(device)}" if gpu else f"{args.threads} threads, {args.clock} clock"
    print(f"\nbeam {BEAM} decoding, {args.length} tokens per sentence (median of {args.repeats}, {where}, "
          f"{args.dtype}, torch {torch.__version__}, OpenMP waiting {openmp_waiting()}"
          f" for ours and HF, other processes' CPU share during the run: {load}, busy rows included);\n"
          "ratio = ours speed / peer speed (in brackets: median of per-round ratios)")
    header = ["config", "batch", "machine", "others' CPU", "ours tok/s", "ours sent/s", "hf tok/s", "hf sent/s",
              "ct2 tok/s", "ct2 sent/s",
              "ct2-nmt tok/s", "ct2-nmt sent/s", *(["eager tok/s", "eager sent/s"] if args.compile else []),
              "ours/hf", "ours/ct2", "ours/ct2-nmt", *(["ours/eager"] if args.compile else [])]
    if args.floor and args.dtype != "int8":
        header += ["gemm share", "ceiling vs hf"]
    print(table(header, rows))


if __name__ == "__main__":
    main()
