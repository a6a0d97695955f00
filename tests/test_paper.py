"""The paper's formulas and settings, each asserted against the code: the tests docs/paper.md cites for the
sections no other test proves (the map: tests/paper_map.py). Tiny models, fixed seeds, the CPU."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import nmt.model
import nmt.translation.translator
from nmt import checkpoint, search
from nmt.config.experiment import Config, DecodeConfig, load_config
from nmt.loss import label_smoothed_loss, projected_label_smoothed_loss
from nmt.model import DecoderLayer, EncoderLayer, FeedForward, MultiHeadAttention, ResidualNorm, Transformer
from nmt.rundir import RunDir
from nmt.search import SearchSettings, length_penalty_divisor, max_lengths
from nmt.tokenizer import SpecialIds
from nmt.train.loop import train
from nmt.train.optim import learning_rate
from nmt.translation.translator import Translator
from tests.helpers.paths import DEMO_MODEL

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
GOLDEN = DEMO_MODEL
PAD, BOS, EOS = 0, 2, 3
V, D = 19, 16


def tiny(**kwargs) -> Transformer:
    torch.manual_seed(0)
    args = dict(d_model=D, n_heads=4, d_ff=32, encoder_layers=2, decoder_layers=2, max_positions=64) | kwargs
    return Transformer(V, V, **args, pad_id=PAD, joint_vocab=True).eval()


def paper_configs() -> list[Config]:
    return [load_config(CONFIGS / "base.yaml"), load_config(CONFIGS / "big.yaml")]


def layer_norm(norm: nn.LayerNorm, x: Tensor) -> Tensor:
    return F.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps)


def multi_head_by_hand(q: Tensor, k: Tensor, v: Tensor, heads: int, w_o: nn.Linear) -> Tensor:
    """Concat(head_1, ..., head_h) W^O, head_i = softmax(Q_i K_i^T / sqrt(d_k)) V_i, where Q_i = Q W_i^Q is the i-th
    block of d_k columns of the projected Q (likewise K, V)."""
    d_k = q.size(-1) // heads
    cols = [slice(i * d_k, (i + 1) * d_k) for i in range(heads)]
    out = [torch.softmax(q[..., c] @ k[..., c].transpose(-2, -1) / math.sqrt(d_k), -1) @ v[..., c] for c in cols]
    return w_o(torch.cat(out, dim=-1))


# ---- §3.1 encoder and decoder stacks, residual + LayerNorm


def test_default_model_is_the_base_model_of_two_stacks_of_6_identical_layers():
    """N = 6 encoder layers of two sub-layers and 6 decoder layers of three, each with its residual + LayerNorm;
    d_model = 512 everywhere, h = 8 heads of d_k = 64, d_ff = 2048 (the model of the default config)."""
    model = Transformer.from_config(Config().model, 40, 40, pad_id=PAD, joint_vocab=True)
    assert len(model.encoder_layers) == len(model.decoder_layers) == 6
    for stack, kind, sublayers in ((model.encoder_layers, EncoderLayer, {MultiHeadAttention: 1, FeedForward: 1}),
                                   (model.decoder_layers, DecoderLayer, {MultiHeadAttention: 2, FeedForward: 1})):
        shapes = [[(n, p.shape) for n, p in layer.named_parameters()] for layer in stack]
        assert all(type(layer) is kind for layer in stack) and all(s == shapes[0] for s in shapes)  # identical
        children = Counter(type(m) for m in stack[0].children())
        assert {t: children[t] for t in sublayers} == sublayers
        assert children[ResidualNorm] == sum(sublayers.values())  # one residual + norm per sub-layer
    attn, ffn = model.encoder_layers[0].self_attn, model.encoder_layers[0].ffn
    assert (attn.n_heads, attn.d_head) == (8, 64)
    assert (ffn.w1.in_features, ffn.w1.out_features, ffn.w2.out_features) == (512, 2048, 512)
    assert model.tgt_embed.embedding_dim == 512 and not model.encoder_layers[0].norm1.pre_norm


def test_each_sublayer_output_is_layernorm_of_x_plus_sublayer_x():
    """Post-norm, written out with the layers' own sub-layers: the encoder layer is two LayerNorm(x + Sublayer(x)),
    the decoder layer three (masked self-attention, attention over the encoder output, FFN)."""
    model = tiny()
    for norm in model.modules():
        if isinstance(norm, ResidualNorm):
            nn.init.normal_(norm.weight)  # a gain and a bias that show
            nn.init.normal_(norm.bias)
    enc, dec = model.encoder_layers[0], model.decoder_layers[0]
    x, y = torch.randn(2, 5, D), torch.randn(2, 4, D)
    mask = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    with torch.no_grad():
        h = layer_norm(enc.norm1, x + enc.self_attn(x, mask=mask)[0])
        torch.testing.assert_close(enc(x, mask)[0], layer_norm(enc.norm2, h + enc.ffn(h)))
        h = layer_norm(dec.norm1, y + dec.self_attn(y, causal=True)[0])
        h = layer_norm(dec.norm2, h + dec.cross_attn(h, x, mask)[0])
        torch.testing.assert_close(dec(y, x, mask)[0], layer_norm(dec.norm3, h + dec.ffn(h)))


# ---- §3.2 attention


def test_scaled_dot_product_attention_is_eq_1():
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V, and the weights it returns are the softmax."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, n, 8, generator=g) for n in (4, 6, 6))  # 4 queries, 6 keys and values
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(8), dim=-1)
    out, returned = nmt.model.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(returned, weights)
    torch.testing.assert_close(out, weights @ v)


def test_masking_sets_illegal_connections_to_minus_infinity_before_the_softmax():
    """The decoder's self-attention: position i attends to positions <= i only; padding keys get no weight."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, 5, 8, generator=g) for _ in range(3))
    scores = q @ k.transpose(-2, -1) / math.sqrt(8)
    illegal = torch.ones(5, 5, dtype=torch.bool).triu(1)
    out, weights = nmt.model.scaled_dot_product_attention(q, k, v, causal=True)
    expected = scores.masked_fill(illegal, float("-inf")).softmax(-1)
    torch.testing.assert_close(weights, expected)
    torch.testing.assert_close(out, expected @ v)
    assert weights[..., illegal].abs().max() == 0
    keep = torch.tensor([True, True, True, False, False])  # True = may be attended to
    out, weights = nmt.model.scaled_dot_product_attention(q, k, v, mask=keep[None, None, None])
    torch.testing.assert_close(weights, scores.masked_fill(~keep, float("-inf")).softmax(-1))


