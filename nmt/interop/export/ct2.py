"""`nmt export --to ct2`: the model as a CTranslate2 model directory, built with CTranslate2's own model-spec API
(`ctranslate2.specs.TransformerSpec`), never by writing its binary format by hand.

What nmt's model is maps one to one onto CTranslate2's Transformer: post- or pre-norm (pre-norm with the final
LayerNorm of each stack), the positional table written out explicitly (so interleaved and halves sinusoids are
both exact), embeddings x sqrt(d_model) or not, relu / gelu (erf) / swish, the output projection with its bias,
tied or untied embeddings and joint or separate vocabularies (CTranslate2 stores what is shared once). The
source gets EOS appended (`add_source_eos`), decoding starts from nmt's BOS (an imported Marian model's <pad>),
and PAD and BOS can never be generated, as in nmt's search (a -1e4 logit bias, which needs no search option).

Search: CTranslate2 normalizes a hypothesis's log-probability by length ** alpha, nmt's `average` form; nmt's
default `gnmt` form ((5 + L) / 6) ** alpha has no CTranslate2 equivalent. `search_options` gives the
`translate_batch` arguments that reproduce `nmt translate` (see README_TEXT).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from nmt.config.experiment import DecodeConfig
from nmt.errors import NmtError, first_line
from nmt.interop.modelspec import Attention, Layer, Linear, ModelDescription, Norm

QUANTIZATIONS = ("none", "int8", "int8_float32", "int16", "float16", "bfloat16")
LAYER_NORM_EPSILON = 1e-5  # torch.nn.LayerNorm's, which nmt's model uses
BANNED_LOGIT = -1e4  # added to the PAD and BOS logits: never generated (representable in float16 too)
# nmt's beam search goes on while an unfinished hypothesis could still beat the finished ones; CTranslate2 stops
# at beam_size * patience finished ones. Patience 2 lets it search on like nmt (patience 1, fairseq's rule, ends
# some searches before nmt finds its best: 1-5 of 100 lines differed on the test models, none with 2).
PATIENCE = 2.0
ONE_SPM, SOURCE_SPM, TARGET_SPM = "sentencepiece.model", "source.spm", "target.spm"


def _ct2() -> Any:
    try:
        import ctranslate2
    except ImportError:
        raise NmtError("--to ct2 needs the ctranslate2 package: pip install ctranslate2") from None
    return ctranslate2


def write(model: ModelDescription, path: Path, quantization: str | None = None) -> None:
    """The exported directory at `path` (which must not exist): the CTranslate2 model, its tokenizer
    model(s) and a README on how to run it as `nmt translate` does."""
    convert(model, path, quantization)
    spm_files = write_tokenizer(model, path)
    (path / "README.md").write_text(readme(model, spm_files, quantization), encoding="utf-8")


def convert(model: ModelDescription, directory: Path, quantization: str | None = None) -> None:
    """Only the CTranslate2 model (model.bin, config.json, vocabularies) into `directory` (created), weights
    quantized as `quantization` (None or "none": float32). Reused by the Argos exporter."""
    compute = _quantization(quantization)
    _ct2()
    spec = build_spec(model)
    try:
        spec.validate()
        spec.optimize(quantization=compute)
    except (ValueError, TypeError) as e:
        raise NmtError(f"CTranslate2 rejected the model: {first_line(e)}") from None
    directory.mkdir(parents=True)
    spec.save(str(directory))


def _quantization(quantization: str | None) -> str | None:
    name = quantization or "none"
    if name not in QUANTIZATIONS:
        raise NmtError(f"--quantization {name}: unknown (choose one of {', '.join(QUANTIZATIONS)})")
    return None if name == "none" else name


# ---- the model spec


def build_spec(model: ModelDescription) -> Any:
    """The filled-in `ctranslate2.specs.TransformerSpec` of `model` (not yet validated nor optimized)."""
    specs = _ct2().specs
    cfg = model.config
    activation = _activation(cfg.activation)
    encoder = specs.TransformerEncoderSpec(cfg.encoder_layers, cfg.n_heads, pre_norm=cfg.pre_norm,
                                           activation=activation)
    decoder = specs.TransformerDecoderSpec(cfg.decoder_layers, cfg.n_heads, pre_norm=cfg.pre_norm,
                                           activation=activation)
    _fill_stack(encoder, model, model.src_embed, model.encoder, model.encoder_norm)
    _fill_stack(decoder, model, model.tgt_embed, model.decoder, model.decoder_norm)
    decoder.embeddings.weight = _np(model.tgt_embed)
    _linear(decoder.projection, (model.output[0], _output_bias(model)))
    spec = specs.TransformerSpec(encoder, decoder)
    _vocabularies(spec, model)
    return spec


def _activation(name: str) -> Any:
    kinds = _ct2().specs.Activation
    table = {"relu": kinds.RELU, "gelu": kinds.GELU, "swish": kinds.SWISH}  # gelu: erf form, as torch's F.gelu
    if name not in table:
        raise NmtError(f"activation '{name}' has no CTranslate2 equivalent (supported: {', '.join(table)})")
    return table[name]


def _fill_stack(stack: Any, model: ModelDescription, embed: Tensor, layers: list[Layer], final: Norm | None) -> None:
    """Embeddings, positions, layers and (pre-norm) the final LayerNorm of one stack."""
    embeddings = stack.embeddings[0] if isinstance(stack.embeddings, list) else stack.embeddings
    embeddings.weight = _np(embed)
    stack.scale_embeddings = bool(model.config.scale_embedding)
    stack.position_encodings.encodings = _np(model.positions)
    if final is not None:
        _norm(stack.layer_norm, final)
    for layer_spec, layer in zip(stack.layer, layers, strict=True):
        _attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_norm, fused_qkv=True)
        if layer.cross_attn is not None and layer.cross_attn_norm is not None:
            _attention(layer_spec.attention, layer.cross_attn, layer.cross_attn_norm, fused_qkv=False)
        _norm(layer_spec.ffn.layer_norm, layer.ffn_norm)
        _linear(layer_spec.ffn.linear_0, layer.ffn_in)
        _linear(layer_spec.ffn.linear_1, layer.ffn_out)


def _attention(spec: Any, attn: Attention, norm: Norm, fused_qkv: bool) -> None:
    """Self-attention: linear[0] = Q|K|V; cross-attention: linear[0] = Q, linear[1] = K|V; the last: output."""
    groups = [[attn.q, attn.k, attn.v]] if fused_qkv else [[attn.q], [attn.k, attn.v]]
    for linear_spec, parts in zip(spec.linear, groups):
        _linear(linear_spec, (torch.cat([w for w, _ in parts]), torch.cat([b for _, b in parts])))
    _linear(spec.linear[-1], attn.out)
    _norm(spec.layer_norm, norm)


def _linear(spec: Any, linear: Linear) -> None:
    spec.weight, spec.bias = _np(linear[0]), _np(linear[1])


def _norm(spec: Any, norm: Norm) -> None:
    spec.gamma, spec.beta = _np(norm[0]), _np(norm[1])


def _np(tensor: Tensor) -> np.ndarray:
    return tensor.detach().float().contiguous().numpy().copy()


def _output_bias(model: ModelDescription) -> Tensor:
    """The output bias with PAD and BOS made impossible, as nmt's search masks them at every step."""
    bias = model.output[1].clone().float()
    bias[[model.special.pad, model.special.bos]] += BANNED_LOGIT
    return bias


