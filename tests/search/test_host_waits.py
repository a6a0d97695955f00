"""Greedy and beam search without host waits (nmt.search.loop polls for finished sentences every `poll_every`
steps; nmt.search.history keeps the rest on the device): none inside a step, at most one per poll, the same outputs
however often the loop polls, and sentences that end at step 0, at their length limit, or far apart in one batch.
(tests/gpu/test_gpu_search.py: the same on a GPU, by CUDA's own check.)"""

from __future__ import annotations

import math

import pytest
import torch

from nmt import search
from nmt.search import SearchSettings
from tests.helpers.tables import (
    EOS,
    IDS,
    PAD,
    TableModel,
    batch,
    beam_search,
    greedy_search,
    random_inputs,
    random_model,
)
from tests.helpers.waits import counting, guard_search_steps

A, B_, C, D = 4, 5, 6, 7
POLLS = (1, 2, 5, 100)  # 100: never before the last step
# Waits outside the steps: the longest and shortest length limits (prelude); the source lengths, the ended
# hypotheses (a nonzero and one copy) and the token histories (one copy) in the ending
PRELUDE_AND_ENDING = 6
# EOS is never chosen: every hypothesis ends at its length limit
NEVER_EOS = TableModel({}, default={A: 0.25, B_: 0.25, C: 0.25, D: 0.25, EOS: 1e-9})
# [] 0.2 at step 0; [B] 0.27 and [A] 0.175 at step 1; [A A] 0.1 at step 2
STOPS = TableModel({(): {A: 0.5, B_: 0.3, EOS: 0.2}, (A,): {A: 0.5, EOS: 0.35, B_: 0.15}, (B_,): {EOS: 0.9, A: 0.1}},
                   default={A: 0.6, EOS: 0.4})


def searched(model, src: torch.Tensor, **settings) -> list[list]:
    """nmt.search.run, untraced (a traced beam search polls at every step)."""
    return search.run(model, src, SearchSettings(**settings), IDS)


def assert_same(got: list[list], want: list[list], exact: bool = True) -> None:
    """The same hypotheses; unless `exact`, numbers within float32 rounding (a real model's rows are computed in
    batches of other sizes when done rows stay until a later poll, which can move a last bit)."""
    assert [[h.tokens for h in hyps] for hyps in got] == [[h.tokens for h in hyps] for hyps in want]
    for g, w in zip(sum(got, []), sum(want, []), strict=True):
        if exact:
            assert (g.score, g.logprob) == (w.score, w.logprob)
        else:
            assert (g.score, g.logprob) == pytest.approx((w.score, w.logprob), rel=1e-5, abs=1e-6)
        assert (g.attention is None) == (w.attention is None)
        if g.attention is not None:
            torch.testing.assert_close(g.attention, w.attention, rtol=0, atol=0 if exact else 1e-6)


class Steps:
    """A model that counts its decoding steps."""

    def __init__(self, model) -> None:
        self.model, self.n = model, 0

    def __getattr__(self, name: str):
        return getattr(self.model, name)

    def decode_step(self, *args, **kwargs):
        self.n += 1
        return self.model.decode_step(*args, **kwargs)


@pytest.mark.parametrize(("beam", "nbest"), [(1, 1), (4, 1), (5, 3)])
def test_outputs_do_not_depend_on_how_often_the_loop_polls(copy_model, beam, nbest):
    """A done sentence's rows left in the batch until the next poll change nothing: against the search that polls
    at every step (greedy on a CPU; the traced beam rule always), token for token."""
    model, seqs = copy_model
    for m, src in ((model, batch(seqs[:8])[0]), (random_model(), random_inputs(8))):
        settings = dict(nbest=nbest, need_attention=True, max_len_b=10)
        want = greedy_search(m, src, **settings) if beam == 1 else beam_search(m, src, beam=beam, **settings)
        for every in POLLS:
            assert_same(searched(m, src, beam=beam, **settings, poll_every=every), want, exact=every == 1)


@pytest.mark.parametrize("beam", [1, 3])
def test_sentences_ending_at_their_limits_far_apart(beam):
    """No EOS but at the length limit, which differs by sentence: 0 (only EOS fits: ends at step 0), 1, 4 and 8."""
    src = torch.tensor([[EOS] + [PAD] * 8, [A, EOS] + [PAD] * 7, [A] * 4 + [EOS] + [PAD] * 4, [A] * 8 + [EOS]])
    want = searched(NEVER_EOS, src, beam=beam, nbest=beam, max_len_a=1.0, max_len_b=-1, poll_every=1)
    assert [len(h.tokens) for h in want[0]] == [0]  # only EOS fits: one hypothesis
    for hyps, limit in zip(want[1:], (1, 4, 8), strict=True):
        assert [len(h.tokens) for h in hyps] == [limit] * beam
        for h in hyps:
            assert h.logprob == pytest.approx(limit * math.log(0.25) + math.log(1e-9), abs=1e-3)
    for every in POLLS:
        assert_same(searched(NEVER_EOS, src, beam=beam, nbest=beam, max_len_a=1.0, max_len_b=-1, poll_every=every),
                    want)


def test_nbest_of_hypotheses_ending_at_different_steps_by_different_rules():
    """Hypotheses end at steps 0, 1 and 2; one sentence stops at its limit (step 1), the other by the stop rule
    (step 2, where its best active hypothesis, A A A 0.15, cannot beat its third finished, A 0.175)."""
    src = torch.tensor([[EOS, PAD, PAD, PAD], [A, A, A, EOS]])  # limits 1 and 4
    settings = dict(beam=3, nbest=3, length_penalty=0.0, max_len_a=1.0, max_len_b=0)
    want = beam_search(STOPS, src, **settings)
    for hyps in want:
        assert [h.tokens for h in hyps] == [[B_], [], [A]]
        assert [h.logprob for h in hyps] == pytest.approx([math.log(p) for p in (0.27, 0.2, 0.175)], abs=1e-5)
    for every in POLLS:
        assert_same(searched(STOPS, src, **settings, poll_every=every), want)


@pytest.mark.parametrize("beam", [1, 4])
@pytest.mark.parametrize("every", [1, 4])
def test_at_most_one_host_wait_per_poll(copy_model, beam, every):
    """Counted on the CPU: what would stall a GPU (.item(), .tolist(), bool(tensor), nonzero, a mask index, a list
    made a tensor) happens once per poll, plus a few times before and after the steps. The search this replaced
    waited about 3 times a step, more when a hypothesis ended (192 times in 29 steps of 32 demo sentences)."""
    model, seqs = copy_model
    counted, src = Steps(model), batch(seqs[:16])[0]
    with counting() as c:
        hyps = search.run(counted, src, SearchSettings(beam=beam, nbest=beam, poll_every=every), IDS)
    assert [h[0].tokens for h in hyps] == seqs[:16]
    assert counted.n > 4
    assert sum(c.waits.values()) <= math.ceil(counted.n / every) + PRELUDE_AND_ENDING, c.waits


@pytest.mark.parametrize("settings", [dict(beam=1), dict(beam=4, nbest=2, need_attention=True)], ids=["greedy", "beam"])
def test_no_host_wait_inside_a_step(copy_model, monkeypatch, settings):
    """Inside every step and every cache reorder: none at all, with done sentences leaving the batch at polls."""
    model, seqs = copy_model
    src = batch(seqs[:16])[0]
    want = searched(model, src, **settings)
    calls = guard_search_steps(monkeypatch, src.device)
    assert_same(searched(model, src, **settings, poll_every=3), want, exact=False)
    assert calls["step"] > 4 and calls["reorder"] > 1
