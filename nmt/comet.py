"""COMET (Rei et al. 2020, 2022), the neural metric: a score for each translation from its source, the translation
and its reference, computed offline from a COMET model directory as Unbabel publishes it (`hparams.yaml` and
`checkpoints/model.ckpt`, e.g. Unbabel/wmt22-comet-da) and the XLM-RoBERTa encoder its hparams name.

unbabel-comet cannot share nmt's environment (it pins numpy<2, transformers<5, huggingface-hub<1), so this module
computes COMET's inference itself, on transformers' XLMRobertaModel and the `tokenizers` library, following
unbabel-comet 2.2.7 (comet/models/base.py, regression/*.py, modules/layerwise_attention.py and feedforward.py,
models/pooling_utils.py, encoders/xlmr.py). tests/core/test_comet.py checks that its segment scores equal
unbabel-comet's own on tiny models that unbabel-comet made (tests/fixtures/make_comet_model.py). For one segment:

1. the source, the translation and the reference are each tokenized alone by the encoder's tokenizer.json (its own
   pipeline, as transformers 4's fast tokenizer runs it), cut at the encoder's positions - 4 pieces;
2. the encoder gives every layer's states (the embeddings' too); `layer: mix` mixes them with one weight per layer,
   made by softmax or sparsemax (`layer_transformation`), times gamma, each layer first normalized over the
   sentence's pieces when `layer_norm` is set;
3. pooling makes one vector of the pieces (`avg`: their mean, <s> and </s> included, padding not);
4. the features [mt, ref, mt*ref, |mt-ref|, mt*src, |mt-src|] (a referenceless model, COMET-QE:
   [mt, src, mt*src, |mt-src|]) go through the feed-forward estimator (dropout off);
5. the corpus score is the mean of the segment scores.
The weights all come from model.ckpt: of the encoder only its config.json and tokenizer.json are read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml
from torch import nn

from nmt.errors import NmtError, first_line
from nmt.log import progress_bar

HPARAMS = "hparams.yaml"
CHECKPOINT = "checkpoints/model.ckpt"
REGRESSION = "regression_metric"  # wmt22-comet-da, wmt20-comet-da: source, translation, reference
REFERENCELESS = "referenceless_regression_metric"  # COMET-QE (wmt20-comet-qe-da): no reference
# the defaults of these classes' constructors, which COMET's load_from_checkpoint falls back on
DEFAULTS: dict[str, Any] = {"encoder_model": "XLM-RoBERTa", "pretrained_model": "xlm-roberta-large", "pool": "avg",
                            "layer": "mix", "layer_transformation": "softmax", "layer_norm": True,
                            "activations": "Tanh", "final_activation": None}
HIDDEN_SIZES = {REGRESSION: [3072, 1024], REFERENCELESS: [2048, 1024]}
POOLS = ("avg", "max", "cls", "default")
BATCH = 16  # segments per forward pass, as comet-score's default
CHUNK = 2048  # segments whose embeddings are held at once: the memory stays bounded for any corpus
HUB_OWNER = "FacebookAI"  # the hub's owner of xlm-roberta-large, which hparams name without it


@dataclass(frozen=True)
class ModelDir:
    """A COMET model directory read without its weights: enough to check it before an hour of other work."""

    path: Path
    hparams: dict[str, Any]  # hparams.yaml's
    encoder: Path  # the encoder's folder on this machine (config.json, tokenizer.json)

    @property
    def uses_references(self) -> bool:
        return self.hparams.get("class_identifier") == REGRESSION


def open_dir(path: str | Path) -> ModelDir:
    """The COMET model dir `path` checked: its files, its model class and encoder kind, its encoder found offline."""
    path = Path(path)
    what = "a COMET model dir holds hparams.yaml and checkpoints/model.ckpt, as Unbabel publishes them"
    if not path.is_dir():
        raise NmtError(f"COMET model {path}: no such directory ({what})")
    for name in (HPARAMS, CHECKPOINT):
        if not (path / name).is_file():
            raise NmtError(f"COMET model {path}: no {name} in it ({what})")
    try:
        hparams = yaml.safe_load((path / HPARAMS).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise NmtError(f"COMET model {path}: {HPARAMS} is not readable YAML ({first_line(e)})") from None
    if not isinstance(hparams, dict):
        raise NmtError(f"COMET model {path}: {HPARAMS} is not a mapping of hyper-parameters")
    settings(hparams, None, path)
    needs_transformers()
    encoder = str(hparams.get("pretrained_model", DEFAULTS["pretrained_model"]))
    return ModelDir(path, hparams, find_encoder(path, encoder))


def settings(yaml_hparams: dict[str, Any], saved: dict[str, Any] | None, path: Path) -> dict[str, Any]:
    """The hyper-parameters the model is built with, as COMET's load_from_checkpoint takes them: the class from
    hparams.yaml, the rest saved in the checkpoint (hparams.yaml's where it saved none) over the class' defaults;
    `layer_transformation: sparsemax_patch` in hparams.yaml (Unbabel's fix of COMET issue #244) means softmax."""
    kind = yaml_hparams.get("class_identifier")
    if kind not in HIDDEN_SIZES:
        raise NmtError(f"COMET model {path}: its class {kind!r} is not one nmt computes ({REGRESSION}, as "
                       f"wmt22-comet-da, or {REFERENCELESS}, as wmt20-comet-qe-da); XCOMET, CometKiwi "
                       "(unified_metric) and ranking models need unbabel-comet")
    hp = {**DEFAULTS, "hidden_sizes": HIDDEN_SIZES[kind], **(saved if saved is not None else yaml_hparams),
          "class_identifier": kind}
    if yaml_hparams.get("layer_transformation") == "sparsemax_patch":
        hp["layer_transformation"] = "softmax"
    if hp["encoder_model"] != "XLM-RoBERTa":
        raise NmtError(f"COMET model {path}: its encoder_model {hp['encoder_model']!r} is not one nmt computes "
                       "(XLM-RoBERTa only)")
    if hp["pool"] not in POOLS:
        raise NmtError(f"COMET model {path}: pool {hp['pool']!r} is not one of {', '.join(POOLS)}")
    return hp


def needs_transformers() -> None:
    try:
        import tokenizers  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        raise NmtError("COMET needs transformers: pip install 'nmt[comet]'") from None


def find_encoder(path: Path, name: str) -> Path:
    """The encoder's folder: `name` as written (a path), a folder of that name in the COMET dir, or the Hugging Face
    cache's copy of the hub model `name` (never the network). It needs config.json and tokenizer.json only."""
    folders = list(dict.fromkeys([Path(name).expanduser(), path / name, path / Path(name).name]))
    for folder in folders:
        if (folder / "config.json").is_file():
            if not (folder / "tokenizer.json").is_file():
                raise NmtError(f"COMET model {path}: its encoder {folder} has no tokenizer.json (copy it from the "
                               f"hub model {name})")
            return folder
    cached = cached_encoder(name)
    if cached is not None:
        return cached
    looked = ", ".join(str(f) for f in folders)
    raise NmtError(f"COMET model {path}: its encoder {name!r} (pretrained_model) is not on this machine: no folder "
                   f"{looked} and not in the Hugging Face cache; copy the hub model {name}'s config.json and "
                   f"tokenizer.json into {path / Path(name).name}/")


def cached_encoder(name: str) -> Path | None:
    """The Hugging Face cache's snapshot of hub model `name` (or FacebookAI/name) with both files, else None."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    for repo in dict.fromkeys([name, f"{HUB_OWNER}/{name}" if "/" not in name else name]):
        try:
            files = [try_to_load_from_cache(repo, file) for file in ("config.json", "tokenizer.json")]
        except ValueError:  # not a valid repository name
            continue
        if all(isinstance(f, str) for f in files) and Path(files[0]).parent == Path(files[1]).parent:
            return Path(files[0]).parent
    return None


def read_checkpoint(file: Path) -> dict[str, Any]:
    """model.ckpt, a PyTorch Lightning checkpoint, read with weights_only=True (tensors and plain values only, as
    unbabel-comet itself reads it on torch >= 2.6), memory-mapped where its format allows."""
    try:
        try:
            ckpt = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError:  # the legacy (non-zip) format cannot be memory-mapped
            ckpt = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as e:  # unpickling, truncation, not a checkpoint at all
        raise NmtError(f"COMET checkpoint {file} cannot be read with weights_only=True: {first_line(e)}") from None
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("state_dict"), dict):
        raise NmtError(f"COMET checkpoint {file} has no state_dict: not a COMET (PyTorch Lightning) checkpoint")
    return ckpt


def sparsemax(x: torch.Tensor) -> torch.Tensor:
    """Sparsemax over a vector (Martins & Astudillo 2016), as entmax computes it: the Euclidean projection onto the
    probability simplex, which can give a layer weight exactly 0."""
    x = x - x.max()
    z, _ = torch.sort(x, descending=True)
    cumsum = z.cumsum(0) - 1
    ranks = torch.arange(1, len(z) + 1, dtype=x.dtype, device=x.device)
    support = (ranks * z > cumsum).sum()
    tau = cumsum[support - 1] / support.to(x.dtype)
    return torch.clamp(x - tau, min=0)


def masked_layer_norm(tensor: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """A layer's states normalized over the sentence's pieces and features together (padding left out), as COMET's
    layer-wise attention does with `layer_norm`."""
    mask_float = mask.float()
    broadcast = mask_float.unsqueeze(-1)
    batch, _, dim = tensor.size()
    masked = tensor * broadcast
    count = mask_float.sum(1) * dim
    mean = (masked.view(batch, -1).sum(1) / count).view(batch, 1, 1)
    variance = (((masked - mean) * broadcast) ** 2).view(batch, -1).sum(1) / count
    return (tensor - mean) / torch.sqrt(variance + 1e-12).view(batch, 1, 1)


def activation(name: str, path: Path) -> nn.Module:
    """torch.nn's activation of that name title-cased ('tanh' -> Tanh), COMET's rule."""
    if not hasattr(nn, name.title()):
        raise NmtError(f"COMET model {path}: {name!r} is not an activation torch.nn has")
    return getattr(nn, name.title())()


def estimator(hp: dict[str, Any], features: int, path: Path) -> nn.Sequential:
    """COMET's FeedForward as its `ff` (the same layer indices, so its state dict loads as saved): Linear,
    activation, Dropout per hidden size, then Linear to one score and the final activation if any."""
    layers: list[nn.Module] = []
    for size in hp["hidden_sizes"]:
        layers += [nn.Linear(features, size), activation(hp["activations"], path), nn.Dropout(0.0)]
        features = size
    layers.append(nn.Linear(features, 1))
    if hp["final_activation"] is not None:
        layers.append(activation(hp["final_activation"], path))
    return nn.Sequential(*layers)


def weights_under(state: dict[str, Any], prefix: str) -> dict[str, torch.Tensor]:
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


class Comet(nn.Module):
    """A COMET model ready to score (eval mode: no dropout), on `device`."""

    def __init__(self, path: str | Path, device: str | torch.device = "cpu"):
        super().__init__()
        from tokenizers import Tokenizer
        from transformers import XLMRobertaConfig, XLMRobertaModel

        found = open_dir(path)
        self.path, ckpt = found.path, read_checkpoint(found.path / CHECKPOINT)
        saved = ckpt.get("hyper_parameters")
        self.hparams = settings(found.hparams, saved if isinstance(saved, dict) else None, self.path)
        encoder = found.encoder if self.hparams["pretrained_model"] == found.hparams.get("pretrained_model") \
            else find_encoder(self.path, str(self.hparams["pretrained_model"]))
        config = XLMRobertaConfig.from_json_file(str(encoder / "config.json"))
        self.encoder = XLMRobertaModel(config, add_pooling_layer=False)
        self.tokenizer = Tokenizer.from_file(str(encoder / "tokenizer.json"))
        pad = self.tokenizer.token_to_id("<pad>")
        if pad is None:
            raise NmtError(f"COMET model {self.path}: its tokenizer {encoder / 'tokenizer.json'} has no <pad>")
        self.pad_id = pad
        # COMET's max_positions is the config's minus 2, and it cuts the text at max_positions - 2 pieces
        self.tokenizer.enable_truncation(max_length=config.max_position_embeddings - 4)
        self.tokenizer.enable_padding(pad_id=pad, pad_token="<pad>")
        self.references = found.uses_references
        hidden = config.hidden_size
        self.estimator = estimator(self.hparams, hidden * (6 if self.references else 4), self.path)
        self.load_weights(ckpt["state_dict"], config.num_hidden_layers + 1)
        self.eval()
        self.to(device)
        self.device = torch.device(device)

    def load_weights(self, state: dict[str, Any], layers: int) -> None:
        """The encoder's, the layer mix's and the estimator's weights from the checkpoint; a weight the model needs
        and the checkpoint lacks is an error (COMET itself would leave it random)."""
        missing, _ = self.encoder.load_state_dict(weights_under(state, "encoder.model."), strict=False)
        mix = self.hparams["layer"] == "mix"
        mixing = [f"layerwise_attention.scalar_parameters.{i}" for i in range(layers)] + ["layerwise_attention.gamma"]
        missing += [k for k in mixing if mix and k not in state]
        if missing:
            raise NmtError(f"COMET checkpoint {self.path / CHECKPOINT} lacks {len(missing)} of the weights its "
                           f"hparams need (first: {missing[0]})")
        if not mix and not (isinstance(self.hparams["layer"], int) and 0 <= self.hparams["layer"] < layers):
            raise NmtError(f"COMET model {self.path}: layer {self.hparams['layer']!r} is not 'mix' or 0..{layers - 1}")
        self.layer_weights = torch.cat([state[k] for k in mixing[:-1]]).float() if mix else None
        self.gamma = state[mixing[-1]].float() if mix else None
        try:
            self.estimator.load_state_dict(weights_under(state, "estimator.ff."))
        except RuntimeError as e:
            raise NmtError(f"COMET checkpoint {self.path / CHECKPOINT}: its estimator does not match its hparams "
                           f"({first_line(e)})") from None

    def signature(self) -> str:
        """What the score depends on, as sacreBLEU's signatures say it."""
        from nmt import __version__

        return (f"model:{self.path.resolve().name}|encoder:{self.hparams['pretrained_model']}|"
                f"ref:{'yes' if self.references else 'no'}|nmt:{__version__}")

    def mix(self, layers: Sequence[torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
        """COMET's LayerwiseAttention at inference: gamma * sum_k w_k * layer_k (each layer normalized first with
        layer_norm), w = softmax or sparsemax of the layer weights."""
        assert self.layer_weights is not None and self.gamma is not None
        weights = self.layer_weights.to(mask.device)
        if self.hparams["layer_transformation"] == "sparsemax":
            weights = sparsemax(weights)
        else:
            weights = torch.softmax(weights, dim=0)
        if self.hparams["layer_norm"]:
            layers = [masked_layer_norm(t, mask) for t in layers]
        return self.gamma.to(mask.device) * sum(w * t for w, t in zip(torch.split(weights, 1), layers))

    def embed(self, texts: list[str]) -> torch.Tensor:
        """One sentence embedding per text (a batch: padded to its longest)."""
        encodings = self.tokenizer.encode_batch(texts)
        ids = torch.tensor([e.ids for e in encodings], device=self.device)
        mask = torch.tensor([e.attention_mask for e in encodings], device=self.device)
        out = self.encoder(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        hp = self.hparams
        states = self.mix(out.hidden_states, mask) if hp["layer"] == "mix" else out.hidden_states[hp["layer"]]
        if hp["pool"] == "default":  # the encoder's own sentence embedding: its last layer's <s>
            return out.last_hidden_state[:, 0, :]
        if hp["pool"] == "cls":
            return states[:, 0, :]
        padding = ids.eq(self.pad_id).unsqueeze(-1)
        if hp["pool"] == "max":
            return states.float().masked_fill(padding, float("-inf")).type_as(states).max(dim=1)[0]
        summed = states.float().masked_fill(padding, 0.0).type_as(states).sum(1)
        return summed / mask.unsqueeze(-1).expand(states.size()).float().sum(1)

    def estimate(self, src: torch.Tensor, mt: torch.Tensor, ref: torch.Tensor | None) -> torch.Tensor:
        """The segment scores from the sentence embeddings."""
        if self.references:
            assert ref is not None
            features = (mt, ref, mt * ref, torch.abs(mt - ref), mt * src, torch.abs(mt - src))
        else:
            features = (mt, src, mt * src, torch.abs(mt - src))
        return self.estimator(torch.cat(features, dim=1)).view(-1)

    @torch.inference_mode()
    def score_systems(self, sources: Sequence[str], systems: dict[str, Sequence[str]],
                      refs: Sequence[str] | None = None, *, batch_size: int = BATCH, progress: bool = False
                      ) -> dict[str, list[float]]:
        """Each system's segment scores. Every distinct text of a chunk of segments (a source, a reference, each
        system's translation) is embedded once, in batches of similar lengths; the scores do not depend on it."""
        if self.references and refs is None:
            raise NmtError(f"COMET model {self.path} needs references")
        for name, lines in {"references": refs or sources, **systems}.items():
            if len(lines) != len(sources):
                raise NmtError(f"COMET: {len(sources):,} sources but {len(lines):,} lines in {name or 'translations'}")
        chunks = [range(k, min(k + CHUNK, len(sources))) for k in range(0, len(sources), CHUNK)]
        texts = [list(dict.fromkeys(self.chunk_texts(sources, systems, refs, part))) for part in chunks]
        out: dict[str, list[float]] = {name: [] for name in systems}
        with progress_bar("sentences", enabled=progress) as bar:
            task = bar.add_task("COMET", total=sum(len(t) for t in texts), note="")
            for part, unique in zip(chunks, texts):
                vectors = self.embed_all(unique, batch_size, lambda n: bar.advance(task, n))
                src = torch.stack([vectors[sources[i]] for i in part])
                ref = torch.stack([vectors[refs[i]] for i in part]) if self.references and refs else None
                for name, lines in systems.items():
                    mt = torch.stack([vectors[lines[i]] for i in part])
                    out[name] += self.estimate(src, mt, ref).tolist()
        return out

    def chunk_texts(self, sources: Sequence[str], systems: dict[str, Sequence[str]], refs: Sequence[str] | None,
                    part: range) -> list[str]:
        sets = [sources, *([refs] if self.references and refs else []), *systems.values()]
        return [lines[i] for lines in sets for i in part]

    def embed_all(self, texts: list[str], batch_size: int, advance: Any) -> dict[str, torch.Tensor]:
        """Each text's sentence embedding, computed in batches of texts sorted by length (less padding)."""
        ordered = sorted(texts, key=len)
        vectors: dict[str, torch.Tensor] = {}
        for k in range(0, len(ordered), batch_size):
            batch = ordered[k:k + batch_size]
            vectors.update(zip(batch, self.embed(batch)))
            advance(len(batch))
        return vectors


def corpus_score(path: str | Path, sources: Sequence[str], hyps: Sequence[str], refs: Sequence[str] | None, *,
                 batch_size: int = BATCH, device: str = "cpu", progress: bool = False) -> dict[str, Any]:
    """`nmt score`'s COMET entry: the mean of the segment scores (unbabel-comet's system score), the segment
    scores, the signature, and the line `nmt score` prints."""
    from nmt.device import pick_device

    model = Comet(path, pick_device(device, "--comet-device"))
    segments = model.score_systems(sources, {"translations": hyps}, refs, batch_size=batch_size,
                                   progress=progress)["translations"]
    system = sum(segments) / len(segments) if segments else 0.0
    return {"name": "COMET", "score": system, "signature": model.signature(), "text": f"COMET = {system:.4f}",
            "segments": segments}
