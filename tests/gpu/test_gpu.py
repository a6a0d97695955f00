"""On a CUDA GPU: what only a GPU run shows. Every test here is marked gpu; without a GPU they are collected and
skipped ("needs a CUDA GPU"). They are also the only tests that see CUDA: conftest hides it from all others.

- the model's logits on the GPU are the CPU's; SDPA (what the GPU runs) agrees with the written-out attention;
- the chunked training loss and its gradients equal the loss through full logits, in fp32, bf16 and fp16;
- `nmt train` on the GPU in fp32, bf16 and fp16 (with its GradScaler in the checkpoint) learns; a run killed
  with SIGKILL resumes and ends where an uninterrupted one does; an out-of-memory batch is split and retried;
- (decoding's golden outputs on the GPU: tests/gpu/test_gpu_golden.py)
- `torchrun --nproc_per_node 2` (NCCL) computes what one process with twice the accumulation does (2 GPUs).

Dry run on a machine without a GPU: NMT_GPU_TESTS_DEVICE=cpu runs the same tests on device "cpu" so that their
own code is exercised; the parts that need CUDA (fp16 training and decoding, a GPU memory cap) skip with their
reason, and bit-exact CPU runs pass the GPU tolerances trivially:
    NMT_GPU_TESTS_DEVICE=cpu python3 -m pytest tests/gpu/test_gpu.py -m gpu -q

Only nmt's public entry points are used (the CLI, nmt.train.loop.train, nmt.loss's functions, nmt.checkpoint.load, the
model's methods), never its private helpers.
"""

from __future__ import annotations

import copy
import gc
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml

from nmt import checkpoint, precision
from nmt.config.experiment import ModelConfig
from nmt.device import pick_device
from nmt.loss import label_smoothed_loss, projected_label_smoothed_loss
from nmt.model import Transformer, scaled_dot_product_attention
from nmt.precision import Precision, prepare
from nmt.train.loop import train
from tests.helpers.cli import nmt_env, run_cli
from tests.helpers.cuda import CUDA_AVAILABLE, CUDA_DEVICES, REAL_CUDA, REAL_VISIBLE_DEVICES
from tests.helpers.paths import ROOT
from tests.helpers.training import tiny_config

DEVICE_NAME = os.environ.get("NMT_GPU_TESTS_DEVICE") or "cuda"
if DEVICE_NAME not in ("cuda", "cpu"):
    raise ValueError(f"NMT_GPU_TESTS_DEVICE must be cuda (the default) or cpu (a dry run), got {DEVICE_NAME!r}")
DRY_RUN = DEVICE_NAME == "cpu"
DEVICE = torch.device("cpu") if DRY_RUN else torch.device("cuda", 0)

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not DRY_RUN and not CUDA_AVAILABLE, reason="needs a CUDA GPU")]

TINY = ROOT / "configs" / "tiny.yaml"
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def cuda_only(what: str) -> None:
    """Skip the rest of a test in a dry run: `what` cannot run on the CPU."""
    if DRY_RUN:
        pytest.skip(f"dry run on the CPU: {what}")


@pytest.fixture(autouse=True)
def full_fp32_matmuls():
    """fp32 products in full fp32 (no TF32), whatever an earlier test or the environment set: the fp32
    tolerances below are fp32's."""
    before = precision.tf32_enabled()
    precision.use_tf32(False)
    yield
    precision.use_tf32(before)
    if DEVICE.type == "cuda":
        torch.cuda.empty_cache()


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    """||got - want|| / ||want||, in float64."""
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    return float((got - want).norm() / want.norm().clamp_min(1e-30))


