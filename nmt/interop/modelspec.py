"""One description of a trained nmt model for the engines it is exported to — and the Marian names that
`nmt import` reads: weights by role (Q, K, V, output projection, feed-forward, norms; nmt's fused Q|K|V and K|V
split apart), norm placement, the positional table, vocabularies in id order, special ids, search settings.

Each exporter (nmt/interop/export/ct2.py, argos.py, hf.py) reads this and nothing else of the checkpoint, so what a
model is lives in one place; `MARIAN` is the one table between these roles and Hugging Face Marian's tensor
names, used both ways (nmt.interop.marian imports through it, nmt.interop.export.hf writes through it).
Core, not a command's: commands share it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from torch import Tensor

from nmt.checkpoint import Checkpoint
from nmt.config.experiment import DecodeConfig, ModelConfig
from nmt.errors import NmtError
from nmt.model import sinusoidal_positions
from nmt.tokenizer import SpecialIds, Tokenizer

Linear = tuple[Tensor, Tensor]  # (weight [out, in], bias [out]), as nn.Linear stores them
Norm = tuple[Tensor, Tensor]  # LayerNorm (gamma, beta)

# role -> the nmt module that holds it (Q, K, V are row blocks of the fused projections)
ENCODER_ROLES = {"self_attn.out": "self_attn.out_proj", "self_attn_norm": "norm1", "ffn.in": "ffn.w1",
                 "ffn.out": "ffn.w2", "ffn_norm": "norm2"}
DECODER_ROLES = {"self_attn.out": "self_attn.out_proj", "self_attn_norm": "norm1", "cross_attn.q": "cross_attn.q_proj",
                 "cross_attn.out": "cross_attn.out_proj", "cross_attn_norm": "norm2", "ffn.in": "ffn.w1",
                 "ffn.out": "ffn.w2", "ffn_norm": "norm3"}
# role -> Hugging Face Marian's module name inside `model.{encoder,decoder}.layers.N`
MARIAN = {"self_attn.q": "self_attn.q_proj", "self_attn.k": "self_attn.k_proj", "self_attn.v": "self_attn.v_proj",
          "self_attn.out": "self_attn.out_proj", "self_attn_norm": "self_attn_layer_norm",
          "cross_attn.q": "encoder_attn.q_proj", "cross_attn.k": "encoder_attn.k_proj",
          "cross_attn.v": "encoder_attn.v_proj", "cross_attn.out": "encoder_attn.out_proj",
          "cross_attn_norm": "encoder_attn_layer_norm", "ffn.in": "fc1", "ffn.out": "fc2",
          "ffn_norm": "final_layer_norm"}


@dataclass
class Attention:
    q: Linear
    k: Linear
    v: Linear
    out: Linear


@dataclass
class Layer:
    """An encoder layer (cross_attn None) or a decoder layer. Post-norm: x = norm(x + sublayer(x)); pre-norm:
    x = x + sublayer(norm(x)) (`ModelConfig.pre_norm`)."""

    self_attn: Attention
    self_attn_norm: Norm
    ffn_in: Linear
    ffn_out: Linear
    ffn_norm: Norm
    cross_attn: Attention | None = None
    cross_attn_norm: Norm | None = None

    def roles(self) -> dict[str, Tensor | tuple[Tensor, Tensor]]:
        """role -> (weight, bias), the role names of ENCODER_ROLES / DECODER_ROLES / MARIAN."""
        out: dict[str, tuple[Tensor, Tensor]] = {"self_attn_norm": self.self_attn_norm, "ffn.in": self.ffn_in,
                                                 "ffn.out": self.ffn_out, "ffn_norm": self.ffn_norm}
        for name, attn in (("self_attn", self.self_attn), ("cross_attn", self.cross_attn)):
            if attn is not None:
                out.update({f"{name}.{p}": getattr(attn, p) for p in ("q", "k", "v", "out")})
        if self.cross_attn_norm is not None:
            out["cross_attn_norm"] = self.cross_attn_norm
        return out  # type: ignore[return-value]


@dataclass
class ModelDescription:
    """What any engine needs to run an nmt model exactly as `nmt translate` does."""

    source: Path  # the checkpoint
    config: ModelConfig  # d_model, heads, layers, pre_norm, activation, position_layout, scale_embedding, ...
    src_embed: Tensor  # [V_src, D]
    tgt_embed: Tensor  # [V_tgt, D]
    output: Linear  # [V_tgt, D] (the tied target embedding unless untied), bias [V_tgt] (zeros without one)
    encoder: list[Layer]
    decoder: list[Layer]
    encoder_norm: Norm | None  # pre-norm: the final LayerNorm of each stack
    decoder_norm: Norm | None
    positions: Tensor  # [max_positions, D]: what is added to the (scaled) embeddings at each position
    tokenizer: Tokenizer
    src_vocab: list[str]  # entries in id order
    tgt_vocab: list[str]
    special: SpecialIds
    langs: tuple[str, str]
    decode: DecodeConfig
    imported_from: str | None

    @property
    def joint(self) -> bool:
        return self.tokenizer.joint

    @property
    def has_output_bias(self) -> bool:
        return bool(self.output[1].abs().max() > 0)

    @property
    def tied_output(self) -> bool:
        return self.output[0].data_ptr() == self.tgt_embed.data_ptr() or bool((self.output[0] == self.tgt_embed).all())


def describe(ck: Checkpoint) -> ModelDescription:
    """The checkpoint `ck` as roles (a one-line error if its weights are not an nmt Transformer's)."""
    weights = {k: v.float() for k, v in ck.weights.items()}
    cfg, tokenizer = ck.model_config, ck.tokenizer()
    ck.check_model_shapes()  # before the positional table below is made at the config's size
    where = ck.where

    def take(name: str) -> Tensor:
        if name not in weights:
            raise NmtError(f"{where}: no tensor '{name}' (not an nmt Transformer checkpoint, or a damaged one)")
        return weights[name]

    def linear(name: str) -> Linear:
        return take(f"{name}.weight"), take(f"{name}.bias")

    def rows(name: str, parts: int) -> list[Linear]:
        w, b = linear(name)
        return list(zip(w.chunk(parts, dim=0), b.chunk(parts, dim=0)))

    def layer(prefix: str, cross: bool) -> Layer:
        table = DECODER_ROLES if cross else ENCODER_ROLES
        q, k, v = rows(f"{prefix}.self_attn.qkv_proj", 3)
        found = Layer(self_attn=Attention(q, k, v, linear(f"{prefix}.{table['self_attn.out']}")),
                      self_attn_norm=linear(f"{prefix}.{table['self_attn_norm']}"),
                      ffn_in=linear(f"{prefix}.{table['ffn.in']}"), ffn_out=linear(f"{prefix}.{table['ffn.out']}"),
                      ffn_norm=linear(f"{prefix}.{table['ffn_norm']}"))
        if cross:
            ck_, cv = rows(f"{prefix}.cross_attn.kv_proj", 2)
            found.cross_attn = Attention(linear(f"{prefix}.{table['cross_attn.q']}"), ck_, cv,
                                         linear(f"{prefix}.{table['cross_attn.out']}"))
            found.cross_attn_norm = linear(f"{prefix}.{table['cross_attn_norm']}")
        return found

    tgt_embed = take("tgt_embed.weight")
    output_bias = weights.get("output.bias")
    if output_bias is None:
        output_bias = tgt_embed.new_zeros(tgt_embed.shape[0])
    return ModelDescription(
        source=Path(ck.path) if ck.path else Path(where), config=cfg, src_embed=take("src_embed.weight"),
        tgt_embed=tgt_embed, output=(weights.get("output.weight", tgt_embed), output_bias),
        encoder=[layer(f"encoder_layers.{i}", False) for i in range(cfg.encoder_layers)],
        decoder=[layer(f"decoder_layers.{i}", True) for i in range(cfg.decoder_layers)],
        encoder_norm=linear("encoder_norm") if cfg.pre_norm else None,
        decoder_norm=linear("decoder_norm") if cfg.pre_norm else None,
        positions=sinusoidal_positions(cfg.max_positions, cfg.d_model, cfg.position_layout),
        tokenizer=tokenizer, src_vocab=vocabulary(tokenizer, "src"), tgt_vocab=vocabulary(tokenizer, "tgt"),
        special=tokenizer.special_ids, langs=ck.langs or (tokenizer.src_lang, tokenizer.tgt_lang),
        decode=ck.decode_config(), imported_from=ck.imported_from)


def vocabulary(tokenizer: Tokenizer, side: str) -> list[str]:
    """One side's entries in id order: the imported vocabulary, else the SentencePiece model's pieces."""
    size = tokenizer.src_vocab_size if side == "src" else tokenizer.tgt_vocab_size
    pieces = tokenizer.src_id_pieces if side == "src" else tokenizer.tgt_pieces
    return pieces(list(range(size)))
