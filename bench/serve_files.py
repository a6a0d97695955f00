"""`nmt serve`'s /translate_file under 1,000 requests: no temporary file left behind.

    python bench/serve_files.py                  # 1,000 requests on the committed demo model
    python bench/serve_files.py --requests 200

A real server (`python -m nmt serve`, 127.0.0.1, its own TMPDIR) gets LibreTranslate's multipart request
(file, source, target) `--requests` times, in this mix: a text file downloaded at once (most), a Markdown file, a
corrupt docx (400), an unsupported extension (400), and one in ten never downloaded (left to serve.file_ttl, set to
2 s here). Then, after the TTL: the files in the server's TMPDIR must be none. Prints the counts, the requests per
second and the leftovers; exits 1 if any file is left."""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINT = ROOT / "tests" / "fixtures" / "demo-model.pt"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(tmp: Path, port: int, ttl: float) -> subprocess.Popen:
    env = {**os.environ, "TMPDIR": str(tmp), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "nmt", "serve", "--checkpoint", str(CHECKPOINT), "--port", str(port), "--dtype",
           "fp32", "--threads", "1", "--no-access-log", "--set", f"serve.file_ttl={ttl}", "--set",
           "serve.max_files=64"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    for _ in range(1200):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise SystemExit(f"the server stopped: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.1)
    raise SystemExit("the server did not get ready in 120 s")


def one(client: httpx.Client, url: str, i: int) -> str:
    """Request i of the mix; returns what it was."""
    if i % 13 == 5:
        kind, file = "corrupt", ("b.docx", b"PK\x03\x04 not a zip")
    elif i % 17 == 3:
        kind, file = "unsupported", ("b.exe", b"MZ")
    elif i % 4 == 1:
        kind, file = "md", ("n.md", b"# three red cars\n\nI see the **red** car.\n")
    else:
        kind, file = "txt", ("t.txt", b"three red cars\n")
    answer = client.post(f"{url}/translate_file", files={"file": file}, data={"source": "en", "target": "de"})
    if kind in ("corrupt", "unsupported"):
        assert answer.status_code == 400, answer.text
        return kind
    assert answer.status_code == 200, answer.text
    if i % 10 == 7:
        return "left to expire"
    got = client.get(answer.json()["translatedFileUrl"])
    assert got.status_code == 200 and got.content.strip(), got.text
    return "downloaded"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--ttl", type=float, default=2.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="nmt-bench-files-") as tmp_name:
        tmp = Path(tmp_name)
        port = free_port()
        proc = start(tmp, port, args.ttl)
        url, counts = f"http://127.0.0.1:{port}", {}
        try:
            started = time.monotonic()
            with httpx.Client(timeout=60) as client:
                for i in range(args.requests):
                    kind = one(client, url, i)
                    counts[kind] = counts.get(kind, 0) + 1
            seconds = time.monotonic() - started
            time.sleep(args.ttl + 2)  # the undownloaded files' TTL, and the sweep after it
            leftovers = [p for p in tmp.rglob("*") if p.is_file()]
        finally:
            proc.terminate()
            proc.wait(60)
        after_exit = [p for p in tmp.rglob("*") if p.is_file()]
    print(f"{args.requests} requests in {seconds:.1f} s ({args.requests / seconds:.1f}/s): "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    print(f"files left in the server's TMPDIR after the TTL: {len(leftovers)}; after it exited: {len(after_exit)}")
    for p in leftovers[:10]:
        print("   ", p)
    return 1 if leftovers or after_exit else 0


if __name__ == "__main__":
    raise SystemExit(main())
