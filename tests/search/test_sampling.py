"""Sampling (nmt.search.sampling) and the minimum output length: on table-driven stub models whose probabilities
are known exactly, and on the tiny copy model and a random model."""

from __future__ import annotations

import pytest
import torch

from nmt import search
from nmt.search import SearchSettings
from nmt.search.sampling import narrowed
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
    teacher_forced_logprob,
)

A, B_, C = 4, 5, 6
# The first token is A (0.5), B (0.3) or C (0.2); then EOS.
THREE_WAY = TableModel({(): {A: 0.5, B_: 0.3, C: 0.2}}, default={EOS: 1.0})
# EOS is the most likely first token: greedy and beam search give an empty output.
EMPTY_FIRST = TableModel({(): {EOS: 0.6, A: 0.4}, (A,): {EOS: 1.0}}, default={EOS: 1.0})


def sample(model, src: torch.Tensor, **settings) -> list[list]:
    return search.run(model, src, SearchSettings(sampling=True, **{"beam": 1, **settings}), IDS)


def first_tokens(model, n: int, **settings) -> list[int]:
    return [h[0].tokens[0] for h in sample(model, torch.tensor([[A, EOS]] * n), **settings)]




def test_samples_follow_the_models_distribution():
    tokens = first_tokens(THREE_WAY, 3000)
    shares = [tokens.count(t) / len(tokens) for t in (A, B_, C)]
    assert shares == pytest.approx([0.5, 0.3, 0.2], abs=0.03)


@pytest.mark.parametrize(("settings", "allowed"), [
    ({"sampling_topk": 1}, {A}),
    ({"sampling_topk": 2}, {A, B_}),
    ({"sampling_topp": 0.5}, {A}),  # A alone holds 0.5
    ({"sampling_topp": 0.7}, {A, B_}),
    ({"sampling_temperature": 0.05}, {A}),
])
def test_topk_topp_and_temperature_narrow_the_draw(settings, allowed):
    assert set(first_tokens(THREE_WAY, 400, **settings)) == allowed


def test_a_high_temperature_flattens_the_draw():
    tokens = first_tokens(THREE_WAY, 3000, sampling_temperature=100.0, sampling_topk=3)
    assert [tokens.count(t) / len(tokens) for t in (A, B_, C)] == pytest.approx([1 / 3] * 3, abs=0.04)


def test_narrowed_keeps_the_most_likely_token():
    logprobs = torch.tensor([[0.9, 0.05, 0.05], [0.2, 0.5, 0.3]]).log()
    out = narrowed(logprobs, topk=0, topp=0.01, temperature=1.0)
    assert out.isfinite().tolist() == [[True, False, False], [False, True, False]]


def test_top_one_sampling_is_greedy_search(copy_model):
    model, seqs = copy_model
    for m, src in ((model, batch(seqs[:8])[0]), (random_model(), random_inputs())):
        greedy = greedy_search(m, src, need_attention=True, max_len_b=10)
        drawn = sample(m, src, sampling_topk=1, need_attention=True, max_len_b=10)
        for g, s in zip(greedy, drawn, strict=True):
            assert s[0].tokens == g[0].tokens and s[0].logprob == pytest.approx(g[0].logprob, abs=1e-5)
            torch.testing.assert_close(s[0].attention, g[0].attention)


def test_a_seed_repeats_its_draws_and_another_seed_differs():
    m, src = random_model(), random_inputs()
    runs = [[h[0].tokens for h in sample(m, src, sampling_seed=seed, max_len_b=10)] for seed in (7, 7, 8)]
    assert runs[0] == runs[1] and runs[0] != runs[2]


def test_beam_samples_per_sentence_the_best_nbest_scored_as_the_model_scores_them():
    m, src = random_model(), random_inputs()
    hyps = sample(m, src, beam=5, nbest=3, need_attention=True, max_len_b=10)
    for row, nbest in zip(src, hyps, strict=True):
        assert len(nbest) == 3
        assert [h.score for h in nbest] == sorted((h.score for h in nbest), reverse=True)
        assert len({tuple(h.tokens) for h in nbest}) > 1  # independent draws, not one repeated
        for h in nbest:
            assert EOS not in h.tokens and len(h.tokens) <= int(row.ne(PAD).sum()) + 10
            assert h.logprob == pytest.approx(teacher_forced_logprob(m, row, h.tokens), abs=1e-4)
            assert h.attention.shape == (len(h.tokens) + 1, int(row.ne(PAD).sum()))


def test_sampling_settings_are_checked():
    for bad in ({"sampling_topk": -1}, {"sampling_topp": 0.0}, {"sampling_topp": 1.5},
                {"sampling_temperature": 0.0}, {"min_len": -1}):
        with pytest.raises(ValueError):
            SearchSettings(**bad)


# ---- the minimum output length --------------------------------------------------------------------


def test_min_len_keeps_eos_away_until_the_output_is_long_enough():
    src = torch.tensor([[A, EOS]])
    for decode in (greedy_search, beam_search):
        assert decode(EMPTY_FIRST, src)[0][0].tokens == []
        assert decode(EMPTY_FIRST, src, min_len=1)[0][0].tokens == [A]
    m, many = random_model(), random_inputs(8)
    for decode in (greedy_search, beam_search):
        for h in decode(m, many, min_len=12, max_len_b=20):
            assert len(h[0].tokens) >= 12


def test_the_length_limit_wins_over_min_len():
    src = torch.tensor([[A, EOS]])  # limit: floor(0 * 2 + 1) = 1 token
    for decode in (greedy_search, beam_search):
        h = decode(EMPTY_FIRST, src, min_len=5, max_len_a=0.0, max_len_b=1)[0][0]
        assert h.tokens == [A] and h.logprob == pytest.approx(0.0 + torch.tensor(0.4).log().item(), abs=1e-5)
