"""The Transformer: incremental decoding equals teacher forcing, masks, tying, positions, autocast."""

from __future__ import annotations

import math

import pytest
import torch

from nmt.cache import DecoderCache
from nmt.model import MultiHeadAttention, scaled_dot_product_attention, sinusoidal_positions
from tests.helpers.modeling import BOS, PAD, SRC, TGT, V, make_model, padded

# Source sentences of different lengths (EOS appended) and BOS-prefixed targets, right-padded.


@pytest.mark.parametrize("pre_norm", [False, True])
def test_decode_step_matches_teacher_forcing_with_padding(pre_norm):
    model = make_model(pre_norm)
    with torch.no_grad():
        memory, src_pad_mask = model.encode(SRC)
        full = model.decode(TGT, memory, src_pad_mask)
        cache = model.init_cache(memory, src_pad_mask, max_len=2)  # small hint: the cache must grow
        for t in range(TGT.size(1)):
            assert cache.step == t
            logits, attention = model.decode_step(TGT[:, t], cache)
            assert attention is None
            torch.testing.assert_close(logits, full[:, t], atol=1e-5, rtol=0)
    assert cache.step == TGT.size(1)


def test_output_shapes_and_attention_weights():
    model = make_model()
    B, S = SRC.shape
    T = TGT.size(1)
    with torch.no_grad():
        memory, src_pad_mask = model.encode(SRC)
        assert memory.shape == (B, S, 32)
        assert torch.equal(src_pad_mask, SRC.eq(PAD))
        assert model.decode(TGT, memory, src_pad_mask).shape == (B, T, V)
        assert model(SRC, TGT).shape == (B, T, V)
        cache = model.init_cache(memory, src_pad_mask, max_len=T)
        assert isinstance(cache, DecoderCache) and cache.batch_size == B
        logits, attention = model.decode_step(TGT[:, 0], cache, need_attention=True)
        enc_attn = model.encoder_attention(SRC)
        dec_attn = model.decoder_attention(SRC, TGT)
    assert logits.shape == (B, V)
    assert attention.shape == (2, B, 4, S)
    assert enc_attn.shape == (2, B, 4, S, S)
    assert dec_attn.shape == (2, B, 4, T, S)
    pad = src_pad_mask[None, :, None, :]
    for weights in (attention, enc_attn[..., 0, :], dec_attn[..., 0, :]):
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))
        assert weights.masked_select(pad.expand_as(weights)).abs().max() == 0  # padding gets no attention
    # The explicit (need_attention) path computes the same logits as SDPA.
    with torch.no_grad():
        cache = model.init_cache(memory, src_pad_mask, max_len=T)
        plain, _ = model.decode_step(TGT[:, 0], cache)
    torch.testing.assert_close(logits, plain, atol=1e-5, rtol=0)
    # decoder_attention row 0 is what decode_step reports for the first position.
    torch.testing.assert_close(dec_attn[:, :, :, 0], attention, atol=1e-5, rtol=0)


@pytest.mark.parametrize("pre_norm", [False, True])
def test_padding_never_changes_real_positions(pre_norm):
    model = make_model(pre_norm)
    S, T = SRC.size(1), TGT.size(1)
    with torch.no_grad():
        memory, mask = model.encode(SRC)
        logits = model.decode(TGT, memory, mask)
        # Extra padding on both sides: identical real outputs.
        memory2, mask2 = model.encode(padded(SRC.tolist(), S + 5))
        logits2 = model.decode(padded(TGT.tolist(), T + 4), memory2, mask2)
        # Garbage in the memory at padded source positions is never attended to.
        noisy = torch.where(mask[:, :, None], torch.randn_like(memory) * 100, memory)
        logits3 = model.decode(TGT, noisy, mask)
    real_src = ~mask
    torch.testing.assert_close(memory2[:, :S][real_src], memory[real_src], atol=1e-5, rtol=0)
    real_tgt = TGT.ne(PAD)
    real_tgt[:, 0] = True
    torch.testing.assert_close(logits2[:, :T][real_tgt], logits[real_tgt], atol=1e-5, rtol=0)
    torch.testing.assert_close(logits3, logits, atol=1e-5, rtol=0)