def test_multi_head_attention_is_concat_of_heads_times_w_o():
    torch.manual_seed(0)
    mha = MultiHeadAttention(D, 4, attention_dropout=0.0).eval()
    nn.init.normal_(mha.qkv_proj.bias)  # initialised to zero: made to show
    nn.init.normal_(mha.out_proj.bias)
    x = torch.randn(2, 5, D)
    with torch.no_grad():
        q, k, v = mha.qkv_proj(x).chunk(3, dim=-1)  # x W^Q, x W^K, x W^V: all heads side by side
        torch.testing.assert_close(mha(x)[0], multi_head_by_hand(q, k, v, 4, mha.out_proj))


def test_queries_keys_and_values_come_from_where_the_paper_says():
    """Encoder self-attention: every source position sees every other. Encoder-decoder attention: queries from the
    decoder, keys and values from the encoder output, which every target position reads."""
    model = tiny()
    src, tgt = torch.tensor([[5, 6, 7, 8, EOS]]), torch.tensor([[BOS, 9, 10, 11]])
    changed = src.clone()
    changed[0, 3] = 12  # the last word
    with torch.no_grad():
        memory, pad_mask = model.encode(src)
        memory2, _ = model.encode(changed)
        assert not torch.allclose(memory[0, 0], memory2[0, 0])  # the first position saw the change: no mask
        logits, logits2 = model.decode(tgt, memory, pad_mask), model.decode(tgt, memory2, pad_mask)
        assert not torch.allclose(logits[0, 0], logits2[0, 0])  # even the first target position reads the source
        cross = model.decoder_layers[0].cross_attn
        y = torch.randn(1, 4, D)
        k, v = cross.kv_proj(memory).chunk(2, dim=-1)
        expected = multi_head_by_hand(cross.q_proj(y), k, v, 4, cross.out_proj)
        torch.testing.assert_close(cross(y, memory)[0], expected)


