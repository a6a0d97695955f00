"""Training throughput: target tokens/s of one update, ours vs Hugging Face MarianMTModel.

Usage (from the repository root):

    python bench/train.py                                  # tiny and base, 4096-token batches
    python bench/train.py --configs tiny --steps 10 --threads 2 --max-tokens 4096
    python bench/train.py --threads 1 --clock cpu        # CPU-time clock: steadier on a busy shared machine

One update = forward, label-smoothed loss (epsilon 0.1), backward of loss / target tokens, the gradient norm
(clipped with `--clip-norm`), the finite check and an Adam step (betas 0.9/0.98, eps 1e-9, as configs/base.yaml;
the fused kernel that `nmt train` uses), for every model alike through `nmt train`'s own functions
(nmt.train.update), so the host waits for the device where training waits; all models in train() mode with
dropout from the config.
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
autocast for all of them alike, fp16 with a GradScaler starting at `nmt train`'s loss scale (updates it skips
are counted and reported: they have no Adam step). It also reports model FLOPs per update (bench/gpu.py
train_flops: 6 x params x tokens plus attention), MFU against the GPU's peak dense TFLOPS for the format the
matrix products run in (bf16/fp16, or TF32 for fp32: training switches it on; bench/gpu.py PEAKS;
--peak-tflops for a GPU not listed) and the peak GPU memory of an update of ours. Every config's line gives the
batch's padding efficiency (real tokens / padded slots, source and target). `--compile` runs ours through
torch.compile (train.compile); `--own-settings` takes each config's train.max_tokens and train.compile;
`--compile-mode reduce-overhead` compiles ours in that mode (train.compile_mode: CUDA graphs);
`--compile-loss` runs ours' loss compiled (train.compile_loss: nmt.loss_compiled); `--packed` adds "ours-packed":
ours on the same sentences packed end to end in one row of max_tokens + 1 (train.packed: no padding, varlen
FlashAttention on a GPU; on a CPU a dense mask, slow by construction):

    python bench/train.py --device cuda --configs base,big --dtype bf16
    python bench/train.py --device cuda --configs base-gpu,big-gpu --dtype bf16 --own-settings
"""

from __future__ import annotations

import argparse
import sys
from functools import partial

import common
import torch
from common import BOS, PAD, OtherLoad, experiment, interleaved, marian, median, model_config, ours, random_batch, table
from gpu import check_dtype, device_from, device_label, mfu, resolve_peak, synced, train_flops

from nmt import kernels
from nmt.config.experiment import COMPILE_MODES
from nmt.data.batching import Batch
from nmt.data.packing import collate_packed
from nmt.loss import label_smoothed_loss, target_positions
from nmt.precision import Precision, prepare
from nmt.train.compiling import compile_for_training
from nmt.train.optim import adam
from nmt.train.state import SkippedUpdate
from nmt.train.update import decides_on_device, finish_update, grad_scaler, piece_backward, piece_loss, queue_update


