"""`nmt prepare`: raw parallel text → SentencePiece model(s) + encoded Arrow datasets + meta.json.

Pipeline (memory stays bounded whatever the corpus size — nothing holds a list of sentences):

1. read every split with `corpus.read_pairs` (streaming), clean + Unicode-normalize each line;
   training pairs pass the text filters (empty, duplicate); valid/test are never dropped and
   their cleaned text is also written out as BLEU references. Pairs stream straight into Arrow
   files (pyarrow record batches, opened as a memory-mapped `Dataset`) in a temp dir inside the output dir.
2. train SentencePiece (joint: both sides into one model; separate: one per side) from a stream
   over the Arrow text; SentencePiece keeps a seeded reservoir sample of `spm_sample` sentences.
3. encode in `num_proc` worker processes (`nmt.data.encoding`: chunks of rows in, Arrow record batches out,
   written in order), drop training pairs by token length (too_long, ratio) and `save_to_disk` each split.
4. move the results into `cfg.dir` and write meta.json last (atomically): a crash at any point
   leaves either the old complete preparation or a directory without meta.json, never a
   half-written one that looks valid.

A preparation is identified by a fingerprint of its options and input checksums: re-running
with the same ones reuses the directory; different ones need `force`.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import Progress, TaskID

from nmt import text
from nmt.config.experiment import Config, DataConfig, check_data
from nmt.data import corpus, datadir
from nmt.data.encoding import encode_split
from nmt.demo.files import write_demo
from nmt.errors import NmtError
from nmt.langcodes import canonical_or_none, is_cjk
from nmt.log import console, progress_bar, show_progress
from nmt.tokenizer import Tokenizer, train_spm


def run(cfg: Config, *, demo: bool = False, force: bool = False, progress: bool | None = None) -> dict[str, Any]:
    """The `nmt prepare` command: with `demo`, first write the built-in corpus next to the data dir.
    `progress`: bars on stderr (None: when stderr is a terminal)."""
    if demo:
        raw = Path(cfg.data.dir + "-raw")
        prefixes = write_demo(raw, seed=cfg.data.seed, src_lang=cfg.data.src_lang, tgt_lang=cfg.data.tgt_lang)
        cfg.data.train, cfg.data.valid, cfg.data.test = prefixes["train"], prefixes["valid"], prefixes["test"]
        console.print(f"demo corpus written to {raw}")
    meta = prepare(cfg.data, force=force, progress=show_progress(progress))
    console.print(f"prepared {cfg.data.dir}: {meta['splits']['train']['pairs']:,} training pairs")
    return meta


def prepare(cfg: DataConfig, *, force: bool = False, progress: bool = True) -> dict[str, Any]:
    """Build (or reuse) the prepared data dir `cfg.dir`; returns its meta dict.

    Same options and inputs as the existing preparation → reused as is. A different one → NmtError
    unless `force`, which always rebuilds (files of the old preparation are replaced or removed;
    other files in the directory are left alone).
    """
    if not cfg.train:
        raise NmtError("no training data: data.train is not set (pass --train: a file prefix, a .tsv/.tmx "
                       "or a datasets name/directory; or --demo)")
    check_data(cfg)
    given = _given_tokenizer(cfg)
    if given is not None:  # text is cleaned as the tokenizer's own data was, whatever data.normalize says
        cfg = replace(cfg, normalize=given.normalize)
    out = Path(cfg.dir)
    sources = {split: corpus.resolve(spec, cfg.src_lang, cfg.tgt_lang)
               for split, spec in _split_specs(cfg).items()}
    inputs = {key: value for source in sources.values() for key, value in source.checksums().items()}
    if given is not None:
        inputs["tokenizer"] = _sha256_json(given.fingerprint())
    options = {k: v for k, v in asdict(cfg).items() if k not in ("dir", "num_proc")}
    fingerprint = _sha256_json({"version": datadir.VERSION, "options": options, "inputs": inputs})

    old = datadir.existing_meta(out)
    if old is not None:
        if old.get("fingerprint") == fingerprint and datadir.is_complete(out, old) and not force:
            console.print(f"reusing prepared data in {out} (same inputs and options)")
            return old
        if old.get("fingerprint") != fingerprint and not force:
            raise NmtError(f"{out} holds a different preparation; use --force to overwrite")
    _check_outputs_spare_inputs(out, cfg, sources)
    if out.exists() and not out.is_dir():
        raise NmtError(f"data.dir {out} exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    datadir.remove_stale_builds(out)

    started = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix=f"{datadir.TMP_PREFIX}{os.getpid()}-", dir=out))
    try:
        with _datasets_quiet():
            meta = _build(cfg, sources, tmp, console, progress, given)
        meta.update(inputs=inputs, options=options, fingerprint=fingerprint)
        datadir.install(out, tmp, meta, old)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    console.print(f"prepared data in {out} ({time.perf_counter() - started:.1f}s)")
    return meta


def _split_specs(cfg: DataConfig) -> dict[str, str]:
    specs = {"train": cfg.train, "valid": cfg.valid, "test": cfg.test}
    return {split: spec for split, spec in specs.items() if spec}


def _hf_split(cfg: DataConfig, split: str) -> str:
    return {"train": cfg.hf_train_split, "valid": cfg.hf_valid_split, "test": cfg.hf_test_split}[split]


def _sha256_json(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def _check_outputs_spare_inputs(out: Path, cfg: DataConfig, sources: dict[str, corpus.Source]) -> None:
    """Refuse a data.dir whose outputs would overwrite an input (e.g. raw valid.en inside it)."""
    targets = {(out / name).resolve(): name for name in datadir.planned_outputs(cfg.src_lang, cfg.tgt_lang)}
    for source in sources.values():
        for path in source.paths:
            resolved = path.resolve()
            for target, name in targets.items():
                if resolved == target or target in resolved.parents:
                    raise NmtError(f"input {path} would be overwritten by the prepared '{name}' in {out}; "
                                   "choose another data.dir")


@contextmanager
def _datasets_quiet() -> Iterator[None]:
    """Silence `datasets` warnings/bars for the duration; restore the caller's settings after."""
    import datasets

    bars, verbosity = datasets.is_progress_bar_enabled(), datasets.logging.get_verbosity()
    datasets.logging.set_verbosity_error()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        datasets.logging.set_verbosity(verbosity)
        (datasets.enable_progress_bars if bars else datasets.disable_progress_bars)()


