"""Reading parallel text (file pairs, TSV, TMX, `datasets` local/hub), line cleaning and training filters.

Everything streams: `read_pairs` yields one pair at a time and never holds a corpus in memory.
`datasets` is imported only when a dataset source is used, so plain-text reading stays light.

Cleaning of every line (all splits): split on "\\n" only (a U+2028 inside a line is not a line
break), strip surrounding whitespace (CRLF files work), turn line/paragraph separators and other
vertical whitespace into spaces and delete the remaining control characters (NUL, DEL, C1,
BOM/U+FEFF) except TAB.

Training-only filters (`PairFilter`, valid/test are never filtered), each pair is counted under
the first filter that drops it:
  empty      either side is empty after cleaning (a pair with one empty side teaches nothing)
  duplicate  exact repeat of an earlier (source, target) pair; only 8-byte hashes are kept
  too_long   either side has more than `max_len` SentencePiece tokens
  ratio      len(longer)/len(shorter) > `max_ratio` in tokens, judged only when the longer side
             has at least RATIO_MIN_TOKENS tokens: on very short pairs ("Ja ." / "Yes , of
             course .") a ratio of tiny counts says nothing, while "Hi" vs a 40-token sentence
             is still caught.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path
from typing import Any

import numpy as np

from nmt.data.tmx import is_tmx, tmx_pairs
from nmt.errors import NmtError, first_line
from nmt.text import clean_text

RATIO_MIN_TOKENS = 6
LOCAL_DATA_FORMATS = {".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}

def file_sha256(path: str | Path) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def dir_sha256(path: str | Path) -> str:
    """SHA-256 over the relative names and contents of every file under a directory."""
    root = Path(path)
    digest = hashlib.sha256()
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(f"{file.relative_to(root).as_posix()}\0{file_sha256(file)}\n".encode())
    return digest.hexdigest()


# ---------------------------------------------------------------- sources


@dataclass(frozen=True)
class Source:
    """What a corpus spec points at. kind: prefix | tsv | tmx | disk | file | hub."""

    spec: str
    kind: str
    paths: tuple[Path, ...] = ()  # local files/dirs read (empty for hub)

    def checksums(self) -> dict[str, str | None]:
        """{path or hub name: sha256} — hub datasets have no local checksum (None)."""
        if self.kind == "hub":
            return {f"hf:{self.spec}": None}
        return {str(p): dir_sha256(p) if p.is_dir() else file_sha256(p) for p in self.paths}


def _is_datasets_dir(path: Path) -> bool:
    return any((path / name).is_file() for name in ("dataset_info.json", "state.json", "dataset_dict.json"))


def _looks_local(spec: str) -> bool:
    """A spec that names a place on disk rather than a hub dataset ("org/name")."""
    if spec.startswith((".", "/", "~")) or (os.sep in spec and Path(spec).parent.is_dir()):
        return True
    return Path(spec).suffix.lower() in (".tsv", *LOCAL_DATA_FORMATS) or is_tmx(Path(spec))


def resolve(spec: str, src_lang: str, tgt_lang: str) -> Source:
    """Decide what `spec` is (see `read_pairs`); missing local files are a one-line NmtError."""
    path = Path(spec).expanduser()
    src, tgt = Path(f"{path}.{src_lang}"), Path(f"{path}.{tgt_lang}")
    if src.is_file() or tgt.is_file():
        missing = tgt if src.is_file() else src
        if not missing.is_file():
            raise NmtError(f"missing file: {missing} (needed next to {src if missing is tgt else tgt})")
        return Source(spec, "prefix", (src, tgt))
    suffix = path.suffix.lower()
    if suffix == ".tsv" or suffix in LOCAL_DATA_FORMATS or is_tmx(path):
        if not path.is_file():
            raise NmtError(f"missing file: {path}")
        return Source(spec, "tsv" if suffix == ".tsv" else "tmx" if is_tmx(path) else "file", (path,))
    if path.is_dir():
        if not _is_datasets_dir(path):
            raise NmtError(f"{path} is a directory but not a `datasets` save_to_disk directory "
                           f"(and {src.name}/{tgt.name} do not exist)")
        return Source(spec, "disk", (path,))
    if _looks_local(spec):
        raise NmtError(f"missing file: {src} (and {tgt}); expected a prefix of {src_lang}/{tgt_lang} "
                       "files, a .tsv/.tmx/.jsonl/.json/.csv/.parquet file or a datasets directory")
    return Source(spec, "hub")


def read_pairs(spec: str, src_lang: str, tgt_lang: str, *, hf_config: str | None = None,
               hf_split: str = "train", src_column: str | None = None, tgt_column: str | None = None,
               cache_dir: str | None = None) -> Iterator[tuple[str, str]]:
    """Stream cleaned (source, target) pairs from `spec`.

    `spec` is (a) a prefix `data/train` → data/train.<src_lang> + data/train.<tgt_lang>; (b) a .tsv
    file (source<TAB>target) or a .tmx/.tmx.gz translation memory (`nmt.data.tmx`: the <tuv>s of
    src_lang/tgt_lang); (c) a `datasets` save_to_disk directory (a DatasetDict uses `hf_split`);
    (d) a local .json/.jsonl/.csv/.parquet file; (e) otherwise a Hugging Face hub dataset name,
    streamed with `hf_config`/`hf_split`. Dataset columns: `src_column`/`tgt_column` if given
    ("translation.en" reaches into a dict column), else columns named like the languages, else
    the common `translation` dict column. `cache_dir` keeps `datasets` lock/cache files out of ~/.cache.
    Files are checked now; bad content raises NmtError while iterating.
    """
    source = resolve(spec, src_lang, tgt_lang)
    if source.kind == "prefix":
        return _prefix_pairs(*source.paths)
    if source.kind == "tmx":
        return tmx_pairs(source.paths[0], src_lang, tgt_lang)
    if source.kind == "tsv":
        return _tsv_pairs(source.paths[0])
    columns = (src_lang, tgt_lang, src_column, tgt_column)
    if source.kind == "disk":
        return _disk_pairs(source.paths[0], hf_split, *columns)
    import datasets

    try:
        if source.kind == "file":
            builder = LOCAL_DATA_FORMATS[source.paths[0].suffix.lower()]
            rows = datasets.load_dataset(builder, data_files=str(source.paths[0]), split="train",
                                         streaming=True, cache_dir=cache_dir)
        else:
            rows = datasets.load_dataset(spec, hf_config, split=hf_split, streaming=True, cache_dir=cache_dir)
    except Exception as e:  # network, unknown name/config/split: all user-fixable
        if source.kind == "file":
            where = f"local file '{spec}'"
        else:
            where = f"Hugging Face dataset '{spec}' (and no local files {spec}.{src_lang}/.{tgt_lang})"
        raise NmtError(f"cannot load {where}: {first_line(e)}") from None
    return _row_pairs(rows, rows.column_names, spec, *columns)


def _decode(raw: bytes, path: Path, lineno: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise NmtError(f"{path}:{lineno}: invalid UTF-8 (byte {e.start + 1} of the line)") from None


def _prefix_pairs(src_path: Path, tgt_path: Path) -> Iterator[tuple[str, str]]:
    # Binary iteration splits on b"\n" only; each line is decoded alone to report its number.
    with open(src_path, "rb") as fs, open(tgt_path, "rb") as ft:
        for lineno, (raw_src, raw_tgt) in enumerate(zip_longest(fs, ft), 1):
            if raw_src is None or raw_tgt is None:  # one file ended: count the rest of the other
                rest = sum(1 for _ in (fs if raw_tgt is None else ft))
                n_src = lineno - 1 if raw_src is None else lineno + rest
                n_tgt = lineno - 1 if raw_tgt is None else lineno + rest
                raise NmtError(f"line counts differ: {src_path} has {n_src} lines but {tgt_path} has {n_tgt}")
            yield (clean_text(_decode(raw_src.rstrip(b"\r\n"), src_path, lineno)),
                   clean_text(_decode(raw_tgt.rstrip(b"\r\n"), tgt_path, lineno)))


def _tsv_pairs(path: Path) -> Iterator[tuple[str, str]]:
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            line = _decode(raw, path, lineno).rstrip("\n").rstrip("\r")
            fields = line.split("\t")
            if len(fields) != 2:
                found = "no tab" if len(fields) == 1 else f"{len(fields)} tab-separated fields"
                raise NmtError(f"{path}:{lineno}: expected source<TAB>target, found {found}")
            yield clean_text(fields[0]), clean_text(fields[1])


def _disk_pairs(path: Path, split: str, *columns: str | None) -> Iterator[tuple[str, str]]:
    import datasets

    try:
        data = datasets.load_from_disk(str(path))
    except Exception as e:
        raise NmtError(f"cannot load datasets directory {path}: {first_line(e)}") from None
    if isinstance(data, datasets.DatasetDict):
        if split not in data:
            raise NmtError(f"{path} has no split '{split}' (available: {', '.join(data)})")
        data = data[split]
    rows = (row for batch in data.iter(batch_size=1000) for row in _batch_rows(batch))
    return _row_pairs(rows, data.column_names, str(path), *columns)


def _batch_rows(batch: dict[str, list]) -> Iterator[dict[str, Any]]:
    names = list(batch)
    for values in zip(*batch.values(), strict=True):
        yield dict(zip(names, values, strict=True))


def _side_getter(columns: list[str], first: dict[str, Any], lang: str, override: str | None, name: str,
                 option: str) -> Callable[[dict[str, Any]], Any]:
    """How to take one side's text out of a row, chosen from the available columns."""
    available = ", ".join(columns)
    if override is not None:
        if override in columns:
            return lambda row: row[override]
        base, _, key = override.partition(".")
        if key and base in columns:
            return lambda row: row[base][key]
        raise NmtError(f"dataset {name} has no column '{override}' (data.{option}; available: {available})")
    if lang in columns:
        return lambda row: row[lang]
    if "translation" in columns:
        inner = first.get("translation")
        if isinstance(inner, dict) and lang not in inner:
            raise NmtError(f"dataset {name}: column 'translation' has no language '{lang}' "
                           f"(available: {', '.join(map(str, inner))})")
        return lambda row: row["translation"][lang]
    raise NmtError(f"dataset {name} has no column '{lang}' (available: {available}); "
                   f"set data.{option}")


