"""The Transformer: incremental decoding equals teacher forcing, masks, tying, positions, autocast."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from nmt.decoding import DecoderCache
from nmt.model import Transformer, sinusoidal_positions

torch.set_num_threads(2)

V = 23
PAD, BOS, EOS = 0, 2, 3


def make_model(pre_norm: bool = False, **kwargs) -> Transformer:
    torch.manual_seed(0)
    src_vocab_size, tgt_vocab_size = kwargs.pop("src_vocab_size", V), kwargs.pop("tgt_vocab_size", V)
    args = dict(d_model=32, n_heads=4, d_ff=64, encoder_layers=2, decoder_layers=2, pre_norm=pre_norm)
    args.update(kwargs)
    return Transformer(src_vocab_size, tgt_vocab_size, **args, pad_id=PAD,
                       joint_vocab=src_vocab_size == tgt_vocab_size).eval()


def padded(rows: list[list[int]], width: int | None = None) -> torch.Tensor:
    width = width or max(map(len, rows))
    return torch.tensor([r + [PAD] * (width - len(r)) for r in rows])


# Source sentences of different lengths (EOS appended) and BOS-prefixed targets, right-padded.
SRC = padded([[5, 6, 7, 8, 9, EOS], [10, 11, EOS], [12, EOS]])
TGT = padded([[BOS, 4, 5, 6, 7], [BOS, 8, 9], [BOS, 10, 11, 12, 13, 14, 15]])


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
            cache.reorder(torch.tensor(keep), parents)
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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dropout_drops_p_and_keeps_the_mean(dtype):
    """The fast CPU paths: a fraction p of zeros, survivors scaled by 1/(1-p') for p rounded to 2^-16
    (in bf16 as exactly as x * scale rounds), the gradient through the same mask, the mask from the seed."""
    from nmt.model import MASK_LEVELS, Dropout

    scale = MASK_LEVELS / (MASK_LEVELS - round(0.1 * MASK_LEVELS))
    assert abs(scale - 1 / 0.9) < 1e-4
    torch.manual_seed(0)
    x = torch.full((400, 500), 0.5, dtype=dtype, requires_grad=True)
    y = Dropout(0.1).train()(x)
    dropped = (y == 0).float().mean().item()
    assert abs(dropped - 0.1) < 0.005
    assert torch.equal(y[y != 0], torch.full_like(y[y != 0], 0.5) * scale)
    assert y.dtype == dtype and abs(y.float().mean().item() - 0.5) < 0.005
    y.sum().backward()
    assert torch.equal(x.grad == 0, y == 0)
    torch.manual_seed(0)
    assert torch.equal(Dropout(0.1).train()(x), y)


def test_packed_weights_give_the_same_results_and_follow_weight_changes(monkeypatch):
    """for_cpu(pack=True) (nmt translate's fp32 CPU model): every CPULinear and the output projection read a
    oneDNN-packed copy of their weight, with the logits and translations of the plain model; a weight
    changed in place is re-packed, never computed stale; with gradients the plain weight is used."""
    import nmt.model as model_module
    from nmt.model import CPULinear, for_cpu
    from nmt.search import beam_search

    if model_module._ONEDNN_PACK is None:
        pytest.skip("this torch build has no oneDNN weight packing")
    monkeypatch.setattr(model_module, "ONEDNN_MIN_MACS", 0)  # float32 products this small go to MKL
    model, packed = make_model(pre_norm=True), make_model(pre_norm=True)
    for_cpu(packed, pack=True)
    layers = [m for m in packed.modules() if isinstance(m, CPULinear)]
    assert len(layers) == 2 * 4 + 2 * 7 + 1 and all(m.packed is not None for m in layers)
    assert packed.output_layer.weight is packed.output_weight
    calls = []
    real = model_module._ONEDNN_LINEAR
    monkeypatch.setattr(model_module, "_ONEDNN_LINEAR", lambda x, w, *a: calls.append(w.is_mkldnn) or real(x, w, *a))
    with torch.no_grad():
        logits = packed(SRC, TGT)
        assert calls and all(calls)  # every product, however small, through a packed weight
        torch.testing.assert_close(logits, model(SRC, TGT), atol=1e-5, rtol=0)
        ids = dict(bos=BOS, eos=EOS, pad=PAD, beam=3, max_len_b=6)
        tokens = [[h[0].tokens for h in beam_search(m, SRC, **ids)] for m in (packed, model)]
        assert tokens[0] == tokens[1]
        for m in (packed, model):
            m.decoder_layers[0].ffn.w1.weight.mul_(-1.0)
        torch.testing.assert_close(packed(SRC, TGT), model(SRC, TGT), atol=1e-5, rtol=0)
    x = torch.randn(3, 32, requires_grad=True)
    layer = packed.decoder_layers[0].ffn.w1
    layer(x).sum().backward()
    assert layer.weight.grad is not None and x.grad is not None


def test_packed_bf16_model_matches_the_plain_bf16_model():
    """A bf16 model (nmt translate --dtype bf16 on CPU) computes with packed bf16 weights at every size."""
    import nmt.model as model_module
    from nmt.model import for_cpu

    if model_module._ONEDNN_PACK is None:
        pytest.skip("this torch build has no oneDNN weight packing")
    model, packed = make_model(pre_norm=True).bfloat16(), for_cpu(make_model(pre_norm=True).bfloat16(), pack=True)
    assert packed.output_layer.packed is not None and packed.output_layer.packed.dtype == torch.bfloat16
    with torch.no_grad():
        torch.testing.assert_close(packed(SRC, TGT).float(), model(SRC, TGT).float(), atol=0.05, rtol=0.02)


def test_bf16_attention_over_short_sequences_is_written_out_and_agrees_with_sdpa(monkeypatch):
    """On CPU in bf16, attention over <= EXPLICIT_MAX_KEYS keys skips SDPA (4x slower there, forward +
    backward); float32 and longer sequences keep it. Both ways give the same output and gradients."""
    import nmt.model as M

    torch.manual_seed(0)
    attn = M.MultiHeadAttention(32, 4, attention_dropout=0.0)
    x = torch.randn(3, 7, 32)
    mask = torch.ones(3, 1, 1, 7, dtype=torch.bool)
    mask[0, ..., 5:] = False

    def run() -> tuple[Tensor, Tensor]:
        attn.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out, _ = attn.attend(*attn.qkv(x), mask=mask)
        out.float().square().sum().backward()
        return out.float(), attn.qkv_proj.weight.grad.clone()

    sdpa = F.scaled_dot_product_attention
    calls = []
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or sdpa(*a, **k))
    explicit_out, explicit_grad = run()
    assert calls == []
    monkeypatch.setattr(M, "EXPLICIT_MAX_KEYS", 0)
    sdpa_out, sdpa_grad = run()
    assert calls == [1]
    assert (explicit_out - sdpa_out).abs().max() < 0.02
    assert torch.allclose(explicit_grad, sdpa_grad, rtol=0.05, atol=0.05 * sdpa_grad.abs().max().item())
    monkeypatch.setattr(M, "EXPLICIT_MAX_KEYS", 128)
    q, long = torch.randn(1, 4, 7, 8), torch.randn(1, 4, 129, 8)
    assert M.explicit_attention_pays(q.bfloat16(), q.bfloat16())
    assert not M.explicit_attention_pays(q, q)  # float32: SDPA
    assert not M.explicit_attention_pays(q.bfloat16(), long.bfloat16())  # 129 keys: SDPA


def test_keep_mask_is_uniform_over_its_16_bit_levels():
    """Each element is dropped with probability dropped / 2^16, independently of its position in the
    64-bit draw it was cut from (a biased quarter would show at one of the four offsets)."""
    from nmt.model import MASK_LEVELS, keep_mask

    torch.manual_seed(0)
    for dropped in (1, MASK_LEVELS // 10, MASK_LEVELS // 2, MASK_LEVELS - 1):
        keep = keep_mask(torch.Size([250_001, 4]), dropped)
        rate = 1 - keep.float().mean(dim=0)  # per offset within a draw
        expected = dropped / MASK_LEVELS
        assert (rate - expected).abs().max() < 5 * math.sqrt(expected * (1 - expected) / 250_001) + 1e-5, rate
    assert keep_mask(torch.Size([3, 5]), 0).all()  # 15 of the 16 levels of 4 draws


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
    assert "output_bias" in model.state_dict() and "output_bias" not in dict(model.named_parameters())
    model.output_bias.copy_(torch.linspace(-1, 1, V))
    with torch.no_grad():
        hidden = model(SRC, TGT, project=False)
        torch.testing.assert_close(model(SRC, TGT), hidden @ model.output_weight.t() + model.output_bias)
        unscaled = model.tgt_embed(TGT) + model.positions[: TGT.size(1)]
        torch.testing.assert_close(model._embed(model.tgt_embed, TGT), unscaled, rtol=0, atol=0)
        assert not torch.equal(plain(SRC, TGT, project=False), hidden)  # the scale made a difference


def test_fast_linear_equals_f_linear_and_falls_back(monkeypatch):
    """Linear layers on CPU in float32 go through oneDNN for products of at least ONEDNN_MIN_MACS multiply-adds,
    forward and backward: the same numbers as F.linear; F.linear below the size, under autocast, without oneDNN."""
    import nmt.model as model_module

    g = torch.Generator().manual_seed(0)
    w, b = torch.randn(512, 256, generator=g), torch.randn(512, generator=g)
    big, small = torch.randn(3, 8, 256, generator=g), torch.randn(2, 256, generator=g)
    assert big.numel() * 512 >= model_module.ONEDNN_MIN_MACS > small.numel() * 512
    calls = []
    onednn = model_module._ONEDNN_LINEAR
    if onednn is not None:
        monkeypatch.setattr(model_module, "_ONEDNN_LINEAR", lambda *args: calls.append(1) or onednn(*args))
    with torch.no_grad():
        for x in (big, small):
            for bias in (b, None):
                got, want = model_module.fast_linear(x, w, bias), F.linear(x, w, bias)
                torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-5)
    assert len(calls) == (2 if onednn is not None else 0)  # the big product only, with and without bias
    # training: the gradients of x, W and b through oneDNN's products equal F.linear's
    grads = []
    for linear in (model_module.fast_linear, F.linear):
        x, w1, b1 = (t.clone().requires_grad_() for t in (big, w, b))
        (linear(x, w1, b1) * torch.linspace(-1, 1, 512)).sum().backward()
        grads.append((x.grad, w1.grad, b1.grad))
    for got, want in zip(*grads, strict=True):
        torch.testing.assert_close(got, want, atol=1e-3, rtol=1e-4)
    assert len(calls) == (5 if onednn is not None else 0)  # forward, dx, dW
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast: F.linear, which casts
        assert model_module.fast_linear(big, w, b).dtype == torch.bfloat16
    monkeypatch.setattr(model_module, "_ONEDNN_LINEAR", None)
    with torch.no_grad():
        assert torch.equal(model_module.fast_linear(big, w, b), F.linear(big, w, b))


def test_for_cpu_keeps_the_weights_and_the_results(monkeypatch):
    """nmt translate's float32 CPU model: every nn.Linear replaced by a CPULinear over the same parameters
    (same state dict, same tensors), the same logits and translations (every product through oneDNN here)."""
    import nmt.model as model_module
    from nmt.model import CPULinear, for_cpu
    from nmt.search import beam_search

    monkeypatch.setattr(model_module, "ONEDNN_MIN_MACS", 0)

    model, fast = make_model(pre_norm=True), make_model(pre_norm=True)
    before = {k: v.clone() for k, v in fast.state_dict().items()}
    for_cpu(fast)
    assert not any(type(m) is torch.nn.Linear for m in fast.modules())
    # 2 encoder layers x (qkv, out, w1, w2) + 2 decoder layers x (qkv, out, q, kv, out, w1, w2)
    assert sum(isinstance(m, CPULinear) for m in fast.modules()) == 2 * 4 + 2 * 7
    assert fast.state_dict().keys() == before.keys()
    assert all(torch.equal(fast.state_dict()[k], v) for k, v in before.items())
    with torch.no_grad():
        torch.testing.assert_close(fast(SRC, TGT), model(SRC, TGT), atol=1e-5, rtol=0)
        ids = dict(bos=BOS, eos=EOS, pad=PAD, beam=3, max_len_b=6)
        tokens = [[h[0].tokens for h in beam_search(m, SRC, **ids)] for m in (fast, model)]
        assert tokens[0] == tokens[1]
