"""What the benches need to run on a GPU (`--device cuda` of bench/train.py and bench/translate.py): the device
and dtype checks, timing between synchronisations, the model FLOPs of a training update and the GPUs' peak
dense TFLOPS, which together give model-FLOPs utilisation (MFU).

The hidden option `--as-gpu` runs this code path on a CPU (no-op synchronisation, a peak from --peak-tflops),
so that its arithmetic can be checked on a machine without a GPU.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import torch
from common import SelfTimed

from nmt import precision
from nmt.config.experiment import ModelConfig
from nmt.device import pick_device
from nmt.errors import NmtError


def device_from(name: str) -> torch.device:
    """--device as a torch.device; one line on stderr and exit 1 where it cannot be had (no CUDA here)."""
    try:
        return pick_device(name, "--device")
    except NmtError as e:
        raise SystemExit(f"error: {e}") from None


def check_dtype(dtype: str, device: torch.device, as_gpu: bool) -> None:
    """One-line exits for dtypes the device does not compute: fp16 (CPU has no fast fp16 and autocast's CPU fp16
    is not what `nmt train` runs) outside the GPU path, int8 (dynamic quantization is CPU only) on CUDA."""
    if dtype == "fp16" and device.type != "cuda" and not as_gpu:
        raise SystemExit("error: --dtype fp16 needs --device cuda")
    if dtype == "int8" and device.type == "cuda":
        raise SystemExit("error: --dtype int8 (dynamic quantization) runs on CPU only; use fp16 or bf16 on CUDA")


def device_label(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def synced(fn: Callable[[], object], device: torch.device) -> Callable[[], SelfTimed]:
    """`fn` timed by the wall clock between two synchronisations of the device. CUDA calls only queue work, so
    without them the clock would stop before the GPU has finished (and start while an earlier call's work still
    runs). On CPU the synchronisation is a no-op: the same code, the same arithmetic."""
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)

    def run() -> SelfTimed:
        sync()
        start = time.perf_counter()
        value = fn()
        sync()
        return SelfTimed(time.perf_counter() - start, value)

    return run


# ---- model FLOPs -------------------------------------------------------------------------------------


def train_flops(cfg: ModelConfig, vocab: int, src_lens: torch.Tensor, tgt_lens: torch.Tensor) -> float:
    """Model FLOPs of one training update (forward + backward) over sentences of these non-pad lengths.

    With d = d_model, f = d_ff, E/D = encoder/decoder layers, V = output vocabulary, s_i/t_i the source/target
    tokens of sentence i (EOS and BOS included; padding does no useful work and is not counted), S = sum s_i and
    T = sum t_i, one multiply-add = 2 FLOPs and backward = 2x forward (gradients of inputs and of weights):

        update = 6 * (N_src * S + N_tgt * T) + 12 * d * (E * sum s_i^2 + D * sum (t_i^2 + t_i * s_i))

    The first term is the standard 6 * params * tokens, each weight matrix counted for the tokens it multiplies:
    N_src = E * (4 d^2 + 2 d f) + D * 2 d^2 (encoder layers: Q, K, V, O and the FFN; the decoder's cross-attention
    K, V projections of the source), N_tgt = D * (6 d^2 + 2 d f) + V * d (decoder layers: self-attention Q, K, V,
    O, cross-attention Q, O, the FFN; the output projection). Embedding lookups multiply nothing and are not
    counted. The second term is attention's two products (Q K^T and weights x V, 2 * 2 * d per query-key pair,
    x3 for the update) over the encoder's s^2, the decoder's t^2 and cross t * s pairs, the whole square for the
    causal self-attention too (as PaLM's MFU does). LayerNorm, softmax, dropout, residuals and the loss's
    elementwise work are left out. Model FLOPs are the model's, not the implementation's, so the ratio of two
    contestants' MFU is their speed ratio."""
    d, f, E, D = cfg.d_model, cfg.d_ff, cfg.encoder_layers, cfg.decoder_layers
    s, t = src_lens.double().cpu(), tgt_lens.double().cpu()
    n_src = E * (4 * d * d + 2 * d * f) + D * 2 * d * d
    n_tgt = D * (6 * d * d + 2 * d * f) + vocab * d
    dense = 6 * (n_src * float(s.sum()) + n_tgt * float(t.sum()))
    attention = 12 * d * (E * float((s * s).sum()) + D * float((t * t + t * s).sum()))
    return dense + attention


# ---- peak dense TFLOPS --------------------------------------------------------------------------------

# Vendors' datasheets (NVIDIA product pages and architecture whitepapers), dense Tensor Core TFLOPS: their
# headline bf16/fp16/tf32 figures are with 2:4 sparsity, which a dense model never uses, so halved. GeForce
# cards: fp16/bf16 with fp32 accumulation (what cuBLAS uses under autocast), half their fp16-accumulate rate.
# "fp32" is the CUDA cores' rate (torch's default, TF32 off); no "tf32" = no TF32 hardware (fp32 then);
# no "bf16" = no bf16 tensor cores (emulated, no meaningful peak). First match of the pattern on
# torch.cuda.get_device_name() wins, so the variants come before the family.
PEAKS: list[tuple[str, str, dict[str, float]]] = [
    (r"H100.*NVL|H200.*NVL", "H100/H200 NVL", {"bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0}),
    (r"H100.*PCIe", "H100 PCIe", {"bf16": 756.5, "fp16": 756.5, "tf32": 378.0, "fp32": 51.0}),
    (r"H100|H200|GH200", "H100/H200 SXM", {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9}),
    (r"A100", "A100", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    (r"\bA10\b", "A10", {"bf16": 125.0, "fp16": 125.0, "tf32": 62.5, "fp32": 31.2}),
    (r"L40S", "L40S", {"bf16": 362.05, "fp16": 362.05, "tf32": 183.0, "fp32": 91.6}),
    (r"\bL4\b", "L4", {"bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3}),
    (r"RTX 4090", "RTX 4090", {"bf16": 165.2, "fp16": 165.2, "tf32": 82.6, "fp32": 82.6}),
    (r"RTX 3090", "RTX 3090", {"bf16": 71.0, "fp16": 71.0, "tf32": 35.6, "fp32": 35.6}),
    (r"V100S", "V100S PCIe", {"fp16": 130.0, "fp32": 16.4}),
    (r"V100.*PCIE", "V100 PCIe", {"fp16": 112.0, "fp32": 14.0}),
    (r"V100", "V100 SXM2", {"fp16": 125.0, "fp32": 15.7}),
    (r"\bT4\b", "T4", {"fp16": 65.0, "fp32": 8.1}),
]


def matmul_format(dtype: str) -> str:
    """The format the matrix multiplies run in: bf16/fp16 under autocast; fp32 as TF32 where torch allows it."""
    if dtype != "fp32":
        return dtype
    return "tf32" if precision.tf32_enabled() else "fp32"


def peak_tflops(name: str, dtype: str) -> tuple[float | None, str]:
    """(peak dense TFLOPS of GPU `name` for `dtype`'s matrix multiplies, where it comes from) or (None, why)."""
    fmt = matmul_format(dtype)
    for pattern, label, peaks in PEAKS:
        if re.search(pattern, name, re.IGNORECASE):
            if fmt == "tf32" and "tf32" not in peaks:
                fmt = "fp32"  # TF32 allowed, but this GPU has no TF32 units: plain fp32
            if fmt not in peaks:
                return None, f"{label} has no {fmt} tensor cores (emulated): MFU n/a"
            return peaks[fmt], f"{label} {fmt} dense, datasheet"
    return None, f"no peak for {name!r} in bench/gpu.py PEAKS: MFU n/a (give one with --peak-tflops)"


def resolve_peak(device: torch.device, dtype: str, given: float | None) -> tuple[float | None, str]:
    """--peak-tflops if given, else the table's figure for this GPU (none for a CPU)."""
    if given is not None:
        return given, f"{given:g} TFLOPS from --peak-tflops"
    if device.type != "cuda":
        return None, "no peak for a CPU: MFU n/a (give one with --peak-tflops)"
    peak, source = peak_tflops(device_label(device), dtype)
    return peak, source if peak is None else f"{peak:g} TFLOPS ({source})"


def mfu(flops: float, seconds: float, peak: float | None) -> str:
    """Achieved model FLOPs / peak as a percentage, or 'n/a' without a peak."""
    return "n/a" if peak is None else f"{100 * flops / seconds / (peak * 1e12):.1f}%"
