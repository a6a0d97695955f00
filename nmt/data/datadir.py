"""The data dir: what `nmt prepare` writes and `nmt train` reads. This module is the only one that knows
its layout.

```
data/
  meta.json            languages, vocab sizes, special ids, splits with pair/token counts, filter
                       statistics, input checksums, options, fingerprint (written last)
  spm.model            joint SentencePiece model (spm.<src>.model + spm.<tgt>.model when separate)
  vocab.json           only with an imported model's tokenizer (prepare --tokenizer-from): its vocabulary,
                       pieces in id order (vocab.<src>.json + vocab.<tgt>.json when separate)
  train/ valid/ test/  Arrow datasets (memory-mapped): src_ids, tgt_ids, src_len, tgt_len
  valid.<lang> test.<lang>   cleaned raw text (BLEU references)
```
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from nmt.errors import ConfigError, NmtError, first_line
from nmt.io import atomic_write_text
from nmt.tokenizer import Tokenizer

VERSION = 1  # of the preparation: meta.json says which
META_FILE = "meta.json"
SPLITS = ("train", "valid", "test")
TMP_PREFIX = ".tmp-prepare-"  # + "<pid>-": a preparation being built inside the data dir


def spm_files(joint: bool, src_lang: str, tgt_lang: str) -> dict[str, str]:
    """Tokenizer model file names: spm.model if joint, else spm.<src>.model + spm.<tgt>.model."""
    if joint:
        return {"src": "spm.model", "tgt": "spm.model"}
    return {"src": f"spm.{src_lang}.model", "tgt": f"spm.{tgt_lang}.model"}


def vocab_files(joint: bool, src_lang: str, tgt_lang: str) -> dict[str, str]:
    """An imported tokenizer's vocabulary file names: vocab.json if one, else vocab.<src>.json + vocab.<tgt>.json."""
    if joint:
        return {"src": "vocab.json", "tgt": "vocab.json"}
    return {"src": f"vocab.{src_lang}.json", "tgt": f"vocab.{tgt_lang}.json"}


