"""`nmt serve` under concurrent clients: sentences/s and latency vs offline translation and vs the same server
with batching off, all in one run.

Usage (from the repository root):

    python bench/serve.py --checkpoint runs/multi30k-en-de/averaged.pt                    # test2016, 1/8/32 clients
    python bench/serve.py --checkpoint runs/multi30k-en-de/averaged.pt --sentences 300 --repeats 3 --threads 2
    python bench/serve.py --checkpoint runs/multi30k-en-de/averaged.pt --sentences 300 --dtype fp32 --compile

Every contestant translates the same sentences (the first --sentences lines of Multi30k test2016, all 1,000 by
default) with the checkpoint's search settings, in --dtype with --threads torch threads:

  - offline: what `nmt translate -i FILE` does with them: Translator.stream (chunks of decode.chunk_lines,
    length-sorted batches of decode.max_tokens) in this process; sentences/s;
  - in-process, one sentence at a time: Translator.translate_chunk([line]) per line: the latency a 1-client
    server is compared with (p50);
  - in-process, C at a time: translate_chunk of C lines after C lines: the most a server can do with C clients
    that each send one sentence and wait for it (its batches hold at most C sentences);
  - server: `python -m nmt serve` (a subprocess, --no-access-log) with C client threads on loopback (C from
    --clients), each with a keep-alive connection sending one sentence per POST /v1/translate and the next
    when answered; sentences/s (all sentences / wall time) and per-request latency p50/p99;
  - unbatched: the same server with serve.batching=false: one request at a time, the OpenNMT-py server's way;
  - compiled (with --compile): the batching server with `nmt serve --compile` (nmt.search.compiled), its packages
    compiled before the timed rounds (by this process, for batches of 1, 2, 4 ... sentences up to the biggest that
    runs compiled), a second table setting it beside the batching server without --compile.

Both servers run during the whole bench (an idle one waits on a condition and takes no CPU); each round runs
every contestant once, the order reversed every other round, after one untimed warm-up round. Reported: medians
over --repeats rounds with the spread (min-max), ratios against offline, unbatched and in-process C at a time,
the server's sentences per batch (from /health), and the share of server answers identical to the offline
translation (bf16 results depend a little on the batch's shape). The clients run on the same machine and take
CPU from the server: on a 2-core machine that is part of the price a loopback measurement shows.

Goals: at 32 clients >= 0.7x the offline throughput and >= 4x the unbatched server; at 1 client p50 <= 1.3x
the in-process latency of one sentence.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from common import ROOT, OtherLoad, median, table

from nmt.search.compiled import CompiledDecoder
from nmt.translation.translator import ModelOptions, Translator

MULTI30K = ROOT.parent / "shared" / "data" / "multi30k" / "test2016.en"


@dataclass
class Run:
    seconds: float  # wall time for all sentences
    latencies: list[float]  # per request (or per sentence in-process)
    texts: list[str]
    batches: int = 0  # the server's batches for them

    @property
    def rate(self) -> float:
        return len(self.texts) / self.seconds


def percentile(xs: list[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Served:
    """A `python -m nmt serve` subprocess on a free loopback port."""

    def __init__(self, args: argparse.Namespace, *extra: str):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(args.threads)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "nmt", "serve", "--checkpoint", str(args.checkpoint), "--port", str(self.port),
             "--threads", str(args.threads), "--dtype", args.dtype, "--no-access-log", *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
        deadline = time.monotonic() + 300
        while self.health() != 200:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"nmt serve {' '.join(extra)} did not start")
            time.sleep(0.2)

    def health(self) -> int | None:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
            conn.request("GET", "/health")
            return conn.getresponse().status
        except OSError:
            return None

    def batches(self) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        conn.request("GET", "/health")
        return json.loads(conn.getresponse().read())["batches"]

    def clients(self, lines: list[str], clients: int) -> Run:
        """`clients` threads, each sending the next unsent sentence as soon as its previous one is answered."""
        texts: list[str] = [""] * len(lines)
        latencies: list[float] = []
        next_line = iter(range(len(lines)))
        lock = threading.Lock()
        start = threading.Barrier(clients + 1)

        def client() -> None:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
            conn.connect()
            start.wait()
            while True:
                with lock:
                    i = next(next_line, None)
                if i is None:
                    break
                body = json.dumps({"sentences": [lines[i]]})
                sent = time.perf_counter()
                conn.request("POST", "/v1/translate", body, {"Content-Type": "application/json"})
                reply = conn.getresponse().read()
                took = time.perf_counter() - sent
                texts[i] = json.loads(reply)["translations"][0]["text"]
                with lock:
                    latencies.append(took)
            conn.close()

        threads = [threading.Thread(target=client) for _ in range(clients)]
        batches = self.batches()
        for t in threads:
            t.start()
        start.wait()
        began = time.perf_counter()
        for t in threads:
            t.join()
        seconds = time.perf_counter() - began
        return Run(seconds, latencies, texts, self.batches() - batches)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(120)


def offline(translator: Translator, lines: list[str]) -> Run:
    began = time.perf_counter()
    texts = [t.text[0] for t in translator.stream(lines)]
    return Run(time.perf_counter() - began, [], texts)


def one_at_a_time(translator: Translator, lines: list[str]) -> Run:
    latencies, texts = [], []
    began = time.perf_counter()
    for line in lines:
        sent = time.perf_counter()
        texts.append(translator.translate_chunk([line])[0].text[0])
        latencies.append(time.perf_counter() - sent)
    return Run(time.perf_counter() - began, latencies, texts)


def at_a_time(translator: Translator, lines: list[str], size: int) -> Run:
    began = time.perf_counter()
    texts = [t.text[0] for i in range(0, len(lines), size) for t in translator.translate_chunk(lines[i:i + size])]
    return Run(time.perf_counter() - began, [], texts)


def spread(xs: list[float], fmt: str = "{:,.1f}") -> str:
    return fmt.format(median(xs)) + (f" ({fmt.format(min(xs))}-{fmt.format(max(xs))})" if len(xs) > 1 else "")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", type=Path, default=ROOT / "runs" / "multi30k-en-de" / "averaged.pt")
    p.add_argument("--source", type=Path, default=MULTI30K, help="one sentence per line")
    p.add_argument("--sentences", type=int, default=1000, help="the first N lines of --source")
    p.add_argument("--clients", default="1,8,32", help="comma-separated numbers of concurrent clients")
    p.add_argument("--repeats", type=int, default=3, help="timed rounds")
    p.add_argument("--threads", type=int, default=2, help="torch threads (in-process and in each server)")
    p.add_argument("--dtype", default="auto", help="as nmt translate/serve --dtype")
    p.add_argument("--max-delay-ms", type=float, help="serve.max_delay_ms of the batching server (default: its own)")
    p.add_argument("--compile", action="store_true", help="also a batching server with --compile (fp32 only)")
    args = p.parse_args()
    lines = args.source.read_text(encoding="utf-8").splitlines()[:args.sentences]
    clients = [int(c) for c in args.clients.split(",")]

    torch.set_num_threads(args.threads)
    translator = Translator.load(args.checkpoint, opts=ModelOptions(dtype=args.dtype, config_given=False))
    print(f"{len(lines)} sentences of {args.source.name}, {args.checkpoint}: beam {translator.decode.beam}, "
          f"{translator.dtype}, {args.threads} threads; starting the servers", file=sys.stderr)
    delay = [] if args.max_delay_ms is None else ["--set", f"serve.max_delay_ms={args.max_delay_ms}"]
    servers = {"batched": Served(args, *delay), "unbatched": Served(args, "--set", "serve.batching=false")}
    if args.compile:
        precompile(args)
        servers["compiled"] = Served(args, *delay, "--compile")
    contestants: dict[str, Callable[[list[str]], Run]] = {
        "offline": lambda xs: offline(translator, xs),
        "in-process 1 by 1": lambda xs: one_at_a_time(translator, xs),
    }
    for c in clients:
        if c > 1:
            contestants[f"in-process {c} at a time"] = lambda xs, c=c: at_a_time(translator, xs, c)
    for name, server in servers.items():
        for c in clients:
            contestants[f"{name} {c}"] = lambda xs, server=server, c=c: server.clients(xs, c)
    runs: dict[str, list[Run]] = {name: [] for name in contestants}
    try:
        with OtherLoad() as load:
            for r in range(args.repeats + 1):
                names = list(contestants) if r % 2 == 0 else list(contestants)[::-1]
                for name in names:
                    time.sleep(0.3)  # let the previous contestant's thread pool go idle
                    run = contestants[name](lines if r else lines[:64])
                    if r:
                        runs[name].append(run)
                done = ", ".join(f"{n} {runs[n][-1].rate:,.1f}/s" for n in contestants if runs[n]) if r else "warm-up"
                print(f"  round {r}/{args.repeats}: {done}", file=sys.stderr, flush=True)
    finally:
        for server in servers.values():
            server.stop()

    rate = {name: [run.rate for run in rs] for name, rs in runs.items()}
    ms = lambda rs, q: [1000 * percentile(run.latencies, q) for run in rs]  # noqa: E731
    reference = runs["offline"][0].texts
    print(f"\nsentences/s and per-request latency (ms), median of {args.repeats} (min-max); other load {load}")
    print(f"offline (nmt translate's Translator.stream): {spread(rate['offline'])} sentences/s; in-process one "
          f"sentence at a time: {spread(rate['in-process 1 by 1'])}/s, p50 "
          f"{spread(ms(runs['in-process 1 by 1'], 0.5))} ms, p99 {spread(ms(runs['in-process 1 by 1'], 0.99))} ms\n")
    header = ["clients", "server sent/s", "p50 ms", "p99 ms", "sent/batch", "unbatched sent/s", "p50 ms", "p99 ms",
              "server/offline", "server/unbatched", "server/in-process C at a time", "p50/in-process",
              "same as offline"]
    rows = []
    for c in clients:
        b, u = runs[f"batched {c}"], runs[f"unbatched {c}"]
        same = statistics.mean(sum(x == y for x, y in zip(run.texts, reference)) / len(reference) for run in b)
        ceiling = rate[f"in-process {c} at a time"] if c > 1 else rate["in-process 1 by 1"]
        rows.append([str(c), spread(rate[f"batched {c}"]), spread(ms(b, 0.5)), spread(ms(b, 0.99)),
                     f"{statistics.mean(len(lines) / run.batches for run in b):.1f}",
                     spread(rate[f"unbatched {c}"]), spread(ms(u, 0.5)), spread(ms(u, 0.99)),
                     f"{median(rate[f'batched {c}']) / median(rate['offline']):.2f}",
                     f"{median(rate[f'batched {c}']) / median(rate[f'unbatched {c}']):.2f}",
                     f"{median(rate[f'batched {c}']) / median(ceiling):.2f} ({spread(ceiling)}/s)",
                     f"{median(ms(b, 0.5)) / median(ms(runs['in-process 1 by 1'], 0.5)):.2f}",
                     f"{100 * same:.1f}%"])
    print(table(header, rows))
    if args.compile:
        print("\n`nmt serve --compile` beside the batching server without it (`batched`), same rounds")
        print(table(["clients", "compiled sent/s", "p50 ms", "p99 ms", "sent/batch", "compiled/batched",
                     "p50 compiled/batched"],
                    [[str(c), spread(rate[f"compiled {c}"]), spread(ms(runs[f"compiled {c}"], 0.5)),
                      spread(ms(runs[f"compiled {c}"], 0.99)),
                      f"{statistics.mean(len(lines) / run.batches for run in runs[f'compiled {c}']):.1f}",
                      f"{median(rate[f'compiled {c}']) / median(rate[f'batched {c}']):.2f}",
                      f"{median(ms(runs[f'compiled {c}'], 0.5)) / median(ms(runs[f'batched {c}'], 0.5)):.2f}"]
                     for c in clients]))


def precompile(args: argparse.Namespace) -> None:
    """The compiled server's packages, built here (beside the checkpoint, where the server finds them): those of
    each number of sentences that runs compiled (1, 2, 4 ... up to nmt.search.compiled's MAX_ROWS rows), on one
    thread and on --threads (nmt.threads.FreeCores may run a batch on either)."""
    translator = Translator.load(args.checkpoint, opts=ModelOptions(dtype=args.dtype, config_given=False,
                                                                    compile=True))
    if not isinstance(translator.compiled, CompiledDecoder):  # a GPU's CUDA graphs: recorded by the warm-up round
        return
    translator.compiled.announce = lambda message: print(message, file=sys.stderr, flush=True)
    n = 1
    while translator.compiled.pays(n, translator.decode.beam):
        for threads in {1, args.threads}:
            translator.compiled.prepare(n, translator.decode.beam, translator.special, threads)
        n *= 2


if __name__ == "__main__":
    main()
