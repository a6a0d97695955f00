"""The checkpoint: its one owner. The file format (self-contained, written atomically, loaded with clear
errors, averaged as in the paper) and `Checkpoint`, the only code that knows its keys. Which checkpoints a
run keeps, and where, is nmt.rundir's business.

A checkpoint holds everything `nmt translate` needs (weights, config, tokenizer model bytes) and,
for training checkpoints, everything an exact resume needs (optimizer, scheduler, scaler, RNG
states, sampler position, counters).
"""

from __future__ import annotations

import codecs
import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from nmt.config.experiment import Config, DecodeConfig, ModelConfig, apply_dict, config_from_dict
from nmt.errors import CheckpointError, NmtError, first_line
from nmt.io import atomic_write
from nmt.model import Transformer
from nmt.tokenizer import Tokenizer

# The tokenizer models in a checkpoint are bytes, which torch.save pickles as _codecs.encode(str, "latin1"):
# torch.load(weights_only=True) allows that by itself from torch 2.5 on, torch 2.4 needs it named.
torch.serialization.add_safe_globals([codecs.encode])

FORMAT = "nmt-checkpoint"
# what a model computes rather than loads (its positional table: max_positions x d_model floats) may take at most
# this; the paper's base model takes 2 MiB, so more is a damaged or hand-edited config, not a model
MAX_COMPUTED_BYTES = 2**30
VERSION = 2  # 2: the output projection is a module, `output.weight` (the tied embedding) and `output.bias`