def _vocabularies(spec: Any, model: ModelDescription) -> None:
    """Vocabularies in id order and the special tokens by name (CTranslate2 finds tokens by their string)."""
    for side, vocab in (("source", model.src_vocab), ("target", model.tgt_vocab)):
        if len(set(vocab)) != len(vocab):
            raise NmtError(f"the {side} vocabulary has duplicate entries: CTranslate2 names tokens by their text")
    ids, tgt = model.special, model.tgt_vocab
    if model.src_vocab[ids.eos] != tgt[ids.eos]:
        raise NmtError(f"source id {ids.eos} is '{model.src_vocab[ids.eos]}', not the target's EOS "
                       f"'{tgt[ids.eos]}': CTranslate2 appends EOS to the source by name")
    spec.register_source_vocabulary(list(model.src_vocab))
    spec.register_target_vocabulary(list(tgt))
    config = spec.config
    config.unk_token, config.eos_token, config.bos_token = tgt[ids.unk], tgt[ids.eos], tgt[ids.bos]
    config.decoder_start_token = tgt[ids.bos]  # nmt's BOS; an imported Marian model's <pad>
    config.add_source_bos, config.add_source_eos = False, True  # nmt feeds source ids + EOS
    config.layer_norm_epsilon = LAYER_NORM_EPSILON


