"""Greedy and beam search: on a tiny Transformer trained to copy, and on table-driven stub models
whose probabilities are known exactly."""

from __future__ import annotations

import math

import pytest
import torch

from nmt import kernels, search
from nmt.model import Transformer
from nmt.search import SearchSettings
from nmt.search.scoring import (
    Hypothesis,
    impossible_tokens,
    length_normalized,
    max_lengths,
    step_log_probs,
    step_logits,
)
from nmt.search.static import StaticDecoder
from tests.helpers.hypotheses import assert_same
from tests.helpers.tables import (
    BOS,
    EOS,
    IDS,
    PAD,
    TableModel,
    V,
    batch,
    beam_search,
    greedy_search,
    random_inputs,
    random_model,
    teacher_forced_logprob,
)

# ---- stub models (tests.helpers.tables.TableModel): next-token probabilities are a table over the prefix ----


A, B_, C, D = 4, 5, 6, 7  # symbols of the stub models

# Greedy takes A (0.6) but then every continuation is weak: A C EOS = 0.3 < B EOS = 0.4.
GREEDY_TRAP = TableModel(
    {(): {A: 0.6, B_: 0.4}, (A,): {C: 0.5, D: 0.5}, (A, C): {EOS: 1.0}, (A, D): {EOS: 1.0},
     (B_,): {EOS: 1.0}},
    default={EOS: 1.0},
)


def test_beam_search_escapes_the_greedy_trap():
    src = torch.tensor([[A, EOS]])
    greedy = greedy_search(GREEDY_TRAP, src, length_penalty=0.0)[0][0]
    best = beam_search(GREEDY_TRAP, src, beam=2, length_penalty=0.0)[0][0]
    assert greedy.tokens[:1] == [A] and greedy.logprob == pytest.approx(math.log(0.3), abs=1e-5)
    assert best.tokens == [B_] and best.logprob == pytest.approx(math.log(0.4), abs=1e-5)


def test_length_penalty_reorders_hypotheses():
    # [B] has logprob log 0.5 (2 tokens with EOS); [A C] has log(0.5 * 0.95 * 0.95) (3 tokens).
    model = TableModel({(): {A: 0.5, B_: 0.5}, (A,): {C: 0.95}, (A, C): {EOS: 0.95}, (B_,): {EOS: 1.0}},
                       default={EOS: 1.0})
    src = torch.tensor([[A, EOS]])
    short_first = beam_search(model, src, beam=2, nbest=2, length_penalty=0.0)[0]
    long_first = beam_search(model, src, beam=2, nbest=2, length_penalty=2.0)[0]
    assert [h.tokens for h in short_first] == [[B_], [A, C]]
    assert [h.tokens for h in long_first] == [[A, C], [B_]]
    for h in long_first:
        assert h.score == pytest.approx(h.logprob / ((5 + len(h.tokens) + 1) / 6) ** 2.0)
    assert length_normalized(-6.0, 1, 1.0) == -6.0
    assert length_normalized(-6.0, 7, 1.0) == pytest.approx(-3.0)
    assert length_normalized(-6.0, 7, 0.0) == -6.0


def test_average_length_penalty_is_generates_form():
    """average: logprob / L ** alpha (Hugging Face generate), for ranking and for the early stop. [B] has
    log 0.5 over 2 tokens, [A C] log 0.4 over 3: with alpha 1 each form ranks them its own way."""
    assert length_normalized(-6.0, 3, 1.0, "average") == pytest.approx(-2.0)
    assert length_normalized(-8.0, 4, 0.5, "average") == pytest.approx(-4.0)
    model = TableModel({(): {A: 0.5, B_: 0.5}, (A,): {C: 0.8, D: 0.2}, (A, C): {EOS: 1.0}, (B_,): {EOS: 1.0}},
                       default={EOS: 1.0})
    src = torch.tensor([[A, EOS]])
    gnmt = beam_search(model, src, beam=2, nbest=2, length_penalty=1.0)[0]
    average = beam_search(model, src, beam=2, nbest=2, length_penalty=1.0, length_penalty_type="average")[0]
    assert [h.tokens for h in gnmt] == [[B_], [A, C]]
    assert [h.tokens for h in average] == [[A, C], [B_]]
    for h in average:
        assert h.score == pytest.approx(h.logprob / (len(h.tokens) + 1))
    greedy = greedy_search(model, src, length_penalty=1.0, length_penalty_type="average")[0][0]
    assert greedy.score == pytest.approx(greedy.logprob / (len(greedy.tokens) + 1))


