"""On a CUDA GPU: what only a GPU run shows. Every test here is marked gpu; without a GPU they are collected and
skipped ("needs a CUDA GPU"). They are also the only tests that see CUDA: conftest hides it from all others.

- the model's logits on the GPU are the CPU's; SDPA (what the GPU runs) agrees with the written-out attention;
- the chunked training loss and its gradients equal the loss through full logits, in fp32, bf16 and fp16;
- `nmt train` on the GPU in fp32, bf16 and fp16 (with its GradScaler in the checkpoint) learns; a run killed
  with SIGKILL resumes and ends where an uninterrupted one does; an out-of-memory batch is split and retried;
- decoding reproduces the golden outputs (tests/test_golden.py) in fp32, nearly in bf16 and fp16;
- `torchrun --nproc_per_node 2` (NCCL) computes what one process with twice the accumulation does (2 GPUs).

Dry run on a machine without a GPU: NMT_GPU_TESTS_DEVICE=cpu runs the same tests on device "cpu" so that their
own code is exercised; the parts that need CUDA (fp16 training and decoding, a GPU memory cap) skip with their
reason, and bit-exact CPU runs pass the GPU tolerances trivially:
    NMT_GPU_TESTS_DEVICE=cpu python3 -m pytest tests/test_gpu.py -m gpu -q

Only nmt's public entry points are used (the CLI, nmt.train.train, nmt.loss's functions, nmt.checkpoint.load, the
model's methods), never its private helpers.
"""

from __future__ import annotations

import copy
import json
import math
import os
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml

from nmt.config import ModelConfig
from nmt.device import pick_device
from nmt.kernels import attention, attention_with_weights
from nmt.loss import label_smoothed_loss, projected_label_smoothed_loss
from nmt.model import Transformer
from nmt.precision import Precision, prepare

from .conftest import (
    CUDA_AVAILABLE,
    CUDA_DEVICES,
    REAL_CUDA,
    REAL_VISIBLE_DEVICES,
    ROOT,
    nmt_env,
)

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
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    yield
    torch.set_float32_matmul_precision(before)
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
    """nmt.kernels.attention (SDPA on CUDA) and attention_with_weights (the written-out formula, what the CPU runs
    for decoding steps and what attention plots use) against the formula in float64, forward and backward."""
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
        return attention(q, k, v, m, causal=c)[0]

    def written_out(q, k, v, m, c):
        return attention_with_weights(q, k, v, m, c, 0.0)[0]

    want = run(formula, torch.float64, "cpu")
    low = DTYPES[dtype]
    for name, got in (("attention", run(sdpa, low, DEVICE)), ("attention_with_weights", run(written_out, low, DEVICE))):
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
