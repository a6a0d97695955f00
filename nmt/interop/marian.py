"""`nmt import`: a Hugging Face Marian model (the ~1,500 OPUS-MT models) -> a self-contained nmt checkpoint.

Reads what `MarianMTModel.save_pretrained` + `MarianTokenizer.save_pretrained` write, without
`transformers`: config.json, model.safetensors (or pytorch_model.bin), source.spm, target.spm,
vocab.json (+ target_vocab.json with separate vocabularies) and, when there, generation_config.json
for the search settings. A hub name is downloaded through `huggingface_hub` first.

Marian is the paper's post-norm Transformer with other choices, each an nmt model key: swish
activation, sines and cosines in two halves, a fixed logits bias, decoding started from <pad>, and
its own vocabulary ids (nmt.tokenizer maps SentencePiece pieces through vocab.json). Anything else
(pre-norm, learned positions, an untied output layer) is refused, naming the key: a model that
imports must translate exactly as it does in `transformers`. A directory `nmt export --to hf` wrote for a
model nmt trained starts decoding from <s> and numbers its pieces as its SentencePiece models do: it comes
back as nmt trained it (no vocabulary mapping). The tensor names are nmt.interop.modelspec's MARIAN table, which
the export writes through.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import sentencepiece as spm
import torch
from torch import Tensor

from nmt.checkpoint import Checkpoint
from nmt.config.experiment import Config, ModelConfig
from nmt.errors import NmtError, first_line
from nmt.interop.modelspec import DECODER_ROLES, ENCODER_ROLES, MARIAN
from nmt.log import console
from nmt.model import Transformer, sinusoidal_positions
from nmt.tokenizer import NMT_IDS, Tokenizer

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
TOKENIZER_FILES = ("source.spm", "target.spm", "vocab.json")
OPTIONAL_FILES = ("target_vocab.json", "generation_config.json", "tokenizer_config.json")
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "swish", "silu": "swish"}
# config.json keys of related models (Bart, FSMT, mBART) that Marian leaves at these values; another value
# is a different architecture, so importing it would translate wrongly
MARIAN_VALUES = {"normalize_before": False, "add_bias_logits": False, "normalize_embedding": False,
                 "add_final_layer_norm": False, "static_position_embeddings": True, "tie_word_embeddings": True}
HUB_NAME = re.compile(r"^[\w.-]+/[\w.-]+$")


def import_model(source: str, output: Path, *, src_lang: str | None = None, tgt_lang: str | None = None) -> Path:
    """The `nmt import` command: read SOURCE (a directory or a hub name), write the checkpoint `output`."""
    directory = resolve(source)
    hf = read_json(directory / "config.json")
    cfg = Config()
    cfg.model = model_config(hf, directory / "config.json")
    tokenizer = read_tokenizer(directory, hf, src_lang, tgt_lang)
    cfg.data.src_lang, cfg.data.tgt_lang = tokenizer.src_lang, tokenizer.tgt_lang
    cfg.decode.beam, cfg.decode.length_penalty = search_settings(directory, hf)
    cfg.decode.length_penalty_type = "average"  # generate's form: logprob / length ** alpha
    weights_file, weights = read_weights(directory)
    check_vocab_fits(weights, hf, tokenizer, directory)
    model = Transformer.from_config(cfg.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size,
                                    pad_id=tokenizer.special_ids.pad, joint_vocab=tokenizer.joint)
    try:
        model.load_state_dict(convert_weights(weights, cfg.model, tokenizer.joint and cfg.model.share_all_embeddings,
                                              weights_file))
    except RuntimeError as e:  # a shape that config.json does not predict
        raise NmtError(f"{weights_file}: the weights do not fit config.json ({first_line(e, 160)})") from None
    Checkpoint.create(model.state_dict(), cfg, tokenizer, (tokenizer.src_vocab_size, tokenizer.tgt_vocab_size),
                      langs=(tokenizer.src_lang, tokenizer.tgt_lang), imported_from=source).save(output)
    m = cfg.model
    console.print(f"imported {source}: Marian {m.encoder_layers}+{m.decoder_layers} layers, d_model {m.d_model}, "
                  f"{m.n_heads} heads, {m.activation}, vocab {tokenizer.src_vocab_size}"
                  + ("" if tokenizer.joint else f"/{tokenizer.tgt_vocab_size}") + f" -> {output}")
    return output


# ---------------------------------------------------------------- where the files are


def resolve(source: str) -> Path:
    """A local directory as it is; a hub name (`org/name`) downloaded through huggingface_hub."""
    path = Path(source)
    if path.is_dir():
        return path
    if path.exists() or not HUB_NAME.match(source):
        raise NmtError(f"{source}: not a directory saved by save_pretrained, nor a Hugging Face hub name "
                       "(like Helsinki-NLP/opus-mt-en-de)")
    return download(source)


def download(name: str) -> Path:
    try:
        import huggingface_hub
    except ImportError:
        raise NmtError("importing from the Hugging Face hub needs huggingface_hub: "
                       "pip install 'nmt[pretrained]'") from None
    try:
        files = set(huggingface_hub.list_repo_files(name))
        weights = next((f for f in WEIGHT_FILES if f in files), WEIGHT_FILES[0])
        wanted = ["config.json", weights, *TOKENIZER_FILES, *OPTIONAL_FILES]
        console.print(f"downloading {name} from the Hugging Face hub ({weights})")
        return Path(huggingface_hub.snapshot_download(name, allow_patterns=wanted))
    except Exception as e:  # offline, unknown repo, gated repo, ...: many exception types
        raise NmtError(f"cannot download {name} from the Hugging Face hub ({type(e).__name__}: {first_line(e, 160)}); "
                       "check the name and the connection, or pass a directory saved by save_pretrained") from None


def read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise NmtError(f"missing {path.name} in {path.parent}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise NmtError(f"{path}: not valid JSON ({first_line(e)})") from None
    if not isinstance(data, dict):
        raise NmtError(f"{path}: expected a JSON object")
    return data


# ---------------------------------------------------------------- config


def model_config(hf: dict[str, Any], path: Path) -> ModelConfig:
    """config.json -> nmt's ModelConfig; a setting nmt's model cannot reproduce is an error naming the key."""
    if hf.get("model_type") != "marian":
        raise NmtError(f"{path}: model_type {hf.get('model_type')!r} is not a Marian model "
                       "(nmt imports MarianMTModel / OPUS-MT checkpoints)")
    for key, value in MARIAN_VALUES.items():
        if key in hf and hf[key] != value:
            raise NmtError(f"{path}: {key}={hf[key]!r} is not supported (nmt's Marian needs {value!r})")
    for enc, dec in (("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim")):
        if hf.get(enc) != hf.get(dec):
            raise NmtError(f"{path}: {enc}={hf.get(enc)} differs from {dec}={hf.get(dec)} "
                           "(nmt's model needs them equal)")
    activation = hf.get("activation_function", "gelu")
    if activation not in ACTIVATIONS:
        raise NmtError(f"{path}: activation_function={activation!r} is not supported ({'|'.join(ACTIVATIONS)})")
    if starts_from_bos(hf) and hf.get("decoder_start_token_id") != hf.get("bos_token_id"):
        raise NmtError(f"{path}: decoder_start_token_id differs from pad_token_id (Marian starts from <pad>)")
    try:
        return ModelConfig(
            d_model=int(hf["d_model"]), n_heads=int(hf["encoder_attention_heads"]), d_ff=int(hf["encoder_ffn_dim"]),
            encoder_layers=int(hf["encoder_layers"]), decoder_layers=int(hf["decoder_layers"]),
            dropout=float(hf.get("dropout", 0.1)), attention_dropout=float(hf.get("attention_dropout", 0.0)),
            activation_dropout=float(hf.get("activation_dropout", 0.0)), pre_norm=False,
            max_positions=int(hf.get("max_position_embeddings", 512)),
            share_all_embeddings=bool(hf.get("share_encoder_decoder_embeddings", True)),
            activation=ACTIVATIONS[activation], position_layout="halves",
            scale_embedding=bool(hf.get("scale_embedding", False)), output_bias=True,
        )
    except KeyError as e:
        raise NmtError(f"{path}: lacks the key {e.args[0]!r}") from None
    except (TypeError, ValueError) as e:
        raise NmtError(f"{path}: a model size is not a number ({first_line(e)})") from None


def search_settings(directory: Path, hf: dict[str, Any]) -> tuple[int, float]:
    """Beam size and length penalty `generate` would use: generation_config.json, else (older exports)
    config.json; generate's defaults (1.0) where neither says, except the beam: 4 rather than greedy."""
    generation = hf
    if (directory / "generation_config.json").is_file():
        generation = read_json(directory / "generation_config.json")
    return int(generation.get("num_beams") or 4), float(generation.get("length_penalty", 1.0))