def test_sentence_alone_equals_sentence_in_padded_batch():
    model = make_model()
    with torch.no_grad():
        batch = model(SRC, TGT)
        for i in range(SRC.size(0)):
            s, t = SRC[i][SRC[i].ne(PAD)], TGT[i][: int(TGT[i].ne(PAD).sum())]
            alone = model(s[None], t[None])[0]
            torch.testing.assert_close(batch[i, : t.numel()], alone, atol=1e-5, rtol=0)


def test_decoder_is_causal():
    model = make_model()
    tgt = TGT.clone()
    tgt[:, 4:] = torch.randint(4, V, (tgt.size(0), tgt.size(1) - 4))
    with torch.no_grad():
        before = model(SRC, tgt)
        tgt[:, 4] = (tgt[:, 4] + 1 - 4) % (V - 4) + 4
        after = model(SRC, tgt)
    torch.testing.assert_close(after[:, :4], before[:, :4], atol=1e-6, rtol=0)
    assert not torch.allclose(after[:, 4:], before[:, 4:])


def test_embedding_tying():
    shared = make_model()
    assert shared.src_embed.weight is shared.tgt_embed.weight
    separate = make_model(share_all_embeddings=False)
    assert separate.src_embed.weight is not separate.tgt_embed.weight
    different = make_model(src_vocab_size=17, tgt_vocab_size=V)  # share requested, vocabularies differ
    assert not different.shares_src_embedding
    assert different.src_embed.weight.shape == (17, 32) and different.tgt_embed.weight.shape == (V, 32)
    for model, n_matrices in ((shared, 1), (separate, 2), (different, 2)):
        # No separate output matrix: the only vocabulary-sized matrices are the embeddings.
        names = [n for n, p in model.named_parameters() if p.size(0) in (17, V)]
        assert len(names) == n_matrices and set(names) <= {"tgt_embed.weight", "src_embed.weight"}
        # The output projection reads the target embedding: zeroing row 7 zeroes logit 7.
        with torch.no_grad():
            model.tgt_embed.weight[7].zero_()
            src = torch.randint(4, model.src_embed.num_embeddings, (2, 5))
            logits = model(src, TGT[:2])
        assert logits[..., 7].abs().max() == 0
    # Gradients from the input and the output side reach the one shared matrix.
    shared.train()
    shared(SRC, TGT).sum().backward()
    assert all(p.grad is not None for p in shared.parameters())


def test_embedding_init():
    model = make_model(d_model=64, n_heads=4, tgt_vocab_size=500, src_vocab_size=500)
    w = model.tgt_embed.weight
    assert w[PAD].abs().max() == 0
    assert abs(w[1:].std().item() - 64**-0.5) < 0.01


def test_positional_encoding_matches_formula():
    d, n = 32, 50
    model = make_model(max_positions=n)
    pe = model.positions
    assert pe.shape == (n, d)
    for pos in (0, 1, 7, 49):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)
    assert sinusoidal_positions(4, 5).shape == (4, 5)  # odd width
    assert "positions" not in model.state_dict()  # computed, not stored in checkpoints
    with pytest.raises(ValueError, match="max_positions"):
        model(torch.full((1, n + 1), 5), TGT[:1])


