"""Golden outputs: `nmt translate` on a fixed checkpoint must print exactly what it printed before.

Guards against refactors (search, model, tokenizer, checkpoint loading, output formatting) silently changing
translations: tests/fixtures/demo-model.pt is a small demo model (conftest's demo_run recipe, training state
dropped), and tests/fixtures/demo-model.{greedy,beam5,nbest3}.txt are its translations of the demo test set
(write_demo(..., seed=3), regenerated here) as the code printed them when they were made. Byte-identical, except the
printed log-probabilities of --scores.

To accept a deliberate change of output, regenerate the golden files with the new code and review the diff:
    NMT_UPDATE_GOLDEN=1 python3 -m pytest tests/test_golden.py
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from nmt.demo.files import write_demo
from tests.helpers.paths import FIXTURES

from .conftest import run_cli

DATA = FIXTURES
CHECKPOINT = DATA / "demo-model.pt"
UPDATE = os.environ.get("NMT_UPDATE_GOLDEN") == "1"
# sha256 of the regenerated test.en the golden files translate: a mismatch means nmt.demo.german changed, not translate
SOURCE_SHA256 = "81c19637125d3058ac3518b6d6067d0e225c0e2e17a85892e18109baf83791f5"
# the last printed digit of a score can flip on another CPU's fp32 kernels, so scores get a tolerance
SCORE_TOL = 2e-4

MODES = {
    "greedy": ["--beam", "1"],
    "beam5": ["--beam", "5"],
    "nbest3": ["--beam", "5", "--nbest", "3", "--scores"],
}


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    raw = write_demo(tmp_path_factory.mktemp("golden-raw"), n_train=2000, n_valid=100, n_test=100, seed=3)
    path = Path(raw["test"] + ".en")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest == SOURCE_SHA256, (
        f"the demo test set changed (sha256 {digest}): the golden outputs translate another input; if nmt.demo.german "
        "changed on purpose, update SOURCE_SHA256 and regenerate the golden files (see the module docstring)")
    return path


def translate(source: Path, out: Path, options: list[str]) -> bytes:
    args = ["translate", "--checkpoint", str(CHECKPOINT), "--dtype", "fp32", *options, "--threads", "1",
            "--no-progress", "--input", str(source), "--output", str(out)]
    result = run_cli(*args)
    assert result.exit_code == 0, f"nmt {' '.join(args)}: exit {result.exit_code}\n{result.output[-3000:]}"
    return out.read_bytes()


def first_difference(got: list[str], want: list[str]) -> str:
    for i, (g, w) in enumerate(zip(got, want, strict=False), 1):
        if g != w:
            return f"first difference at output line {i}:\n  got:    {g!r}\n  golden: {w!r}"
    return f"{len(got)} output lines, golden has {len(want)}"


def same_scored_lines(got: str, want: str) -> str | None:
    """None when the line number and text (the first two tab-separated fields) are identical and the scores
    after them (score, log-prob) agree within SCORE_TOL, printed with as many decimals; otherwise a
    description of the first difference."""
    got_lines, want_lines = got.split("\n"), want.split("\n")
    if len(got_lines) != len(want_lines):
        return first_difference(got_lines, want_lines)
    for i, (g, w) in enumerate(zip(got_lines, want_lines, strict=True), 1):
        if g == w:
            continue
        g_fields, w_fields = g.split("\t"), w.split("\t")
        same_text = len(w_fields) > 2 and len(g_fields) == len(w_fields) and g_fields[:2] == w_fields[:2]
        if not (same_text and all(_close(x, y) for x, y in zip(g_fields[2:], w_fields[2:], strict=True))):
            return f"first difference at output line {i}:\n  got:    {g!r}\n  golden: {w!r}"
    return None


def _close(got: str, want: str) -> bool:
    try:
        close = abs(float(got) - float(want)) <= SCORE_TOL
    except ValueError:
        return False
    return close and len(got.partition(".")[2]) == len(want.partition(".")[2])


@pytest.mark.parametrize("mode", list(MODES))
def test_translate_output_matches_golden(mode, source, tmp_path):
    golden = DATA / f"demo-model.{mode}.txt"
    got = translate(source, tmp_path / f"{mode}.txt", MODES[mode])
    if UPDATE:
        golden.write_bytes(got)
        return
    want = golden.read_bytes()
    if mode == "nbest3":
        problem = same_scored_lines(got.decode("utf-8"), want.decode("utf-8"))
        assert problem is None, f"{golden.name}: {problem}"
    else:
        assert got == want, f"{golden.name}: " + first_difference(got.decode("utf-8", "replace").split("\n"),
                                                                  want.decode("utf-8", "replace").split("\n"))