# ---------------------------------------------------------------- tokenizer


def read_tokenizer(directory: Path, hf: dict[str, Any], src_lang: str | None, tgt_lang: str | None) -> Tokenizer:
    """source.spm / target.spm (SentencePiece) + vocab.json (Marian's ids) [+ target_vocab.json]."""
    for name in TOKENIZER_FILES:
        if not (directory / name).is_file():
            raise NmtError(f"missing {name} in {directory} (save the tokenizer too: tokenizer.save_pretrained)")
    separate = not hf.get("share_encoder_decoder_embeddings", True)
    src_vocab = read_vocab(directory / "vocab.json")
    tgt_vocab = read_vocab(directory / "target_vocab.json") if separate else None
    src_model, tgt_model = (directory / "source.spm").read_bytes(), (directory / "target.spm").read_bytes()
    config = read_json(directory / "tokenizer_config.json") if (directory / "tokenizer_config.json").is_file() else {}
    src_lang = src_lang or config.get("source_lang") or "src"
    tgt_lang = tgt_lang or config.get("target_lang") or "tgt"
    if starts_from_bos(hf):  # what `nmt export --to hf` writes for a model nmt trained
        return own_ids_tokenizer(directory, hf, src_lang, tgt_lang, src_vocab, tgt_vocab)
    try:
        return Tokenizer(src_model, None if tgt_model == src_model else tgt_model, src_lang=src_lang,
                         tgt_lang=tgt_lang, normalize=None, src_vocab=src_vocab, tgt_vocab=tgt_vocab)
    except NmtError as e:
        raise NmtError(f"{directory}: {e}") from None


