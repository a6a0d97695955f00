"""Step 3 of `nmt prepare`: a split's cleaned text (a memory-mapped Arrow `Dataset` of `src`, `tgt`) ->
its token ids, `src_ids`, `tgt_ids`, `src_len`, `tgt_len`, in an Arrow file of the same rows in the same
order. Worker processes encode chunks of rows; one writer appends their record batches in order.
(SentencePiece subwords for the data dir; not the model's encoder.)"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from nmt.log import progress_bar
from nmt.tokenizer import Tokenizer

CHUNK = 1000  # rows a worker encodes at a time

_worker: dict[str, Any] = {}  # an encoding worker's dataset and tokenizer, set once per process


def encode_split(dataset, tokenizer: Tokenizer, path: Path, *, name: str, num_proc: int, progress: bool):
    """Encode `dataset` into the Arrow file `path` and return it as a memory-mapped Dataset, `num_proc`
    processes working on chunks of CHUNK rows (a bar `encoding NAME` on stderr with `progress`). Not
    `Dataset.map`: its tqdm bars cannot be ours, and chunks written in order by one writer give the same
    file without its per-worker cache files and merge."""
    import datasets
    import pyarrow as pa

    ranges = [(start, min(start + CHUNK, len(dataset))) for start in range(0, len(dataset), CHUNK)]
    procs = max(1, min(num_proc, len(ranges)))  # forking for a tiny valid set costs more than it saves
    with (pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, _schema()) as writer,
          progress_bar("pairs", enabled=progress) as bar, _pool(procs, dataset, tokenizer) as pool):
        task = bar.add_task(f"encoding {name}", total=len(dataset), note="")
        batches = pool.imap(_encode_rows, ranges) if pool is not None else map(_encode_rows, ranges)
        for batch in batches:
            writer.write_batch(batch)
            bar.advance(task, batch.num_rows)
    return datasets.Dataset.from_file(str(path))


def _schema():  # -> pyarrow.Schema
    import datasets

    ids = datasets.List(datasets.Value("int32"))
    return datasets.Features({"src_ids": ids, "tgt_ids": ids, "src_len": datasets.Value("int32"),
                              "tgt_len": datasets.Value("int32")}).arrow_schema


def _encode_batch(batch: dict[str, list[str]], tokenizer: Tokenizer) -> dict[str, list]:
    src = tokenizer.encode_src(batch["src"], clean=False)  # text was cleaned while reading
    tgt = tokenizer.encode_tgt(batch["tgt"], clean=False)
    return {"src_ids": src, "tgt_ids": tgt, "src_len": [len(x) for x in src],
            "tgt_len": [len(x) for x in tgt]}


def _init_worker(dataset, tokenizer: Tokenizer) -> None:
    _worker.update(dataset=dataset, tokenizer=tokenizer)


def _encode_rows(rows: tuple[int, int]):  # -> pyarrow.RecordBatch
    """Encode rows [start, stop) of the text dataset: the worker reads them from the memory-mapped Arrow
    file itself, so only the ids travel back (as one record batch)."""
    import pyarrow as pa

    batch = _encode_batch(_worker["dataset"][rows[0]:rows[1]], _worker["tokenizer"])
    return pa.RecordBatch.from_pydict(batch, schema=_schema())


@contextmanager
def _pool(procs: int, dataset, tokenizer: Tokenizer) -> Iterator[Any]:
    """`procs` worker processes that hold the dataset and tokenizer, or None to work in this one."""
    if procs == 1:
        _init_worker(dataset, tokenizer)
        try:
            yield None
        finally:
            _worker.clear()
        return
    with multiprocessing.get_context().Pool(procs, _init_worker, (dataset, tokenizer)) as pool:
        yield pool