def metrics(run: Path, kind: str = "train") -> list[dict]:
    """The run dir's metrics.jsonl records of one type ("train" or "valid"), in file order."""
    lines = (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [r for r in map(json.loads, lines) if r["type"] == kind]


def write_config(path: Path, cfg) -> Path:
    path.write_text(yaml.safe_dump(cfg.to_dict()), encoding="utf-8")
    return path


# ---------------------------------------------------------------- the pinning, from this side


def test_a_gpu_test_sees_the_real_cuda():
    """conftest hides CUDA from the tests not marked gpu; these get the machine's back, here and in children."""
    assert torch.cuda.is_available is REAL_CUDA["is_available"]
    assert torch.cuda.device_count is REAL_CUDA["device_count"]
    assert torch.cuda.is_available() == CUDA_AVAILABLE and torch.cuda.device_count() == CUDA_DEVICES
    assert os.environ.get("CUDA_VISIBLE_DEVICES") == REAL_VISIBLE_DEVICES
    assert nmt_env().get("CUDA_VISIBLE_DEVICES") == REAL_VISIBLE_DEVICES
    expected = torch.device("cuda", 0) if CUDA_AVAILABLE else torch.device("cpu")
    assert pick_device("auto", "train.device") == expected


# ---------------------------------------------------------------- the model and its kernels

VOCAB, PAD, BOS = 400, 0, 2


def tiny_model(seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    cfg = ModelConfig(d_model=64, n_heads=4, d_ff=128, encoder_layers=2, decoder_layers=2, max_positions=256)
    return Transformer.from_config(cfg, VOCAB, VOCAB, pad_id=PAD, joint_vocab=True).eval()


def padded_batch(lengths: list[int], seed: int, bos: bool = False) -> torch.Tensor:
    """[len(lengths), max(lengths)] random token ids, each row padded after its length."""
    g = torch.Generator().manual_seed(seed)
    out = torch.full((len(lengths), max(lengths)), PAD, dtype=torch.long)
    for row, n in enumerate(lengths):
        out[row, :n] = torch.randint(4, VOCAB, (n,), generator=g)
        if bos:
            out[row, 0] = BOS
    return out


def test_logits_on_the_device_equal_the_cpu_logits():
    """The same weights in fp32 (eval), the inference form nmt.precision.prepare makes on the device, against the
    plain model on the CPU: teacher-forced logits, and the logits of incremental decoding with the KV cache
    (on CUDA SDPA computes every step; on the CPU a decoding step is written out)."""
    reference = tiny_model()
    model = prepare(copy.deepcopy(reference), DEVICE, Precision("fp32"), training=False)
    src = padded_batch([23, 17, 5, 11], seed=1)
    tgt_in = padded_batch([19, 6, 12, 1], seed=2, bos=True)
    with torch.no_grad():
        want = reference(src, tgt_in)
        got = model(src.to(DEVICE), tgt_in.to(DEVICE))
        assert got.device.type == DEVICE.type and got.dtype == torch.float32
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)
        memory, src_pad_mask = model.encode(src.to(DEVICE))
        cache = model.init_cache(memory, src_pad_mask, tgt_in.size(1))
        steps = [model.decode_step(tgt_in[:, t].to(DEVICE), cache)[0].cpu() for t in range(tgt_in.size(1))]
    real = tgt_in != PAD  # each row's own positions (a padded row's later steps are never used by a search)
    torch.testing.assert_close(torch.stack(steps, dim=1)[real], want[real], rtol=1e-4, atol=1e-4)


ATTENTION_CASES = {  # (queries, keys, key lengths or None, causal): how the model calls attention
    "padding": (29, 29, [29, 17, 4], False),  # encoder self-attention over padded sources
    "cross": (11, 29, [29, 17, 4], False),  # decoder over the encoder output
    "causal": (29, 29, None, True),  # decoder self-attention in training
}
# relative error of the output and of the gradients against float64: fp32, and the 8 / 11 significand bits of
# bf16 / fp16 (inputs and outputs rounded, products accumulated in fp32). The CPU measured fp32 3e-7, bf16 5e-3,
# fp16 6e-4 (both SDPA and written out)
ATTENTION_TOL = {"fp32": 1e-5, "bf16": 2e-2, "fp16": 3e-3}


def formula(q, k, v, mask, causal):
    """softmax(Q K^T / sqrt(d_k)) V in the inputs' dtype throughout (the float64 reference)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    if causal:
        scores = scores.masked_fill(torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return scores.softmax(dim=-1) @ v


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", list(ATTENTION_CASES))
def test_sdpa_agrees_with_the_written_out_attention(case, dtype):
    """PyTorch's SDPA (what the model runs on CUDA) and nmt.model.scaled_dot_product_attention (equation 1 written
    out, what the CPU runs for decoding steps and what attention plots use) against the formula in float64, forward
    and backward."""
    T, S, lengths, causal = ATTENTION_CASES[case]
    g = torch.Generator().manual_seed(7)
    B, H, Dh = 3, 4, 64
    q64, k64, v64 = (torch.randn(B, H, n, Dh, generator=g, dtype=torch.float64) for n in (T, S, S))
    mask = None
    if lengths is not None:
        mask = (torch.arange(S)[None, :] < torch.tensor(lengths)[:, None])[:, None, None, :]  # True = attend
    upstream = torch.randn(B, H, T, Dh, generator=g, dtype=torch.float64)

    def run(fn, dtype_, device):
        leaves = [x.to(device=device, dtype=dtype_, copy=True).requires_grad_() for x in (q64, k64, v64)]
        out = fn(*leaves, None if mask is None else mask.to(device), causal)
        out.backward(upstream.to(device=device, dtype=dtype_))
        return [out.detach(), *(x.grad for x in leaves)]

    def sdpa(q, k, v, m, c):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=c)

    def written_out(q, k, v, m, c):
        return scaled_dot_product_attention(q, k, v, m, c)[0]

    want = run(formula, torch.float64, "cpu")
    low = DTYPES[dtype]
    for name, got in (("sdpa", run(sdpa, low, DEVICE)), ("written out", run(written_out, low, DEVICE))):
        for what, a, b in zip(("output", "d q", "d k", "d v"), got, want, strict=True):
            assert a.dtype == low and a.device.type == DEVICE.type
            err = rel_err(a, b)
            assert err < ATTENTION_TOL[dtype], f"{name} {what} {dtype}: relative error {err:.2e}"


# ---------------------------------------------------------------- the loss

# a realistic output layer: ~32k vocabulary, ~4k target tokens of an update's batch (the dry run: a quarter each,
# the CPU being slower, fp16 most: ~6 min at full size). Tolerances: relative error of the loss and of each gradient
# against the fp32 loss through full logits, about 10x what the CPU measured at full size (fp32 2e-7 / 4e-6,
# bf16 1e-6 / 2e-3, fp16 4e-7 / 2e-4; the full-logits loss under autocast: bf16 1e-6 / 3e-3, fp16 3e-7 / 3e-4)
LOSS_SHAPE = (8000, 1000) if DRY_RUN else (32000, 4000)
LOSS_TOL = {"fp32": (1e-5, 5e-5), "bf16": (5e-4, 2e-2), "fp16": (2e-4, 3e-3)}  # (loss, gradients)


def loss_inputs(vocab: int, tokens: int, d_model: int = 256):
    g = torch.Generator().manual_seed(11)
    T = 40
    B = math.ceil(tokens / (0.75 * T))  # sentences of 20-40 tokens, padded to 40
    lengths = torch.randint(20, T + 1, (B,), generator=g)
    target = torch.randint(4, vocab, (B, T), generator=g)
    target[torch.arange(T)[None, :] >= lengths[:, None]] = PAD
    hidden = torch.randn(B, T, d_model, generator=g)  # the decoder's last (layer-normed) states
    weight = torch.randn(vocab, d_model, generator=g) * 2 * d_model**-0.5  # logits of std ~2
    return hidden.to(DEVICE), weight.to(DEVICE), target.to(DEVICE)


def loss_and_grads(fn, hidden, weight, target, autocast_dtype=None):
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    with torch.autocast(DEVICE.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
        loss, nll = fn(h, w, target)
    loss.backward()
    return loss.detach(), nll.detach(), h.grad, w.grad


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_chunked_loss_and_gradients_equal_the_full_logits_loss(dtype):
    """projected_label_smoothed_loss (chunks of logits, the gradient formed in the same pass) against
    label_smoothed_loss over the full [tokens, vocabulary] logits: the loss, and d/d hidden and d/d weight, in
    fp32, and under bf16 / fp16 autocast as training runs it (against the fp32 numbers: the full-logits loss
    under autocast is shown to be no closer)."""
    hidden, weight, target = loss_inputs(*LOSS_SHAPE)
    eps = 0.1

    def full(h, w, t):
        return label_smoothed_loss(F.linear(h, w), t, eps, PAD)

    def chunked(h, w, t):
        return projected_label_smoothed_loss(h, w, t, eps, PAD)

    want = loss_and_grads(full, hidden, weight, target)
    low = None if dtype == "fp32" else DTYPES[dtype]
    got = loss_and_grads(chunked, hidden, weight, target, low)
    assert got[2].dtype == torch.float32 and got[3].dtype == torch.float32  # gradients in the parameters' dtype
    assert all(bool(torch.isfinite(x).all()) for x in got)
    loss_tol, grad_tol = LOSS_TOL[dtype]
    errors = {what: rel_err(a, b) for what, a, b in zip(("loss", "nll", "d hidden", "d weight"), got, want,
                                                          strict=True)}
    assert errors["loss"] < loss_tol and errors["nll"] < loss_tol, errors
    assert errors["d hidden"] < grad_tol and errors["d weight"] < grad_tol, errors
    if low is not None:  # the plain loss under the same autocast: the rounding of the format, not of the chunking
        plain = loss_and_grads(full, hidden, weight, target, low)
        plain_errors = {what: rel_err(a, b) for what, a, b in zip(("loss", "nll", "d hidden", "d weight"), plain,
                                                                  want, strict=True)}
        for what, err in errors.items():
            assert err <= 3 * plain_errors[what] + loss_tol / 10, (what, errors, plain_errors)
    padded = (target == PAD).cpu()
    assert got[2].cpu()[padded].abs().sum() == 0  # padding gets no gradient


# ---------------------------------------------------------------- nmt train on the device


def tiny_yaml_args(data_dir: Path, run: Path, *overrides: str) -> list[str]:
    """`nmt train` of configs/tiny.yaml (the demo's model) on the demo corpus and the test device."""
    sets = [f"data.dir={data_dir}", "data.vocab_size=400", f"train.run_dir={run}", f"train.device={DEVICE_NAME}",
            "train.max_minutes=0", "train.warmup=10", "train.log_every=5", "train.valid_every=50",
            "train.valid_bleu_sentences=20", "train.save_every=50", "train.average_last=0", *overrides]
    return ["train", "--config", str(TINY), "--no-progress", *[x for s in sets for x in ("--set", s)]]


@pytest.mark.parametrize("amp", ["none", "bf16", "fp16"], ids=["fp32", "bf16", "fp16"])
def test_fifty_updates_of_the_tiny_config_learn(demo_data, tmp_path, amp):
    if amp == "fp16":
        cuda_only("train.amp=fp16 needs CUDA (nmt refuses it on the CPU)")
    run = tmp_path / "run"
    result = run_cli(*tiny_yaml_args(demo_data, run, f"train.amp={amp}", "train.max_updates=50"))
    assert result.exit_code == 0, result.stderr[-3000:]
    precision = Precision("fp32" if amp == "none" else amp).describe(training=True)
    assert f"training on {DEVICE} in {precision}" in result.stderr, result.stderr[-3000:]
    records = metrics(run)
    assert [r["step"] for r in records] == list(range(5, 51, 5))
    assert all(math.isfinite(r[k]) for r in records for k in ("loss", "nll", "ppl", "gnorm")), records
    first, last = records[0]["loss"], records[-1]["loss"]
    assert last < first - 0.5, f"loss {first:.3f} -> {last:.3f} over 50 updates"
    (valid,) = metrics(run, "valid")
    assert math.isfinite(valid["loss"]) and valid["loss"] < first
    state = checkpoint.load(run / "last.pt")
    assert state["train_state"]["step"] == 50
    for name, tensor in state["model"].items():
        if tensor.is_floating_point():
            assert tensor.dtype == torch.float32 and bool(torch.isfinite(tensor).all()), name
    scaler = state["train_state"]["scaler"]
    if amp == "fp16":  # the GradScaler's state is saved, so a resume continues its loss scale
        assert scaler and math.isfinite(scaler["scale"]) and scaler["scale"] > 0, scaler
    else:
        assert not scaler


def test_a_run_killed_after_a_checkpoint_resumes_to_the_uninterrupted_result(demo_data, tmp_path):
    """`python -m nmt train` killed with SIGKILL once it has written a checkpoint, then resumed to the same
    max_updates. On CUDA a resume is not bit-exact (non-deterministic kernels: atomics in backward), so the
    run must end within a tolerance of an uninterrupted one; on the CPU (dry run) it is exact anyway."""
    common = ("train.save_every=10", "train.max_updates=100", "train.valid_every=100", "train.valid_bleu_sentences=0",
              "train.log_every=1", "train.max_tokens=1024", f"train.device={DEVICE_NAME}")
    full, parts = tmp_path / "full", tmp_path / "parts"
    config = write_config(tmp_path / "parts.yaml", tiny_config(demo_data, parts, *common))
    log = tmp_path / "killed.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "nmt", "train", "--config", str(config), "--no-progress"],
                                env=nmt_env(), stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 300
        while not (parts / "checkpoint_10.pt").exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        running = proc.poll() is None
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert running and (parts / "checkpoint_10.pt").exists(), log.read_text(errors="replace")[-3000:]
    assert proc.returncode == -signal.SIGKILL

    resumed = run_cli("train", "--config", str(config), "--no-progress")
    assert resumed.exit_code == 0, resumed.stderr[-3000:]
    at = re.search(r"resumed from .* at update (\d+)", resumed.stderr)
    assert at, resumed.stderr[-3000:]
    step = int(at.group(1))
    assert 10 <= step < 100 and step % 10 == 0, step
    result = run_cli("train", "--config", str(write_config(tmp_path / "full.yaml",
                                                           tiny_config(demo_data, full, *common))), "--no-progress")
    assert result.exit_code == 0, result.stderr[-3000:]

    got, want = metrics(parts), metrics(full)
    assert [r["step"] for r in got] == [r["step"] for r in want] == list(range(1, 101))  # each update once
    # the first update after the resume: the restored weights, optimizer and sampler position (the same batch)
    assert got[step]["loss"] == pytest.approx(want[step]["loss"], rel=1e-3)
    (valid_got,), (valid_want,) = metrics(parts, "valid"), metrics(full, "valid")
    assert valid_got["loss"] == pytest.approx(valid_want["loss"], rel=0.02)
    assert valid_want["loss"] < want[0]["loss"] - 1.0  # and the runs learned: the tolerance is not vacuous
    assert checkpoint.load(parts / "last.pt")["train_state"]["step"] == 100


def test_an_out_of_memory_batch_is_split_and_the_run_completes(demo_data, tmp_path):
    """A GPU memory cap a third of what one update over a big batch (the whole demo corpus) takes: nmt.train.loop.train
    splits the batch that runs out of memory, retries, and finishes with the losses of an uncapped run."""
    cuda_only("a GPU memory cap (torch.cuda.set_per_process_memory_fraction) needs CUDA; test_faults fakes "
              "out-of-memory errors on the CPU")
    common = ("model.d_model=256", "model.n_heads=4", "model.d_ff=1024", "model.encoder_layers=2",
              "model.decoder_layers=2", "model.dropout=0", "train.max_tokens=100000", "train.max_updates=2",
              "train.amp=none", "train.device=cuda", "train.valid_bleu_sentences=0", "train.average_last=0")
    torch.cuda.init()  # the memory statistics need CUDA initialised (when this test runs alone)
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(DEVICE)
    uncapped = train(tiny_config(demo_data, tmp_path / "uncapped", *common), progress=False)
    peak = torch.cuda.max_memory_reserved(DEVICE)
    assert uncapped["oom_splits"] == 0 and uncapped["step"] == 2
    gc.collect()
    torch.cuda.empty_cache()
    cap = peak // 3
    torch.cuda.set_per_process_memory_fraction(cap / torch.cuda.get_device_properties(DEVICE).total_memory, DEVICE)
    try:
        summary = train(tiny_config(demo_data, tmp_path / "capped", *common), progress=False)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, DEVICE)
        gc.collect()
        torch.cuda.empty_cache()
    assert summary["oom_splits"] > 0, f"no split under a cap of {cap / 2**20:.0f} MiB (peak {peak / 2**20:.0f} MiB)"
    assert summary["oom_skipped"] == 0 and summary["step"] == 2 and summary["stopped"] == "max_updates"
    assert checkpoint.load(tmp_path / "capped" / "last.pt")["train_state"]["step"] == 2
    # the same updates: the pieces' gradients add up to the whole batch's (in another order)
    got, want = [r["loss"] for r in metrics(tmp_path / "capped")], [r["loss"] for r in metrics(tmp_path / "uncapped")]
    assert len(got) == 2 and got == pytest.approx(want, rel=1e-3)