def starts_from_bos(hf: dict[str, Any]) -> bool:
    return hf.get("decoder_start_token_id", hf.get("pad_token_id")) != hf.get("pad_token_id")


def own_ids_tokenizer(directory: Path, hf: dict[str, Any], src_lang: str, tgt_lang: str, src_vocab: list[str],
                      tgt_vocab: list[str] | None) -> Tokenizer:
    """A model nmt trained, exported with `nmt export --to hf`: decoding starts from <s>, and the vocabularies
    are the SentencePiece models' own pieces in their own order, with nmt's special ids. Imported as nmt trained
    it (no vocabulary mapping); anything else that starts from another token than <pad> is refused."""
    models = [(directory / name).read_bytes() for name in ("source.spm", "target.spm")]
    pieces = []
    for model in models:
        processor = spm.SentencePieceProcessor()
        try:
            processor.LoadFromSerializedProto(model)
        except (RuntimeError, TypeError, OSError):
            pieces.append(None)
            continue
        pieces.append([processor.id_to_piece(i) for i in range(processor.get_piece_size())])
    if (hf.get("decoder_start_token_id") != NMT_IDS.bos or pieces[0] != src_vocab
            or pieces[1] != (tgt_vocab or src_vocab)):
        raise NmtError(f"{directory / 'config.json'}: decoder_start_token_id differs from pad_token_id (Marian "
                       "starts from <pad>)")
    try:
        return Tokenizer(models[0], None if models[1] == models[0] else models[1], src_lang=src_lang,
                         tgt_lang=tgt_lang, normalize=None)
    except NmtError as e:
        raise NmtError(f"{directory}: {e}") from None