def test_cache_reorder_then_step_equals_stepping_reordered_batch():
    model = make_model(pre_norm=True)
    src = SRC
    steps = torch.randint(4, V, (src.size(0), 6))
    steps[:, 0] = BOS
    index = torch.tensor([2, 0, 0, 1])  # permute and duplicate sentences (one row each)
    one_row = torch.zeros(4, 1, dtype=torch.long)  # each new row continues the only row of its group
    with torch.no_grad():
        memory, mask = model.encode(src)
        cache = model.init_cache(memory, mask, max_len=6)
        for t in range(3):
            model.decode_step(steps[:, t], cache)
        cache.reorder(index, one_row)
        assert cache.batch_size == 4
        got = [model.decode_step(steps[index, t], cache)[0] for t in range(3, 5)]
        cache.reorder(torch.tensor([3, 1]), one_row[:2])  # drop finished sentences
        got.append(model.decode_step(steps[index[[3, 1]], 5], cache)[0])

        memory, mask = model.encode(src[index])
        ref_cache = model.init_cache(memory, mask, max_len=6)
        ref = [model.decode_step(steps[index, t], ref_cache)[0] for t in range(5)][3:]
        ref_cache.reorder(torch.tensor([3, 1]), one_row[:2])
        ref.append(model.decode_step(steps[index[[3, 1]], 5], ref_cache)[0])
    for a, b in zip(got, ref, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


ATTENTION_MASKS = {  # how the model calls attention: (queries, keys, mask, causal)
    "padding": (6, 6, torch.tensor([[True] * 6, [True] * 3 + [False] * 3])[:, None, None, :], False),
    "causal": (6, 6, None, True),
    "additive": (3, 6, torch.tensor([0.0, 0.0, -math.inf, 0.0, -math.inf, 0.0]).expand(2, 1, 3, 6), False),
}


@pytest.mark.parametrize("case", list(ATTENTION_MASKS))
def test_written_out_attention_equals_the_fused_one_and_equation_1(case):
    """The model's readable equation 1 and PyTorch's fused SDPA (its fast path) compute the same output, and both
    equal softmax(QK^T / sqrt(d_k)) V computed here by hand, row by row."""
    T, S, mask, causal = ATTENTION_MASKS[case]
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 4, n, 8, generator=g) for n in (T, S, S))
    out, weights = scaled_dot_product_attention(q, k, v, mask, causal)
    fused = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
    torch.testing.assert_close(out, fused, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, T, dtype=torch.float32))
    b, h, i = 1, 2, T - 1  # one query by hand
    allowed = torch.ones(S, dtype=torch.bool)
    if mask is not None:
        m = mask.expand(2, 4, T, S)[b, h, i]
        allowed = m if m.dtype == torch.bool else m.isfinite()
    if causal:
        allowed &= torch.arange(S) <= i
    scores = torch.tensor([q[b, h, i] @ k[b, h, j] / math.sqrt(8) if allowed[j] else -math.inf for j in range(S)])
    by_hand = scores.softmax(0) @ v[b, h]
    torch.testing.assert_close(out[b, h, i], by_hand, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("cross", [False, True])
def test_attention_with_and_without_weights_agree(cross):
    """need_weights=True takes the written-out path, False the fused one: the layer's output is the same."""
    torch.manual_seed(0)
    attn = MultiHeadAttention(32, 4, 0.0, cross=cross).eval()
    x, memory = torch.randn(2, 5, 32), torch.randn(2, 7, 32)
    mask = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])[:, None, None, :]
    with torch.no_grad():
        plain, none = attn(x, memory if cross else None, mask if cross else None, causal=not cross)
        shown, weights = attn(x, memory if cross else None, mask if cross else None, causal=not cross,
                              need_weights=True)
    assert none is None and weights.shape == (2, 4, 5, 7 if cross else 5)
    torch.testing.assert_close(plain, shown, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("capacity_hint", [8, 2])  # 2: the cache must grow while groups are in use
def test_beam_style_reorders_match_teacher_forcing(monkeypatch, capacity_hint):
    """Beam search's use of the cache: one row per sentence, then K rows per sentence that pick parents
    within their sentence (with repeats), and sentences leaving. Every step's logits must equal teacher
    forcing of that row's own token history. Fresh buffers are NaN-filled: a masked slot that was never
    written must still not poison the attention (0 * NaN)."""
    real_new_empty = torch.Tensor.new_empty

    def nan_empty(self, *size, **kwargs):
        t = real_new_empty(self, *size, **kwargs)
        return t.fill_(float("nan")) if t.is_floating_point() else t

    monkeypatch.setattr(torch.Tensor, "new_empty", nan_empty)
    model, K = make_model(pre_norm=True), 3
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        memory, mask = model.encode(SRC)
        cache = model.init_cache(memory, mask, max_len=capacity_hint)
        sentence, history = [0, 1, 2], [[BOS], [BOS], [BOS]]  # per row
        groups, width = [0, 1, 2], 1  # the sentence of each group, rows per group
        for step in range(6):
            tokens = torch.tensor([h[-1] for h in history])
            logits, _ = model.decode_step(tokens, cache)
            for row, (s, h) in enumerate(zip(sentence, history, strict=True)):
                expected = model(SRC[s : s + 1], torch.tensor([h]))[0, -1]
                torch.testing.assert_close(logits[row], expected, atol=1e-5, rtol=0)
            keep = list(range(len(groups))) if step != 3 else list(range(len(groups)))[::2]  # step 3: drop one
            # K new rows per kept group, each continuing a random row (parent) of that group
            parents = torch.randint(width, (len(keep), K), generator=g)
            # every group kept is also said as None (step 0's widening included): the same reorder, unchecked
            cache.reorder(None if step in (0, 2, 4) else torch.tensor(keep), parents)
            index = [k * width + int(q) for k, row in zip(keep, parents, strict=True) for q in row]
            groups, width = [groups[k] for k in keep], K
            assert cache.group == K and cache.batch_size == len(index)
            sentence = [sentence[r] for r in index]
            history = [history[r] + [int(torch.randint(4, V, (1,), generator=g))] for r in index]


def test_dropout_only_in_training():
    model = make_model(dropout=0.3, attention_dropout=0.3, activation_dropout=0.3)
    with torch.no_grad():
        assert torch.equal(model(SRC, TGT), model(SRC, TGT))
        model.train()
        assert not torch.equal(model(SRC, TGT), model(SRC, TGT))


@pytest.mark.parametrize("pre_norm", [False, True])
def test_bf16_autocast_runs_and_is_finite(pre_norm):
    model = make_model(pre_norm)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(SRC, TGT)
        memory, mask = model.encode(SRC)
        cache = model.init_cache(memory, mask, max_len=4)
        step_logits, attention = model.decode_step(TGT[:, 0], cache, need_attention=True)
        step_logits2, _ = model.decode_step(TGT[:, 1], cache)
    assert logits.shape == (3, TGT.size(1), V) and torch.isfinite(logits.float()).all()
    assert torch.isfinite(step_logits.float()).all() and torch.isfinite(step_logits2.float()).all()
    assert torch.isfinite(attention).all()
    # bf16 agrees with float32 to bf16 precision.
    with torch.no_grad():
        reference = model(SRC, TGT)
    assert (logits.float() - reference).abs().max() < 0.25


def test_training_step_reduces_loss():
    model = make_model(dropout=0.1)
    model.train()
    labels = torch.cat([TGT[:, 1:], torch.zeros(3, 1, dtype=torch.long)], 1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(5):
        logits = model(SRC, TGT)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, V), labels.view(-1), ignore_index=PAD)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_positions_in_halves_put_the_same_sines_then_the_cosines():
    """Marian's layout: the paper's frequencies, sines in the first half of the vector, cosines in the second."""
    paper, halves = sinusoidal_positions(20, 8), sinusoidal_positions(20, 8, "halves")
    torch.testing.assert_close(halves[:, :4], paper[:, 0::2])
    torch.testing.assert_close(halves[:, 4:], paper[:, 1::2])
    assert sinusoidal_positions(20, 7, "halves").shape == (20, 7)  # odd width: one cosine fewer


