"""The numbers of `nmt explain`: one sentence walked through the model's OWN modules, step by step, in the paper's
order (embeddings §3.4-3.5, encoder and decoder layers §3.1-3.3, output softmax §3.4), each step checked against
the module's real forward pass (the embeddings, each layer, the encoder's output), so the page can never show a
computation that drifted from the model's.

The walk calls the model's parts (`src_embed`, `embed_scale`, `positions`, each layer's `norm*`, `qkv_proj` /
`q_proj` / `memory_kv`, `out_proj`, `ffn.w1` / `ffn.w2` / `ffn.activation`) and equation 1 as the model writes it
(`nmt.model.scaled_dot_product_attention`); nothing here computes a layer itself. What it keeps is small and
JSON-able (see nmt/explain/command.py for the size budget): SHOW dimensions of each vector, attention weights quantized
to bytes, top-k of each softmax.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from nmt.model import MultiHeadAttention, Transformer, scaled_dot_product_attention

SHOW = 6  # vector dimensions shown: enough to follow a sum by hand, few enough to read
PICTURE = 96  # an attention picture of more rows or columns is averaged down to this many (a long input's page)


class ExplainMismatch(AssertionError):
    """The step-by-step walk disagrees with the model's own forward pass (a bug: the page would be wrong)."""


def rounded(t: Tensor | float) -> Any:
    """A tensor (or number) as nested lists of floats with 4 significant digits: what a reader can follow."""
    if isinstance(t, Tensor):
        t = t.detach().float().cpu().tolist()
    if isinstance(t, list):
        return [rounded(v) for v in t]
    return float(f"{t:.4g}") if math.isfinite(t) else None


def quantized(t: Tensor, lo: float = 0.0, hi: float = 1.0) -> dict[str, Any]:
    """A tensor of values in [lo, hi] as 1 byte each, base64: 1/255 of the range is finer than a picture shows,
    and a 6-layer, 8-head attention of 40 x 40 tokens takes 100 KB instead of a megabyte of JSON numbers."""
    scaled = ((t.detach().float().cpu().clamp(lo, hi) - lo) / (hi - lo) * 255).round().to(torch.uint8)
    return {"shape": list(t.shape), "lo": lo, "hi": hi, "b64": base64.b64encode(scaled.numpy().tobytes()).decode()}


def attention_picture(weights: Tensor) -> dict[str, Any]:
    """Every head's weights [H, T, S] quantized; a long sentence's averaged in blocks down to PICTURE x PICTURE
    (`pooled`: the labels no longer match the cells one to one)."""
    H, T, S = weights.shape
    pooled = T > PICTURE or S > PICTURE
    if pooled:
        weights = torch.nn.functional.adaptive_avg_pool2d(weights.float(), (min(T, PICTURE), min(S, PICTURE)))
        weights = weights / weights.amax(dim=-1, keepdim=True).clamp_min(1e-9)  # each row's strongest = 1
    return {**quantized(weights), "pooled": pooled}


def dequantized(q: dict[str, Any]) -> Tensor:
    """The inverse of `quantized` (to within (hi - lo) / 510), for tests and for code that reads the page."""
    raw = torch.frombuffer(bytearray(base64.b64decode(q["b64"])), dtype=torch.uint8).float()
    return (q["lo"] + raw / 255 * (q["hi"] - q["lo"])).view(q["shape"])


def _check(ours: Tensor, real: Tensor, what: str) -> None:
    """The walk's result equals the module's own output (to float rounding; wider in bf16/fp16)."""
    tol = 1e-3 if ours.dtype == torch.float32 else 5e-2
    if ours.shape != real.shape or not torch.allclose(ours.float(), real.float(), rtol=tol, atol=tol):
        worst = (ours.float() - real.float()).abs().max().item() if ours.shape == real.shape else float("nan")
        raise ExplainMismatch(f"explain: {what} differs from the model's own forward pass (max difference {worst})")