def read_vocab(path: Path) -> list[str]:
    """vocab.json ({piece: id}) -> the pieces in id order; the ids must be 0..N-1, each once."""
    if not path.is_file():
        raise NmtError(f"missing {path.name} in {path.parent}")
    vocab = read_json(path)
    pieces: list[str | None] = [None] * len(vocab)
    for piece, i in vocab.items():
        if not isinstance(i, int) or not 0 <= i < len(vocab) or pieces[i] is not None:
            raise NmtError(f"{path}: ids must be 0..{len(vocab) - 1}, each once; {piece!r} has {i!r}")
        pieces[i] = piece
    return pieces  # type: ignore[return-value]


def check_vocab_fits(weights: dict[str, Tensor], hf: dict[str, Any], tokenizer: Tokenizer, directory: Path) -> None:
    """Each vocabulary has as many entries as its embedding matrix has rows, and config.json's special ids
    are its <pad> and </s>."""
    rows = {name.removeprefix("model."): t.shape[0] for name, t in weights.items()
            if name.endswith(("embed_tokens.weight", "shared.weight"))}
    sides = [("vocab.json", ("encoder.embed_tokens.weight", "shared.weight"), tokenizer.src_vocab_size)]
    if not tokenizer.joint:
        sides.append(("target_vocab.json", ("decoder.embed_tokens.weight",), tokenizer.tgt_vocab_size))
    for file, names, size in sides:
        found = [rows[n] for n in names if n in rows]
        if found and found[0] != size:
            raise NmtError(f"{directory / file} has {size} entries but the weights' embedding has {found[0]} rows: "
                           "the vocabulary does not belong to these weights")
    special = tokenizer.special_ids
    for key, value in (("pad_token_id", special.pad), ("eos_token_id", special.eos)):
        if key in hf and hf[key] != value:
            raise NmtError(f"{directory / 'config.json'}: {key}={hf[key]} but the vocabulary has it at {value}")


# ---------------------------------------------------------------- weights


def read_weights(directory: Path) -> tuple[Path, dict[str, Tensor]]:
    path = next((directory / f for f in WEIGHT_FILES if (directory / f).is_file()), None)
    if path is None:
        raise NmtError(f"missing model weights in {directory} ({' or '.join(WEIGHT_FILES)})")
    try:
        if path.suffix == ".safetensors":
            try:
                from safetensors.torch import load_file
            except ImportError:
                raise NmtError(f"reading {path.name} needs safetensors: pip install 'nmt[pretrained]'") from None
            weights = load_file(str(path))
        else:
            weights = torch.load(path, map_location="cpu", weights_only=True)
    except NmtError:
        raise
    except Exception as e:  # safetensors and torch raise many types for damaged files
        raise NmtError(f"{path}: corrupt or unreadable weights ({type(e).__name__}: {first_line(e, 120)})") from None
    if not isinstance(weights, dict) or not all(isinstance(t, Tensor) for t in weights.values()):
        raise NmtError(f"{path}: not a file of named tensors")
    return path, weights


class _Source:
    """The checkpoint's tensors by name (the "model." prefix of MarianMTModel dropped); remembers which were
    read, so that a tensor nmt has no place for is an error, not silently ignored."""

    def __init__(self, weights: dict[str, Tensor], path: Path):
        self.tensors = {name.removeprefix("model."): t for name, t in weights.items()}
        self.path, self.used = path, set()

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def take(self, name: str) -> Tensor:
        if name not in self.tensors:
            raise NmtError(f"{self.path}: no tensor '{name}' (not a Marian checkpoint, or a damaged one)")
        self.used.add(name)
        return self.tensors[name].float()

    def linear(self, name: str) -> tuple[Tensor, Tensor]:
        return self.take(f"{name}.weight"), self.take(f"{name}.bias")

    def one_of(self, names: tuple[str, ...]) -> Tensor:
        """One matrix stored under several names (tied weights; `save_pretrained` keeps any one of them): all
        the names present must hold the same values, or the model is not tied the way nmt's is."""
        present = [n for n in names if n in self.tensors]
        if not present:
            raise NmtError(f"{self.path}: no tensor '{names[0]}' (not a Marian checkpoint, or a damaged one)")
        first = self.take(present[0])
        for other in present[1:]:
            if not torch.equal(self.take(other), first):
                raise NmtError(f"{self.path}: '{other}' differs from '{present[0]}' "
                               "(untied embeddings are not supported)")
        return first


