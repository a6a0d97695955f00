"""The compiled projected loss (nmt.loss_compiled, `compiled=True`) gives the eager loss's numbers and gradients, in
chunks of one fixed shape (compiled once whatever the row count), and keeps the CPU's bf16 workaround out.

One vocabulary and width throughout (V=300, D=32), so the file compiles few graphs: fp32 and bf16, with and without
a bias, at a chunk of 16 rows (several chunks, the last one ragged), and one more chunk size."""

from __future__ import annotations

import re

import pytest
import torch
from torch._dynamo.utils import counters
from torch._inductor.utils import run_and_get_code
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from nmt import loss as loss_mod
from nmt import loss_compiled
from nmt.loss import label_smoothed_loss, projected_label_smoothed_loss

V, D, CHUNK = 300, 32, 16


@pytest.fixture(autouse=True)
def chunk_of_16_rows(monkeypatch):
    """16-row chunks: the inputs' ~90 real rows are 6 chunks, the last one padded."""
    monkeypatch.setattr(loss_mod, "COMPILED_CPU_CHUNK_BYTES", CHUNK * 4 * V)


def inputs(seed: int = 0, rows: int = 4, length: int = 25):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(rows, length, D, generator=g)
    weight = torch.randn(V, D, generator=g) * 0.3
    target = torch.randint(4, V, (rows, length), generator=g)
    target[0, length - 4:] = 0  # padding (id 0) at the end of two rows
    target[-1, length // 2:] = 0
    return hidden, weight, target


def with_grads(compiled: bool, hidden, weight, target, epsilon: float = 0.1, bias=None, scale: float = 1.0):
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    loss, nll = projected_label_smoothed_loss(h, w, target, epsilon, pad=0, bias=bias, compiled=compiled)
    (loss * scale).backward()
    return loss.detach(), nll.detach(), h.grad, w.grad


def assert_all_close(got, expected, **tol):
    for name, a, b in zip(("loss", "nll", "d hidden", "d weight"), got, expected, strict=True):
        torch.testing.assert_close(a, b, msg=name, **tol)


@pytest.mark.parametrize("with_bias", [False, True])
def test_compiled_loss_equals_the_eager_loss_and_its_gradients(with_bias):
    hidden, weight, target = inputs()
    bias = torch.linspace(-2.0, 2.0, V) if with_bias else None
    compiled = with_grads(True, hidden, weight, target, bias=bias)
    assert_all_close(compiled, with_grads(False, hidden, weight, target, bias=bias), rtol=1e-5, atol=1e-5)
    plain = label_smoothed_loss(hidden @ weight.t() + (0 if bias is None else bias), target, 0.1, pad=0)
    torch.testing.assert_close(compiled[:2], plain, rtol=1e-5, atol=1e-4)
    assert compiled[2][0, -4:].abs().sum() == 0 and compiled[2][-1, 12:].abs().sum() == 0  # padding: no gradient
    assert int(target.ne(0).sum()) % CHUNK != 0  # the last chunk is ragged, padded in the compiled path


def test_the_gradient_scales_with_what_backward_brings():
    hidden, weight, target = inputs(1)
    once = with_grads(True, hidden, weight, target)
    scaled = with_grads(True, hidden, weight, target, scale=3.0)
    torch.testing.assert_close(scaled[2], 3.0 * once[2])
    torch.testing.assert_close(scaled[3], 3.0 * once[3])


def exact_gradients(hidden, weight, target, rounded_logits: bool = False):
    """d loss / d hidden and d weight in float64 on the bf16-rounded inputs, what bf16 autocast approximates; with
    `rounded_logits` of the logits rounded to bf16 too (both paths round them: the error after that is the loss's)."""
    h = hidden.bfloat16().double().requires_grad_()
    w = weight.bfloat16().double().requires_grad_()
    z = h @ w.t()
    if rounded_logits:
        z = z + (z.bfloat16().double() - z).detach()  # the rounding's value, the gradient straight through
    loss, _ = label_smoothed_loss(z, target, 0.1, pad=0)
    loss.backward()
    return h.grad.float(), w.grad.float()


def relative_error(got, exact) -> float:
    return float((got - exact).abs().max() / exact.abs().max())


# of the largest gradient entry: the bf16 logits' rounding (2**-9 of z, both paths) moves p by ~|z| 2**-9, ~1% here
BF16_TOLERANCE = 2**-6


def test_under_bf16_autocast_compiled_gradients_are_bf16_accurate_without_the_cpu_workaround(monkeypatch):
    """bf16: compiled and eager gradients both within BF16_TOLERANCE of the exact ones, their sums alike; given the
    rounded logits, the compiled CPU path within 2**-7 (d loss / d z rounded once, and each GEMM's output: mm has no
    fp32 output on a CPU). LowPrecisionGradWeight (the CPU's eager workaround) is never built on the compiled path."""
    hidden, weight, target = inputs(3)
    monkeypatch.setattr(loss_mod.LowPrecisionGradWeight, "__init__", lambda *a: pytest.fail("workaround compiled"))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        compiled = with_grads(True, hidden, weight, target)
    assert compiled[2].dtype == hidden.dtype and compiled[3].dtype == weight.dtype  # the parameters' dtype
    monkeypatch.undo()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        eager = with_grads(False, hidden, weight, target)
    for path in (compiled, eager):
        for got, ref in zip(path[2:], exact_gradients(hidden, weight, target), strict=True):
            assert relative_error(got, ref) < BF16_TOLERANCE
    for got, ref in zip(compiled[2:], exact_gradients(hidden, weight, target, rounded_logits=True), strict=True):
        assert relative_error(got, ref) < 2**-7
    torch.testing.assert_close(compiled[:2], eager[:2], rtol=1e-3, atol=0.0)  # the sums: fp32 from the same logits


def test_with_a_gpus_fp32_output_gemms_the_bf16_gradients_beat_the_eager_ones(monkeypatch):
    """On CUDA `_mm32` is mm(out_dtype=float32): bf16 products summed and written in fp32, the result not rounded.
    Emulated here (bf16 operands widened: exact products, fp32 sums) on chunk_step run eagerly, the arithmetic the
    compiled function runs. Where the model is right (labels its argmax, p at the label ~0.5), d loss / d z =
    p - (1 - eps) at the label is small; folded in fp32 before its one rounding, it is rounded relative to itself,
    where the eager path rounds p and subtracts (1 - eps) W[label] after: given the same rounded logits, both
    gradients come out closer to the exact ones, d weight's by more than 1.5x."""
    hidden, weight, target = inputs(0)
    hidden = 3.0 * hidden
    target = torch.where(target == 0, 0, (hidden @ weight.t()).argmax(-1))
    exact = exact_gradients(hidden, weight, target, rounded_logits=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        eager = with_grads(False, hidden, weight, target)
    monkeypatch.setattr(loss_compiled, "compiled_step", lambda: loss_compiled.chunk_step)
    monkeypatch.setattr(loss_compiled, "_mm32", lambda a, b: a.float() @ b.float())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        gpu_like = with_grads(True, hidden, weight, target)
    assert relative_error(gpu_like[2], exact[0]) < relative_error(eager[2], exact[0])
    assert relative_error(gpu_like[3], exact[1]) < relative_error(eager[3], exact[1]) / 1.5


def test_one_compiled_graph_serves_every_row_count():
    """The chunk has a fixed shape: after the first call no row count compiles again (1 to 3 chunks, the last
    one padded), and each result is still the eager one. A new chunk size does compile: the count sees it."""
    hidden, weight, target = inputs(5)
    with_grads(True, hidden, weight, target)  # 16-row chunk compiled (here or by an earlier test)
    counters.clear()
    for rows, length in ((1, 5), (1, 16), (2, 17), (3, 15)):
        hidden, weight, target = inputs(6, rows, length)
        assert_all_close(with_grads(True, hidden, weight, target), with_grads(False, hidden, weight, target),
                         rtol=1e-5, atol=1e-5)
    assert counters["stats"]["unique_graphs"] == 0
    loss_mod.COMPILED_CPU_CHUNK_BYTES = 2 * CHUNK * 4 * V  # restored by the fixture
    with_grads(True, hidden, weight, target)
    assert counters["stats"]["unique_graphs"] == 1


def test_the_chunk_shape_depends_on_device_vocabulary_and_dtype_only():
    rows = loss_mod.compiled_chunk_rows
    assert rows(torch.device("cuda", 0), 32_000, torch.bfloat16) == 4096  # 256 MB of bf16 logits, 128-row tiles
    assert rows(torch.device("cuda", 0), 32_000, torch.float32) == 2048
    assert rows(torch.device("cpu"), 32_000, torch.float32) % 16 == 0
    assert rows(torch.device("cuda", 0), 10**9, torch.float32) == 128  # at least one tile


def test_eager_stays_the_default(monkeypatch):
    monkeypatch.setattr(loss_mod, "compiled_chunked", lambda *a: pytest.fail("compiled without being asked"))
    hidden, weight, target = inputs(7)
    with_grads(False, hidden, weight, target)
    h = hidden.clone().requires_grad_()
    projected_label_smoothed_loss(h, weight, target, 0.1, pad=0)[0].backward()
    with torch.no_grad():  # no gradient to form: the eager chunks even when compiled is asked
        projected_label_smoothed_loss(hidden, weight, target, 0.1, pad=0, compiled=True)


def chunk_args(dtype: torch.dtype, device: str = "cpu") -> tuple:
    h, weight = torch.zeros(CHUNK, D, dtype=dtype, device=device), torch.zeros(V, D, dtype=dtype, device=device)
    label, valid = torch.zeros(CHUNK, dtype=torch.long, device=device), torch.ones(CHUNK, device=device)
    return (h, weight, label, valid, None, torch.zeros(D, device=device), torch.zeros((), device=device), 0.9, 0.1,
            torch.zeros(V, D, device=device), torch.zeros(2, device=device))


def test_on_a_cpu_a_bf16_chunk_is_three_gemms_and_two_fused_kernels_over_bf16_logits():
    """What Inductor makes of the chunk (its C++ on a CPU, the same graph a GPU gets as Triton): the logits' GEMM,
    one kernel for every pass over them (max, sum-exp, label, sums, d loss / d z), the two gradient GEMMs, one
    kernel adding d W and the sums; the only [C, V] buffers are bf16 (the logits and d loss / d z)."""
    torch._dynamo.reset()  # compiled anew (from Inductor's cache), so that its code is seen
    _, code = run_and_get_code(loss_compiled.compiled_step(), *chunk_args(torch.bfloat16))
    call = code[0][code[0].index("def call("):]
    assert call.count("extern_kernels.mm(") == 3
    assert len(re.findall(r"\bcpp_fused_\w+\(", call)) == 2
    assert re.findall(rf"empty_strided_cpu\(\({CHUNK}, {V}\)[^)]*\), (torch\.\w+)", call) == ["torch.bfloat16"] * 2


def test_on_cuda_the_gradient_gemms_write_fp32_and_nothing_scatters():
    """The graph a GPU gets, traced on fake CUDA tensors (no GPU needed): the logits' GEMM in bf16, both gradient
    GEMMs mm(out_dtype=float32) (d W accumulated from fp32 products), no index_add_ nor any scatter."""
    with FakeTensorMode(allow_non_fake_inputs=True):
        args = chunk_args(torch.bfloat16, "cuda")
        graph = make_fx(lambda *tensors: loss_compiled.chunk_step(*tensors, *args[7:]))(*args[:4], None, *args[5:7])
    targets = [str(node.target) for node in graph.graph.nodes if node.op == "call_function"]
    assert targets.count("aten.mm.default") == 1 and targets.count("aten.mm.dtype") == 2
    assert not [t for t in targets if "index" in t or "scatter" in t]
