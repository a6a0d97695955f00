"""Run one bench script from two commits, alternating, on the same machine state: the before/after check a
speed-neutral change (a refactor) or a speed change needs.

    python bench/ab.py --old 3e89dad --rounds 3 -- bench/translate.py --configs tiny,base --batches 32,1 --repeats 3
    python bench/ab.py --old HEAD~1 --rounds 3 -- bench/train.py --configs tiny,base,multi30k --steps 4

Each round runs the bench from the old commit (a temporary `git worktree`), then from the new one (the
working tree, or --new REV), each in a fresh process that imports that tree's `nmt`; the order alternates
between rounds so neither side always runs first. Every run's output is printed under a heading, then
the result table of each run once more, old rounds then new rounds: the ratios against the peers (HF,
CTranslate2), measured in the same process, are what should not move.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def checkout(rev: str | None) -> Iterator[Path]:
    """The tree of `rev` (a temporary worktree), or this working tree for None."""
    if rev is None:
        yield ROOT
        return
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), rev], check=True)
        try:
            yield tree
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)


def run_bench(tree: Path, argv: list[str]) -> str:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run([sys.executable, *argv], cwd=tree, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} in {tree} failed:\n{proc.stderr[-3000:]}")
    return proc.stdout


def result_table(output: str) -> list[str]:
    """The lines of the last table a bench printed (from its header line on)."""
    lines = output.rstrip().splitlines()
    starts = [i for i, line in enumerate(lines) if set(line.replace(" ", "")) == {"-"}]
    return lines[starts[-1] - 1:] if starts else lines[-5:]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--old", required=True, help="the commit before (any git revision)")
    p.add_argument("--new", help="the commit after (default: the working tree)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("bench", nargs=argparse.REMAINDER,
                   help="-- the bench script (path relative to the repo) and its options")
    args = p.parse_args()
    argv = args.bench[1:] if args.bench[:1] == ["--"] else args.bench
    if not argv:
        raise SystemExit("give the bench to run after --, e.g. -- bench/translate.py --configs tiny")
    tables: dict[str, list[list[str]]] = {"old": [], "new": []}
    with checkout(args.old) as old, checkout(args.new) as new:
        trees = {"old": old, "new": new}
        for r in range(args.rounds):
            for side in (("old", "new") if r % 2 == 0 else ("new", "old")):
                out = run_bench(trees[side], argv)
                print(f"===== round {r + 1}, {side} ({args.old if side == 'old' else args.new or 'working tree'})")
                print(out, flush=True)
                tables[side].append(result_table(out))
    for side in ("old", "new"):
        print(f"\n##### {side}: result tables of rounds 1..{args.rounds}")
        for r, t in enumerate(tables[side], 1):
            print(f"-- round {r}")
            print("\n".join(t))


if __name__ == "__main__":
    main()