def _as_text(value: Any) -> str:
    return "" if value is None else clean_text(value if isinstance(value, str) else str(value))


def _row_pairs(rows: Iterable[dict[str, Any]], columns: list[str] | None, name: str, src_lang: str,
               tgt_lang: str, src_column: str | None, tgt_column: str | None) -> Iterator[tuple[str, str]]:
    get_src = get_tgt = None
    for index, row in enumerate(rows, 1):
        if get_src is None or get_tgt is None:  # decided on the first row (streamed columns may be unknown)
            names = list(columns) if columns else list(row)
            get_src = _side_getter(names, row, src_lang, src_column, name, "src_column")
            get_tgt = _side_getter(names, row, tgt_lang, tgt_column, name, "tgt_column")
        try:
            pair = _as_text(get_src(row)), _as_text(get_tgt(row))
        except (KeyError, TypeError, IndexError) as e:
            raise NmtError(f"dataset {name}: row {index} lacks the text field ({first_line(e)})") from None
        yield pair


# ---------------------------------------------------------------- training filters

FILTERS = ("empty", "duplicate", "too_long", "ratio")


@dataclass
class PairFilter:
    """Training-pair filters with counters of what each dropped (see module docstring).

    Text-level checks (`keep_text`: empty, duplicate) run while reading; token-level checks
    (`keep_lengths` / vectorised `length_mask`: too_long, ratio) run after SentencePiece encoding.
    Dedup keeps one 8-byte hash per distinct pair (~60 bytes each in a Python set), never the text.
    """

    max_len: int = 256
    max_ratio: float = 3.0
    dedup: bool = False
    ratio_min_tokens: int = RATIO_MIN_TOKENS
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(("read", *FILTERS, "kept"), 0))
    _seen: set[int] = field(default_factory=set, repr=False)

    def keep_text(self, src: str, tgt: str) -> bool:
        self.counts["read"] += 1
        if not src or not tgt:
            self.counts["empty"] += 1
            return False
        if self.dedup:
            key = int.from_bytes(hashlib.blake2b(f"{src}\0{tgt}".encode(), digest_size=8).digest(), "little")
            if key in self._seen:
                self.counts["duplicate"] += 1
                return False
            self._seen.add(key)
        return True

    def release(self) -> None:
        """Forget the dedup hashes (after the reading pass) to free their memory."""
        self._seen = set()

    def _reason(self, src_len: np.ndarray, tgt_len: np.ndarray) -> np.ndarray:
        """0 keep, 1 too_long, 2 ratio, 3 empty (a side with no tokens) — first failing wins."""
        longer, shorter = np.maximum(src_len, tgt_len), np.minimum(src_len, tgt_len)
        reason = np.zeros(src_len.shape, dtype=np.int8)
        bad_ratio = (longer >= self.ratio_min_tokens) & (longer > self.max_ratio * shorter)
        reason[bad_ratio] = 2
        reason[longer > self.max_len] = 1
        reason[shorter == 0] = 3
        return reason

    def length_mask(self, src_len: Iterable[int], tgt_len: Iterable[int]) -> np.ndarray:
        """Boolean keep-mask over token lengths (without eos); updates the counters."""
        reason = self._reason(np.asarray(src_len, dtype=np.int64), np.asarray(tgt_len, dtype=np.int64))
        for code, name in ((1, "too_long"), (2, "ratio"), (3, "empty")):
            self.counts[name] += int((reason == code).sum())
        keep = reason == 0
        self.counts["kept"] += int(keep.sum())
        return keep

    def keep_lengths(self, src_len: int, tgt_len: int) -> bool:
        return bool(self.length_mask([src_len], [tgt_len])[0])

    def summary(self) -> str:
        return ", ".join(f"{name}={self.counts[name]}" for name in FILTERS)
