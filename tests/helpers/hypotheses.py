"""Comparing two searches' hypotheses (nmt.search.static, nmt.search.compiled against nmt's own decoding)."""

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
