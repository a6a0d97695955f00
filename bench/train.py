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
"""

from __future__ import annotations

import argparse

import torch
from common import BOS, PAD, OtherLoad, interleaved, marian, median, model_config, ours, random_batch, table

from nmt import kernels
from nmt.loss import label_smoothed_loss, projected_label_smoothed_loss
from nmt.optim import adam
from nmt.precision import Precision, prepare


def make_batch(max_tokens: int, vocab: int, seed: int = 0) -> dict[str, torch.Tensor]:
    rows = max(1, max_tokens // 32)
    src = random_batch(rows, 21, 30, vocab, seed)  # [rows, 31]
    tgt = random_batch(rows, 22, 31, vocab, seed + 1)  # labels: tgt + EOS, [rows, 32]
    tgt_in = torch.cat([torch.full((rows, 1), BOS), tgt[:, :-1]], dim=1)
    tgt_in = tgt_in.masked_fill(tgt.eq(PAD), PAD)  # BOS + tgt, padded where the labels are
    return {"src": src, "tgt_in": tgt_in, "tgt_out": tgt, "ntok": int(tgt.ne(PAD).sum())}


def update_fn(model, loss_fn, optimizer, batch, epsilon: float, dtype: torch.dtype):
    def update() -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
            loss = loss_fn(model, batch, epsilon)
        (loss / batch["ntok"]).backward()
        optimizer.step()

    return update


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


def bench(name: str, args) -> list[str]:
    cfg = model_config(name)
    batch = make_batch(args.max_tokens, args.vocab)
    contestants = {}
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    cpu, fp32 = torch.device("cpu"), Precision("fp32")  # the weights; --dtype bf16 is autocast, as in nmt train
    for label, model, loss_fn in (("ours", prepare(ours(cfg, args.vocab), cpu, fp32, training=True), ours_loss),
                                  ("ours-mkl", kernels.swap_dropout(ours(cfg, args.vocab)), ours_loss),
                                  ("ours-logits", prepare(ours(cfg, args.vocab), cpu, fp32, training=True),
                                   ours_logits_loss),
                                  ("marian", marian(cfg, args.vocab, attn=args.marian_attn), marian_loss)):
        model.train()
        opt = adam(list(model.parameters()), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
        contestants[label] = update_fn(model, loss_fn, opt, batch, args.label_smoothing, dtype)
    print(f"{name}: d_model {cfg.d_model}, heads {cfg.n_heads}, d_ff {cfg.d_ff}, layers "
          f"{cfg.encoder_layers}+{cfg.decoder_layers}, pre_norm {cfg.pre_norm}, batch {tuple(batch['src'].shape)} "
          f"-> {tuple(batch['tgt_in'].shape)}, {batch['ntok']} target tokens", flush=True)
    times = interleaved(contestants, args.steps, args.warmup, clock=args.clock)
    tps = {k: batch["ntok"] / median(v) for k, v in times.items()}

    def ratio(other: str) -> str:
        paired = median([m / o for o, m in zip(times["ours"], times[other], strict=True)])
        return f"{tps['ours'] / tps[other]:.2f} ({paired:.2f})"

    return [name, f"{tps['ours']:,.0f}", f"{tps['ours-mkl']:,.0f}", f"{tps['ours-logits']:,.0f}",
            f"{tps['marian']:,.0f}", ratio("ours-mkl"), ratio("ours-logits"), ratio("marian")]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--configs", default="tiny,base", help="comma-separated config names or YAML paths")
    p.add_argument("--steps", type=int, default=6, help="timed updates per model")
    p.add_argument("--warmup", type=int, default=1, help="untimed updates per model first")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                   help="wall: elapsed time; cpu: this process's CPU time (robust to other load; use --threads 1)")
    p.add_argument("--max-tokens", type=int, default=4096, help="padded target tokens per batch (rows x 32)")
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--label-smoothing", type=float, default=0.1)
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32", help="bf16: all of them under bf16 autocast")
    p.add_argument("--marian-attn", choices=["sdpa", "eager"], default="sdpa",
                   help="Marian's attention: torch's SDPA (HF's default) or HF's written-out softmax(QK^T)V")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    with OtherLoad() as load:
        rows = [bench(name, args) for name in args.configs.split(",")]
    print(f"\ntraining update, target tokens/s (median of {args.steps}, {args.threads} threads, {args.dtype}, "
          f"torch {torch.__version__}, other processes' CPU share during the run: {load}); "
          f"in brackets: median of per-round ratios")
    print(table(["config", "ours tok/s", "ours-mkl tok/s", "ours-logits tok/s", "marian tok/s", "ours/ours-mkl",
                 "ours/ours-logits", "ours/marian"], rows))


if __name__ == "__main__":
    main()