# ---------------------------------------------------------------- several GPUs


@pytest.mark.skipif(not DRY_RUN and CUDA_AVAILABLE and CUDA_DEVICES < 2, reason="needs 2 CUDA GPUs")
def test_torchrun_on_two_gpus_matches_one_process_with_twice_the_accumulation(demo_data, tmp_path):
    """torchrun --nproc_per_node 2 (NCCL; gloo in the dry run) x update_freq 1 == 1 process x update_freq 2: the
    same global batches, so the same losses and weights (test_train.py's gloo test, on GPUs through torchrun)."""
    common = ("model.dropout=0", "train.max_updates=4", "train.save_every=4", "train.amp=none",
              f"train.device={DEVICE_NAME}")
    single, ddp = tmp_path / "single", tmp_path / "ddp"
    config = write_config(tmp_path / "single.yaml", tiny_config(demo_data, single, "train.update_freq=2", *common))
    result = run_cli("train", "--config", str(config), "--no-progress")
    assert result.exit_code == 0, result.stderr[-3000:]
    config = write_config(tmp_path / "ddp.yaml", tiny_config(demo_data, ddp, "train.update_freq=1", *common))
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           "-m", "nmt", "train", "--config", str(config), "--no-progress"],
                          env=nmt_env(), capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]
    single_losses = [r["loss"] for r in metrics(single)]
    ddp_losses = [r["loss"] for r in metrics(ddp)]
    assert len(ddp_losses) == 4  # rank 0 alone writes the metrics
    assert ddp_losses == pytest.approx(single_losses, rel=1e-4)
    a, b = checkpoint.load(single / "last.pt")["model"], checkpoint.load(ddp / "last.pt")["model"]
    assert a.keys() == b.keys()
    # Adam divides by sqrt(v): coordinates whose gradient is ~0 turn float noise into lr-sized steps, so compare
    # element-wise loosely (lr = 3e-4..1.2e-3 here) and the whole model tightly
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=5e-3)
    diff = sum((a[k].double() - b[k].double()).norm() ** 2 for k in a) ** 0.5
    total = sum(a[k].double().norm() ** 2 for k in a) ** 0.5
    assert diff / total < 1e-3
