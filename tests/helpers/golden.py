"""The golden outputs (tests/test_golden.py; the GPU's run of them: tests/gpu/test_gpu.py): where they are, the
modes they were printed in, the input they translate, and how a translation is compared with them."""

from __future__ import annotations

from .paths import DEMO_MODEL, FIXTURES

DATA = FIXTURES  # demo-model.{greedy,beam5,nbest3}.txt
CHECKPOINT = DEMO_MODEL
# sha256 of the regenerated test.en the golden files translate: a mismatch means nmt.demo.german changed, not translate
SOURCE_SHA256 = "81c19637125d3058ac3518b6d6067d0e225c0e2e17a85892e18109baf83791f5"
# the last printed digit of a score can flip on another CPU's fp32 kernels, so scores get a tolerance
SCORE_TOL = 2e-4

MODES = {
    "greedy": ["--beam", "1"],
    "beam5": ["--beam", "5"],
    "nbest3": ["--beam", "5", "--nbest", "3", "--scores"],
}


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