def test_forced_eos_at_max_length_per_sentence():
    # EOS is never among the 4 best candidates, so only the length limit ends a hypothesis.
    never_eos = TableModel({}, default={A: 0.25, B_: 0.25, C: 0.25, D: 0.25, EOS: 1e-9})
    src = torch.tensor([[A, A, A, A, EOS], [A, EOS, PAD, PAD, PAD]])  # src_len 5 and 2
    for decode in (greedy_search, beam_search):
        hyps = decode(never_eos, src, max_len_a=1.0, max_len_b=2, need_attention=True)
        assert [len(h[0].tokens) for h in hyps] == [7, 4]
        for h, n in zip(hyps, (5, 2), strict=True):
            assert h[0].attention.shape == (len(h[0].tokens) + 1, n)
    assert max_lengths(never_eos, src, PAD, 0.5, 1).tolist() == [3, 2]
    for h in beam_search(never_eos, src, max_len_a=0.0, max_len_b=0):  # only EOS fits
        assert h == [Hypothesis([], h[0].score, h[0].logprob)]
        assert h[0].logprob == h[0].score == pytest.approx(math.log(1e-9), abs=1e-4)


# ---- the real model ------------------------------------------------------------------------------


def test_beam_search_recovers_the_copied_sequence(copy_model):
    model, seqs = copy_model
    src, _, _ = batch(seqs)
    hyps = beam_search(model, src, beam=4)
    assert [h[0].tokens for h in hyps] == seqs


def test_beam_one_is_greedy(copy_model):
    model, seqs = copy_model
    for src in (batch(seqs)[0], random_inputs()):
        for m in (model, random_model()):
            greedy = greedy_search(m, src, need_attention=True, max_len_b=10)
            beam1 = beam_search(m, src, beam=1, need_attention=True, max_len_b=10)
            for g, b in zip(greedy, beam1, strict=True):
                assert len(g) == len(b) == 1
                g, b = g[0], b[0]
                assert g.tokens == b.tokens and g.logprob == b.logprob and g.score == b.score
                assert torch.equal(g.attention, b.attention)



@pytest.mark.parametrize("beam", [1, 3])
def test_batched_equals_one_by_one(copy_model, beam):
    model, seqs = copy_model
    for m, src in ((model, batch(seqs[:8])[0]), (random_model(), random_inputs())):
        batched = beam_search(m, src, beam=beam, nbest=beam, need_attention=True)
        greedy = greedy_search(m, src, need_attention=True)
        for i, row in enumerate(src):
            alone = row[row.ne(PAD)][None]
            one = beam_search(m, alone, beam=beam, nbest=beam, need_attention=True)[0]
            assert [h.tokens for h in one] == [h.tokens for h in batched[i]]
            for h1, hb in zip(one, batched[i], strict=True):
                assert h1.logprob == pytest.approx(hb.logprob, abs=1e-4)
                torch.testing.assert_close(h1.attention, hb.attention, atol=1e-5, rtol=0)
            assert greedy_search(m, alone)[0][0].tokens == greedy[i][0].tokens


def test_nbest_sorted_distinct_and_scored_correctly(copy_model):
    model, seqs = copy_model
    for m, src, layer in ((model, batch(seqs[:6])[0], -1), (random_model(), random_inputs(), 0)):
        hyps = beam_search(m, src, beam=5, nbest=5, length_penalty=0.6, need_attention=True, max_len_b=12,
                           attention_layer=layer)
        for row, nbest in zip(src, hyps, strict=True):
            assert 1 <= len(nbest) <= 5
            scores = [h.score for h in nbest]
            assert scores == sorted(scores, reverse=True)
            assert len({tuple(h.tokens) for h in nbest}) == len(nbest)
            src_len = int(row.ne(PAD).sum())
            for h in nbest:
                assert EOS not in h.tokens and BOS not in h.tokens
                # Bookkeeping through reorders: the model agrees with the reported log-probability...
                assert h.logprob == pytest.approx(teacher_forced_logprob(m, row, h.tokens), abs=1e-4)
                assert h.score == pytest.approx(length_normalized(h.logprob, len(h.tokens) + 1, 0.6))
                # ...and with the reported attention (chosen layer, mean over heads).
                with torch.no_grad():
                    weights = m.decoder_attention(row[None, :src_len], torch.tensor([[BOS] + h.tokens]))
                torch.testing.assert_close(h.attention, weights[layer, 0].mean(0), atol=1e-5, rtol=0)
                torch.testing.assert_close(h.attention.sum(-1), torch.ones(len(h.tokens) + 1))
    assert len(beam_search(model, batch(seqs[:2])[0], beam=4, nbest=2)[0]) == 2


