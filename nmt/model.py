"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017) for translation.

Read top-down like the paper: positional encoding (§3.5), multi-head attention (§3.2), the
position-wise feed-forward network (§3.3), encoder and decoder layers (§3.1), and the model with
shared embeddings (§3.4). Search drives the decoder one position at a time through
`init_cache` / `decode_step`; `DecoderCache` (nmt/decoding.py) holds that incremental state.

Shapes: B batch rows, S source length, T target length, D d_model, H heads, Dh = D / H,
L decoder layers, V vocabulary. Masks handed to `scaled_dot_product_attention` are boolean with
True = "may be attended to"; the padding masks this module returns are True = padding.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmt.decoding import DecoderCache


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


def xavier_(linear: nn.Linear, blocks: int = 1) -> None:
    """Xavier-uniform weights, zero bias. A fused projection (Q|K|V) is initialised block by block
    so each block gets the same scale as a separate d_model x d_model layer."""
    with torch.no_grad():
        for block in linear.weight.chunk(blocks, dim=0):
            nn.init.xavier_uniform_(block)
        nn.init.zeros_(linear.bias)


def attention_with_weights(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool, dropout_p: float
) -> tuple[Tensor, Tensor]:
    """softmax(QK^T / sqrt(d_k)) V written out, because SDPA does not return the weights (and is slower at
    decoding's shapes on CPU). `mask`: boolean (True = attend) or additive. Weights are float32 [B, H, T, S]."""
    scores = (q @ k.transpose(-2, -1)).float() / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    if causal:
        T, S = scores.shape[-2:]
        future = torch.ones(T, S, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    weights = scores.softmax(dim=-1)
    out = (F.dropout(weights, dropout_p) if dropout_p > 0 else weights).to(v.dtype) @ v
    return out, weights


EXPLICIT_MAX_KEYS = 128  # bf16 on CPU: the written-out attention is faster up to here, SDPA beyond


def explicit_attention_pays(q: Tensor, k: Tensor) -> bool:
    """On CPU in bf16/fp16, SDPA's flash kernel is slow at short lengths: written out, a base-size
    attention over 32 keys takes 4x less time forward+backward and 1.6x less forward only (2 threads,
    AVX512-BF16); at 256 keys SDPA is 2-3x faster. In float32 SDPA wins at every length."""
    return q.device.type == "cpu" and q.dtype in (torch.bfloat16, torch.float16) and k.size(-2) <= EXPLICIT_MAX_KEYS


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention (§3.2.2).

    Self-attention projects x to Q, K, V with one fused matrix; cross-attention (`cross=True`)
    projects the decoder state to Q and the encoder output to K, V with one fused matrix, so the
    decoder cache can compute K, V of the source once per sentence.
    """

    def __init__(self, d_model: int, n_heads: int, attention_dropout: float, cross: bool = False):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not a multiple of n_heads={n_heads}")
        self.n_heads, self.d_head = n_heads, d_model // n_heads
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

    def _split_heads(self, x: Tensor, n: int) -> tuple[Tensor, ...]:
        """[B, T, n*D] -> n tensors [B, H, T, Dh]. Unbinding the n axis in place (not moved to the front)
        lets backward stack the n gradients straight into the [B, T, n*D] layout: one copy, not two."""
        B, T, _ = x.shape
        return tuple(part.transpose(1, 2) for part in x.view(B, T, n, self.n_heads, self.d_head).unbind(2))

    def qkv(self, x: Tensor) -> tuple[Tensor, ...]:
        return self._split_heads(self.qkv_proj(x), 3)

    def qkv_stacked(self, x: Tensor) -> Tensor:
        """[B, T, D] -> Q, K, V heads as one view [3, B, H, T, Dh] of the fused projection (for decoding,
        which writes K and V into the cache in one copy)."""
        B, T, _ = x.shape
        return self.qkv_proj(x).view(B, T, 3, self.n_heads, self.d_head).permute(2, 0, 3, 1, 4)

    def q(self, x: Tensor) -> Tensor:
        B, T, _ = x.shape
        return self.q_proj(x).view(B, T, self.n_heads, self.d_head).transpose(1, 2)

    def kv(self, memory: Tensor) -> tuple[Tensor, ...]:
        return self._split_heads(self.kv_proj(memory), 2)

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False,
        need_weights: bool = False, explicit: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Heads [B, H, T, Dh] -> output [B, T, D] and, only if asked, weights [B, H, T, S]. `explicit`:
        attention_with_weights instead of SDPA (decoding steps on CPU, where it is 2.5-5x faster); also
        taken wherever `explicit_attention_pays`."""
        p = self.attention_dropout if self.training else 0.0
        if need_weights or explicit or explicit_attention_pays(q, k):
            out, weights = attention_with_weights(q, k, v, mask, causal, p)
            weights = weights if need_weights else None
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=causal)
            weights = None
        B, H, T, Dh = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(B, T, H * Dh)), weights


