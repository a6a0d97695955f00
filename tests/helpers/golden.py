"""The golden tests' shared rules (tests/test_golden*.py; the GPU's run of them: tests/gpu/test_gpu.py): where
the golden files are, how a command is run for them, and how an output is compared with its golden file: byte for byte,
except the printed numbers that another CPU's fp32 kernels may move in their last digits (scores, the numbers of `nmt
explain`'s page), which get a tolerance, and the fields that differ on every run (timings, random ids), which are masked
(each test says which).

Only the command line and HTTP are used, never nmt's modules: the golden files pin what a user sees, whatever the
code behind it becomes. To accept a deliberate change of output, regenerate the golden files with the new code and
review the diff (a file is rewritten only where its output differs beyond the tolerances, so another CPU's last
digits leave it as it is):
    NMT_UPDATE_GOLDEN=1 python3 -m pytest tests/test_golden.py tests/test_golden_*.py
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from .cli import run_cli
from .paths import DEMO_MODEL, FIXTURES, ROOT

DATA = FIXTURES  # demo-model.{greedy,beam5,nbest3}.txt
GOLDEN = FIXTURES / "golden"
DEMO = DEMO_MODEL  # post-norm, see tests/fixtures/make_demo_model.py
CHECKPOINT = DEMO
PRENORM = FIXTURES / "prenorm-model.pt"  # Multi30k's options, tiny (tests/fixtures/make_prenorm_model.py)
# sha256 of the regenerated test.en the golden files translate: a mismatch means nmt.demo.german changed, not translate
SOURCE_SHA256 = "81c19637125d3058ac3518b6d6067d0e225c0e2e17a85892e18109baf83791f5"
MODES = {
    "greedy": ["--beam", "1"],
    "beam5": ["--beam", "5"],
    "nbest3": ["--beam", "5", "--nbest", "3", "--scores"],
}
UPDATE = os.environ.get("NMT_UPDATE_GOLDEN") == "1"
# the last printed digit of a score can flip on another CPU's fp32 kernels, so scores get a tolerance
SCORE_TOL = 2e-4
# every run of nmt the golden files were made with: one thread, fp32, no progress bar
FIXED = ["--dtype", "fp32", "--threads", "1", "--no-progress"]


def multi30k() -> Path | None:
    """Multi30k's directory: ../shared/data/multi30k beside the checkout, else $NMT_SHARED/data/multi30k (a
    checkout elsewhere, e.g. a git worktree); None when neither holds it."""
    candidates = [ROOT.parent / "shared" / "data" / "multi30k"]
    if os.environ.get("NMT_SHARED"):
        candidates.append(Path(os.environ["NMT_SHARED"]) / "data" / "multi30k")
    return next((path for path in candidates if (path / "test2016.en").is_file()), None)


def checked_source(path: Path, sha256: str, what: str) -> Path:
    """`path`, after checking that it holds the input the golden files translate."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest == sha256, (
        f"{what} changed (sha256 {digest}): the golden outputs translate another input; if that is on purpose, "
        "update its sha256 and regenerate the golden files (see tests/golden.py)")
    return path


def nmt(*args: str | Path) -> str:
    """`nmt ARGS` in-process (conftest.run_cli); fails the test unless it exits 0. Returns its stdout."""
    result = run_cli(*args)
    assert result.exit_code == 0, f"nmt {' '.join(map(str, args))}: exit {result.exit_code}\n{result.output[-3000:]}"
    return result.stdout


def translate(checkpoint: Path, source: Path, out: Path, options: list[str]) -> bytes:
    """The bytes `nmt translate --checkpoint CHECKPOINT OPTIONS --input SOURCE --output OUT` writes."""
    nmt("translate", "--checkpoint", checkpoint, *FIXED, *options, "--input", source, "--output", out)
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


def check(golden: Path, got: bytes, problem: Callable[[bytes, bytes], str | None]) -> None:
    """`got` is `golden`'s bytes as `problem(got, want)` judges (None: the same); under NMT_UPDATE_GOLDEN=1 it
    becomes the golden file where it is not, and only there: the last digits another CPU moves within the
    tolerances do not rewrite the files."""
    found = problem(got, golden.read_bytes()) if golden.is_file() else "no golden file (NMT_UPDATE_GOLDEN=1 makes it)"
    if found is not None and UPDATE:
        golden.write_bytes(got)
        return
    assert found is None, f"{golden.name}: {found}"


def check_text(golden: Path, got: bytes, scored: bool = False) -> None:
    """`got` is `golden`'s bytes (with `scored`: up to the printed scores of `--scores` lines, see
    same_scored_lines)."""
    check(golden, got, _same_scored if scored else _same_text)


def _same_text(got: bytes, want: bytes) -> str | None:
    if got == want:
        return None
    return first_difference(got.decode("utf-8", "replace").split("\n"), want.decode("utf-8", "replace").split("\n"))


def _same_scored(got: bytes, want: bytes) -> str | None:
    return same_scored_lines(got.decode("utf-8"), want.decode("utf-8"))


# a decimal number as printed (not inside a word or a base64 string), or a base64 picture of `nmt explain`
_NUMBER_OR_PICTURE = re.compile(r'(?<![\w.+/])-?\d+\.\d+(?:e-?\d+)?(?![\w.])|"b64":"[A-Za-z0-9+/=]*"')


def same_up_to_last_digits(got: str, want: str) -> str | None:
    """None when `got` is `want` but for its printed decimal numbers, each within one unit of its last printed
    digit (and printed with as many decimals), and its base64 pictures (one byte per value), each byte within one
    level: the fp32 noise of another CPU; otherwise a description of the first difference."""
    if got == want:
        return None
    g_parts, w_parts = _NUMBER_OR_PICTURE.split(got), _NUMBER_OR_PICTURE.split(want)
    g_values, w_values = _NUMBER_OR_PICTURE.findall(got), _NUMBER_OR_PICTURE.findall(want)
    if g_parts != w_parts or len(g_values) != len(w_values):
        where = next((i for i, (g, w) in enumerate(zip(got, want, strict=False)) if g != w), min(len(got), len(want)))
        return f"differs at character {where}:\n  got:    {got[where - 80:where + 80]!r}\n" \
               f"  golden: {want[where - 80:where + 80]!r}"
    for g, w in zip(g_values, w_values, strict=True):
        if g == w:
            continue
        if g.startswith('"b64"') != w.startswith('"b64"'):
            return f"{g[:80]!r} where the golden file has {w[:80]!r}"
        if g.startswith('"b64"'):
            gb, wb = base64.b64decode(g[7:-1]), base64.b64decode(w[7:-1])
            if len(gb) != len(wb) or any(abs(x - y) > 1 for x, y in zip(gb, wb, strict=True)):
                return f"a picture differs by more than one level: {g[:80]!r}... vs {w[:80]!r}..."
            continue
        decimals = len(w.partition(".")[2].partition("e")[0])
        unit = 10.0 ** -decimals * (10.0 ** int(w.partition("e")[2]) if "e" in w else 1.0)
        if len(g.partition(".")[2].partition("e")[0]) != decimals or abs(float(g) - float(w)) > 1.01 * unit:
            return f"the number {g} where the golden file has {w}"
    return None


def skip_without(path: Path | None, what: str) -> Path:
    """`path`, or the test skipped, saying what is missing and how to provide it."""
    if path is None:
        pytest.skip(f"{what} absent: ../shared/data/multi30k beside the checkout, or set NMT_SHARED to the shared dir")
    return path
