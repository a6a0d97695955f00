"""Throughput and memory of `nmt prepare` on a large corpus made by replicating Multi30k.

Usage (from the repository root):

    python bench/prepare.py                       # 1,000,000 pairs, num_proc=2
    python bench/prepare.py --pairs 200000 --num-proc 1 --vocab-size 16000
    python bench/prepare.py --data /path/to/multi30k --keep   # keep the temp dir to inspect it

The Multi30k training set (train.en/train.de) is repeated until it has --pairs lines; every copy
gets a copy-index token ("c17") so the copies are distinct pairs (dedup is off anyway). Valid/test
are val.* and test2016.*. Then `prepare` runs with the library defaults (joint BPE, spm_sample
2,000,000) and the script prints pairs/s and peak memory:

  - ru_maxrss of this process and of its (waited-for) children, from getrusage;
  - the peak, sampled every 0.1 s from /proc, of the summed RSS and PSS of the whole process tree
    (RSS double-counts pages forked workers share with the parent; PSS splits them fairly), and
    of the anonymous part of PSS: RSS/PSS also count the page cache of memory-mapped Arrow files,
    which the kernel can drop at any time; anonymous memory is what really has to fit.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from nmt.config.experiment import DataConfig  # noqa: E402
from nmt.data.prepare import prepare  # noqa: E402


def replicate(data: Path, out: Path, pairs: int) -> str:
    """Write out/train.{en,de} with `pairs` lines; returns the prefix."""
    lines = {lang: (data / f"train.{lang}").read_text(encoding="utf-8").split("\n")[:-1]
             for lang in ("en", "de")}
    n = len(lines["en"])
    for lang in ("en", "de"):
        with open(out / f"train.{lang}", "w", encoding="utf-8") as f:
            for start in range(0, pairs, n):
                copy = start // n
                f.writelines(f"{line.strip()} c{copy}\n" for line in lines[lang][: min(n, pairs - start)])
    return str(out / "train")


def _tree(root: int) -> list[int]:
    """`root` and all its descendants, from /proc/*/stat parent pids."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _memory_kib(pid: int) -> tuple[int, int, int]:
    """(RSS, PSS, anonymous PSS) of one process in KiB; zeros if it is gone."""
    try:
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0, 0, 0
    values = {line.split(":")[0]: int(line.split()[1])
              for line in rollup.splitlines()[1:] if line.endswith("kB")}
    return values.get("Rss", 0), values.get("Pss", 0), values.get("Pss_Anon", 0)


class TreeSampler(threading.Thread):
    """Samples the summed RSS/PSS of this process tree; keeps the peaks."""

    def __init__(self, interval: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.interval, self.peak_rss, self.peak_pss, self.peak_anon, self.peak_procs = interval, 0, 0, 0, 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            pids = _tree(os.getpid())
            totals = [_memory_kib(pid) for pid in pids]
            self.peak_rss = max(self.peak_rss, sum(t[0] for t in totals))
            self.peak_pss = max(self.peak_pss, sum(t[1] for t in totals))
            self.peak_anon = max(self.peak_anon, sum(t[2] for t in totals))
            self.peak_procs = max(self.peak_procs, len(pids))
            self._stop_event.wait(self.interval)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=1_000_000)
    parser.add_argument("--data", default=str(REPO.parent / "shared/data/multi30k"),
                        help="Multi30k dir (default: ../shared/data/multi30k next to the repo)")
    parser.add_argument("--num-proc", type=int, default=2)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--spm-sample", type=int, default=DataConfig.spm_sample)
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()

    data = Path(args.data)
    if not (data / "train.en").is_file():
        sys.exit(f"error: no Multi30k train.en in {data} (use --data)")
    work = Path(tempfile.mkdtemp(prefix="nmt-bench-prepare-"))
    try:
        started = time.perf_counter()
        train = replicate(data, work, args.pairs)
        print(f"wrote {args.pairs:,} pairs to {work} in {time.perf_counter() - started:.1f}s",
              file=sys.stderr)
        cfg = DataConfig(dir=str(work / "data"), train=train, valid=str(data / "val"),
                         test=str(data / "test2016"), vocab_size=args.vocab_size, num_proc=args.num_proc,
                         spm_sample=args.spm_sample)
        sampler = TreeSampler()
        sampler.start()
        started = time.perf_counter()
        meta = prepare(cfg, progress=sys.stderr.isatty())
        seconds = time.perf_counter() - started
        sampler.stop()
        self_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        children_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        disk = sum(p.stat().st_size for p in (work / "data").rglob("*") if p.is_file())
        print(f"pairs           {args.pairs:,} (kept {meta['filters']['kept']:,})")
        print(f"num_proc        {args.num_proc}  (cpus: {os.cpu_count()})")
        print(f"time            {seconds:.1f} s")
        print(f"throughput      {args.pairs / seconds:,.0f} pairs/s")
        print(f"maxrss self     {self_kib / 1024:,.0f} MiB")
        print(f"maxrss children {children_kib / 1024:,.0f} MiB (largest single child)")
        print(f"peak tree RSS   {sampler.peak_rss / 1024:,.0f} MiB "
              f"(sum over up to {sampler.peak_procs} processes)")
        print(f"peak tree PSS   {sampler.peak_pss / 1024:,.0f} MiB")
        print(f"  anonymous     {sampler.peak_anon / 1024:,.0f} MiB "
              "(the rest: page cache of memory-mapped Arrow files)")
        print(f"data dir size   {disk / 2**20:,.0f} MiB")
    finally:
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