@pytest.mark.parametrize("activation, fn", [("relu", torch.relu), ("gelu", torch.nn.functional.gelu),
                                            ("swish", lambda x: x * torch.sigmoid(x))])
def test_feed_forward_activation(activation, fn):
    from nmt.model import FeedForward

    ffn = FeedForward(8, 16, 0.0, activation).eval()
    x = torch.randn(3, 8)
    torch.testing.assert_close(ffn(x), ffn.w2(fn(ffn.w1(x))))


def test_output_bias_and_unscaled_embeddings():
    """Keys for models that differ from the paper: a fixed bias on the logits (a buffer, stored in the
    state dict, not trained) and embeddings without the sqrt(d_model) factor."""
    plain = make_model(pre_norm=True)
    model = make_model(pre_norm=True, output_bias=True, scale_embedding=False)
    model.load_state_dict(plain.state_dict(), strict=False)
    assert "output.bias" in model.state_dict() and "output.bias" not in dict(model.named_parameters())
    model.output_bias.copy_(torch.linspace(-1, 1, V))
    with torch.no_grad():
        hidden = model(SRC, TGT, project=False)
        torch.testing.assert_close(model(SRC, TGT), hidden @ model.output_weight.t() + model.output_bias)
        unscaled = model.tgt_embed(TGT) + model.positions[: TGT.size(1)]
        torch.testing.assert_close(model._embed(model.tgt_embed, TGT), unscaled, rtol=0, atol=0)
        assert not torch.equal(plain(SRC, TGT, project=False), hidden)  # the scale made a difference
