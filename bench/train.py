"""Training throughput: target tokens/s of one update, ours vs Hugging Face MarianMTModel.

Usage (from the repository root):

    python bench/train.py                                  # tiny and base, 4096-token batches
    python bench/train.py --configs tiny --steps 10 --threads 2 --max-tokens 4096
    python bench/train.py --threads 1 --clock cpu        # CPU-time clock: steadier on a busy shared machine

One update = forward, label-smoothed loss (epsilon 0.1), backward of
loss / target tokens, and an Adam step (betas 0.9/0.98, eps 1e-9, as configs/base.yaml; the fused kernel
that `nmt train` uses, for both models alike), both models in train() mode with dropout from the config.
Both get the same random batch: `--max-tokens` / 32 rows, source 21..30 tokens + EOS, target 22..31
tokens (+BOS in, +EOS out), right-padded. Marian gets `decoder_input_ids` and `attention_mask` (no
`labels`: HF would compute a second, unsmoothed loss); its loss comes from its logits through the same
function, so the work is equal. Weights are random; vocabulary `--vocab` shared by source, target and
output layer in both. Ours runs as `nmt train` does: the decoder's last states into
`projected_label_smoothed_loss` (chunked vocabulary projection, no full logits), its Linear layers through
oneDNN where that is faster and cheaper dropout masks (`nmt.precision.prepare`, nmt.kernels); "ours-mkl"
is the same with torch's F.linear (MKL's sgemm); "ours-logits" is the same model through full logits and
`label_smoothed_loss` (the path before that loss existed, and what Marian gets), so the table also says what
the fused loss is worth.
`--dtype bf16` runs all of them under bf16 autocast (fp32 weights, as `nmt train` with train.amp does).
`--marian-attn eager` gives Marian HF's written-out attention instead of SDPA (faster in bf16 on CPU, as ours).

Updates run interleaved (ours, Marian, Marian, ours, ...) after a warm-up; the medians are reported, with
the median of per-round ratios in brackets and how much CPU other processes took meanwhile.
Goal: ratio ours/Marian >= 1.0.

`--device cuda` runs the same updates on the GPU (models and batch moved there, as `nmt train` does: our CPU
kernels stay out, `nmt.precision.prepare` decides per device; no ours-mkl, a CPU question), each timed
between `torch.cuda.synchronize()` calls after 3 warm-up updates, 20 timed. `--dtype` fp32 | bf16 | fp16:
autocast for all of them alike, fp16 with a GradScaler (as `nmt train`). It also reports model FLOPs per
update (bench/gpu.py train_flops: 6 x params x tokens plus attention) and MFU against the GPU's peak dense
TFLOPS for the dtype (bench/gpu.py PEAKS; --peak-tflops for a GPU not listed):

    python bench/train.py --device cuda --configs base,big --dtype bf16
"""

from __future__ import annotations

import argparse
import math
import sys

import torch
from common import BOS, PAD, OtherLoad, interleaved, marian, median, model_config, ours, random_batch, table
from gpu import check_dtype, device_from, device_label, mfu, resolve_peak, synced, train_flops

from nmt import kernels
from nmt.loss import label_smoothed_loss, projected_label_smoothed_loss
from nmt.precision import Precision, autocast, prepare
from nmt.train.optim import adam


