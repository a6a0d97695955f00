"""On a CUDA GPU: decoding reproduces the golden outputs (tests/test_golden.py) in fp32, nearly in bf16 and fp16, as
nmt's own steps and with --compile (each step a CUDA graph: nmt.search.graphed). Marked gpu, skipped without a GPU.

Dry run on the CPU (fp16 and --compile skip with their reason): NMT_GPU_TESTS_DEVICE=cpu python3 -m pytest
tests/gpu/test_gpu_golden.py -m gpu -q"""

from __future__ import annotations

import hashlib
import math
import os
from pathlib import Path

import pytest

from nmt.demo.files import write_demo
from tests.helpers.cli import run_cli
from tests.helpers.cuda import CUDA_AVAILABLE
from tests.helpers.golden import CHECKPOINT, DATA, MODES, SOURCE_SHA256, first_difference, same_scored_lines

DEVICE_NAME = os.environ.get("NMT_GPU_TESTS_DEVICE") or "cuda"
DRY_RUN = DEVICE_NAME == "cpu"
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not DRY_RUN and not CUDA_AVAILABLE, reason="needs a CUDA GPU")]
DTYPES = ("fp32", "bf16", "fp16")


@pytest.fixture(scope="module")
def golden_source(tmp_path_factory) -> Path:
    """The demo test set tests/fixtures/demo-model.*.txt translate (see test_golden.py)."""
    raw = write_demo(tmp_path_factory.mktemp("gpu-golden-raw"), n_train=2000, n_valid=100, n_test=100, seed=3)
    path = Path(raw["test"] + ".en")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == SOURCE_SHA256, "the demo test set changed"
    return path


def texts(printed: str, mode: str) -> list[str]:
    """The translations of an output: its lines, or with --nbest the text field of each."""
    lines = printed.split("\n")[:-1]
    return [line.split("\t")[1] for line in lines] if mode == "nbest3" else lines


@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "compile"])
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_decoding_reproduces_the_golden_outputs(golden_source, tmp_path, dtype, mode, graphs):
    """fp32 on the device prints the golden files (the demo model's decisions are far from ties, so another
    device's fp32 rounding does not change them; scores within test_golden's tolerance). bf16 and fp16 round
    every logit to 8 / 11 significand bits, which flips the search's choice where two hypotheses score nearly
    the same, so there the output must be well formed (a line per input, scores finite) and at least 80% of the
    lines identical to fp32's. `graphs`: with --compile, the search's steps as CUDA graphs (nmt.search.graphed)."""
    if DRY_RUN and dtype == "fp16":
        pytest.skip("dry run on the CPU: --dtype fp16 needs CUDA (nmt refuses it on the CPU)")
    if DRY_RUN and graphs:
        pytest.skip("dry run on the CPU: --compile there is the CPU's compiled step (tests/search/test_compiled.py)")
    out = tmp_path / "out.txt"
    args = ["translate", "--checkpoint", str(CHECKPOINT), "--device", DEVICE_NAME, "--dtype", dtype, *MODES[mode],
            "--threads", "1", "--no-progress", "--input", str(golden_source), "--output", str(out),
            *(["--compile", "--max-tokens", "120"] if graphs else [])]  # batches of <= 128 rows run as graphs
    result = run_cli(*args)
    assert result.exit_code == 0, f"nmt {' '.join(args)}: exit {result.exit_code}\n{result.stderr[-3000:]}"
    assert f"translating on {DEVICE_NAME}" in result.stderr, result.stderr[-3000:]
    assert "could not be recorded as a CUDA graph" not in result.stderr, result.stderr[-3000:]
    got, want = out.read_text(encoding="utf-8"), (DATA / f"demo-model.{mode}.txt").read_text(encoding="utf-8")
    if dtype == "fp32":
        if mode == "nbest3":
            problem = same_scored_lines(got, want)
            assert problem is None, problem
        else:
            assert got == want, first_difference(got.split("\n"), want.split("\n"))
        return
    got_lines, want_lines = got.split("\n")[:-1], want.split("\n")[:-1]
    assert got.endswith("\n") and len(got_lines) == len(want_lines)
    if mode == "nbest3":
        fields = [line.split("\t") for line in got_lines]
        assert all(len(f) == 4 and math.isfinite(float(f[2])) and math.isfinite(float(f[3])) for f in fields)
        assert [f[0] for f in fields] == [line.split("\t")[0] for line in want_lines]  # 3 per input line, in order
    same = sum(a == b for a, b in zip(texts(got, mode), texts(want, mode), strict=True))
    assert same >= 0.8 * len(want_lines), f"{dtype}: {same} of {len(want_lines)} lines as in fp32"