def write_tokenizer(tokenizer: Tokenizer, directory: str | Path) -> dict[str, dict[str, str]]:
    """Write the SentencePiece model file(s) and, for an imported tokenizer, its vocabulary file(s) into
    `directory`; returns their names for meta.json: {"spm_files": {...}, "vocab_files": {...}} (the latter
    only when there are vocabularies)."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    state = tokenizer.to_state()
    langs = tokenizer.src_lang, tokenizer.tgt_lang
    files = {"spm_files": spm_files(state["tgt_model"] is None, *langs)}
    (out / files["spm_files"]["src"]).write_bytes(state["src_model"])
    if state["tgt_model"] is not None:
        (out / files["spm_files"]["tgt"]).write_bytes(state["tgt_model"])
    if tokenizer.mapped:
        files["vocab_files"] = vocab_files(tokenizer.joint, *langs)
        for side in ("src", "tgt"):
            vocab = state[f"{side}_vocab"] or state["src_vocab"]
            atomic_write_text(out / files["vocab_files"][side], json.dumps(vocab, ensure_ascii=False) + "\n")
    return files


def read_meta(path: str | Path) -> dict[str, Any]:
    """meta.json of a prepared data dir, or a one-line NmtError saying how to get one."""
    meta_path = Path(path) / META_FILE
    if not meta_path.is_file():
        raise NmtError(f"no prepared data in {path} (run `nmt prepare` first)")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise NmtError(f"{meta_path} is corrupt ({type(e).__name__}); run `nmt prepare --force`") from None
    if not isinstance(meta, dict) or meta.get("version") != VERSION:
        raise NmtError(f"{meta_path} is not a version-{VERSION} preparation; run `nmt prepare --force`")
    return meta


class DataDir:
    """A prepared data dir, opened for reading (`DataDir.open`)."""

    def __init__(self, path: str | Path, meta: dict[str, Any]):
        self.path = Path(path)
        self.meta = meta
        self._splits: dict[str, Any] = {}  # opened once: training and the start-up checks share them
        self._lengths: dict[str, dict[str, np.ndarray]] = {}

    @classmethod
    def open(cls, path: str | Path) -> DataDir:
        return cls(path, read_meta(path))

    def __str__(self) -> str:
        return str(self.path)

    @property
    def langs(self) -> tuple[str, str]:
        return self.meta["src_lang"], self.meta["tgt_lang"]

    @property
    def vocab_sizes(self) -> tuple[int, int]:
        return self.meta["src_vocab_size"], self.meta["tgt_vocab_size"]

    @property
    def fingerprint(self) -> str | None:
        return self.meta.get("fingerprint")

    def has_split(self, split: str) -> bool:
        return split in (self.meta.get("splits") or {})

    def split(self, split: str):  # -> datasets.Dataset
        """A prepared split as a memory-mapped `datasets.Dataset`."""
        if split not in self._splits:
            self._splits[split] = self._load_split(split)
        return self._splits[split]

    def split_lengths(self, split: str) -> dict[str, np.ndarray]:
        """src_len and tgt_len of a split (read once)."""
        if split not in self._lengths:
            self._lengths[split] = lengths(self.split(split))
        return self._lengths[split]

    def _load_split(self, split: str):
        import datasets

        path = self.path / split
        if not path.is_dir():
            raise NmtError(f"prepared data in {self.path} has no '{split}' split (was data.{split} set?)")
        try:
            return datasets.load_from_disk(str(path))
        except Exception as e:
            raise NmtError(f"cannot load {path}: {first_line(e)}; run `nmt prepare --force`") from None

    def tokenizer(self) -> Tokenizer:
        """The tokenizer the splits were encoded with: SentencePiece model(s), and the vocabularies of an
        imported one."""
        meta = self.meta
        files = meta.get("spm_files") or spm_files(True, *self.langs)
        models = [self._tokenizer_file(files[side], "tokenizer model").read_bytes() for side in ("src", "tgt")]
        vocabs: list[list[str] | None] = [None, None]
        if meta.get("vocab_files"):
            vocabs = [self._vocab(meta["vocab_files"][side]) for side in ("src", "tgt")]
            joint = meta["vocab_files"]["src"] == meta["vocab_files"]["tgt"]
            tgt_model = None if files["src"] == files["tgt"] else models[1]
        else:
            joint = bool(meta.get("joint_vocab", files["src"] == files["tgt"]))
            tgt_model = None if joint else models[1]
        return Tokenizer(models[0], tgt_model, src_lang=meta.get("src_lang", "src"),
                         tgt_lang=meta.get("tgt_lang", "tgt"), normalize=(meta.get("options") or {}).get("normalize"),
                         src_vocab=vocabs[0], tgt_vocab=None if joint else vocabs[1])

    def _tokenizer_file(self, name: str, what: str) -> Path:
        path = self.path / name
        if not path.is_file():
            raise NmtError(f"missing {what} {path} (run `nmt prepare --force`)")
        return path

    def _vocab(self, name: str) -> list[str]:
        path = self._tokenizer_file(name, "vocabulary")
        try:
            vocab = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise NmtError(f"{path} is corrupt ({type(e).__name__}); run `nmt prepare --force`") from None
        if not isinstance(vocab, list) or not all(isinstance(piece, str) for piece in vocab):
            raise NmtError(f"{path} is not a list of pieces; run `nmt prepare --force`")
        return vocab

    def check_positions(self, max_positions: int) -> None:
        """Every train/valid sentence (+ EOS/BOS) must fit model.max_positions: else the first long batch
        would crash mid-run."""
        for split, name in (("train", "training"), ("valid", "validation")):
            if not self.has_split(split):
                continue
            lens = self.split_lengths(split)
            longest = int(max(lens["src_len"].max(initial=0), lens["tgt_len"].max(initial=0))) + 1
            if longest > max_positions:
                raise ConfigError(f"model.max_positions={max_positions} but the longest {name} sentence needs "
                                  f"{longest} positions; raise it (or prepare with a lower data.max_len)")

    def references(self, split: str, n: int) -> list[str]:
        """The first `n` cleaned target sentences of a split (valid/test), for BLEU."""
        text = (self.path / f"{split}.{self.meta['tgt_lang']}").read_text(encoding="utf-8")
        return text.split("\n")[:n]


def lengths(dataset) -> dict[str, np.ndarray]:
    """src_len and tgt_len of an encoded split as numpy arrays (no per-row Python objects)."""
    return dataset.with_format("numpy", columns=["src_len", "tgt_len"])[:]


# ---------------------------------------------------------------- writing (nmt prepare)


def existing_meta(path: Path) -> dict[str, Any] | None:
    """The current meta.json of `path`; an unreadable one counts as a different preparation."""
    if not (path / META_FILE).is_file():
        return None
    try:
        return read_meta(path)
    except NmtError:
        return {"fingerprint": None}


def outputs(meta: dict[str, Any]) -> list[str]:
    """Names (relative to the data dir) a preparation consists of, meta.json excluded."""
    names = list(dict.fromkeys([*(meta.get("spm_files") or {}).values(), *(meta.get("vocab_files") or {}).values()]))
    for split in meta.get("splits") or {}:
        names.append(split)
        if split != "train":
            names += [f"{split}.{meta['src_lang']}", f"{split}.{meta['tgt_lang']}"]
    return names


def planned_outputs(src_lang: str, tgt_lang: str) -> list[str]:
    """Every name a preparation for these languages may write (to keep inputs from being overwritten)."""
    return [*dict.fromkeys([*spm_files(True, src_lang, tgt_lang).values(),
                            *spm_files(False, src_lang, tgt_lang).values(),
                            *vocab_files(True, src_lang, tgt_lang).values(),
                            *vocab_files(False, src_lang, tgt_lang).values()]),
            META_FILE, *SPLITS, *(f"{s}.{lang}" for s in ("valid", "test") for lang in (src_lang, tgt_lang))]


def is_complete(path: Path, meta: dict[str, Any]) -> bool:
    return bool(meta.get("splits")) and all((path / name).exists() for name in outputs(meta))


def remove_stale_builds(path: Path) -> None:
    """Temp build dirs left by killed preparations (their pid is gone)."""
    for build in path.glob(f"{TMP_PREFIX}*"):
        try:
            os.kill(int(build.name[len(TMP_PREFIX):].split("-")[0]), 0)
        except ProcessLookupError:
            shutil.rmtree(build, ignore_errors=True)
        except (ValueError, PermissionError, OSError):
            pass


def install(path: Path, build: Path, meta: dict[str, Any], old: dict[str, Any] | None) -> None:
    """Move a finished build into `path`; meta.json goes last so a crash never looks complete."""
    (path / META_FILE).unlink(missing_ok=True)
    new = outputs(meta)
    stale = [name for name in (outputs(old) if old and old.get("splits") else []) if name not in new]
    for name in [*stale, *new]:
        target = path / name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.exists() or target.is_symlink():
            target.unlink()
    for name in new:
        os.replace(build / name, path / name)
    atomic_write_text(path / META_FILE, json.dumps(meta, indent=2) + "\n")