# ---------------------------------------------------------------- building


def _given_tokenizer(cfg: DataConfig) -> Tokenizer | None:
    """The tokenizer of the checkpoint named by data.tokenizer_from (fine-tuning data must be encoded with
    the model's own vocabulary), or None: train SentencePiece."""
    if not cfg.tokenizer_from:
        return None
    from nmt import checkpoint

    tokenizer = checkpoint.load(cfg.tokenizer_from).tokenizer()
    langs = (tokenizer.src_lang, tokenizer.tgt_lang)
    if langs != (cfg.src_lang, cfg.tgt_lang) and langs != ("src", "tgt"):
        raise NmtError(f"{cfg.tokenizer_from} translates {langs[0]}->{langs[1]} but data.src_lang/tgt_lang are "
                       f"{cfg.src_lang}->{cfg.tgt_lang}; pass --src-lang {langs[0]} --tgt-lang {langs[1]}")
    tokenizer.src_lang, tokenizer.tgt_lang = cfg.src_lang, cfg.tgt_lang
    return tokenizer


def _encode_splits(cfg: DataConfig, raw: dict[str, Any], tokenizer: Tokenizer, filters: corpus.PairFilter, tmp: Path,
                   console: Console, progress: bool) -> dict[str, dict[str, int]]:
    """Step 3: each split encoded, train length-filtered, saved under `tmp`; each split's pair and token counts."""
    splits = {}
    for split, dataset in raw.items():
        encoded = encode_split(dataset, tokenizer, tmp / "cache" / f"{split}-ids.arrow", name=split,
                               num_proc=cfg.num_proc, progress=progress)
        src_len = encoded.data.column("src_len").to_numpy()
        tgt_len = encoded.data.column("tgt_len").to_numpy()
        if split == "train":
            keep = filters.length_mask(src_len, tgt_len)
            if not keep.any():
                raise NmtError(f"no training pairs left after filtering ({filters.counts['read']} read; "
                               f"{filters.summary()})")
            if not keep.all():
                encoded = encoded.select(np.flatnonzero(keep), new_fingerprint=uuid.uuid4().hex)
            src_len, tgt_len = src_len[keep], tgt_len[keep]
            console.print(f"train: read {filters.counts['read']} pairs, dropped {filters.summary()}, "
                          f"kept {filters.counts['kept']}")
        else:
            console.print(f"{split}: {len(encoded)} pairs (never filtered)")
            if len(encoded) == 0:
                console.print(f"[yellow]warning:[/] the {split} split is empty")
        # an empty dataset needs an explicit shard, else load_from_disk cannot read it back
        encoded.save_to_disk(str(tmp / split), num_shards=1 if len(encoded) == 0 else None)
        splits[split] = {"pairs": len(encoded), "src_tokens": int(src_len.sum()),
                         "tgt_tokens": int(tgt_len.sum())}
    return splits