def test_max_length_respected_and_capped_by_positions():
    src = random_inputs(8)
    src_len = src.ne(PAD).sum(1)
    m = random_model()
    for decode in (greedy_search, beam_search):
        for h, n in zip(decode(m, src, max_len_a=0.5, max_len_b=2), src_len.tolist(), strict=True):
            assert len(h[0].tokens) <= int(0.5 * n + 2)
    short = random_model(max_positions=10)
    for decode in (greedy_search, beam_search):
        hyps = decode(short, src, max_len_a=2.0, max_len_b=50)
        assert all(len(h[0].tokens) <= 9 for h in hyps)


def test_empty_batch_and_argument_checks():
    m = random_model()
    empty = torch.zeros(0, 3, dtype=torch.long)
    assert greedy_search(m, empty) == [] and beam_search(m, empty) == []
    with pytest.raises(ValueError):
        beam_search(m, random_inputs(1), beam=2, nbest=3)


def test_beam_wider_than_half_the_vocabulary(copy_model):
    """2 x beam candidates per row exceed V = 14: the padding candidates must never become tokens."""
    model, seqs = copy_model
    src, _, _ = batch(seqs[:6])
    wide = beam_search(model, src, beam=8, nbest=8)
    for hyps, seq in zip(wide, seqs[:6], strict=True):
        assert hyps[0].tokens == seq
        assert all(0 <= tok < V for h in hyps for tok in h.tokens)


@pytest.mark.parametrize("vocab", [3008, 3005])  # 47 groups of 64; 3005: the last 61 entries fill none
@pytest.mark.parametrize("static", [False, True])
def test_the_grouped_top_k_finds_the_hypotheses_of_a_plain_top_k(vocab, static, monkeypatch):
    """Beam search over a vocabulary large enough for nmt.kernels.top_k_beams' groups (the test models' 1,000 tokens
    take its plain top-k) finds the hypotheses and scores of the plain top-k, n-best included; with static shapes
    too, where every beam but the first starts at -inf."""
    torch.manual_seed(2)
    model = Transformer(vocab, vocab, d_model=16, n_heads=2, d_ff=32, encoder_layers=1, decoder_layers=2,
                        pad_id=PAD, joint_vocab=True).eval()
    model = StaticDecoder(model) if static else model
    src, settings = random_inputs(5), SearchSettings(beam=4, nbest=4, max_len_b=6)
    assert vocab // kernels.TOPK_GROUP >= 4 * 2 * settings.beam  # the grouped path
    with torch.inference_mode():
        grouped = search.run(model, src, settings, IDS)
        monkeypatch.setattr(kernels, "TOPK_GROUP", vocab + 1)  # no group: each row's top-k, then the sentence's
        plain = search.run(model, src, settings, IDS)
    assert_same(grouped, plain)
    assert all(len(hyps) == 4 for hyps in grouped)


@pytest.mark.parametrize("too_short", [False, True])
def test_masked_logits_minus_their_normaliser_are_the_steps_log_probabilities(too_short):
    """step_logits (the compiled beam step's form, its masks a row of impossible_tokens) makes the same tokens
    impossible as step_log_probs: PAD and BOS always, EOS while too short unless at the limit, everything but EOS at
    the limit."""
    logits = torch.randn(6, 11, generator=torch.Generator().manual_seed(0)) * 4
    at_limit = torch.tensor([False, True, False, True, False, False])
    want = step_log_probs(logits, at_limit, 2, 3, 0, too_short=torch.tensor(too_short))
    masked, lse = step_logits(logits, at_limit, torch.tensor(too_short), impossible_tokens(11, 2, 3, 0))
    torch.testing.assert_close(masked - lse[:, None], want)
    assert masked[1].isfinite().tolist() == [i == 3 for i in range(11)]  # at the limit: EOS alone
    assert masked[0, 3].isfinite().item() is not too_short and masked[:, [0, 2]].isinf().all()