# ---- §3.3 feed-forward, §3.4 embeddings, §3.5 positions


def test_feed_forward_is_eq_2_applied_to_each_position_separately():
    assert Config().model.activation == "relu"
    torch.manual_seed(0)
    ffn = FeedForward(D, 64, activation_dropout=0.0).eval()
    nn.init.normal_(ffn.w1.bias)  # initialised to zero: made to show
    nn.init.normal_(ffn.w2.bias)
    x = torch.randn(2, 5, D)
    w1, b1, w2, b2 = ffn.w1.weight.T, ffn.w1.bias, ffn.w2.weight.T, ffn.w2.bias
    with torch.no_grad():
        expected = torch.clamp(x @ w1 + b1, min=0) @ w2 + b2  # max(0, x W1 + b1) W2 + b2
        torch.testing.assert_close(ffn(x), expected)
        for t in range(5):  # identically at each position, alone
            torch.testing.assert_close(ffn(x[:, t]), expected[:, t])


def test_embedding_is_e_times_sqrt_d_model_plus_the_positional_encoding():
    model = tiny()
    tokens = torch.tensor([[5, 6, 7, EOS]])
    expected = model.src_embed.weight[tokens] * math.sqrt(D) + nmt.model.sinusoidal_positions(64, D)[:4]
    with torch.no_grad():
        torch.testing.assert_close(model._embed(model.src_embed, tokens), expected)
        # a decoding step at position 2 adds PE(2)
        torch.testing.assert_close(model._embed(model.tgt_embed, tokens[:, 2:3], offset=2), expected[:, 2:3])


def test_logits_are_the_decoder_output_times_the_shared_embedding_matrix():
    model = tiny()
    assert model.src_embed.weight is model.tgt_embed.weight is model.output_weight
    assert [n for n, p in model.named_parameters() if p.size(0) == V] == ["tgt_embed.weight"]  # one V x D matrix
    src, tgt = torch.tensor([[5, 6, 7, EOS]]), torch.tensor([[BOS, 9, 10]])
    with torch.no_grad():
        torch.testing.assert_close(model(src, tgt), model(src, tgt, project=False) @ model.tgt_embed.weight.T)


# ---- §5.3 optimizer and learning rate


def eq_3(step: int, d_model: int, warmup: int = 4000) -> float:
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def test_paper_configs_use_eq_3_with_4000_warmup_steps():
    for cfg in paper_configs():
        assert (cfg.train.schedule, cfg.train.lr, cfg.train.warmup) == ("noam", 1.0, 4000)
        steps = (1, 1000, 3999, 4000, 4001, 20000, 100000)
        assert [learning_rate(s, cfg) for s in steps] == pytest.approx([eq_3(s, cfg.model.d_model) for s in steps])
        assert max(range(3990, 4010), key=lambda s: learning_rate(s, cfg)) == 4000  # the peak: warmup_steps