class Checkpoint(dict):
    """What a checkpoint file holds, one accessor per fact. It is the mapping the file stores (so it can be
    indexed like one); nmt's modules read it through the accessors, which check what they return and
    name the file in their one-line errors."""

    path: Path | None = None  # where it was loaded from

    @classmethod
    def create(cls, weights: dict[str, Any], config: Config, tokenizer: Tokenizer, vocab_sizes: Sequence[int], *,
               langs: Sequence[str], data_fingerprint: str | None = None,
               imported_from: str | None = None) -> Checkpoint:
        """A weights-only checkpoint of a model trained (or imported) with `config` and `tokenizer`."""
        state = cls(model=weights, config=config.to_dict(), tokenizer=tokenizer.to_state(),
                    vocab={"src": int(vocab_sizes[0]), "tgt": int(vocab_sizes[1])}, langs=list(langs))
        if data_fingerprint is not None:
            state["data_fingerprint"] = data_fingerprint
        if imported_from is not None:
            state["imported_from"] = imported_from
        return state

    def with_training(self, train_state: dict[str, Any]) -> Checkpoint:
        """This checkpoint with the state an exact resume needs (nmt.train.state.training_state)."""
        return Checkpoint(self, train_state=train_state)

    def save(self, path: str | Path) -> None:
        save(self, path)

    @property
    def where(self) -> str:
        return str(self.path) if self.path is not None else "checkpoint"

    # ---- what it is and where it came from
    @property
    def kind(self) -> str:
        """training: resumable; averaged: `nmt average` output; imported: `nmt import` output; weights: weights
        only (best.pt)."""
        if "train_state" in self:
            return "training"
        if self.get("averaged_from"):
            return "averaged"
        return "imported" if self.get("imported_from") else "weights"

    @property
    def averaged_from(self) -> list[str] | None:
        return [str(p) for p in self.get("averaged_from") or []] or None

    @property
    def imported_from(self) -> str | None:
        return self.get("imported_from")

    @property
    def data_fingerprint(self) -> str | None:
        return self.get("data_fingerprint")

    @property
    def langs(self) -> tuple[str, str] | None:
        """(source, target) language codes, None where an old checkpoint did not record them."""
        langs = self.get("langs")
        return (str(langs[0]), str(langs[1])) if langs else None

    # ---- the model
    @property
    def weights(self) -> dict[str, Any]:
        if not isinstance(self["model"], dict):
            raise CheckpointError(f"{self.where}: checkpoint weights are not a state dict")
        return self["model"]

    @property
    def saved_config(self) -> dict[str, Any]:
        """The resolved config of the run, as saved (a mapping)."""
        if not isinstance(self["config"], dict):
            raise CheckpointError(f"{self.where}: the checkpoint's config is not a mapping")
        return self["config"]

    @property
    def config(self) -> Config:
        try:
            return config_from_dict(self.saved_config)
        except NmtError as e:
            raise CheckpointError(f"{self.where}: {e}") from None

    @property
    def model_config(self) -> ModelConfig:
        return self.config.model

    @property
    def vocab_sizes(self) -> tuple[int, int]:
        """(source, target) vocabulary sizes."""
        vocab = self["vocab"]
        if not (isinstance(vocab, dict) and all(isinstance(vocab.get(side), int) for side in ("src", "tgt"))):
            raise CheckpointError(f"{self.where}: checkpoint vocabulary sizes are missing or corrupt")
        return vocab["src"], vocab["tgt"]

    def tokenizer(self) -> Tokenizer:
        try:
            return Tokenizer.from_state(self["tokenizer"])
        except NmtError as e:
            raise CheckpointError(f"{self.where}: {e}") from None

    def build_model(self, tokenizer: Tokenizer | None = None) -> Transformer:
        """The model with these weights, on CPU in float32 (nmt.precision.prepare puts it to work)."""
        tokenizer = tokenizer or self.tokenizer()
        self.check_model_shapes()
        model = Transformer.from_config(self.model_config, *self.vocab_sizes, pad_id=tokenizer.special_ids.pad,
                                        joint_vocab=tokenizer.joint)
        try:
            model.load_state_dict(self.weights)
        except RuntimeError as e:
            raise CheckpointError(f"checkpoint {self.where}: its weights do not fit its model config "
                                  f"({first_line(e)})") from None
        return model

    def check_model_shapes(self) -> None:
        """Refuse, before a model is allocated, a config that does not describe the stored weights: a damaged
        or hand-edited config asking for d_model 2^20 would otherwise fail in an allocation, with a traceback,
        or take the machine's memory. Every parameter's shape is made of the layer counts, d_model, d_ff and
        the vocabulary sizes, so once these match the stored tensors the model is the weights' size, and
        load_state_dict checks each name and shape. What the model computes rather than loads (its positional
        table) has a sane limit. (Not a model built on the meta device: its first use costs seconds.)"""
        cfg, weights, where = self.model_config, self.weights, f"checkpoint {self.where}"
        for stack in ("encoder_layers", "decoder_layers"):
            stored = {name.split(".")[1] for name in weights if name.startswith(f"{stack}.")}
            if len(stored) != getattr(cfg, stack):
                raise CheckpointError(f"{where}: its config asks for model.{stack}={getattr(cfg, stack)}, "
                                      f"its weights hold {len(stored)}")
        src_vocab, tgt_vocab = self.vocab_sizes
        sizes = {"src_embed.weight": [src_vocab, cfg.d_model], "tgt_embed.weight": [tgt_vocab, cfg.d_model],
                 "encoder_layers.0.ffn.w1.weight": [cfg.d_ff, cfg.d_model],
                 "decoder_layers.0.ffn.w1.weight": [cfg.d_ff, cfg.d_model]}
        for name, shape in sizes.items():
            stored_shape = list(getattr(weights.get(name), "shape", []))
            if not stored_shape:
                raise CheckpointError(f"{where}: its weights lack {name}")
            if stored_shape != shape:
                raise CheckpointError(
                    f"{where}: its model config (d_model={cfg.d_model}, d_ff={cfg.d_ff}, vocabularies {src_vocab} "
                    f"and {tgt_vocab}) does not fit its weights: {name} is {stored_shape}, the config makes {shape}")
        table = cfg.max_positions * cfg.d_model * 4  # float32
        if table > MAX_COMPUTED_BYTES:
            raise CheckpointError(f"{where}: its model config (max_positions={cfg.max_positions}, d_model="
                                  f"{cfg.d_model}) makes a {table / 2**30:.1f} GiB positional table, over the "
                                  f"{MAX_COMPUTED_BYTES / 2**30:.0f} GiB limit")

    def decode_config(self, changes: dict[str, Any] | None = None) -> DecodeConfig:
        """The search settings of the config the model was trained with, then `changes` (decode keys, typed)."""
        cfg = Config()
        apply_dict(cfg, {"decode": self.saved_config.get("decode") or {}}, origin=self.where)
        if changes:
            apply_dict(cfg, {"decode": changes}, origin="the options")
        return cfg.decode

    # ---- training state
    @property
    def train_state(self) -> dict[str, Any] | None:
        """Optimizer, scaler, sampler, RNG states and counters (nmt.train.state); None for weights only."""
        return self.get("train_state")

    @property
    def progress(self) -> dict[str, Any] | None:
        """The counters of a training checkpoint (trainstate.Counters as a dict); None for weights-only files."""
        ts = self.train_state
        if not isinstance(ts, dict):
            return None
        return ts["progress"] if isinstance(ts.get("progress"), dict) else {}

    @property
    def processes(self) -> int | None:
        """How many processes trained up to this checkpoint (None without training state)."""
        ts = self.train_state
        if not isinstance(ts, dict) or "rng" not in ts:
            return None
        return len(ts["rng"]) if isinstance(ts["rng"], list) else 1


def save(state: dict[str, Any], path: str | Path) -> None:
    """Atomically save a checkpoint (adds format/version tags)."""
    payload = {"format": FORMAT, "version": VERSION, **state}
    atomic_write(path, lambda f: torch.save(payload, f))


def _damaged_member(path: Path) -> str | None:
    """The first record of a torch zip archive whose CRC-32 does not match (torch.load does not check them:
    a flipped bit in the weights would load silently), or None. Non-zip files are left to torch.load."""
    try:
        if not zipfile.is_zipfile(path):  # it raises too, e.g. BadZipFile for a damaged end record
            return None
        with zipfile.ZipFile(path) as archive:
            return archive.testzip()
    except (zipfile.BadZipFile, EOFError, ValueError, NotImplementedError, zlib.error) as e:
        return f"the archive ({type(e).__name__})"


