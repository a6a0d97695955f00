"""The training objective: label-smoothed cross-entropy (Szegedy et al. 2016; the paper's §5.4).

Two ways to the same numbers:
- `label_smoothed_loss(logits, ...)`: from logits [.., V] (validation, benches, any caller with logits).
- `projected_label_smoothed_loss(hidden, weight, ...)`: from the decoder's last hidden states and the
  output matrix, for training. The [tokens, V] logits are the largest tensors of a small model's update
  (written and read by log-softmax, NLL, the smoothing sum and each of their backwards;
  `python bench/train.py`, column ours/ours-logits, times both). Here they exist a cache-sized chunk of
  rows at a time, and the gradient with respect to each chunk is formed in the same pass (the loss is a
  scalar, so backward only scales what forward already computed): three GEMMs per chunk and no full-size
  tensor. Padding rows are never projected. The chunk is sized per device: on a CPU to stay in cache, on
  a GPU large enough that a batch is a few chunks (each chunk is ~40 kernel launches). `compiled=True`: each chunk
  one torch.compile'd function of one fixed shape, its passes over the logits fused (nmt.loss_compiled).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from nmt.kernels import autocast_dtype, fast_linear
from nmt.loss_compiled import compiled_chunked


def smoothing_weights(epsilon: float) -> tuple[float, float]:
    """The label-smoothing rule (§5.4) as the loss applies it: (weight of the target's NLL, weight of the mean over
    the whole vocabulary of -log p_v) = (1 - eps, eps). Pad and the other special ids are in that mean too."""
    return 1.0 - epsilon, epsilon


def smoothed_targets(target: Tensor, vocab: int, epsilon: float, dtype: torch.dtype = torch.float32) -> Tensor:
    """The distribution the loss trains towards, [..., V] for target ids [...]: q = (1 - eps) onehot + eps / V,
    so 1 - eps + eps / V at the target and eps / V everywhere else; -sum_v q_v log p_v is
    `label_smoothed_loss`'s per-token loss. For pictures and tests: the losses never build it."""
    keep, spread = smoothing_weights(epsilon)
    onehot = F.one_hot(target.long(), vocab).to(dtype)
    return keep * onehot + spread / vocab


def label_smoothed_loss(logits: Tensor, target: Tensor, epsilon: float, pad: int) -> tuple[Tensor, Tensor]:
    """Sum over non-pad tokens of the label-smoothed loss and of the plain NLL.

    Smoothing spreads `epsilon` uniformly over the vocabulary (as in the paper; `smoothed_targets`):
    loss = (1 - eps) * nll + eps * mean_v(-log p_v).
    """
    vocab = logits.size(-1)
    lprobs = F.log_softmax(logits.float(), dim=-1).view(-1, vocab)
    target = target.reshape(-1)
    # masks instead of boolean indexing: no [tokens, vocab] copies in forward or backward
    nll = F.nll_loss(lprobs, target, ignore_index=pad, reduction="sum")
    smooth = -(lprobs.sum(dim=-1) * (target != pad)).sum() / vocab
    keep, spread = smoothing_weights(epsilon)
    return keep * nll + spread * smooth, nll


CHUNK_BYTES = 4 << 20  # CPU: fp32 logits per chunk, in cache between the GEMM and the passes over it
GPU_CHUNK_BYTES = 256 << 20  # GPU: few chunks a batch (launch-bound otherwise), bounded memory still