class Dropout(nn.Dropout):
    """nn.Dropout with a faster mask on CPU: zero each element with probability p, scale the rest by
    1/(1-p). nn.Dropout's `bernoulli_` costs ~2 ns an element there, `rand_like` ~2.5 ns; one 64-bit draw of
    the generator gives four 16-bit uniforms, ~0.9 ns an element (`keep_mask`), so forward+backward run 1.7x
    faster at base size in fp32 and bf16. p is rounded to a multiple of 2^-16 and the scale is the exact
    1 / (1 - p') of the rounded p', so the output stays unbiased. In bf16/fp16 the scale is applied to x,
    not rounded into the mask (1/0.9 is 1.109 in bf16). CUDA has a fused kernel, and eval is nn.Dropout."""

    def forward(self, x: Tensor) -> Tensor:
        dropped = round(self.p * MASK_LEVELS)
        if not self.training or x.device.type != "cpu" or not 0 < dropped < MASK_LEVELS:
            return super().forward(x)
        keep = keep_mask(x.shape, dropped)
        scale = MASK_LEVELS / (MASK_LEVELS - dropped)
        if x.dtype == torch.float32:
            return x * keep.to(x.dtype).mul_(scale)
        return x.mul(scale) * keep.to(x.dtype)


MASK_LEVELS = 1 << 16


