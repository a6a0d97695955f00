"""Peak memory of `nmt translate` as the input grows: streaming must keep it flat.

Usage (from the repository root, after `make multi30k`):

    python bench/translate_memory.py --checkpoint runs/multi30k-en-de/averaged.pt
    python bench/translate_memory.py --checkpoint CKPT --lines 1000,10000,100000 --beam 4

For each line count the source file (default: Multi30k train.en) is cycled to that many lines and
`python -m nmt translate --input ... --output ...` runs as a child process; its peak resident memory
comes from the kernel (ru_maxrss of wait4, which covers the whole life of that process). Reported per
run: lines, wall time, lines/s, peak RSS, and a check that the output has one line per input line.
Peak RSS should not grow with the number of lines: translate reads decode.chunk_lines lines at a time.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, table


def run(checkpoint: Path, src: Path, out: Path, beam: int, threads: int) -> tuple[float, int]:
    """Seconds and peak RSS (bytes) of one `nmt translate` child."""
    cmd = [sys.executable, "-m", "nmt", "translate", "--checkpoint", str(checkpoint), "--input", str(src),
           "--output", str(out), "--beam", str(beam), "--threads", str(threads)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"nmt translate failed:\n{proc.stderr.read().decode()[-2000:]}")
    return seconds, usage.ru_maxrss * 1024  # Linux reports KiB


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument("--source", type=Path, default=ROOT.parent / "shared/data/multi30k/train.en",
                   help="sentences to cycle through (default: Multi30k train.en)")
    p.add_argument("--lines", default="1000,10000,100000", help="comma-separated input sizes")
    p.add_argument("--beam", type=int, default=1, help="beam size (1 = greedy, the quickest way through 100k lines)")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    sentences = args.source.read_text(encoding="utf-8").splitlines()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in map(int, args.lines.split(",")):
            src, out = Path(tmp) / f"in.{n}", Path(tmp) / f"out.{n}"
            src.write_text("".join(s + "\n" for s in itertools.islice(itertools.cycle(sentences), n)),
                           encoding="utf-8")
            seconds, peak = run(args.checkpoint, src, out, args.beam, args.threads)
            with open(out, encoding="utf-8") as f:
                got = sum(1 for _ in f)
            rows.append([f"{n:,}", f"{seconds:.1f}", f"{n / seconds:,.0f}", f"{peak / 2**20:,.0f}",
                         "yes" if got == n else f"NO ({got:,})"])
            print(f"  {n:,} lines: {seconds:.1f} s, peak RSS {peak / 2**20:,.0f} MiB", file=sys.stderr, flush=True)
    print(f"\nnmt translate {args.checkpoint}, beam {args.beam}, {args.threads} threads, source {args.source}")
    print(table(["lines", "seconds", "lines/s", "peak RSS MiB", "one line per line"], rows))


if __name__ == "__main__":
    main()