def chunk_rows(device: torch.device, vocab: int) -> int:
    """Rows of logits per chunk on this device."""
    budget = CHUNK_BYTES if device.type == "cpu" else GPU_CHUNK_BYTES
    return max(1, budget // (4 * vocab))


COMPILED_CPU_CHUNK_BYTES = 16 << 20  # compiled, CPU: each chunk's d W is added to the fp32 [V, D] once; fewer, larger


def compiled_chunk_rows(device: torch.device, vocab: int, dtype: torch.dtype) -> int:
    """Rows of the compiled loss's chunk, one shape for a run: the same budget of logits, now in the compute dtype,
    in whole GEMM tiles (128 rows on a GPU: 4,096 at a 32k vocabulary in bf16; 16 on a CPU)."""
    cpu = device.type == "cpu"
    tile = 16 if cpu else 128
    budget = COMPILED_CPU_CHUNK_BYTES if cpu else GPU_CHUNK_BYTES
    return max(tile, budget // (dtype.itemsize * vocab) // tile * tile)


def target_positions(target: Tensor, pad: int) -> Tensor:
    """The flat positions [n] of target's non-pad tokens. Computed where the batch is built (its size is
    then known without asking the GPU); the loss selects rows with it instead of a boolean mask, whose
    result size the host must wait for."""
    return (target.reshape(-1) != pad).nonzero().squeeze(1)


def projected_label_smoothed_loss(hidden: Tensor, weight: Tensor, target: Tensor, epsilon: float,
                                  pad: int, bias: Tensor | None = None,
                                  positions: Tensor | None = None, compiled: bool = False) -> tuple[Tensor, Tensor]:
    """`label_smoothed_loss(hidden @ weight.T + bias, target, ...)` without the full logits: hidden
    [..., D], weight [V, D], target [...], bias [V] a constant (a model's fixed output bias), positions
    `target_positions(target, pad)` if the caller has them. The loss is differentiable (once) with respect
    to hidden and weight; the NLL is for logging. Under autocast the GEMMs run in the autocast dtype, the
    softmax in fp32. `compiled`: the gradient's chunks through nmt.loss_compiled (one torch.compile'd function
    per chunk shape, fused passes over the logits; for a GPU), else the eager chunks here (the reference)."""
    if positions is None:
        positions = target_positions(target, pad)
    positions = positions.to(hidden.device, non_blocking=True)
    rows = hidden.reshape(-1, hidden.size(-1)).index_select(0, positions)  # [n, D]
    labels = target.reshape(-1).index_select(0, positions)  # [n]
    dtype = autocast_dtype(hidden.device.type) or hidden.dtype
    bias = bias.detach().float() if bias is not None else None
    if torch.is_grad_enabled() and (rows.requires_grad or weight.requires_grad):
        return _ProjectedLoss.apply(rows, weight, labels, epsilon, dtype, bias, compiled)
    with torch.autocast(hidden.device.type, enabled=False):
        loss, nll, _, _ = _chunked(rows.to(dtype), weight.to(dtype), labels, epsilon, bias, with_grad=False)
    return loss, nll


def _chunked(rows: Tensor, weight: Tensor, labels: Tensor, epsilon: float, bias: Tensor | None,
             with_grad: bool) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
    """Loss and NLL sums over rows [N, D] (and with `with_grad` their gradients d loss / d rows [N, D],
    d loss / d weight [V, D], fp32), a chunk of rows at a time.

    With z = h W^T + b, m = max(z), e = exp(z - m), s = sum(e) and p = e / s per row:
    nll = m + log s - z[label]; mean_v(-log p_v) = m + log s - h . mean_v(W) - mean_v(b);
    d loss / d z = p - (1 - eps) onehot(label) - eps / V, so
    d loss / d h = (e @ W) / s - (1 - eps) W[label] - eps mean_v(W),
    d loss / d W = e^T (h / s) - (1 - eps) onehot^T h - eps / V * sum_n(h).
    Only the first terms need the [n, V] chunk (one GEMM each); the passes over it are: the GEMM that
    writes z, max, subtract, exp, sum."""
    vocab = weight.size(0)
    step = chunk_rows(rows.device, vocab)
    keep, spread = smoothing_weights(epsilon)
    mean_row = weight.float().mean(dim=0)  # [D]
    mean_bias = bias.mean() if bias is not None else 0.0  # a tensor: no wait for the GPU
    loss = rows.new_zeros((), dtype=torch.float32)
    nll = rows.new_zeros((), dtype=torch.float32)
    grad_rows = torch.empty(rows.shape, dtype=torch.float32, device=rows.device) if with_grad else None
    grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=rows.device) if with_grad else None
    gather = with_grad and rows.dtype != torch.float32 and gathers_products(rows.device)
    low = LowPrecisionGradWeight(rows, vocab, step) if gather else None
    for start in range(0, rows.size(0), step):
        h, label = rows[start:start + step], labels[start:start + step]
        h32 = h.float()  # the same tensor when h is fp32
        z = fast_linear(h, weight, None).float()  # [n, V] = h W^T
        if bias is not None:
            z += bias
        label_z = z.gather(1, label[:, None]).squeeze(1)
        m = z.amax(dim=-1)
        e = z.sub_(m[:, None]).exp_()
        s = e.sum(dim=-1)
        lse = m + s.log()
        chunk_nll = lse - label_z
        nll += chunk_nll.sum()
        loss += keep * chunk_nll.sum() + spread * (lse - h32 @ mean_row - mean_bias).sum()
        if with_grad:
            inv_s = s.reciprocal()[:, None]
            e = e.to(h.dtype) if low is None else low.add(e, h32 * inv_s, grad_weight)
            e_w = fast_linear(e, weight.t(), None).float()  # e @ W
            grad_rows[start:start + step] = e_w * inv_s - keep * weight[label].float() - spread * mean_row
            if low is None:
                add_product(grad_weight, e, h32 * inv_s)
            grad_weight.index_add_(0, label, h32, alpha=-keep)
    if low is not None:
        low.flush_into(grad_weight)
    if with_grad:
        grad_weight -= (spread / vocab) * rows.float().sum(dim=0)
    return loss, nll, grad_rows, grad_weight


def add_product(grad_weight: Tensor, e: Tensor, scaled_h: Tensor) -> None:
    """grad_weight (fp32) += e^T scaled_h, a chunk's product made at once. In bf16/fp16 (a GPU's, where
    `gathers_products` is false) the product is in e's dtype, cast and added: no mixed-dtype addmm."""
    if e.dtype == torch.float32:  # MKL, not fast_linear: oneDNN is slower at this [V, n] x [n, D] shape
        grad_weight.addmm_(e.t(), scaled_h)
    else:
        grad_weight += (e.t() @ scaled_h.to(e.dtype)).float()


def gathers_products(device: torch.device) -> bool:
    """Whether the low-precision e^T (h / s) products of several chunks are gathered into one
    (LowPrecisionGradWeight): a CPU workaround. A GPU's chunk is already large (GPU_CHUNK_BYTES), and a copy of
    each chunk's e into a buffer would only add memory traffic there."""
    return device.type == "cpu"


DW_BYTES = 16 << 20  # low precision: e rows gathered per e^T (h / s) product (each product is cast and added in fp32)


class LowPrecisionGradWeight:
    """d loss / d W's e^T (h / s) in bf16/fp16: CPU has no mixed-dtype addmm, so each low-precision product is
    cast to fp32 and added to the [V, D] gradient, ~4 x V x D bytes of memory traffic, which per chunk of
    rows costs as much as the product (`python bench/train.py --dtype bf16`). The chunks' e and h / s are
    gathered instead, DW_BYTES of e at a time, and one product over them is cast
    and added (`flush_into`)."""

    def __init__(self, rows: Tensor, vocab: int, step: int):
        capacity = max(step, min(rows.size(0), DW_BYTES // (rows.element_size() * vocab)) // step * step)
        self.e = rows.new_empty((capacity, vocab))
        self.h = rows.new_empty((capacity, rows.size(1)))
        self.used = 0

    def add(self, e: Tensor, scaled_h: Tensor, grad_weight: Tensor) -> Tensor:
        """Stores a chunk's e (fp32 [n, V], cast here) and h / s, first flushing what is gathered into
        `grad_weight` if they do not fit; returns the stored low-precision e."""
        if self.used + e.size(0) > self.e.size(0):
            self.flush_into(grad_weight)
        end = self.used + e.size(0)
        self.e[self.used:end].copy_(e)
        self.h[self.used:end].copy_(scaled_h)
        stored, self.used = self.e[self.used:end], end
        return stored

    def flush_into(self, grad_weight: Tensor) -> None:
        if self.used:
            grad_weight += (self.e[: self.used].t() @ self.h[: self.used]).float()
        self.used = 0


class _ProjectedLoss(torch.autograd.Function):
    """Forward computes the gradients too; backward scales them by the incoming scalar gradient."""

    @staticmethod
    def forward(ctx, rows: Tensor, weight: Tensor, labels: Tensor, epsilon: float, dtype: torch.dtype,
                bias: Tensor | None, compiled: bool) -> tuple[Tensor, Tensor]:
        ctx.dtypes = rows.dtype, weight.dtype  # the gradients' dtypes
        with torch.autocast(rows.device.type, enabled=False):
            rows, weight = rows.to(dtype), weight.to(dtype)
            if compiled:
                step = compiled_chunk_rows(rows.device, weight.size(0), dtype)
                loss, nll, grad_rows, grad_weight = compiled_chunked(rows, weight, labels, *smoothing_weights(epsilon),
                                                                     bias, step)
            else:
                loss, nll, grad_rows, grad_weight = _chunked(rows, weight, labels, epsilon, bias, with_grad=True)
        ctx.save_for_backward(grad_rows, grad_weight)
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_nll: Tensor) -> tuple[Tensor | None, ...]:
        grad_rows, grad_weight = ctx.saved_tensors
        rows_dtype, weight_dtype = ctx.dtypes
        return ((grad_rows * grad_loss).to(rows_dtype), (grad_weight * grad_loss).to(weight_dtype),
                None, None, None, None, None)
