"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017) for translation.

In the paper's order: the encoder and decoder layers with the residual connection and LayerNorm around each
sub-layer (§3.1), attention, written out as equation 1, and its multi-head form (§3.2), the position-wise
feed-forward network (§3.3), the output projection that shares the embedding matrix (§3.4) and the sinusoidal
positional encoding (§3.5); then `Transformer`, which assembles them: embeddings (§3.4-3.5), the encoder, the
decoder, and the decoder run one position at a time for search (`init_cache` / `decode_step`, the incremental
state held by `DecoderCache` in nmt/cache.py). docs/paper.md maps each section and equation to its code and test.

Plain PyTorch modules. Where PyTorch's fused attention computes equation 1 faster, `MultiHeadAttention` calls it
(the same numbers: tests/core/test_model.py); nmt.precision swaps in faster CPU kernels (nmt/kernels.py) from outside.

Shapes: B batch rows, S source length, T target length, D d_model, H heads, Dh = D / H, L decoder layers, V
vocabulary. Attention masks: boolean, True = "may be attended to" (or additive); padding masks: True = padding.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt import kernels
from nmt.cache import DecoderCache, LayerCache
from nmt.packed import AttentionMask, Packed, PackedMask


# ---- §3.1 Encoder and decoder stacks -------------------------------------------------------------
class ResidualNorm(nn.LayerNorm):
    """The residual connection and layer normalisation around one sub-layer (§3.1), with dropout on the
    sub-layer's output (§5.4):
        post-norm (the paper):  x -> LayerNorm(x + Dropout(Sublayer(x)))
        pre-norm:               x -> x + Dropout(Sublayer(LayerNorm(x)))   (stabler for deep stacks)
    A layer feeds its sub-layer `norm.input(x)` and continues with `norm(x, sublayer_output)`."""

    def __init__(self, d_model: int, dropout: float, pre_norm: bool):
        super().__init__(d_model)
        self.dropout = nn.Dropout(dropout)
        self.pre_norm = pre_norm

    def input(self, x: Tensor) -> Tensor:
        """What the sub-layer reads: LayerNorm(x) in pre-norm, x itself in post-norm."""
        return super().forward(x) if self.pre_norm else x

    def forward(self, x: Tensor, sublayer_out: Tensor) -> Tensor:
        x = x + self.dropout(sublayer_out)
        return x if self.pre_norm else super().forward(x)


class EncoderLayer(nn.Module):
    """Self-attention over the source, then the feed-forward network (§3.1)."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float, attention_dropout: float,
                 activation_dropout: float, pre_norm: bool, activation: str = "relu"):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, attention_dropout)
        self.ffn = FeedForward(d_model, d_ff, activation_dropout, activation)
        self.norm1 = ResidualNorm(d_model, dropout, pre_norm)
        self.norm2 = ResidualNorm(d_model, dropout, pre_norm)

    def forward(self, x: Tensor, mask: Tensor, need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """x [B, S, D], mask [B, 1, 1, S] -> [B, S, D] and, if asked, the self-attention weights."""
        h, weights = self.self_attn(self.norm1.input(x), mask=mask, need_weights=need_weights)
        x = self.norm1(x, h)
        x = self.norm2(x, self.ffn(self.norm2.input(x)))
        return x, weights


class DecoderLayer(nn.Module):
    """Masked self-attention, attention over the encoder output, then the feed-forward network (§3.1)."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float, attention_dropout: float,
                 activation_dropout: float, pre_norm: bool, activation: str = "relu"):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, attention_dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, attention_dropout, cross=True)
        self.ffn = FeedForward(d_model, d_ff, activation_dropout, activation)
        self.norm1 = ResidualNorm(d_model, dropout, pre_norm)
        self.norm2 = ResidualNorm(d_model, dropout, pre_norm)
        self.norm3 = ResidualNorm(d_model, dropout, pre_norm)

    def forward(self, x: Tensor, memory: Tensor | None, memory_mask: AttentionMask, cache: LayerCache | None = None,
                need_weights: bool = False, self_mask: PackedMask | None = None) -> tuple[Tensor, Tensor | None]:
        """Teacher forcing: x [B, T, D] over memory [B, S, D]; the causal mask (a packed batch's: `self_mask`) hides
        the future. A decoding step (`cache` given, memory None): one new position for each row, x [G, group, D]
        for G groups of rows that share a source (a sentence's beams), which attend to their own history
        (`cache.self_mask`) and to the cached source. Returns x and, if asked, the cross-attention weights."""
        causal = cache is None and self_mask is None
        self_mask = cache.self_mask if cache is not None else self_mask
        h, _ = self.self_attn(self.norm1.input(x), mask=self_mask, cache=cache, causal=causal)
        x = self.norm1(x, h)
        h, weights = self.cross_attn(self.norm2.input(x), memory, memory_mask, cache=cache, need_weights=need_weights)
        x = self.norm2(x, h)
        x = self.norm3(x, self.ffn(self.norm3.input(x)))
        return x, weights


