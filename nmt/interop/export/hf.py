"""`nmt export --to hf`: a Hugging Face directory that `AutoModelForSeq2SeqLM.from_pretrained` (MarianMTModel for a
post-norm model, PegasusForConditionalGeneration for a pre-norm one, a shipped pre-norm MarianMTModel for a
pre-norm one with two embedding matrices) and `MarianTokenizer.from_pretrained` load and `generate()` translates
with as `nmt translate` does.

Written without `transformers` (it needs safetensors only): config.json (MarianConfig or PegasusConfig),
model.safetensors (tensor names from nmt.interop.modelspec's MARIAN table, the one `nmt import` reads through;
Pegasus' layers have the same names), source.spm / target.spm, vocab.json (+ target_vocab.json for separate
vocabularies), tokenizer_config.json, generation_config.json and a model card (nmt.interop.export.modelcard).
How nmt's choices become Marian's:

- positions: Marian adds sines then cosines in two halves; the paper's interleaved layout is the same table
  with its columns in another order. A fixed permutation P of the model dimension (x' = x[P]) applied to
  every weight that reads or writes it (embedding columns, input columns of Q/K/V/FFN-in, output rows and
  biases of the output projections and FFN-out, LayerNorm gamma/beta) is exact: attention heads split the
  projections' outputs, which P leaves alone, and LayerNorm's mean and variance do not depend on the order.
- decoding starts from nmt's <s> (decoder_start_token_id = bos; Marian's own models start from <pad>), and
  bad_words_ids forbid <pad> and <s> as nmt's search does; </s> ends it.
- vocabularies keep nmt's ids (the SentencePiece model's own, or an imported model's vocab.json);
  MarianTokenizer appends </s> to the source as nmt does.
- search: generate() has only the average length penalty (log-prob / L ** alpha), not nmt's default GNMT
  form; the card says so, and `nmt translate --set decode.length_penalty_type=average` gives generate's.
- pre-norm: Marian is post-norm, but Pegasus is nmt's pre-norm model exactly: x + sublayer(LayerNorm(x)) in
  every layer, a final LayerNorm after each stack, embeddings x sqrt(d_model) plus Marian's sine/cosine halves
  (the same class, copied), no LayerNorm on the embeddings (mBART has one), positions from 0 (M2M100's start
  after the padding id and use fairseq's frequencies), tied output with a logits bias. The positional tables are
  written into model.safetensors (Pegasus loads them rather than computing them, and would warn of "newly
  initialized" weights without them). Pegasus has one embedding matrix for source, target and output, so a
  pre-norm model with two (separate vocabularies, or an untied source embedding) is a MarianMTModel made pre-norm
  by a modeling file shipped in the directory (nmt.interop.export.hf_prenorm_modeling, loaded with
  trust_remote_code=True; its model_type is not Marian's, so transformers refuses it without that flag).

Anything else the chosen architecture cannot express is refused in one line. `--push REPO` uploads the finished
directory (`after`, called by nmt.interop.export once the directory is in place).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from nmt.errors import NmtError, first_line
from nmt.interop.export.modelcard import model_card
from nmt.interop.modelspec import MARIAN, Layer, ModelDescription
from nmt.log import console
from nmt.model import sinusoidal_positions

ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "swish"}  # nmt's name -> transformers' ACT2FN name
SPECIAL_PIECES = {"pad": "<pad>", "unk": "<unk>", "eos": "</s>"}  # what MarianTokenizer looks the ids up by
MAX_LENGTH = 512  # generate's max_length (OPUS-MT's), at most the model's positions
# the transformers class (config.json's `architectures`) for a post-norm and a pre-norm model
CLASSES = {"marian": "MarianMTModel", "pegasus": "PegasusForConditionalGeneration",
           "nmt_prenorm_marian": "NmtPreNormMTModel"}
REMOTE_CODE = "modeling_nmt_prenorm"  # the shipped modeling file's module name in the exported directory
# where the permutation goes for each role: the input columns, or the output rows (and bias)
OUTPUT_ROLES = ("self_attn.out", "cross_attn.out", "ffn.out")


def write(model: ModelDescription, path: Path, *, push: str | None = None, quantization: str | None = None,
          **options: Any) -> None:
    """The directory `path` (created here) for MarianMTModel; a one-line error for what Marian cannot express."""
    check(model, quantization, options)
    if push is not None:
        hub_api(push)  # before anything is written: huggingface_hub and a token are there
    try:
        from safetensors.torch import save_file
    except ImportError:
        raise NmtError("--to hf needs safetensors: pip install 'nmt[pretrained]'") from None
    path.mkdir(parents=True)
    save_file(weights(model), str(path / "model.safetensors"), metadata={"format": "pt"})
    dump(path / "config.json", config(model))
    generation = generation_config(model)
    dump(path / "generation_config.json", generation)
    write_tokenizer(model, path)
    if architecture(model) == "nmt_prenorm_marian":
        shutil.copyfile(Path(__file__).with_name("hf_prenorm_modeling.py"), path / f"{REMOTE_CODE}.py")
    (path / "README.md").write_text(model_card(model, generation, CLASSES[architecture(model)]), encoding="utf-8")


def after(path: Path, *, push: str | None = None, **_: Any) -> None:
    """Once the directory is in place (nmt.interop.export calls this): upload it with --push."""
    if push is not None:
        upload(path, push)


# ---------------------------------------------------------------- what Marian and Pegasus can express


def architecture(model: ModelDescription) -> str:
    """config.json's model_type: Marian for the paper's post-norm layers, Pegasus for pre-norm ones with one
    embedding matrix, the shipped pre-norm Marian for the other pre-norm ones."""
    if not model.config.pre_norm:
        return "marian"
    return "pegasus" if shared_embeddings(model) else "nmt_prenorm_marian"



def check(model: ModelDescription, quantization: str | None, options: dict[str, Any]) -> None:
    cfg, target = model.config, CLASSES[architecture(model)]
    if options:
        raise NmtError(f"--{next(iter(options)).replace('_', '-')} is not an option of --to hf")
    if quantization not in (None, "none"):
        raise NmtError(f"--quantization {quantization}: --to hf writes float32 weights (quantize with --to ct2, or "
                       "after loading in transformers)")
    if cfg.activation not in ACTIVATIONS:
        raise NmtError(f"{model.source}: model.activation={cfg.activation} has no {target} equivalent")
    if cfg.position_layout not in ("interleaved", "halves"):
        raise NmtError(f"{model.source}: model.position_layout={cfg.position_layout} is not sinusoidal: "
                       f"{target} cannot express it")
    if not model.tied_output:
        raise NmtError(f"{model.source}: an output layer untied from the target embedding is not supported by "
                       "--to hf (nmt import refuses tie_word_embeddings=false); export it with --to ct2")
    if not cfg.pre_norm and (model.decoder_norm is not None or model.encoder_norm is not None):
        raise NmtError(f"{model.source}: final LayerNorms of the stacks cannot be expressed in MarianConfig; "
                       "export it with --to ct2")
    special = model.special
    for side, vocab in (("source", model.src_vocab), ("target", model.tgt_vocab)):
        for role, piece in SPECIAL_PIECES.items():
            i = getattr(special, role)
            if not 0 <= i < len(vocab) or vocab[i] != piece:
                found = repr(vocab[i]) if 0 <= i < len(vocab) else "nothing"
                raise NmtError(f"{model.source}: the {side} vocabulary has {found} at the {role} id {i}, where "
                               f"MarianTokenizer needs {piece!r}")


def shared_embeddings(model: ModelDescription) -> bool:
    """One embedding matrix for encoder, decoder and output (MarianConfig share_encoder_decoder_embeddings)."""
    return model.joint and model.config.share_all_embeddings


# ---------------------------------------------------------------- weights


def permutation(model: ModelDescription) -> Tensor:
    """P with Marian's positions == nmt's positions[:, P] (the identity for a model already in halves)."""
    d = model.config.d_model
    if model.config.position_layout == "halves":
        order = torch.arange(d)
    else:  # interleaved: sin at even columns, cos at odd ones -> all sines, then all cosines
        order = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])
    marian = sinusoidal_positions(model.positions.shape[0], d, "halves")
    if not torch.allclose(model.positions[:, order], marian, atol=1e-6):
        raise NmtError(f"{model.source}: the positional table is not a permutation of Marian's sinusoids")
    return order


def layer_weights(layer: Layer, prefix: str, p: Tensor) -> dict[str, Tensor]:
    out = {}
    for role, (w, b) in layer.roles().items():
        if role.endswith("norm"):
            w, b = w[p], b[p]
        elif role in OUTPUT_ROLES:
            w, b = w[p, :], b[p]
        else:  # Q, K, V, FFN-in: they read the model dimension
            w = w[:, p]
        out[f"{prefix}.{MARIAN[role]}.weight"], out[f"{prefix}.{MARIAN[role]}.bias"] = w, b
    return out


def weights(model: ModelDescription) -> dict[str, Tensor]:
    """The state dict of CLASSES[architecture(model)] (tied matrices once: from_pretrained ties the rest)."""
    p, kind = permutation(model), architecture(model)
    out: dict[str, Tensor] = final_norms(model, p) if model.config.pre_norm else {}
    if kind == "pegasus":
        out.update(pegasus_positions(model, p))
    if shared_embeddings(model):
        out["model.shared.weight"] = model.tgt_embed[:, p]
    else:
        out["model.encoder.embed_tokens.weight"] = model.src_embed[:, p]
        out["model.decoder.embed_tokens.weight"] = model.tgt_embed[:, p]
    out["final_logits_bias"] = model.output[1].reshape(1, -1)
    for side, layers in (("encoder", model.encoder), ("decoder", model.decoder)):
        for i, layer in enumerate(layers):
            out.update(layer_weights(layer, f"model.{side}.layers.{i}", p))
    return {name: t.float().contiguous().clone() for name, t in out.items()}


def final_norms(model: ModelDescription, p: Tensor) -> dict[str, Tensor]:
    """The final LayerNorm of each pre-norm stack, named as Pegasus (and the shipped pre-norm Marian) name it."""
    assert model.encoder_norm is not None and model.decoder_norm is not None  # pre-norm: describe() reads them
    out = {}
    for side, (gamma, beta) in (("encoder", model.encoder_norm), ("decoder", model.decoder_norm)):
        out[f"model.{side}.layer_norm.weight"], out[f"model.{side}.layer_norm.bias"] = gamma[p], beta[p]
    return out


def pegasus_positions(model: ModelDescription, p: Tensor) -> dict[str, Tensor]:
    """Pegasus' positional tables: Marian's halves, nmt's table with the model dimension permuted like every
    weight (Marian computes its own and ignores missing ones)."""
    return {f"model.{side}.embed_positions.weight": model.positions[:, p] for side in ("encoder", "decoder")}


# ---------------------------------------------------------------- configs


def config(model: ModelDescription) -> dict[str, Any]:
    """config.json: MarianConfig's keys, or PegasusConfig's (the same less the two vocabularies' keys)."""
    cfg, special, kind = model.config, model.special, architecture(model)
    vocabularies = {} if kind == "pegasus" else {"decoder_vocab_size": len(model.tgt_vocab),
                                                  "share_encoder_decoder_embeddings": shared_embeddings(model)}
    if kind == "nmt_prenorm_marian":  # the shipped classes, for trust_remote_code
        vocabularies["auto_map"] = {"AutoConfig": f"{REMOTE_CODE}.NmtPreNormConfig",
                                    "AutoModelForSeq2SeqLM": f"{REMOTE_CODE}.{CLASSES[kind]}"}
    return {
        "architectures": [CLASSES[kind]], "model_type": kind, "vocab_size": len(model.src_vocab),
        **vocabularies, "d_model": cfg.d_model, "encoder_layers": cfg.encoder_layers,
        "decoder_layers": cfg.decoder_layers, "encoder_attention_heads": cfg.n_heads,
        "decoder_attention_heads": cfg.n_heads, "encoder_ffn_dim": cfg.d_ff, "decoder_ffn_dim": cfg.d_ff,
        "max_position_embeddings": cfg.max_positions, "activation_function": ACTIVATIONS[cfg.activation],
        "scale_embedding": cfg.scale_embedding, "dropout": cfg.dropout, "attention_dropout": cfg.attention_dropout,
        "activation_dropout": cfg.activation_dropout, "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0,
        "init_std": 0.02, "is_encoder_decoder": True, "use_cache": True, "tie_word_embeddings": True,
        "pad_token_id": special.pad, "eos_token_id": special.eos, "forced_eos_token_id": special.eos,
        "bos_token_id": None if special.bos == special.pad else special.bos,
        "decoder_start_token_id": special.bos, "dtype": "float32",
    }


def generation_config(model: ModelDescription) -> dict[str, Any]:
    """generation_config.json: nmt's search as generate() runs it (see the module docstring)."""
    special, decode = model.special, model.decode
    forbidden = [[special.pad]] + ([[special.bos]] if special.bos != special.pad else [])
    return {
        "bad_words_ids": forbidden, "decoder_start_token_id": special.bos, "eos_token_id": special.eos,
        "forced_eos_token_id": special.eos, "pad_token_id": special.pad,
        "bos_token_id": None if special.bos == special.pad else special.bos,
        "max_length": min(MAX_LENGTH, model.config.max_positions), "num_beams": decode.beam,
        "length_penalty": decode.length_penalty, "early_stopping": False,
    }


def write_tokenizer(model: ModelDescription, path: Path) -> None:
    """source.spm, target.spm, vocab.json [+ target_vocab.json], tokenizer_config.json."""
    state = model.tokenizer.to_state()
    (path / "source.spm").write_bytes(state["src_model"])
    (path / "target.spm").write_bytes(state["tgt_model"] or state["src_model"])
    separate = not shared_embeddings(model)
    dump(path / "vocab.json", vocab_json(model.src_vocab, "source"))
    if separate:
        dump(path / "target_vocab.json", vocab_json(model.tgt_vocab, "target"))
    special = model.special
    settings: dict[str, Any] = {
        "tokenizer_class": "MarianTokenizer", "source_lang": model.langs[0], "target_lang": model.langs[1],
        "separate_vocabs": separate, "model_max_length": min(MAX_LENGTH, model.config.max_positions),
        "unk_token": "<unk>", "eos_token": "</s>", "pad_token": "<pad>", "sp_model_kwargs": {}}
    if special.bos != special.pad:  # nmt's <s>: special, so that decode(skip_special_tokens=True) drops it
        settings["bos_token"] = model.tgt_vocab[special.bos]
    dump(path / "tokenizer_config.json", settings)


def vocab_json(vocab: list[str], side: str) -> dict[str, int]:
    ids = {piece: i for i, piece in enumerate(vocab)}
    if len(ids) != len(vocab):
        raise NmtError(f"the {side} vocabulary has a piece twice: vocab.json cannot hold it")
    return ids


def dump(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


# ---------------------------------------------------------------- the hub


def hub_api(repo: str) -> Any:
    """huggingface_hub's HfApi, once it is known to be installed and to have a token (one-line errors)."""
    try:
        import huggingface_hub
    except ImportError:
        raise NmtError("--push needs huggingface_hub: pip install 'nmt[pretrained]'") from None
    if not huggingface_hub.get_token():
        raise NmtError(f"--push {repo}: no Hugging Face token (log in with `hf auth login`, or set HF_TOKEN)")
    return huggingface_hub.HfApi()


def upload(path: Path, repo: str) -> None:
    api = hub_api(repo)
    try:
        api.create_repo(repo, exist_ok=True)
        api.upload_folder(folder_path=str(path), repo_id=repo, commit_message="nmt export --to hf")
    except Exception as e:  # offline, bad token, no rights, ...: many exception types
        raise NmtError(f"exported {path}, but uploading it to {repo} on the Hugging Face hub failed "
                       f"({type(e).__name__}: {first_line(e, 160)}); check the connection and the token, then run "
                       f"`hf upload {repo} {path}`") from None
    console.print(f"uploaded {path} to https://huggingface.co/{repo}")