def test_training_uses_adam_and_the_eq_3_learning_rate_of_configs_base_yaml(demo_data, tmp_path):
    """configs/base.yaml's optimizer and schedule on a tiny model: the optimizer state saved after 3 updates is
    Adam's with beta1 0.9, beta2 0.98, eps 1e-9, and each update's logged learning rate is eq. 3's."""
    run = tmp_path / "run"
    cfg = load_config(CONFIGS / "base.yaml", [
        f"data.dir={demo_data}", f"train.run_dir={run}", "train.device=cpu", "train.amp=none",
        "model.d_model=32", "model.n_heads=2", "model.d_ff=64", "model.encoder_layers=1", "model.decoder_layers=1",
        "model.max_positions=256", "train.max_tokens=512", "train.update_freq=1", "train.max_updates=3",
        "train.log_every=1", "train.valid_bleu_sentences=0", "train.average_last=0"])
    assert (cfg.train.betas, cfg.train.eps) == ([0.9, 0.98], 1e-9)
    train(cfg, progress=False)
    optimizer = checkpoint.load(run / "last.pt")["train_state"]["optimizer"]
    group = optimizer["param_groups"][0]
    assert tuple(group["betas"]) == (0.9, 0.98) and group["eps"] == 1e-9 and group["weight_decay"] == 0
    assert not group["amsgrad"] and {"exp_avg", "exp_avg_sq"} <= set(optimizer["state"][0])  # Adam's moments
    lrs = [r["lr"] for r in RunDir(run).read_metrics() if r["type"] == "train"]
    assert lrs == pytest.approx([eq_3(step, 32) for step in (1, 2, 3)])


# ---- §5.4 regularization


class MarkedDropout(nn.Module):
    """A stand-in for a dropout module: records what it is given and doubles it, so the output shows where the
    result went."""

    def forward(self, x: Tensor) -> Tensor:
        self.seen = x
        return 2 * x


def test_dropout_is_on_each_sublayer_output_and_on_the_embedding_sums():
    model = tiny(dropout=0.1)
    assert Config().model.dropout == 0.1 and model.dropout.p == 0.1
    norms = [m for m in model.modules() if isinstance(m, ResidualNorm)]
    assert len(norms) == 2 * 2 + 2 * 3 and all(type(n.dropout) is nn.Dropout and n.dropout.p == 0.1 for n in norms)
    norm = norms[0]
    norm.dropout = MarkedDropout()
    x, sublayer_out = torch.randn(2, 3, D), torch.randn(2, 3, D)
    with torch.no_grad():
        out = norm(x, sublayer_out)
    assert torch.equal(norm.dropout.seen, sublayer_out)  # dropout on the sub-layer output...
    torch.testing.assert_close(out, layer_norm(norm, x + 2 * sublayer_out))  # ... before the add and the norm
    model.dropout = MarkedDropout()
    tokens = torch.tensor([[5, 6, 7, EOS]])
    with torch.no_grad():
        model._embed(model.src_embed, tokens)
    summed = model.src_embed.weight[tokens] * math.sqrt(D) + model.positions[:4]
    torch.testing.assert_close(model.dropout.seen, summed)  # on the sum of the embedding and the encoding


def test_label_smoothing_is_cross_entropy_against_the_smoothed_target_distribution():
    """q = (1 - eps_ls) one_hot(y) + eps_ls / V; loss = -sum_v q_v log p_v over the non-pad tokens, whose gradient
    with respect to the logits is p - q (the loss is least where the model predicts q). The training loss
    (from the decoder output and the output matrix) is the same."""
    assert Config().train.label_smoothing == 0.1 and all(c.train.label_smoothing == 0.1 for c in paper_configs())
    eps, vocab = 0.1, 7
    g = torch.Generator().manual_seed(0)
    hidden, weight = torch.randn(2, 3, 5, generator=g), torch.randn(vocab, 5, generator=g)
    logits = (hidden @ weight.T).requires_grad_()
    target = torch.tensor([[1, 4, PAD], [6, PAD, PAD]])
    real = target != PAD
    q = (1 - eps) * F.one_hot(target, vocab) + eps / vocab
    expected = -(q * logits.log_softmax(-1)).sum(-1)[real].sum()
    loss, _ = label_smoothed_loss(logits, target, eps, pad=PAD)
    torch.testing.assert_close(loss, expected)
    loss.backward()
    torch.testing.assert_close(logits.grad[real], (logits.softmax(-1) - q)[real])
    assert logits.grad[~real].abs().max() == 0
    projected, _ = projected_label_smoothed_loss(hidden, weight, target, eps, pad=PAD)
    torch.testing.assert_close(projected, expected.detach())