# Marian's module name -> nmt's, from the one table nmt.interop.export.hf writes through (nmt.interop.modelspec)
ENCODER = {MARIAN[role]: ours for role, ours in ENCODER_ROLES.items()}
DECODER = {MARIAN[role]: ours for role, ours in DECODER_ROLES.items()}
SELF_QKV = [MARIAN[f"self_attn.{p}"] for p in "qkv"]
CROSS_KV = [MARIAN[f"cross_attn.{p}"] for p in "kv"]


def convert_weights(weights: dict[str, Tensor], cfg: ModelConfig, joint: bool, path: Path) -> dict[str, Tensor]:
    """Marian's tensor names -> nmt's. Separate Q, K, V projections become nmt's fused ones (Q|K|V for
    self-attention, K|V for cross-attention); positions must be the sinusoids nmt computes."""
    src = _Source(weights, path)
    out: dict[str, Tensor] = {}
    if joint:
        shared = src.one_of(("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight",
                             "lm_head.weight"))
        out["src_embed.weight"] = out["tgt_embed.weight"] = shared
    else:
        out["src_embed.weight"] = src.take("encoder.embed_tokens.weight")
        out["tgt_embed.weight"] = src.one_of(("decoder.embed_tokens.weight", "lm_head.weight"))
        src.used.add("shared.weight")  # the encoder's copy, when separate vocabularies keep one
    out["output.weight"] = out["tgt_embed.weight"]  # tied (§3.4)
    out["output.bias"] = src.take("final_logits_bias").reshape(-1) if "final_logits_bias" in src else \
        torch.zeros(out["tgt_embed.weight"].shape[0])
    for side, n, table in (("encoder", cfg.encoder_layers, ENCODER), ("decoder", cfg.decoder_layers, DECODER)):
        for i in range(n):
            hf, ours = f"{side}.layers.{i}", f"{side}_layers.{i}"
            for name, to in table.items():
                out[f"{ours}.{to}.weight"], out[f"{ours}.{to}.bias"] = src.linear(f"{hf}.{name}")
            _fuse(out, f"{ours}.self_attn.qkv_proj", [src.linear(f"{hf}.{name}") for name in SELF_QKV])
            if side == "decoder":
                _fuse(out, f"{ours}.cross_attn.kv_proj", [src.linear(f"{hf}.{name}") for name in CROSS_KV])
    _check_positions(src, cfg)
    unused = sorted(set(src.tensors) - src.used)
    if unused:
        raise NmtError(f"{path}: tensor '{unused[0]}' has no place in nmt's Marian model "
                       f"({len(unused)} such); this variant is not supported")
    return out


def _fuse(out: dict[str, Tensor], name: str, parts: list[tuple[Tensor, Tensor]]) -> None:
    out[f"{name}.weight"] = torch.cat([w for w, _ in parts])
    out[f"{name}.bias"] = torch.cat([b for _, b in parts])


def _check_positions(src: _Source, cfg: ModelConfig) -> None:
    """Older exports store the sinusoid tables: they must be Marian's (else the positions were learned)."""
    for name in ("encoder.embed_positions.weight", "decoder.embed_positions.weight"):
        if name in src:
            table = src.take(name)
            expected = sinusoidal_positions(table.shape[0], cfg.d_model, "halves")
            if table.shape != expected.shape or not torch.allclose(table, expected, atol=1e-4):
                raise NmtError(f"{src.path}: '{name}' is not Marian's sinusoid table (learned positions are not "
                               "supported)")