def _build(cfg: DataConfig, sources: dict[str, corpus.Source], tmp: Path, console: Console,
           progress: bool, given: Tokenizer | None) -> dict[str, Any]:
    # 1. read all splits first: a bad valid/test file fails before the slow SentencePiece step
    filters = corpus.PairFilter(max_len=cfg.max_len, max_ratio=cfg.max_ratio, dedup=cfg.dedup)
    raw = {split: _read_split(cfg, split, tmp, filters if split == "train" else None, progress)
           for split in sources}
    filters.release()
    if len(raw["train"]) == 0:
        if filters.counts["read"] == 0:
            raise NmtError(f"training data {cfg.train} is empty")
        raise NmtError(f"no training pairs left after filtering ({filters.counts['read']} read; "
                       f"{filters.summary()})")

    # 2. SentencePiece (unless the data is for a model that has its tokenizer)
    started = time.perf_counter()
    if given is None:
        with progress_bar("sentences", enabled=progress) as bar:
            rules = vocabulary_rules(cfg, raw["train"])
            tokenizer = _train_tokenizer(cfg, raw["train"], bar, rules)
        _return_freed_memory()
    else:
        tokenizer = given
    tokenizer_files = datadir.write_tokenizer(tokenizer, tmp)
    kind = "joint" if tokenizer.joint else "separate"
    if given is None:
        console.print(f"SentencePiece {cfg.spm_type} ({kind}) vocab {tokenizer.src_vocab_size}/"
                      f"{tokenizer.tgt_vocab_size} trained in {time.perf_counter() - started:.1f}s")
    else:
        console.print(f"encoding with the tokenizer of {cfg.tokenizer_from} ({kind}, vocab "
                      f"{tokenizer.src_vocab_size}/{tokenizer.tgt_vocab_size})")

    # 3. encode, length-filter train, save
    splits = _encode_splits(cfg, raw, tokenizer, filters, tmp, console, progress)

    return {
        "version": datadir.VERSION, "src_lang": cfg.src_lang, "tgt_lang": cfg.tgt_lang,
        "joint_vocab": tokenizer.joint, "spm_type": cfg.spm_type if given is None else None,
        **({("spm_" if k == "normalization" else "") + k: v for k, v in rules.items()} if given is None else {}),
        "tokenizer_from": cfg.tokenizer_from,
        "src_vocab_size": tokenizer.src_vocab_size, "tgt_vocab_size": tokenizer.tgt_vocab_size,
        "special_ids": asdict(tokenizer.special_ids), **tokenizer_files, "splits": splits,
        "filters": {name: filters.counts[name] for name in (*corpus.FILTERS, "kept", "read")},
    }