# ---- §6.1 inference


def test_translation_searches_with_beam_4_and_the_gnmt_length_penalty_0_6(monkeypatch):
    for d in [DecodeConfig()] + [c.decode for c in paper_configs()]:
        assert (d.beam, d.length_penalty, d.length_penalty_type) == (4, 0.6, "gnmt")
    for n in (1, 6, 20):  # lp(Y) = ((5 + |Y|) / 6)^alpha (Wu et al. 2016)
        assert length_penalty_divisor(n, 0.6) == pytest.approx(((5 + n) / 6) ** 0.6)
    calls = []
    def spy(model, src, settings, *args, **kwargs):
        calls.append(settings)
        return search.run(model, src, settings, *args, **kwargs)

    monkeypatch.setattr(nmt.translation.translator, "run", spy)
    Translator.load(GOLDEN, Config()).translate_chunk(["three hundred forty-two"])
    assert [(c.beam, c.length_penalty, c.length_penalty_type) for c in calls] == [(4, 0.6, "gnmt")]


def test_averaging_is_the_mean_of_the_last_checkpoints(tmp_path):
    """The last 5 of 7 step checkpoints by step (checkpoint_10 sorts before checkpoint_2 as text); tied weights stay
    one tensor. base.yaml averages the last 5, big.yaml the last 20, and both keep that many."""
    base, big = paper_configs()
    assert (base.train.average_last, big.train.average_last) == (5, 20)
    assert all(c.train.checkpoints_kept >= c.train.average_last for c in (base, big))
    run = RunDir(tmp_path)
    for step in range(2, 16, 2):  # 2, 4, ..., 14
        embedding = torch.full((3, 2), float(step))
        weights = {"w": torch.tensor([step, -step], dtype=torch.float32), "tgt_embed.weight": embedding,
                   "output.weight": embedding}
        run.save_checkpoint({"model": weights, "config": {}, "tokenizer": {}, "vocab": {}}, step, keep_last=7)
    averaged = checkpoint.load(run.average(5))["model"]
    mean = sum(range(6, 16, 2)) / 5  # steps 6 to 14
    assert averaged["w"].tolist() == [mean, -mean] and averaged["tgt_embed.weight"].eq(mean).all()
    assert averaged["output.weight"].data_ptr() == averaged["tgt_embed.weight"].data_ptr()


class NeverEnds:
    """A stand-in model for search whose best next token is always 5 and EOS the worst: only the length limit ends
    its output."""

    max_positions = 1024

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        return src.float()[..., None], src.eq(PAD)

    def init_cache(self, memory: Tensor, src_pad_mask: Tensor, max_len: int) -> NeverEnds:
        return self

    def reorder(self, keep: Tensor | None, parents: Tensor) -> None:
        pass

    def decode_step(self, tokens: Tensor, cache: NeverEnds, need_attention: bool = False) -> tuple[Tensor, None]:
        logits = torch.zeros(tokens.numel(), V)
        logits[:, 5], logits[:, EOS] = 5.0, -5.0
        return logits, None


def test_maximum_output_length_is_input_length_plus_50():
    """Input length = the source's tokens (its EOS included); the output, EOS not counted, stops there."""
    for d in [DecodeConfig()] + [c.decode for c in paper_configs()]:
        assert (d.max_len_a, d.max_len_b) == (1.0, 50)
    assert (SearchSettings().max_len_a, SearchSettings().max_len_b) == (1.0, 50)
    src = torch.tensor([[5, 6, 7, EOS], [5, EOS, PAD, PAD]])  # input lengths 4 and 2
    assert max_lengths(NeverEnds(), src, PAD, 1.0, 50).tolist() == [54, 52]
    for beam in (4, 1):  # the beam rule, greedy search
        hyps = search.run(NeverEnds(), src, SearchSettings(beam=beam), SpecialIds(pad=PAD, unk=1, bos=BOS, eos=EOS))
        assert [len(h[0].tokens) for h in hyps] == [54, 52]