def make_batch(max_tokens: int, vocab: int, device: torch.device, seed: int = 0) -> dict[str, torch.Tensor]:
    rows = max(1, max_tokens // 32)
    src = random_batch(rows, 21, 30, vocab, seed)  # [rows, 31]
    tgt = random_batch(rows, 22, 31, vocab, seed + 1)  # labels: tgt + EOS, [rows, 32]
    tgt_in = torch.cat([torch.full((rows, 1), BOS), tgt[:, :-1]], dim=1)
    tgt_in = tgt_in.masked_fill(tgt.eq(PAD), PAD)  # BOS + tgt, padded where the labels are
    return {"src": src.to(device), "tgt_in": tgt_in.to(device), "tgt_out": tgt.to(device),
            "ntok": int(tgt.ne(PAD).sum())}


def update_fn(model, loss_fn, optimizer, batch, epsilon: float, device: torch.device, precision: Precision):
    # a disabled GradScaler (all but fp16) passes loss and step through unchanged
    scaler = torch.amp.GradScaler(device.type, enabled=precision.grad_scaler)

    def update() -> None:
        optimizer.zero_grad(set_to_none=True)
        with autocast(device, precision):
            loss = loss_fn(model, batch, epsilon)
        scaler.scale(loss / batch["ntok"]).backward()
        scaler.step(optimizer)  # fp16: skipped on overflow
        scaler.update()

    update.scaler = scaler
    return update


def skipped_updates(scaler: torch.amp.GradScaler) -> int:
    """fp16 updates skipped on overflow so far (each halves the scale; the bench runs far fewer than the 2,000
    good updates after which it would grow again). A skipped update has no Adam step: it looks faster."""
    return round(math.log2(65536.0 / scaler.get_scale())) if scaler.is_enabled() else 0


def ours_loss(model, batch, epsilon: float):
    hidden = model(batch["src"], batch["tgt_in"], project=False)
    return projected_label_smoothed_loss(hidden, model.output_weight, batch["tgt_out"], epsilon, PAD)[0]


def ours_logits_loss(model, batch, epsilon: float):
    return label_smoothed_loss(model(batch["src"], batch["tgt_in"]), batch["tgt_out"], epsilon, PAD)[0]


def marian_loss(model, batch, epsilon: float):
    return label_smoothed_loss(marian_forward(model, batch), batch["tgt_out"], epsilon, PAD)[0]


def marian_forward(model, batch):
    return model(input_ids=batch["src"], attention_mask=batch["src"].ne(PAD),
                 decoder_input_ids=batch["tgt_in"], use_cache=False).logits


def bench(name: str, args, device: torch.device, gpu: bool, peak: float | None) -> list[str]:
    """One row of the table; `gpu`: the GPU path (sync timing, MFU, no ours-mkl), on `device`."""
    cfg = model_config(name)
    batch = make_batch(args.max_tokens, args.vocab, device)
    contestants = {}
    precision, fp32 = Precision(args.dtype), Precision("fp32")  # fp32 weights; bf16/fp16 are autocast, as nmt train
    models = [("ours", prepare(ours(cfg, args.vocab), device, fp32, training=True), ours_loss)]
    if not gpu:  # torch's F.linear instead of our oneDNN kernels: a CPU question
        models.append(("ours-mkl", kernels.swap_dropout(ours(cfg, args.vocab)), ours_loss))
    models += [("ours-logits", prepare(ours(cfg, args.vocab), device, fp32, training=True), ours_logits_loss),
               ("marian", marian(cfg, args.vocab, attn=args.marian_attn).to(device), marian_loss)]
    for label, model, loss_fn in models:
        model.train()
        opt = adam(list(model.parameters()), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
        contestants[label] = update_fn(model, loss_fn, opt, batch, args.label_smoothing, device, precision)
    print(f"{name}: d_model {cfg.d_model}, heads {cfg.n_heads}, d_ff {cfg.d_ff}, layers "
          f"{cfg.encoder_layers}+{cfg.decoder_layers}, pre_norm {cfg.pre_norm}, batch {tuple(batch['src'].shape)} "
          f"-> {tuple(batch['tgt_in'].shape)}, {batch['ntok']} target tokens", flush=True)
    timed = {k: synced(v, device) for k, v in contestants.items()} if gpu else contestants
    times = interleaved(timed, args.steps, args.warmup, clock=args.clock, pause=0.0 if gpu else 0.3)
    for label, update in contestants.items():
        if skipped := skipped_updates(update.scaler):
            print(f"warning: {name} {label}: {skipped} of {args.warmup + args.steps} fp16 updates skipped on "
                  "overflow", file=sys.stderr)
    tps = {k: batch["ntok"] / median(v) for k, v in times.items()}

    def ratio(other: str) -> str:
        paired = median([m / o for o, m in zip(times["ours"], times[other], strict=True)])
        return f"{tps['ours'] / tps[other]:.2f} ({paired:.2f})"

    if not gpu:
        return [name, f"{tps['ours']:,.0f}", f"{tps['ours-mkl']:,.0f}", f"{tps['ours-logits']:,.0f}",
                f"{tps['marian']:,.0f}", ratio("ours-mkl"), ratio("ours-logits"), ratio("marian")]
    flops = train_flops(cfg, args.vocab, batch["src"].ne(PAD).sum(1), batch["tgt_out"].ne(PAD).sum(1))
    sec = {k: median(v) for k, v in times.items()}
    return [name, f"{tps['ours']:,.0f}", f"{tps['ours-logits']:,.0f}", f"{tps['marian']:,.0f}",
            ratio("ours-logits"), ratio("marian"), f"{flops / 1e9:,.1f}", f"{flops / sec['ours'] / 1e12:,.2f}",
            mfu(flops, sec["ours"], peak), mfu(flops, sec["marian"], peak)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--configs", default="tiny,base", help="comma-separated config names or YAML paths")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--steps", type=int, help="timed updates per model (default: 6 on CPU, 20 on a GPU)")
    p.add_argument("--warmup", type=int, help="untimed updates per model first (default: 1 on CPU, 3 on a GPU)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                   help="wall: elapsed time; cpu: this process's CPU time (robust to other load; use --threads 1)")
    p.add_argument("--max-tokens", type=int, default=4096, help="padded target tokens per batch (rows x 32)")
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--label-smoothing", type=float, default=0.1)
    p.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default="fp32",
                   help="bf16/fp16: all of them under autocast (fp16 with a GradScaler; CUDA only)")
    p.add_argument("--marian-attn", choices=["sdpa", "eager"], default="sdpa",
                   help="Marian's attention: torch's SDPA (HF's default) or HF's written-out softmax(QK^T)V")
    p.add_argument("--peak-tflops", type=float, help="the GPU's peak dense TFLOPS for --dtype, for MFU (default: "
                                                     "bench/gpu.py's table)")
    p.add_argument("--as-gpu", action="store_true", help=argparse.SUPPRESS)  # the GPU path on CPU: tests its arithmetic
    args = p.parse_args()
    device = device_from(args.device)
    gpu = device.type == "cuda" or args.as_gpu
    check_dtype(args.dtype, device, args.as_gpu)
    if gpu and args.clock == "cpu":
        raise SystemExit("error: --clock cpu measures the CPU, not the GPU: use the default wall clock")
    args.steps = args.steps or (20 if gpu else 6)
    args.warmup = args.warmup if args.warmup is not None else (3 if gpu else 1)
    torch.set_num_threads(args.threads)
    peak, peak_note = resolve_peak(device, args.dtype, args.peak_tflops) if gpu else (None, "")
    with OtherLoad() as load:
        rows = [bench(name, args, device, gpu, peak) for name in args.configs.split(",")]
    if not gpu:
        print(f"\ntraining update, target tokens/s (median of {args.steps}, {args.threads} threads, {args.dtype}, "
              f"torch {torch.__version__}, other processes' CPU share during the run: {load}); "
              f"in brackets: median of per-round ratios")
        print(table(["config", "ours tok/s", "ours-mkl tok/s", "ours-logits tok/s", "marian tok/s", "ours/ours-mkl",
                     "ours/ours-logits", "ours/marian"], rows))
        return
    print(f"\ntraining update on {device_label(device)}, target tokens/s (median of {args.steps} after "
          f"{args.warmup} warm-up, {Precision(args.dtype).describe(training=True)}, torch {torch.__version__}); "
          f"in brackets: median of per-round ratios; MFU = model FLOPs (bench/gpu.py train_flops) / time / peak: "
          f"{peak_note}")
    print(table(["config", "ours tok/s", "ours-logits tok/s", "marian tok/s", "ours/ours-logits", "ours/marian",
                 "GFLOP/update", "ours TFLOP/s", "ours MFU", "marian MFU"], rows))


if __name__ == "__main__":
    main()