def keep_mask(shape: torch.Size, dropped: int) -> Tensor:
    """Boolean mask of `shape`, each element False with probability dropped / 2^16: 16-bit uniforms cut
    from full-range 64-bit draws of the default generator (seeded and resumed like any other draw)."""
    n = math.prod(shape)
    bits = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(2**63), None).view(torch.int16)[:n]
    return bits.view(shape) >= dropped - MASK_LEVELS // 2


ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "swish": F.silu}


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2  (§3.3), with dropout on the hidden activation; GELU or
    swish (x * sigmoid(x), Marian's) in place of max(0, .) when asked."""

    def __init__(self, d_model: int, d_ff: int, activation_dropout: float, activation: str = "relu"):
        super().__init__()
        self.w1 = nn.Linear(d_model, d_ff)
        self.w2 = nn.Linear(d_ff, d_model)
        self.dropout = Dropout(activation_dropout)
        self.activation = ACTIVATIONS[activation]
        xavier_(self.w1)
        xavier_(self.w2)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(self.dropout(self.activation(self.w1(x))))


class _Residual(nn.Module):
    """Residual connection around each sublayer. Post-norm (paper): LayerNorm(x + Dropout(f(x))).
    Pre-norm: x + Dropout(f(LayerNorm(x))), which trains deep stacks more stably."""

    def __init__(self, pre_norm: bool, dropout: float):
        super().__init__()
        self.pre_norm = pre_norm
        self.dropout = Dropout(dropout)

    def _in(self, x: Tensor, norm: nn.LayerNorm) -> Tensor:
        return norm(x) if self.pre_norm else x

    def _add(self, x: Tensor, h: Tensor, norm: nn.LayerNorm) -> Tensor:
        x = x + self.dropout(h)
        return x if self.pre_norm else norm(x)


class EncoderLayer(_Residual):
    """Self-attention over the source, then the feed-forward network."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float, attention_dropout: float,
                 activation_dropout: float, pre_norm: bool, activation: str = "relu"):
        super().__init__(pre_norm, dropout)
        self.self_attn = MultiHeadAttention(d_model, n_heads, attention_dropout)
        self.ffn = FeedForward(d_model, d_ff, activation_dropout, activation)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, x: Tensor, mask: Tensor, need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        h, weights = self.self_attn.attend(*self.self_attn.qkv(self._in(x, self.norm1)), mask=mask,
                                           need_weights=need_weights)
        x = self._add(x, h, self.norm1)
        x = self._add(x, self.ffn(self._in(x, self.norm2)), self.norm2)
        return x, weights


class DecoderLayer(_Residual):
    """Masked self-attention, attention over the encoder output, then the feed-forward network."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float, attention_dropout: float,
                 activation_dropout: float, pre_norm: bool, activation: str = "relu"):
        super().__init__(pre_norm, dropout)
        self.self_attn = MultiHeadAttention(d_model, n_heads, attention_dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, attention_dropout, cross=True)
        self.ffn = FeedForward(d_model, d_ff, activation_dropout, activation)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))

    def forward(self, x: Tensor, memory_kv: tuple[Tensor, ...], memory_mask: Tensor,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """Teacher forcing over all T positions; the causal mask hides the future."""
        h, _ = self.self_attn.attend(*self.self_attn.qkv(self._in(x, self.norm1)), causal=True)
        x = self._add(x, h, self.norm1)
        return self._cross_and_ffn(x, memory_kv, memory_mask, need_weights)

    def step(self, x: Tensor, self_kv: Tensor, step: int, memory_kv: Tensor, memory_mask: Tensor,
             self_mask: Tensor | None, need_weights: bool, group: int = 1) -> tuple[Tensor, Tensor | None]:
        """One new position x [N, 1, D] for N rows in groups of `group` that share a source (the beams of
        a sentence): group g's rows are x[g*group : (g+1)*group].

        Self-attention: the group's keys/values live in self_kv [2, G, H, capacity, W, Dh], one slot w < W
        per row and position; row q writes its new K, V into slot q at `step` and attends to all
        (step + 1) x W entries of its group, `self_mask` [G, 1, group, (step + 1) * W] (additive, None
        when W = 1) keeping exactly those on its own history. Beams thus never copy each other's caches.
        Cross-attention: memory_kv [2, G, H, S, Dh] holds one copy of the source per group, and the
        group's rows attend to it as `group` query positions of one sequence."""
        N, _, D = x.shape
        x = x.view(N // group, group, D)
        qkv = self.self_attn.qkv_stacked(self._in(x, self.norm1))  # [3, G, H, group, Dh]
        self_kv[:, :, :, step, :group] = qkv[1:]  # K and V in one copy
        if group < self_kv.size(4):  # unused slots are masked, but 0 * NaN garbage would still be NaN
            self_kv[:, :, :, step, group:] = 0
        k, v = self_kv[:, :, :, : step + 1].flatten(3, 4)  # [G, H, (step + 1) * W, Dh] each, views
        # a few query rows against tens of keys: SDPA's CPU kernel costs more than its work there
        explicit = x.device.type == "cpu"
        h, _ = self.self_attn.attend(qkv[0], k, v, mask=self_mask, explicit=explicit)
        x = self._add(x, h, self.norm1)
        x, weights = self._cross_and_ffn(x, memory_kv, memory_mask, need_weights, explicit)
        if weights is not None:  # [G, H, group, S] -> [N, H, 1, S]
            weights = weights.transpose(1, 2).reshape(N, weights.size(1), 1, weights.size(-1))
        return x.view(N, 1, D), weights

    def _cross_and_ffn(self, x: Tensor, memory_kv: tuple[Tensor, ...] | Tensor, memory_mask: Tensor,
                       need_weights: bool, explicit: bool = False) -> tuple[Tensor, Tensor | None]:
        k, v = memory_kv
        q = self.cross_attn.q(self._in(x, self.norm2))
        h, weights = self.cross_attn.attend(q, k, v, mask=memory_mask, need_weights=need_weights, explicit=explicit)
        x = self._add(x, h, self.norm2)
        x = self._add(x, self.ffn(self._in(x, self.norm3)), self.norm3)
        return x, weights


class Transformer(nn.Module):
    """Encoder-decoder Transformer. Keyword names equal the fields of `nmt.config.ModelConfig`.

    Embeddings: the decoder input embedding and the output projection are always the same matrix;
    with `share_all_embeddings` the encoder embedding is that matrix too, but only when the data says
    source and target are one vocabulary (`joint_vocab`): two vocabularies of equal size are still two.
    `activation`, `position_layout`, `scale_embedding` and `output_bias` default to the paper's model;
    other values describe published models that differ (Marian: swish, halves, a fixed logits bias).
    """

    INITIAL_CACHE = 16  # positions preallocated by init_cache before doubling

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
        # a constant of the model (not trained), stored in its checkpoints
        self.output_bias: Tensor | None
        self.register_buffer("output_bias", torch.zeros(tgt_vocab_size) if output_bias else None)
        self.output_layer: nn.Module | None = None  # a replacement of the projection (an int8 copy; see _project)
        self.dropout = Dropout(dropout)
        layer_args = (d_model, n_heads, d_ff, dropout, attention_dropout, activation_dropout, pre_norm, activation)
        self.encoder_layers = nn.ModuleList(EncoderLayer(*layer_args) for _ in range(encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(*layer_args) for _ in range(decoder_layers))
        # Pre-norm leaves the residual stream un-normalised, so each stack ends with a LayerNorm.
        self.encoder_norm = nn.LayerNorm(d_model) if pre_norm else nn.Identity()
        self.decoder_norm = nn.LayerNorm(d_model) if pre_norm else nn.Identity()

    @classmethod
    def from_config(cls, cfg: Any, src_vocab_size: int, tgt_vocab_size: int, *, pad_id: int,
                    joint_vocab: bool) -> Transformer:
        """The one place a model is built: from a `ModelConfig` (any dataclass with this class's keyword
        names), the vocabulary sizes of the data, the tokenizer's padding id and whether the tokenizer is
        one vocabulary for both sides."""
        return cls(src_vocab_size, tgt_vocab_size, pad_id=pad_id, joint_vocab=joint_vocab, **dataclasses.asdict(cfg))

    def _embedding(self, vocab_size: int) -> nn.Embedding:
        """N(0, d_model^-0.5) so that scaled by sqrt(d_model) the entries are ~N(0, 1); pad row zero."""
        embed = nn.Embedding(vocab_size, self.d_model, padding_idx=self.pad_id)
        nn.init.normal_(embed.weight, mean=0.0, std=self.d_model**-0.5)
        with torch.no_grad():
            embed.weight[self.pad_id].zero_()
        return embed

    def _embed(self, embedding: nn.Embedding, tokens: Tensor, offset: int = 0) -> Tensor:
        end = offset + tokens.size(1)
        if end > self.max_positions:
            raise ValueError(f"sequence needs {end} positions, model has max_positions={self.max_positions}")
        return self.dropout(embedding(tokens) * self.embed_scale + self.positions[offset:end])

    def _project(self, x: Tensor) -> Tensor:
        """Output logits with the (tied) target embedding matrix (and the output bias, if the model has one), or
        with `output_layer` when inference set one (nmt.translator's int8 copy of that matrix)."""
        if self.output_layer is not None:
            return self.output_layer(x)
        return fast_linear(x, self.output_weight, self.output_bias)

    # ---- encoder ---------------------------------------------------------------------------------

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """src [B, S] -> memory [B, S, D] and src_pad_mask [B, S] (True = padding)."""
        memory, src_pad_mask, _ = self._encode(src, need_weights=False)
        return memory, src_pad_mask

    def _encode(self, src: Tensor, need_weights: bool) -> tuple[Tensor, Tensor, list[Tensor | None]]:
        src_pad_mask = src.eq(self.pad_id)
        mask = _attend_mask(src_pad_mask)
        x = self._embed(self.src_embed, src)
        weights = []
        for layer in self.encoder_layers:
            x, w = layer(x, mask, need_weights)
            weights.append(w)
        return self.encoder_norm(x), src_pad_mask, weights

    # ---- decoder: teacher forcing ----------------------------------------------------------------

    def decode(self, tgt_in: Tensor, memory: Tensor, src_pad_mask: Tensor) -> Tensor:
        """tgt_in [B, T] (BOS + target, right-padded) -> logits [B, T, V]. Padding sits at the end,
        so the causal mask alone keeps it out of every real position."""
        return self._decode(tgt_in, memory, src_pad_mask, need_weights=False)[0]

    def _decode(self, tgt_in: Tensor, memory: Tensor, src_pad_mask: Tensor, need_weights: bool,
                project: bool = True) -> tuple[Tensor, list[Tensor | None]]:
        mask = _attend_mask(src_pad_mask)
        x = self._embed(self.tgt_embed, tgt_in)
        weights = []
        for layer in self.decoder_layers:
            x, w = layer(x, layer.cross_attn.kv(memory), mask, need_weights)
            weights.append(w)
        x = self.decoder_norm(x)
        return (self._project(x) if project else x), weights

    def forward(self, src: Tensor, tgt_in: Tensor, project: bool = True) -> Tensor:
        """src [B, S], tgt_in [B, T] -> logits [B, T, V]; with project=False the decoder's last states
        [B, T, D], for a loss that applies `output_weight` itself (nmt.loss.projected_label_smoothed_loss)."""
        memory, src_pad_mask = self.encode(src)
        return self._decode(tgt_in, memory, src_pad_mask, need_weights=False, project=project)[0]

    @property
    def output_weight(self) -> Tensor:
        """The output projection [V, D]: the (tied) target embedding matrix."""
        return self.tgt_embed.weight

    # ---- decoder: one position at a time (search) ------------------------------------------------

    def init_cache(self, memory: Tensor, src_pad_mask: Tensor, max_len: int) -> DecoderCache:
        """Decoding state for the rows of `memory`; max_len is the expected number of steps.

        The capacity starts at INITIAL_CACHE positions and doubles (up to max_len) as decoding goes on: a
        cache reserving all max_len positions at once costs nothing extra only while its pages stay fresh,
        and with freed memory reused (`nmt.device.keep_freed_memory`) they are not."""
        cross_kv = torch.stack([torch.stack(layer.cross_attn.kv(memory)) for layer in self.decoder_layers])
        L, _, B, H, _, Dh = cross_kv.shape
        capacity = max(1, min(max_len, self.INITIAL_CACHE))
        self_kv = cross_kv.new_empty(L, 2, B, H, capacity, 1, Dh)
        slots = torch.zeros(B, 1, capacity, dtype=torch.long, device=memory.device)
        return DecoderCache(cross_kv, _attend_mask(src_pad_mask), self_kv, slots, max_len=max_len)

    def decode_step(self, tokens: Tensor, cache: DecoderCache,
                    need_attention: bool = False) -> tuple[Tensor, Tensor | None]:
        """Feed tokens [B] at position `cache.step`; return (logits [B, V], attention).

        Appends this position's self-attention K/V to the cache and advances `cache.step`.
        attention is None unless `need_attention`: then the cross-attention weights of every
        decoder layer and head, float32 [L, B, H, S] (computed explicitly; costs nothing otherwise).
        Inference only (writes into the cache in place): call under torch.no_grad().
        """
        step = cache.step
        cache.reserve(step + 1)
        x = self._embed(self.tgt_embed, tokens[:, None], offset=step)
        self_mask = cache.begin_step(x.dtype)
        weights = []
        for i, layer in enumerate(self.decoder_layers):
            x, w = layer.step(x, cache.self_kv[i], step, cache.cross_kv[i], cache.memory_mask, self_mask,
                              need_attention, cache.group)
            weights.append(w)
        cache.step = step + 1
        logits = self._project(self.decoder_norm(x[:, 0]))
        return logits, (torch.stack(weights)[:, :, :, 0] if need_attention else None)

    # ---- attention weights for inspection / plots ------------------------------------------------

    def encoder_attention(self, src: Tensor) -> Tensor:
        """Self-attention weights of every encoder layer: float32 [L_enc, B, H, S, S]."""
        return torch.stack(self._encode(src, need_weights=True)[2])

    def decoder_attention(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Cross-attention weights of teacher-forced decoding of tgt_in: float32 [L, B, H, T, S]."""
        memory, src_pad_mask = self.encode(src)
        return torch.stack(self._decode(tgt_in, memory, src_pad_mask, need_weights=True)[1])


ONEDNN_MIN_MACS = 2**20  # below, oneDNN's fixed cost per call (~13 us) outweighs its faster kernel


def fast_linear(x: Tensor, weight: Tensor, bias: Tensor | None, packed: Tensor | None = None) -> Tensor:
    """F.linear, through oneDNN on CPU where that pays, forward and backward. torch's F.linear calls MKL's
    sgemm for float32, which on AMD EPYC (Zen 5, 2 threads) runs at about half oneDNN's speed ([1000, 128] x
    [128, 384]: 462 vs 218 us; [128, 512] x [512, 1536]: 972 vs 446 us; a base-size training step's products
    2.2x forward and for the input's gradient, 1.6-1.9x for the weight's) but costs ~5 us less per call, so
    products under ONEDNN_MIN_MACS multiply-adds stay with it ([4, 128] x [128, 384]: 10 vs 15-17 us).
    `packed` (`pack_weight` of `weight`) is used where no gradient is wanted, in float32 and in a bf16
    model's bf16. Under autocast, F.linear, which casts."""
    if (_ONEDNN_LINEAR is None or x.device.type != "cpu" or _cpu_autocast() or x.dtype != weight.dtype
            or x.dtype not in (torch.float32, torch.bfloat16)):
        return F.linear(x, weight, bias)
    if x.dtype == torch.float32 and x.numel() * weight.size(0) < ONEDNN_MIN_MACS:
        return F.linear(x, weight, bias)
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return _OneDNNLinear.apply(x, weight, bias) if x.dtype == torch.float32 else F.linear(x, weight, bias)
    if packed is not None:
        return _ONEDNN_LINEAR(x, packed, bias, "none", [], "")
    if x.dtype == torch.float32:
        return _ONEDNN_LINEAR(x, weight, bias, "none", [], "")
    return F.linear(x, weight, bias)


def pack_weight(weight: Tensor) -> Tensor | None:
    """A float32 or bf16 CPU weight [N, K] reordered once into oneDNN's blocked layout, for inference: with
    the plain layout oneDNN reorders it on every call, which products with few rows (a decoding step: beam
    x sentences) pay most (2 threads, [4, 512] x [512, 2048]: fp32 81 vs 42 us, bf16 50 vs 31 us; the
    [4, 512] x [512, 8000] projection fp32 300 vs 125 us) and larger ones a little ([128, 512] x [512, 2048]:
    634 vs 581 us). A copy, so it takes the weight's memory again and does not follow later changes of
    `weight` (CPULinear re-packs when the weight's version changes). None where oneDNN or its reorder is
    missing."""
    if (_ONEDNN_LINEAR is None or _ONEDNN_PACK is None or weight.device.type != "cpu"
            or weight.dtype not in (torch.float32, torch.bfloat16)):
        return None
    return _ONEDNN_PACK(weight.detach())


class _OneDNNLinear(torch.autograd.Function):
    """y = x W^T + b with both gradients from oneDNN products too: dx = dy W, dW = dy^T x (as linear forms)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _ONEDNN_LINEAR(x, weight, bias, "none", [], "")

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        x, weight = ctx.saved_tensors
        rows = grad.reshape(-1, grad.size(-1))
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = _ONEDNN_LINEAR(grad, weight.t(), None, "none", [], "")
        if ctx.needs_input_grad[1]:
            grad_w = _ONEDNN_LINEAR(rows.t(), x.reshape(-1, x.size(-1)).t(), None, "none", [], "")
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = rows.sum(0)
        return grad_x, grad_w, grad_b


def _cpu_autocast() -> bool:
    try:
        return torch.is_autocast_enabled("cpu")
    except TypeError:  # torch < 2.4
        return torch.is_autocast_cpu_enabled()


class CPULinear(nn.Module):
    """An nn.Linear's parameters (same names) computed with fast_linear; see `for_cpu`. After `pack()`
    (inference), products that need no gradient read a oneDNN-packed copy of the weight."""

    def __init__(self, weight: Tensor, bias: Tensor | None):
        super().__init__()
        self.weight, self.bias = weight, bias
        self.packed: Tensor | None = None
        self._packed_version = -1

    @classmethod
    def of(cls, linear: nn.Linear) -> CPULinear:
        return cls(linear.weight, linear.bias)

    def pack(self) -> CPULinear:
        self.packed, self._packed_version = pack_weight(self.weight), self.weight._version
        return self

    def forward(self, x: Tensor) -> Tensor:
        if self.packed is not None and self._packed_version != self.weight._version:
            self.pack()  # the weight changed in place since: never compute with a stale copy
        return fast_linear(x, self.weight, self.bias, self.packed)


def for_cpu(model: nn.Module, pack: bool = False) -> nn.Module:
    """`model` with every nn.Linear replaced (in place) by a CPULinear over the same parameters: how nmt trains
    on CPU and translates on CPU in float32 and bf16; `pack`: (inference) each with a oneDNN-packed copy of its
    weight, and a Transformer's output projection too. Not before int8 quantization, which converts
    nn.Linear modules."""
    for name, child in model.named_children():
        if type(child) is nn.Linear:
            setattr(model, name, CPULinear.of(child).pack() if pack else CPULinear.of(child))
        else:
            for_cpu(child, pack)
    if pack and isinstance(model, Transformer) and model.output_layer is None:
        model.output_layer = CPULinear(model.output_weight, model.output_bias).pack()
    return model


# an internal op of torch (inductor's CPU matmul), so looked up rather than assumed
_ONEDNN_LINEAR = getattr(torch.ops.mkldnn, "_linear_pointwise", None) if torch.backends.mkldnn.is_available() else None
_ONEDNN_PACK = getattr(torch.ops.mkldnn, "_reorder_linear_weight", None) if _ONEDNN_LINEAR is not None else None


def _attend_mask(pad_mask: Tensor) -> Tensor:
    """Padding mask [B, S] (True = pad) -> SDPA key mask [B, 1, 1, S] (True = attend), broadcast
    over heads and queries instead of materialising [B, H, T, S]."""
    return ~pad_mask[:, None, None, :]
