"""Comparing two searches' hypotheses (nmt.search.static, nmt.search.compiled, nmt.search.graphed against nmt's own
decoding)."""

from __future__ import annotations

import pytest
import torch


def assert_same(got: list[list], want: list[list]) -> None:
    """The same tokens; scores within float32 rounding (rows are multiplied in batches of other sizes)."""
    assert [[h.tokens for h in hyps] for hyps in got] == [[h.tokens for h in hyps] for hyps in want]
    for g, w in zip(sum(got, []), sum(want, []), strict=True):
        assert (g.score, g.logprob) == pytest.approx((w.score, w.logprob), rel=1e-5, abs=1e-5)
        assert (g.attention is None) == (w.attention is None)
        if g.attention is not None:
            torch.testing.assert_close(g.attention, w.attention, rtol=0, atol=1e-5)


def compiled_and_eager(translator, lines: list[str], **decode) -> tuple[list, list]:
    """A translator's translations of `lines` (decode settings `decode`) through its compiled decoder
    (`translator.compiled`: --compile) and through its model alone."""
    d = translator.decode_with(**decode)
    got = translator.translate_chunk(lines, decode=d)
    decoder, translator.compiled = translator.compiled, None
    try:
        want = translator.translate_chunk(lines, decode=d)
    finally:
        translator.compiled = decoder
    return got, want


def assert_same_translations(got: list, want: list) -> None:
    """The same texts and hypotheses (assert_same) for each line."""
    assert [t.text for t in got] == [t.text for t in want]
    assert_same([t.hypotheses for t in got], [t.hypotheses for t in want])