def _read_split(cfg: DataConfig, split: str, tmp: Path, filters: corpus.PairFilter | None, progress: bool):
    """Stream one split into an Arrow text file (a memory-mapped Dataset); valid/test text also goes
    to <split>.<lang>. Batches are written with pyarrow directly: `Dataset.from_generator` gives the
    same Arrow file but encodes every example in Python, which made this pass 3x slower."""
    import datasets
    import pyarrow as pa

    pairs = corpus.read_pairs(getattr(cfg, split), cfg.src_lang, cfg.tgt_lang, hf_config=cfg.hf_config,
                              hf_split=_hf_split(cfg, split), src_column=cfg.src_column,
                              tgt_column=cfg.tgt_column, cache_dir=str(tmp / "hf-cache"))
    texts = [tmp / f"{split}.{lang}" for lang in (cfg.src_lang, cfg.tgt_lang)] if filters is None else []
    arrow = tmp / "cache" / f"{split}-text.arrow"
    arrow.parent.mkdir(exist_ok=True)
    schema = pa.schema([("src", pa.string()), ("tgt", pa.string())])
    src_batch: list[str] = []
    tgt_batch: list[str] = []

    def flush(writer: pa.ipc.RecordBatchStreamWriter) -> None:
        columns = [pa.array(batch, pa.string()) for batch in (src_batch, tgt_batch)]
        writer.write_batch(pa.record_batch(columns, schema=schema))
        src_batch.clear()
        tgt_batch.clear()

    with (pa.OSFile(str(arrow), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer,
          progress_bar("pairs", enabled=progress) as bar):
        files = [open(path, "w", encoding="utf-8", newline="\n") for path in texts]
        try:
            task = bar.add_task(f"reading {split}", total=None, note="")
            count = 0
            for count, (src, tgt) in enumerate(pairs, 1):
                src, tgt = text.normalize(src, cfg.normalize), text.normalize(tgt, cfg.normalize)
                if files:
                    files[0].write(src + "\n")
                    files[1].write(tgt + "\n")
                if filters is None or filters.keep_text(src, tgt):
                    src_batch.append(src)
                    tgt_batch.append(tgt)
                    if len(src_batch) == 10_000:
                        flush(writer)
                if count % 20_000 == 0:
                    bar.update(task, completed=count, note=_kept(filters))
            if src_batch:
                flush(writer)
            bar.update(task, completed=count, total=count, note=_kept(filters))
        finally:
            for f in files:
                f.close()
    return datasets.Dataset.from_file(str(arrow))


def _return_freed_memory() -> None:
    """Hand the heap SentencePiece freed back to the OS (glibc keeps it otherwise), so the encoding
    workers forked next do not start from a bloated parent. A no-op where there is no glibc."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _kept(filters: corpus.PairFilter | None) -> str:
    """The reading bar's remark for training data: pairs past the text filters so far."""
    if filters is None:
        return ""
    c = filters.counts
    return f"{c['read'] - c['empty'] - c['duplicate']:,} kept"


def _stream_text(dataset, columns: tuple[str, ...]) -> Iterator[str]:
    for batch in dataset.select_columns(list(columns)).iter(batch_size=10_000):
        for column in columns:
            yield from batch[column]


def _counted(sentences: Iterable[str], bar: Progress, task: TaskID, training: str) -> Iterator[str]:
    """Feed SentencePiece while counting; once the stream is used up, its own training runs (no
    progress to report from inside it: the bar then says so and shows the time spent)."""
    for count, sentence in enumerate(sentences, 1):
        yield sentence
        if count % 10_000 == 0:
            bar.update(task, completed=count)
    bar.update(task, completed=bar.tasks[task].total, description=training)


def vocabulary_rules(cfg: DataConfig, train=None) -> dict[str, Any]:
    """SentencePiece's character_coverage, byte_fallback and normalization for the pair: where null, chosen by
    script and by the training text's character inventory. Chinese, Japanese and Korean have thousands of
    characters, most of them rare: SentencePiece advises coverage 0.9995, the rare ones then going through byte
    pieces rather than <unk>. But when the corpus' characters fit in half the vocabulary each gets a piece
    (coverage 1.0): in a vocabulary shared with English the Latin letters' counts push common Chinese characters
    past the 99.95% line (the zh demo: 7 of its 136), which the model then spells in bytes, sometimes wrongly.
    Their full-width punctuation (，！？（）) is the script's own, which SentencePiece's default NFKC rule would turn
    into ASCII in every translation: the text keeps nmt's own normalization (data.normalize) alone."""
    # a file suffix that is no language code ("english") has no script to go by
    cjk = any(is_cjk(code) for code in map(canonical_or_none, (cfg.src_lang, cfg.tgt_lang)) if code)
    coverage = cfg.character_coverage
    if coverage is None:
        few = cjk and train is not None and _inventory(train, cfg.spm_sample) <= cfg.vocab_size // 2
        coverage = 0.9995 if cjk and not few else 1.0
    fallback = cfg.byte_fallback if cfg.byte_fallback is not None else cjk
    return {"character_coverage": coverage, "byte_fallback": fallback,
            "normalization": "identity" if cjk else "nmt_nfkc"}


def _inventory(train, cap: int) -> int:
    """Distinct characters of the training text (both sides; the first `cap` pairs, as SentencePiece samples)."""
    seen: set[str] = set()
    for sentence in _stream_text(train.select(range(min(len(train), cap))), ("src", "tgt")):
        seen.update(sentence)
    return len(seen)


def _train_tokenizer(cfg: DataConfig, train, bar: Progress, rules: dict[str, Any]) -> Tokenizer:
    options = dict(vocab_size=cfg.vocab_size, model_type=cfg.spm_type, seed=cfg.seed, sample_cap=cfg.spm_sample,
                   **rules)
    langs = dict(src_lang=cfg.src_lang, tgt_lang=cfg.tgt_lang, normalize=cfg.normalize)
    sides = {"src": cfg.src_lang, "tgt": cfg.tgt_lang}
    groups = [("src", "tgt")] if cfg.joint_vocab else [("src",), ("tgt",)]
    models = []
    for columns in groups:
        what = "SentencePiece " + "+".join(sides[c] for c in columns)
        task = bar.add_task(f"{what}: reading", total=len(train) * len(columns), note="")
        stream = _counted(_stream_text(train, columns), bar, task, f"{what}: training")
        try:
            models.append(train_spm(stream, **options))
        except NmtError as e:
            raise NmtError(f"{sides[columns[0]]} side: {e}" if len(columns) == 1 else str(e)) from None
        bar.update(task, description=f"{what}: trained")
    return Tokenizer(*models, **langs)
