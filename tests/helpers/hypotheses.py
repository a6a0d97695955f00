"""Comparing two searches' hypotheses (nmt.search.static, nmt.search.compiled, nmt.search.graphed against nmt's own
decoding)."""

from __future__ import annotations

import pytest
import torch

# what a padded decoder (nmt.search.compiled's packages, nmt.search.graphed's graphs) must decode as the model does:
# every search here fits 8 rows, the one package size tests/search/test_compiled.py builds
LINES = ["A man is riding a bicycle.", "Two dogs play in the snow near a small red house."]
FOUR = [*LINES, "Hello!", "The old woman sells fresh bread at the market."]  # beam 2: 8 rows
THREE = FOUR[:3]  # beam 2: 3 sentences padded to 4, 8 rows
PADDED_CASES = [
    (FOUR, dict(beam=2)),
    (FOUR, dict(beam=2, nbest=2, length_penalty=1.0)),
    (FOUR, dict(beam=2, min_len=12)),
    (FOUR, dict(beam=2, max_len_a=0.0, max_len_b=0)),  # every output empty: a one-position search
    (THREE, dict(beam=2, nbest=2)),
    (LINES * 4, dict(beam=1, max_len_a=0.0, max_len_b=4)),  # greedy, cut at 4 tokens
    (THREE * 2, dict(beam=1)),  # 6 rows padded to 8
]


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