def _shape(t: Tensor) -> list[int]:
    """A shape without the batch dimension (one sentence)."""
    return list(t.shape[1:])


# ---- §3.4-3.5 embeddings ---------------------------------------------------------------------------------------


def embedding_panel(model: Transformer, embedding: nn.Module, tokens: Tensor) -> tuple[Tensor, dict[str, Any]]:
    """x = E[token] * sqrt(d_model) + PE(position): [1, T, D], and its panel (SHOW dims of every token)."""
    e = embedding(tokens)  # [1, T, D]
    scaled = e * model.embed_scale
    pe = model.positions[: tokens.size(1)].to(e.dtype)
    x = model.dropout(scaled + pe)  # dropout is off in eval(): the sum itself
    _check(x, model._embed(embedding, tokens), "the embeddings")
    return x, {"shape": _shape(x), "scale": rounded(model.embed_scale), "embed": rounded(e[0, :, :SHOW]),
               "scaled": rounded(scaled[0, :, :SHOW]), "pe": rounded(pe[:, :SHOW]), "x": rounded(x[0, :, :SHOW])}


def positions_panel(model: Transformer, count: int, layout: str) -> dict[str, Any]:
    """The positional encodings of positions 0..count-1 (at least 50, as the model has them) as a picture (every
    dimension) and a few dimensions as curves: a sine and its cosine at three frequencies (§3.5)."""
    count = min(model.max_positions, max(count, 50))
    pe = model.positions[:count].float()
    D = pe.size(1)
    pairs = sorted({0, D // 16, D // 8})  # i in sin(pos / 10000^(2i/D)): the fastest and two slower waves
    dims = [d for i in pairs for d in ((2 * i, 2 * i + 1) if layout != "halves" else (i, (D + 1) // 2 + i)) if d < D]
    curve_count = min(model.max_positions, max(count, 100))
    curves = model.positions[:curve_count, dims].float().T
    return {"picture": quantized(pe, -1.0, 1.0), "count": count, "d_model": D, "layout": layout,
            "curve_dims": dims, "curves": rounded(curves), "curve_count": curve_count}


# ---- §3.2 attention -------------------------------------------------------------------------------------------


def _attention(attn: MultiHeadAttention, x_in: Tensor, memory: Tensor | None, mask: Tensor | None,
               causal: bool) -> tuple[Tensor, ...]:
    """The sub-layer through its own projections and equation 1; returns q, k, v [1, H, *, Dh], the heads'
    outputs [1, H, T, Dh], the weights [1, H, T, S] and the sub-layer output [1, T, D] (checked)."""
    if attn.cross:
        q = attn._heads(attn.q_proj(x_in), 1)[0]
        k, v = attn.memory_kv(memory)
    else:
        q, k, v = attn._heads(attn.qkv_proj(x_in), 3)
    heads, weights = scaled_dot_product_attention(q, k, v, mask, causal)
    B, H, T, Dh = heads.shape
    out = attn.out_proj(heads.transpose(1, 2).reshape(B, T, H * Dh))  # Concat(head_1..head_H) W^O
    return q, k, v, heads, weights, out  # checked with the whole layer (a check per sub-layer would cost more)


def worked_example(q: Tensor, k: Tensor, v: Tensor, heads: Tensor, weights: Tensor, query: int,
                   head: int = 0) -> dict[str, Any]:
    """Equation 1 for ONE query of one head, with the model's numbers: q.k_j for every key j, divided by sqrt(d_k),
    the softmax over j, and the weighted sum of the values, on SHOW dimensions (its full-width dot products and
    output are the model's)."""
    qv, ks, vs = q[0, head, query].float(), k[0, head].float(), v[0, head].float()
    dot = ks @ qv  # [S]
    d_k = q.size(-1)
    w = weights[0, head, query]
    return {"head": head, "query": query, "d_k": d_k, "q": rounded(qv[:SHOW]), "k": rounded(ks[:, :SHOW]),
            "v": rounded(vs[:, :SHOW]), "dot": rounded(dot), "scaled": rounded(dot / math.sqrt(d_k)),
            "weights": rounded(w), "masked": (w == 0).tolist(), "output": rounded(heads[0, head, query, :SHOW])}


# ---- §3.1 residual + LayerNorm, §3.3 feed-forward -----------------------------------------------------------


def residual_panel(norm: nn.LayerNorm, x: Tensor, sub: Tensor, out: Tensor, row: int) -> dict[str, Any]:
    """x + Sublayer(x) and the LayerNorm around it (post-norm: of the sum; pre-norm: of the sub-layer's input),
    for one token: its mean and standard deviation, gamma and beta, on SHOW dimensions."""
    pre = bool(getattr(norm, "pre_norm", False))
    z = (x if pre else x + sub)[0, row].float()
    return {"pre_norm": pre, "x": rounded(x[0, row, :SHOW]), "sub": rounded(sub[0, row, :SHOW]),
            "sum": rounded((x + sub)[0, row, :SHOW]), "out": rounded(out[0, row, :SHOW]),
            "mean": rounded(z.mean().item()), "std": rounded(math.sqrt(z.var(unbiased=False).item() + norm.eps)),
            "gamma": rounded(norm.weight[:SHOW]), "beta": rounded(norm.bias[:SHOW]),
            "normed": rounded(norm.input(x)[0, row, :SHOW] if pre else out[0, row, :SHOW])}


def _ffn(layer: nn.Module, norm: nn.Module, x: Tensor, row: int) -> tuple[Tensor, dict[str, Any]]:
    """FFN(x) = act(x W1 + b1) W2 + b2 (§3.3, eq. 2) through the layer's own w1, activation and w2, with its
    residual; the new x and the panel."""
    ffn = layer.ffn
    f_in = norm.input(x)
    hidden = ffn.activation(ffn.w1(f_in))  # [1, T, d_ff]
    f = ffn.w2(ffn.dropout(hidden))
    out = norm(x, f)
    panel = {"in": rounded(f_in[0, row, :SHOW]), "hidden": rounded(hidden[0, row, :SHOW]),
             "out": rounded(f[0, row, :SHOW]), "hidden_shape": _shape(hidden), "out_shape": _shape(f),
             "zero_fraction": rounded(hidden[0, row].eq(0).float().mean().item()),
             "w1_shape": list(ffn.w1.weight.T.shape), "w2_shape": list(ffn.w2.weight.T.shape),
             "residual": residual_panel(norm, x, f, out, row)}
    return out, panel


def _sublayer(layer: nn.Module, norm: nn.Module, attn: MultiHeadAttention, x: Tensor, row: int, *,
              memory: Tensor | None = None, mask: Tensor | None = None, causal: bool = False,
              example: bool = False) -> tuple[Tensor, dict[str, Any]]:
    """One attention sub-layer with its residual and LayerNorm: the new x and the panel."""
    q, k, v, heads, weights, h = _attention(attn, norm.input(x), memory, mask, causal)
    out = norm(x, h)
    panel = {"weights": attention_picture(weights[0]), "causal": causal, "cross": attn.cross,
             "shapes": {"x": _shape(x), "q": _shape(q), "k": _shape(k), "v": _shape(v),
                        "scores": _shape(weights), "heads": _shape(heads), "out": _shape(h)},
             "residual": residual_panel(norm, x, h, out, row)}
    if example:
        panel["example"] = worked_example(q, k, v, heads, weights, row)
    return out, panel


# ---- the stacks -----------------------------------------------------------------------------------------------


def encoder_walk(model: Transformer, x: Tensor, mask: Tensor, query: int) -> tuple[Tensor, list[dict[str, Any]]]:
    """Each encoder layer: self-attention (with its worked example), then the FFN; checked layer by layer."""
    panels = []
    for layer in model.encoder_layers:
        y, attention = _sublayer(layer, layer.norm1, layer.self_attn, x, query, mask=mask, example=True)
        y, ffn = _ffn(layer, layer.norm2, y, query)
        _check(y, layer(x, mask)[0], "an encoder layer")
        panels.append({"self_attn": attention, "ffn": ffn})
        x = y
    return model.encoder_norm(x), panels


def decoder_walk(model: Transformer, y: Tensor, memory: Tensor, mask: Tensor,
                 query: int) -> tuple[Tensor, list[dict[str, Any]]]:
    """Each decoder layer: masked self-attention, cross-attention over the encoder output (with its worked
    example), then the FFN; checked layer by layer."""
    panels = []
    for layer in model.decoder_layers:
        z, self_attn = _sublayer(layer, layer.norm1, layer.self_attn, y, query, causal=True)
        z, cross = _sublayer(layer, layer.norm2, layer.cross_attn, z, query, memory=memory, mask=mask, example=True)
        z, ffn = _ffn(layer, layer.norm3, z, query)
        _check(z, layer(y, memory, mask)[0], "a decoder layer")
        panels.append({"self_attn": self_attn, "cross_attn": cross, "ffn": ffn})
        y = z
    return model.decoder_norm(y), panels


def output_panel(logits: Tensor, targets: list[int], pieces: Callable[[list[int]], list[str]], banned: set[int],
                 top_k: int) -> dict[str, Any]:
    """softmax(logits) at each target position: the top-k pieces (never <pad> or <s>: search bans them) and the
    probability of the piece the translation chose."""
    probs = logits[0].float().softmax(-1)  # [T, V]
    ranked = probs.clone()
    ranked[:, sorted(banned)] = -1.0
    top_p, top_i = ranked.topk(min(top_k, probs.size(-1)), dim=-1)
    steps = []
    for t, chosen in enumerate(targets):
        p = probs[t, chosen].item()
        ids = top_i[t].tolist()
        names = pieces([chosen, *ids])
        steps.append({"chosen": names[0], "chosen_id": chosen, "prob": rounded(p),
                      "logprob": rounded(math.log(p) if p > 0 else float("-inf")),
                      "rank": int(ranked[t].gt(ranked[t, chosen]).sum().item()) + 1,
                      "top": [[name, i, rounded(pr)] for name, i, pr in zip(names[1:], ids, top_p[t].tolist())]})
    total = sum(math.log(max(probs[t, c].item(), 1e-45)) for t, c in enumerate(targets))
    return {"shape": _shape(logits), "steps": steps, "logprob": rounded(total)}


@torch.inference_mode()
def walk(model: Transformer, src: Tensor, tgt_in: Tensor, targets: list[int], pieces: Callable[[list[int]], list[str]],
         *, banned: set[int], query: int = 0, top_k: int = 5) -> dict[str, Any]:
    """The whole forward pass of one sentence pair: src [1, S] (ending in EOS) and the teacher-forced decoder
    input tgt_in [1, T] (BOS + the translation) whose next tokens are `targets` (the translation + EOS)."""
    pad_mask = src.eq(model.pad_id)
    mask = ~pad_mask[:, None, None, :]  # [1, 1, 1, S]: True = may be attended to
    x, src_embedding = embedding_panel(model, model.src_embed, src)
    memory, encoder = encoder_walk(model, x, mask, min(query, src.size(1) - 1))
    _check(memory, model.encode(src)[0], "the encoder output")
    y, tgt_embedding = embedding_panel(model, model.tgt_embed, tgt_in)
    final, decoder = decoder_walk(model, y, memory, mask, min(query, tgt_in.size(1) - 1))
    logits = model.output(final)  # [1, T, V]: x E^T, the tied embedding matrix (§3.4); the layers were checked
    return {"src_embedding": src_embedding, "tgt_embedding": tgt_embedding, "encoder": encoder,
            "memory": {"shape": _shape(memory), "rows": rounded(memory[0, :, :SHOW])}, "decoder": decoder,
            "output": output_panel(logits, targets, pieces, banned, top_k)}