# ---- search settings


def search_options(decode: DecodeConfig) -> dict[str, Any]:
    """`Translator.translate_batch` keyword arguments that search as `nmt translate` does with `decode`, except
    max_decoding_length (per sentence: `max_decoding_length`). A `gnmt` length penalty has no CTranslate2 form:
    this gives the `average` form with the same alpha (nmt's decode.length_penalty_type=average)."""
    return {"beam_size": decode.beam, "num_hypotheses": decode.nbest, "length_penalty": decode.length_penalty,
            "patience": PATIENCE, "min_decoding_length": decode.min_len, "return_end_token": True,
            "max_input_length": 0}


def max_decoding_length(decode: DecodeConfig, source_tokens: int, max_positions: int) -> int:
    """CTranslate2's max_decoding_length for a source of `source_tokens` pieces (EOS not counted): nmt's limit,
    floor(a * (n + 1) + b) tokens capped so that positions exist. nmt then forces EOS; CTranslate2 stops there
    without one (`output_tokens` gives the same tokens either way)."""
    limit = math.floor(decode.max_len_a * (source_tokens + 1) + decode.max_len_b)
    return max(1, min(limit, max_positions - 1))  # CTranslate2 refuses 0 (where nmt's output is empty)


def output_tokens(tokens: list[str], eos: str) -> list[str]:
    """A hypothesis's tokens up to (not including) EOS, which `return_end_token=True` keeps."""
    return tokens[: tokens.index(eos)] if eos in tokens else list(tokens)


# ---- the files beside the model


def write_tokenizer(model: ModelDescription, directory: Path) -> list[str]:
    """The SentencePiece model(s) into `directory`: one `sentencepiece.model` when both sides share one, else
    `source.spm` and `target.spm`. Returns the file names."""
    state = model.tokenizer.to_state()
    if state["tgt_model"] is None:
        (directory / ONE_SPM).write_bytes(state["src_model"])
        return [ONE_SPM]
    (directory / SOURCE_SPM).write_bytes(state["src_model"])
    (directory / TARGET_SPM).write_bytes(state["tgt_model"])
    return [SOURCE_SPM, TARGET_SPM]


def _penalty_note(decode: Any) -> str:
    """What the README says of the length penalty: CTranslate2 has nmt's `average` form, not `gnmt`."""
    gnmt = decode.length_penalty_type == "gnmt"
    return (
        f"This model's own setting is nmt's `gnmt` length penalty ((5 + L) / 6) ** {decode.length_penalty}, which "
        "CTranslate2 cannot express: its `length_penalty` divides by L ** alpha (L = tokens, EOS included with "
        "`return_end_token=True`), nmt's `average` form. The call below reproduces "
        f"`nmt translate --set decode.length_penalty_type=average` exactly; with `gnmt` a few beam-search "
        "results may differ (greedy search, `beam_size=1`, is unaffected)."
        if gnmt else
        f"This model's length penalty is nmt's `average` form, logprob / L ** {decode.length_penalty}, which is "
        "CTranslate2's (L = tokens, EOS included with `return_end_token=True`).")