def _damaged_weights(path: Path, weights: dict[str, Any]) -> str | None:
    """With a memory-mapped load, the CRC-32 check of the weights' records only (reading the weights, which
    the caller reads anyway, and not the optimizer's moments): the first weight whose bytes match no
    record's size and checksum, or None."""
    with zipfile.ZipFile(path) as archive:
        records = {(info.file_size, info.CRC) for info in archive.infolist()}
    for name, group in tensors_by_storage(weights).items():
        if storage_crc(weights[name]) not in records:
            return f"the weight {group[0]}"
    return None


def storage_crc(tensor: torch.Tensor) -> tuple[int, int]:
    """The size and CRC-32 of the bytes of a tensor's whole storage, as torch.save stores it."""
    storage = tensor.untyped_storage()
    data = torch.empty(0, dtype=torch.uint8).set_(storage).numpy()  # the storage's bytes, not a copy
    return storage.nbytes(), zlib.crc32(data)


def load(path: str | Path, map_location: str | torch.device = "cpu", mmap: bool = False) -> Checkpoint:
    """Load and check a checkpoint; any damage is a one-line CheckpointError naming the file. With `mmap`
    the file is mapped, not read: only what is used is read (checkpoint averaging reads the weights and
    not the optimizer state, which is twice their size), and only the weights are checked."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    if path.stat().st_size == 0:
        raise CheckpointError(f"{path}: empty checkpoint file (0 bytes)")
    damaged = None if mmap else _damaged_member(path)
    if damaged is not None:
        raise CheckpointError(f"{path}: corrupt checkpoint (checksum mismatch in {damaged})")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except Exception as e:  # torch raises many types for truncated/garbled files
        reason = first_line(e, 120)
        raise CheckpointError(f"{path}: corrupt or truncated checkpoint ({reason})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not an nmt checkpoint")
    if state.get("version") not in (1, VERSION):
        raise CheckpointError(
            f"{path}: checkpoint format version {state.get('version')!r}, this nmt reads versions 1 to {VERSION}"
        )
    for key in ("model", "config", "tokenizer", "vocab"):
        if key not in state:
            raise CheckpointError(f"{path}: checkpoint lacks '{key}'")
    if mmap and (damaged := _damaged_weights(path, state["model"])) is not None:
        raise CheckpointError(f"{path}: corrupt checkpoint (checksum mismatch in {damaged})")
    if state["version"] == 1:
        _upgrade_weights_v1(state["model"])
        state["version"] = VERSION
    checkpoint = Checkpoint(state)
    checkpoint.path = path
    return checkpoint


def _upgrade_weights_v1(weights: dict[str, Any]) -> None:
    """Version 1 named the fixed output bias `output_bias` and stored the tied output matrix only as the
    target embedding."""
    if "tgt_embed.weight" in weights:
        weights.setdefault("output.weight", weights["tgt_embed.weight"])
    if "output_bias" in weights:
        weights["output.bias"] = weights.pop("output_bias")


def average(paths: list[Path]) -> Checkpoint:
    """Average the weights of several checkpoints (Vaswani et al.: last 5/20 checkpoints). Names that share
    one tensor in the first checkpoint (tied embeddings) share one averaged tensor, as the model saved them.
    Only the weights are read (memory-mapped loads), not the optimizer states beside them."""
    if not paths:
        raise NmtError("no checkpoints to average")
    first = load(paths[0], mmap=True)
    names = tensors_by_storage(first["model"])
    total = {k: first["model"][k].double() if first["model"][k].is_floating_point() else first["model"][k].clone()
             for k in names}
    for p in paths[1:]:
        model = load(p, mmap=True)["model"]
        if model.keys() != first["model"].keys():
            raise CheckpointError(f"{p}: parameters differ from {paths[0]}; cannot average")
        for k, v in total.items():
            if v.is_floating_point():
                v += model[k].double()
    averaged = {}
    for k, v in total.items():
        dtype = first["model"][k].dtype
        mean = (v / len(paths)).to(dtype) if v.is_floating_point() else v
        averaged.update(dict.fromkeys(names[k], mean))
    out = Checkpoint({k: v for k, v in first.items() if k not in ("model", "train_state", "format", "version")})
    out["model"] = {k: averaged[k] for k in first["model"]}
    out["averaged_from"] = [str(p) for p in paths]
    return out


def tensors_by_storage(weights: dict[str, Any]) -> dict[str, list[str]]:
    """First name of each distinct tensor -> every name that is that same tensor (same storage and view),
    e.g. tied embeddings; entries that are not tensors are left out."""
    groups: dict[tuple[Any, ...], list[str]] = {}
    for name, t in weights.items():
        if not isinstance(t, torch.Tensor):
            continue
        view = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)
        groups.setdefault(view, []).append(name)
    return {group[0]: group for group in groups.values()}