# ---- §3.2 Attention ------------------------------------------------------------------------------
def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False,
                                 dropout_p: float = 0.0) -> tuple[Tensor, Tensor]:
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V  (§3.2.1, equation 1), as the paper writes it.

    q [B, H, T, Dh] (T queries), k and v [B, H, S, Dh] (S keys and values); `mask` broadcasts to [B, H, T, S],
    boolean (True = may be attended to) or additive; `causal` hides from each query the keys after it (§3.2.3).
    Returns the output [B, H, T, Dh] and the attention weights, float32 [B, H, T, S], each row summing to 1.
    """
    d_k = q.size(-1)
    scores = (q @ k.transpose(-2, -1)).float() / math.sqrt(d_k)  # [B, H, T, S]: how well each query fits each key
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    if causal:
        T, S = scores.shape[-2:]
        later = torch.ones(T, S, dtype=torch.bool, device=q.device).triu(1)  # key j > query i
        scores = scores.masked_fill(later, float("-inf"))
    weights = scores.softmax(dim=-1)  # [B, H, T, S]
    dropped = F.dropout(weights, dropout_p) if dropout_p > 0 else weights  # attention dropout (not the paper's)
    return dropped.to(v.dtype) @ v, weights  # [B, H, T, Dh]: a weighted sum of the values


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_H) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V),
    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V  (§3.2.1-3.2.2).

    The H heads' projections are one matrix: self-attention projects its input to Q|K|V at once;
    cross-attention (`cross=True`) projects the decoder state to Q and the encoder output to K|V, so a
    decoding cache computes the source's K, V once per sentence (`memory_kv`).
    """

    def __init__(self, d_model: int, n_heads: int, attention_dropout: float, cross: bool = False):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not a multiple of n_heads={n_heads}")
        self.n_heads, self.d_head, self.cross = n_heads, d_model // n_heads, cross
        self.attention_dropout = attention_dropout
        if cross:
            self.q_proj = nn.Linear(d_model, d_model)
            self.kv_proj = nn.Linear(d_model, 2 * d_model)
            xavier_(self.q_proj)
            xavier_(self.kv_proj, blocks=2)
        else:
            self.qkv_proj = nn.Linear(d_model, 3 * d_model)
            xavier_(self.qkv_proj, blocks=3)
        self.out_proj = nn.Linear(d_model, d_model)
        xavier_(self.out_proj)

    def forward(self, query: Tensor, key_value: Tensor | None = None, mask: AttentionMask | None = None, *,
                cache: LayerCache | None = None, causal: bool = False,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """query [B, T, D] attends to key_value [B, S, D] (cross-attention) or to itself (self-attention,
        key_value None); mask broadcasts to [B, H, T, S] (or is a packed batch's); `causal` hides later positions.
        A decoding `cache` gives self-attention every position's keys and values, cross-attention the source's.
        Returns [B, T, D] and, if asked, the weights float32 [B, H, T, S]."""
        if self.cross:
            q = self._heads(self.q_proj(query), 1)[0]  # [B, H, T, Dh]
            k, v = cache.memory_kv if cache is not None else self.memory_kv(key_value)  # [B', H, S, Dh] each
            if k.size(0) < q.size(0):  # B = B' x G rows share a source (a static cache's beams): G x T queries each
                q = q.unflatten(0, (k.size(0), -1)).transpose(1, 2).flatten(2, 3)  # [B', H, G*T, Dh]
        else:
            q, k, v = self._heads(self.qkv_proj(query), 3)  # [B, H, T, Dh] each
            if cache is not None:
                k, v = cache.append(k, v)  # [B, H, S, Dh]: every position so far
        dropout_p = self.attention_dropout if self.training else 0.0
        if isinstance(mask, PackedMask):  # a packed batch [1, total]: attention inside each sentence
            out, weights = mask.attend(q, k, v, dropout_p), None
        elif need_weights or kernels.written_out_pays(q, k, decoding_step=cache is not None):
            out, weights = scaled_dot_product_attention(q, k, v, mask, causal, dropout_p)  # [B, H, T, Dh]
        else:  # equation 1 fused by PyTorch: the same output, no weights
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=causal)
            weights = None
        B, T, _ = query.shape
        out = self.out_proj(out.transpose(1, 2).reshape(B, T, -1))  # Concat(head_1..head_H) W^O
        if need_weights and weights is not None and weights.size(0) < B:  # [B', H, G*T, S] -> [B, H, T, S]
            weights = weights.unflatten(2, (-1, T)).transpose(1, 2).flatten(0, 1)
        return out, weights if need_weights else None

    def memory_kv(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Cross-attention's keys and values of the encoder output memory [B, S, D]: [B, H, S, Dh] each."""
        k, v = self._heads(self.kv_proj(memory), 2)
        return k, v

    def _heads(self, x: Tensor, n: int) -> tuple[Tensor, ...]:
        """[B, T, n*D] -> n tensors [B, H, T, Dh], the n axis unbound in place: backward's gradients stack into
        [B, T, n*D] in one copy."""
        B, T, _ = x.shape
        return tuple(part.transpose(1, 2) for part in x.view(B, T, n, self.n_heads, self.d_head).unbind(2))


# ---- §3.3 Position-wise feed-forward networks ----------------------------------------------------
ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "swish": F.silu}


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2  (§3.3), with dropout on the hidden activation; GELU or
    swish (x * sigmoid(x), Marian's) in place of max(0, .) when asked."""

    def __init__(self, d_model: int, d_ff: int, activation_dropout: float, activation: str = "relu"):
        super().__init__()
        self.w1 = nn.Linear(d_model, d_ff)
        self.w2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(activation_dropout)
        self.activation = ACTIVATIONS[activation]
        xavier_(self.w1)
        xavier_(self.w2)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(self.dropout(self.activation(self.w1(x))))  # [.., D] -> [.., d_ff] -> [.., D]


# ---- §3.4 Embeddings and softmax -----------------------------------------------------------------
class TiedLinear(nn.Linear):
    """The output projection logits = x E^T (+ b) with the target embedding matrix E [V, D] (§3.4: the
    embeddings and the pre-softmax linear transformation share their weights). The optional bias is a
    fixed buffer, not trained (Marian's final logits bias)."""

    def __init__(self, embedding: nn.Embedding, bias: bool):
        nn.Module.__init__(self)  # not nn.Linear's: the weight exists already
        self.out_features, self.in_features = embedding.weight.shape
        self.weight = embedding.weight  # the same Parameter, trained by both uses
        self.bias: Tensor | None
        self.register_buffer("bias", torch.zeros(self.out_features) if bias else None)


# ---- §3.5 Positional encoding --------------------------------------------------------------------
def sinusoidal_positions(max_positions: int, d_model: int, layout: str = "interleaved") -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)).
    layout "halves" (Marian) puts the same sines in the first half of the vector and the cosines in the
    second: PE(pos, i) = sin(angle_i), PE(pos, ceil(d/2) + i) = cos(angle_i)."""
    pos = torch.arange(max_positions, dtype=torch.float64)[:, None]
    angle = pos * torch.pow(10000.0, -torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    sin, cos = torch.sin(angle), torch.cos(angle)[:, : d_model // 2]  # odd d_model: one cosine fewer
    if layout == "halves":
        return torch.cat([sin, cos], dim=1).float()
    pe = torch.zeros(max_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = sin
    pe[:, 1::2] = cos
    return pe.float()


# ---- The model: §3.1's stacks assembled ----------------------------------------------------------
def xavier_(linear: nn.Linear, blocks: int = 1) -> None:
    """Xavier-uniform weights, zero bias. A fused projection (Q|K|V) is initialised block by block
    so each block gets the same scale as a separate d_model x d_model layer."""
    with torch.no_grad():
        for block in linear.weight.chunk(blocks, dim=0):
            nn.init.xavier_uniform_(block)
        nn.init.zeros_(linear.bias)


class Transformer(nn.Module):
    """Encoder-decoder Transformer. Keyword names equal the fields of `nmt.config.experiment.ModelConfig`.

    Embeddings: the decoder input embedding and the output projection are always the same matrix; with
    `share_all_embeddings` the encoder embedding is that matrix too, but only when the data says source and target
    are one vocabulary (`joint_vocab`): two vocabularies of equal size are still two. `activation`,
    `position_layout`, `scale_embedding` and `output_bias` default to the paper's model; other values describe
    published models that differ (Marian: swish, halves, a fixed logits bias)."""

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, d_model: int = 512, n_heads: int = 8,
                 d_ff: int = 2048, encoder_layers: int = 6, decoder_layers: int = 6, dropout: float = 0.1,
                 attention_dropout: float = 0.0, activation_dropout: float = 0.0, pre_norm: bool = False,
                 max_positions: int = 1024, share_all_embeddings: bool = True, activation: str = "relu",
                 position_layout: str = "interleaved", scale_embedding: bool = True, output_bias: bool = False,
                 *, pad_id: int, joint_vocab: bool):
        super().__init__()
        self.d_model, self.n_heads, self.pad_id, self.max_positions = d_model, n_heads, pad_id, max_positions
        self.embed_scale = math.sqrt(d_model) if scale_embedding else 1.0  # §3.4: embeddings x sqrt(d_model)
        self.tgt_embed = self._embedding(tgt_vocab_size)
        if joint_vocab and src_vocab_size != tgt_vocab_size:
            raise ValueError(f"a joint vocabulary has one size, got {src_vocab_size} and {tgt_vocab_size}")
        self.shares_src_embedding = share_all_embeddings and joint_vocab
        self.src_embed = self.tgt_embed if self.shares_src_embedding else self._embedding(src_vocab_size)
        self.register_buffer("positions", sinusoidal_positions(max_positions, d_model, position_layout),
                             persistent=False)
        self.output = TiedLinear(self.tgt_embed, bias=output_bias)
        self.dropout = nn.Dropout(dropout)  # on the sums of embeddings and positional encodings (§5.4)
        layer_args = (d_model, n_heads, d_ff, dropout, attention_dropout, activation_dropout, pre_norm, activation)
        self.encoder_layers = nn.ModuleList(EncoderLayer(*layer_args) for _ in range(encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(*layer_args) for _ in range(decoder_layers))
        # Pre-norm leaves the residual stream un-normalised, so each stack ends with a LayerNorm.
        self.encoder_norm = nn.LayerNorm(d_model) if pre_norm else nn.Identity()
        self.decoder_norm = nn.LayerNorm(d_model) if pre_norm else nn.Identity()

    @classmethod
    def from_config(cls, cfg: Any, src_vocab_size: int, tgt_vocab_size: int, *, pad_id: int,
                    joint_vocab: bool) -> Transformer:
        """The one place a model is built: from a `ModelConfig` (a dataclass of this class's keyword names), the
        data's vocabulary sizes, the tokenizer's padding id and whether it is one vocabulary for both sides."""
        return cls(src_vocab_size, tgt_vocab_size, pad_id=pad_id, joint_vocab=joint_vocab, **dataclasses.asdict(cfg))

    def _embedding(self, vocab_size: int) -> nn.Embedding:
        """N(0, d_model^-0.5) so that scaled by sqrt(d_model) the entries are ~N(0, 1); pad row zero."""
        embed = nn.Embedding(vocab_size, self.d_model, padding_idx=self.pad_id)
        nn.init.normal_(embed.weight, mean=0.0, std=self.d_model**-0.5)
        with torch.no_grad():
            embed.weight[self.pad_id].zero_()
        return embed

    def _embed(self, embedding: nn.Embedding, tokens: Tensor, offset: int = 0, at: Tensor | None = None) -> Tensor:
        """tokens [B, T] at positions offset.. (or at the positions `at` [B, T]) -> Dropout(E x sqrt(D) + PE)."""
        end = offset + tokens.size(1)
        if at is None and end > self.max_positions:
            raise ValueError(f"sequence needs {end} positions, model has max_positions={self.max_positions}")
        positions = self.positions[offset:end] if at is None else self.positions[at]
        return self.dropout(embedding(tokens) * self.embed_scale + positions)

    @property
    def output_weight(self) -> Tensor:
        """The output projection's matrix [V, D] as it computes: the tied embeddings (nmt.train.fakequant: rounded)."""
        return getattr(self.output, "computed_weight", self.output.weight)

    @property
    def output_bias(self) -> Tensor | None:
        """The fixed output bias [V], or None."""
        return self.output.bias

    # ---- encoder ---------------------------------------------------------------------------------

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """src [B, S] -> memory [B, S, D] and src_pad_mask [B, S] (True = padding)."""
        return self._encode(src, need_weights=False)[:2]

    def _encode(self, src: Tensor, need_weights: bool,
                packed: Packed | None = None) -> tuple[Tensor, Tensor, list[Tensor | None]]:
        src_pad_mask = src.eq(self.pad_id)
        mask = _attend_mask(src_pad_mask) if packed is None else packed.encoder
        x = self._embed(self.src_embed, src, at=None if packed is None else packed.src.positions)
        weights = []
        for layer in self.encoder_layers:
            x, w = layer(x, mask, need_weights)
            weights.append(w)
        return self.encoder_norm(x), src_pad_mask, weights

    # ---- decoder: teacher forcing ----------------------------------------------------------------

    def decode(self, tgt_in: Tensor, memory: Tensor, src_pad_mask: Tensor) -> Tensor:
        """tgt_in [B, T] (BOS + target, right-padded: the causal mask keeps padding out) -> logits [B, T, V]."""
        return self._decode(tgt_in, memory, src_pad_mask, need_weights=False)[0]

    def _decode(self, tgt_in: Tensor, memory: Tensor, src_pad_mask: Tensor, need_weights: bool,
                project: bool = True, packed: Packed | None = None) -> tuple[Tensor, list[Tensor | None]]:
        mask, self_mask = (_attend_mask(src_pad_mask), None) if packed is None else (packed.cross, packed.decoder)
        x = self._embed(self.tgt_embed, tgt_in, at=None if packed is None else packed.tgt.positions)
        weights = []
        for layer in self.decoder_layers:
            x, w = layer(x, memory, mask, need_weights=need_weights, self_mask=self_mask)
            weights.append(w)
        x = self.decoder_norm(x)
        return (self.output(x) if project else x), weights

    def forward(self, src: Tensor, tgt_in: Tensor, project: bool = True, packed: Packed | None = None) -> Tensor:
        """src [B, S], tgt_in [B, T] -> logits [B, T, V]; with project=False the decoder's last states
        [B, T, D], for a loss that applies `output_weight` itself (nmt.loss.projected_label_smoothed_loss).
        A packed batch (nmt.packed): src [1, S], tgt_in [1, T], the sentences' segments in `packed`."""
        memory, src_pad_mask, _ = self._encode(src, need_weights=False, packed=packed)
        return self._decode(tgt_in, memory, src_pad_mask, need_weights=False, project=project, packed=packed)[0]

    # ---- decoder: one position at a time (search) ------------------------------------------------

    def init_cache(self, memory: Tensor, src_pad_mask: Tensor, max_len: int) -> DecoderCache:
        """Decoding state for the rows of `memory` [B, S, D] for about max_len steps; every decoder layer's
        cross-attention keys and values of the source are computed here, once."""
        cross_kv = torch.stack([torch.stack(layer.cross_attn.memory_kv(memory)) for layer in self.decoder_layers])
        return DecoderCache.start(cross_kv, _attend_mask(src_pad_mask), max_len)  # cross_kv [L, 2, B, H, S, Dh]

    def decode_step(self, tokens: Tensor, cache: DecoderCache,
                    need_attention: bool = False) -> tuple[Tensor, Tensor | None]:
        """Feed tokens [N] at position `cache.step`; return (logits [N, V], attention): this position's K/V appended
        to the cache, `cache.step` advanced. The N rows are G groups of `cache.group` rows that share a source (a
        sentence's beams), each one sequence of `group` query positions for the layers. attention, if asked: every
        decoder layer's cross-attention weights, float32 [L, N, H, S]. Inference only (under torch.no_grad())."""
        x = self._embed(self.tgt_embed, tokens[:, None], offset=cache.step)  # [N, 1, D]
        cache.begin_step(x.dtype)
        x = cache.as_groups(x)  # [G, group, D]
        weights = []
        for i, layer in enumerate(self.decoder_layers):
            x, w = layer(x, None, cache.memory_mask, cache=cache.layer(i), need_weights=need_attention)
            weights.append(w)  # [G, H, group, S]
        cache.step += 1
        logits = self.output(self.decoder_norm(cache.as_rows(x)))  # [N, V]
        return logits, cache.attention_rows(torch.stack(weights)) if need_attention else None

    # ---- attention weights for inspection / plots ------------------------------------------------

    def encoder_attention(self, src: Tensor) -> Tensor:
        """Self-attention weights of every encoder layer: float32 [L_enc, B, H, S, S]."""
        return torch.stack(self._encode(src, need_weights=True)[2])

    def decoder_attention(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Cross-attention weights of teacher-forced decoding of tgt_in: float32 [L, B, H, T, S]."""
        memory, src_pad_mask = self.encode(src)
        return torch.stack(self._decode(tgt_in, memory, src_pad_mask, need_weights=True)[1])


def _attend_mask(pad_mask: Tensor) -> Tensor:
    """Padding mask [B, S] (True = pad) -> key mask [B, 1, 1, S] (True = attend), broadcast over heads, queries."""
    return ~pad_mask[:, None, None, :]