def readme(model: ModelDescription, spm_files: list[str], quantization: str | None) -> str:
    """How to run the exported model from Python as `nmt translate` does."""
    decode, cfg = model.decode, model.config
    src_spm, tgt_spm = spm_files[0], spm_files[-1]
    compute = "int8" if (quantization or "none").startswith("int8") else "default"
    prefix = f"[{decode.prefix!r}] + " if decode.prefix else ""
    form = model.tokenizer.normalize
    text = f'unicodedata.normalize("{form}", line.strip())' if form else "line.strip()"
    cut = min(decode.max_input_tokens, cfg.max_positions - 1)  # source pieces nmt keeps (EOS not counted)
    penalty_note = _penalty_note(decode)
    return f"""# {model.langs[0]}->{model.langs[1]} translation model for CTranslate2

Exported by `nmt export --to ct2` from `{model.source.name}`{f" (imported from {model.imported_from})"
                                                                if model.imported_from else ""}:
{cfg.encoder_layers}+{cfg.decoder_layers} layers, d_model {cfg.d_model}, {cfg.n_heads} heads,
{"pre" if cfg.pre_norm else "post"}-norm, {cfg.activation}, weights {quantization or "float32"}.
Files: `model.bin`, `config.json`, the vocabularies, and the SentencePiece model(s) {", ".join(spm_files)}.

```python
import unicodedata
import ctranslate2
import sentencepiece as spm

translator = ctranslate2.Translator("THIS_DIRECTORY", device="cpu", compute_type="{compute}")
src = spm.SentencePieceProcessor(model_file="THIS_DIRECTORY/{src_spm}")
tgt = spm.SentencePieceProcessor(model_file="THIS_DIRECTORY/{tgt_spm}")

lines = ["Hello world."]
# as nmt does: Unicode normalization ({form or "none"}), SentencePiece pieces, at most {cut} of them
pieces = [({prefix}src.encode({text}, out_type=str))[:{cut}] for line in lines]
results = translator.translate_batch(
    pieces, beam_size={decode.beam}, length_penalty={decode.length_penalty}, patience={PATIENCE:g},
    min_decoding_length={decode.min_len}, return_end_token=True, max_input_length=0,
    max_decoding_length=max(int({decode.max_len_a} * (len(p) + 1) + {decode.max_len_b}) for p in pieces))
out = [r.hypotheses[0] for r in results]
out = [h[: h.index("{model.tgt_vocab[model.special.eos]}")] if "{model.tgt_vocab[model.special.eos]}" in h else h
       for h in out]
print([tgt.decode(h) for h in out])
```

The source gets `{model.tgt_vocab[model.special.eos]}` appended by CTranslate2 itself (`add_source_eos` in
config.json); decoding starts from `{model.tgt_vocab[model.special.bos]}`, and PAD and BOS are never generated.
{penalty_note}

Settings that reproduce `nmt translate`: `beam_size` = nmt's decode.beam (1 = greedy), `length_penalty` = its
alpha, `patience={PATIENCE:g}`, `min_decoding_length` = its decode.min_len (CTranslate2's default 1 forbids an empty
translation, nmt's default 0 does not), `return_end_token=True` (so that the length penalty counts EOS, as nmt's
does; strip it as above).
nmt limits each sentence to floor(a * (pieces + 1) + b) tokens (decode.max_len_a = {decode.max_len_a},
decode.max_len_b = {decode.max_len_b}), then ends it with EOS; CTranslate2's `max_decoding_length` is one value
per call (batch sentences of equal length to apply it exactly) and stops there without EOS: greedy search gives
the same tokens, but beam search ranks such hypotheses a little differently. nmt's beam search goes on while an
unfinished hypothesis could still beat its finished ones, CTranslate2 until `beam_size * patience` have finished:
with patience {PATIENCE:g} both found the same translations of trained models; a barely trained model, whose
hypotheses run to the length limit, can differ in a few sentences.
"""