def make_batch(max_tokens: int, vocab: int, device: torch.device, seed: int = 0) -> Batch:
    """The bench's batch as `nmt train` gets it: a Batch whose target positions were found on the host."""
    rows = max(1, max_tokens // 32)
    src = random_batch(rows, 21, 30, vocab, seed)  # [rows, 31]
    tgt = random_batch(rows, 22, 31, vocab, seed + 1)  # labels: tgt + EOS, [rows, 32]
    tgt_in = torch.cat([torch.full((rows, 1), BOS), tgt[:, :-1]], dim=1)
    tgt_in = tgt_in.masked_fill(tgt.eq(PAD), PAD)  # BOS + tgt, padded where the labels are
    batch = Batch(src=src, tgt_in=tgt_in, tgt_out=tgt, n_src_tokens=int(src.ne(PAD).sum()),
                  n_tgt_tokens=int(tgt.ne(PAD).sum()), index=torch.arange(rows),
                  tgt_positions=target_positions(tgt, PAD))
    return batch.to(device)


def packed_batch(batch: Batch, device: torch.device) -> Batch:
    """The same sentences as `batch` (on the host) packed as `nmt train` with train.packed packs them, in a row of
    the padded batch's width."""
    rows = lambda t: [r[r.ne(PAD)].tolist() for r in t]  # noqa: E731
    src = [r[:-1] for r in rows(batch.src)]  # without EOS
    tgt = [r[:-1] for r in rows(batch.tgt_out)]
    max_tokens = max(batch.src.numel(), batch.tgt_out.numel())
    return collate_packed(src, tgt, batch.index, pad=PAD, bos=BOS, eos=common.EOS,
                          max_tokens=max_tokens).to(device)


def padding_efficiency(batch: Batch) -> tuple[float, float]:
    """Real tokens / padded slots of the source and of the target side: the share of the work that is not padding."""
    return batch.n_src_tokens / batch.src.numel(), batch.n_tgt_tokens / batch.tgt_out.numel()


def update_fn(model, loss_fn, optimizer, batch: Batch, epsilon: float, device: torch.device, precision: Precision,
              clip_norm: float = 0.0):
    """One update as `nmt train` runs it (nmt.train.update): the piece's backward, then the gradient norm (clipped
    when clip_norm > 0), the finite check and the step, decided on the device (queue_update) or, with fp16's loss
    scaler, on the host after one wait (finish_update). fp16: the loss scaler starts where `nmt train`'s does; an
    update it skips (no Adam step: it looks faster) is counted in `update.skipped`."""
    scaler = grad_scaler(precision, device)
    params = list(model.parameters())

    def update() -> None:
        sums = piece_backward(lambda: loss_fn(model, batch, epsilon), scaler, 1.0 / batch.n_tgt_tokens, device,
                              precision)
        if decides_on_device(optimizer, scaler):  # the step decided on the device: nothing waits for it
            queue_update(params, optimizer, clip_norm, sums)
            return
        try:
            finish_update(params, optimizer, scaler, clip_norm, sums)
        except SkippedUpdate:
            update.skipped += 1

    update.scaler, update.skipped = scaler, 0
    return update


def ours_loss(model, batch: Batch, epsilon: float, forward=None, compiled_loss: bool = False):
    """`nmt train`'s loss of a piece; `forward`: the model through torch.compile (train.compile), else the model;
    `compiled_loss`: train.compile_loss."""
    return piece_loss(model if forward is None else forward, model, batch, epsilon, PAD, compiled_loss)


def ours_logits_loss(model, batch: Batch, epsilon: float):
    return label_smoothed_loss(model(batch.src, batch.tgt_in), batch.tgt_out, epsilon, PAD)


def marian_loss(model, batch: Batch, epsilon: float):
    return label_smoothed_loss(marian_forward(model, batch), batch.tgt_out, epsilon, PAD)


def marian_forward(model, batch: Batch):
    return model(input_ids=batch.src, attention_mask=batch.src.ne(PAD), decoder_input_ids=batch.tgt_in,
                 use_cache=False).logits


def compiled_forward(model: torch.nn.Module, args):
    """The model through torch.compile in --compile-mode, as `nmt train` compiles it (train.compile_mode)."""
    return compile_for_training(model, model.parameters(), args.compile_mode)


def contestants_of(cfg, args, device: torch.device, gpu: bool, batch: Batch, compiled: bool) -> dict:
    """label -> its update, each model with its own Adam; `gpu`: no ours-mkl (a CPU question); `compiled`: ours
    through torch.compile, as `nmt train` with train.compile."""
    fp32 = Precision("fp32")  # fp32 weights; bf16/fp16 are autocast, as nmt train
    ours_model = prepare(ours(cfg, args.vocab), device, fp32, training=True)
    ours_fn = partial(ours_loss, forward=compiled_forward(ours_model, args) if compiled else None,
                      compiled_loss=args.compile_loss)
    models = [("ours", ours_model, ours_fn, batch)]
    if args.packed:
        packed_model = prepare(ours(cfg, args.vocab), device, fp32, training=True)
        packed_fn = partial(ours_loss, forward=compiled_forward(packed_model, args) if compiled else None,
                            compiled_loss=args.compile_loss)
        models.append(("ours-packed", packed_model, packed_fn, packed_batch(batch.to("cpu"), device)))
    if not gpu:  # torch's F.linear instead of our oneDNN kernels
        models.append(("ours-mkl", kernels.swap_dropout(ours(cfg, args.vocab)), ours_loss, batch))
    models += [("ours-logits", prepare(ours(cfg, args.vocab), device, fp32, training=True), ours_logits_loss, batch),
               ("marian", marian(cfg, args.vocab, attn=args.marian_attn).to(device), marian_loss, batch)]
    contestants = {}
    for label, model, loss_fn, its_batch in models:
        model.train()
        opt = adam(list(model.parameters()), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
        contestants[label] = update_fn(model, loss_fn, opt, its_batch, args.label_smoothing, device,
                                       Precision(args.dtype), args.clip_norm)
    return contestants


def peak_memory(update, device: torch.device) -> float | None:
    """GiB at the peak of one more update (torch.cuda.max_memory_allocated: every contestant's weights and
    Adam moments are resident, plus this update's activations and gradients); None off CUDA."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    update()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) / 2**30


def own_batch(name: str, args) -> tuple[int, bool]:
    """(max_tokens, compile) of a config's row: --own-settings takes each config's train section's."""
    if not args.own_settings:
        return args.max_tokens, args.compile or args.compile_mode != "default"
    train = experiment(name).train
    return train.max_tokens, train.compile


def bench(name: str, args, device: torch.device, gpu: bool, given_peak: float | None) -> tuple[list[str], str]:
    """One row of the table and where its MFU's peak came from; `gpu`: the GPU path (sync timing, MFU), on
    `device`."""
    cfg = model_config(name)
    max_tokens, compiled = own_batch(name, args)
    batch = make_batch(max_tokens, args.vocab, device)
    contestants = contestants_of(cfg, args, device, gpu, batch, compiled)
    # after prepare(): it switches TF32 on for training on CUDA, which sets the fp32 peak
    peak, peak_note = resolve_peak(device, args.dtype, given_peak) if gpu else (None, "")
    src_eff, tgt_eff = padding_efficiency(batch)
    print(f"{name}: d_model {cfg.d_model}, heads {cfg.n_heads}, d_ff {cfg.d_ff}, layers "
          f"{cfg.encoder_layers}+{cfg.decoder_layers}, pre_norm {cfg.pre_norm}, batch {tuple(batch.src.shape)} "
          f"-> {tuple(batch.tgt_in.shape)}, {batch.n_tgt_tokens} target tokens, padding efficiency (real tokens / "
          f"padded slots) source {src_eff:.1%}, target {tgt_eff:.1%}"
          f"{f', ours compiled ({args.compile_mode})' if compiled else ''}",
          flush=True)
    timed = {k: synced(v, device) for k, v in contestants.items()} if gpu else contestants
    times = interleaved(timed, args.steps, args.warmup, clock=args.clock, pause=0.0 if gpu else 0.3)
    for label, update in contestants.items():
        if update.skipped:
            print(f"warning: {name} {label}: {update.skipped} of {args.warmup + args.steps} fp16 updates skipped on "
                  "overflow (timed as they ran: a skipped update has no Adam step)", file=sys.stderr)
    tps = {k: batch.n_tgt_tokens / median(v) for k, v in times.items()}

    def ratio(other: str, of: str = "ours") -> str:
        paired = median([m / o for o, m in zip(times[of], times[other], strict=True)])
        return f"{tps[of] / tps[other]:.2f} ({paired:.2f})"

    packed = [f"{tps['ours-packed']:,.0f}", ratio("ours", of="ours-packed")] if args.packed else []
    if not gpu:
        return [name, f"{tps['ours']:,.0f}", f"{tps['ours-mkl']:,.0f}", f"{tps['ours-logits']:,.0f}",
                f"{tps['marian']:,.0f}", ratio("ours-mkl"), ratio("ours-logits"), ratio("marian"), *packed], peak_note
    flops = train_flops(cfg, args.vocab, batch.src.ne(PAD).sum(1), batch.tgt_out.ne(PAD).sum(1))
    sec = {k: median(v) for k, v in times.items()}
    gib = peak_memory(contestants["ours"], device)
    return [name, f"{max_tokens:,}", f"{tps['ours']:,.0f}", f"{tps['ours-logits']:,.0f}", f"{tps['marian']:,.0f}",
            ratio("ours-logits"), ratio("marian"), f"{flops / 1e9:,.1f}", f"{flops / sec['ours'] / 1e12:,.2f}",
            mfu(flops, sec["ours"], peak), mfu(flops, sec["marian"], peak),
            "n/a" if gib is None else f"{gib:.1f}", *packed], peak_note


PACKED_COLUMNS = ["ours-packed tok/s", "packed/padded"]


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
    p.add_argument("--compile", action="store_true", help="ours through torch.compile, as `nmt train` with "
                                                          "train.compile (the peers eager)")
    p.add_argument("--compile-mode", choices=COMPILE_MODES, default="default",
                   help="torch.compile's mode for ours (train.compile_mode): reduce-overhead adds CUDA graphs")
    p.add_argument("--compile-loss", action="store_true", help="ours' loss chunks through torch.compile "
                                                               "(train.compile_loss)")
    p.add_argument("--packed", action="store_true", help="also ours on the same sentences packed (train.packed)")
    p.add_argument("--own-settings", action="store_true",
                   help="each config's own train.max_tokens and train.compile instead of --max-tokens/--compile")
    p.add_argument("--clip-norm", type=float, default=0.0, help="train.clip_norm of the updates (0: none, as "
                                                                "configs/base.yaml)")
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
    with OtherLoad() as load:
        rows, notes = zip(*[bench(name, args, device, gpu, args.peak_tflops) for name in args.configs.split(",")],
                          strict=True)
    if not gpu:
        print(f"\ntraining update, target tokens/s (median of {args.steps}, {args.threads} threads, {args.dtype}, "
              f"torch {torch.__version__}, other processes' CPU share during the run: {load}); "
              f"in brackets: median of per-round ratios")
        print(table(["config", "ours tok/s", "ours-mkl tok/s", "ours-logits tok/s", "marian tok/s", "ours/ours-mkl",
                     "ours/ours-logits", "ours/marian", *PACKED_COLUMNS[:2 * args.packed]], rows))
        return
    print(f"\ntraining update on {device_label(device)}, target tokens/s (median of {args.steps} after "
          f"{args.warmup} warm-up, {Precision(args.dtype).describe(training=True)}, torch {torch.__version__}); "
          f"in brackets: median of per-round ratios; MFU = model FLOPs (bench/gpu.py train_flops) / time / peak: "
          f"{notes[-1]}; peak GiB: torch.cuda.max_memory_allocated in an update of ours (all models resident)")
    print(table(["config", "max_tokens", "ours tok/s", "ours-logits tok/s", "marian tok/s", "ours/ours-logits",
                 "ours/marian", "GFLOP/update", "ours TFLOP/s", "ours MFU", "marian MFU", "peak GiB",
                 *PACKED_COLUMNS[:2 * args.packed]], rows))


if __name__ == "__main__":
    main()
