"""`nmt serve` under abuse: a flood of greedy clients, connections that never speak, and SIGTERM under load.

What it measures, each scenario against a fresh `python -m nmt serve` subprocess on a free loopback port (stderr
in a temp file, stopped with SIGTERM at the end, killed if it hangs):

  - flood: --flooders keep-alive connections, each POSTing --sentences-per-request sentences to /v1/translate in a
    loop (reconnecting when the server closes it; after a 503/429 it waits 0.5 s, ignoring Retry-After), for
    --seconds; meanwhile one good client sends one sentence at a time (10 s client timeout: a timeout is a failure
    with latency 10 s; it connects just before the flood, like a user already there). Reported: the good client's
    requests, p50/p99/max latency and failures; the flooders' answers by status, non-200 answers without a JSON
    {"error": "..."} body, 503s without Retry-After, connection errors; the server's RSS (VmRSS) when idle (after
    8 warm-up requests of the flooders' size sent at once: the memory of full batches is the server's working set,
    not the flood's), its peak (sampled every 0.5 s) and at the end (2 s after the
    flooders left); sentences translated (/health before and after).
  - silent: --silent TCP connections that never send a byte: how long until the server closes each (bounded to
    serve.read_timeout + 10 s); meanwhile a good client sends one sentence per second. Also one connection that
    sends its headers one byte per second (never finishing them) and one that announces Content-Length: 1000 and
    sends 10 bytes: when each was answered or closed, and with what.
  - sigterm: with serve.shutdown_timeout = --shutdown-timeout, --shutdown-requests requests of
    --sentences-per-request sentences at once, each on its own connection; once /health shows them queued (at most
    1 s), SIGTERM. Reported: every answer (status, JSON or not, connection errors), the time from SIGTERM to the
    process's exit and its exit code, and the "Traceback"s in the server's stderr.

  - payloads: each attack of bench/abuse_payloads.py (HTML, documents, a glossary) sent once while /health is
    polled: the answer (status, error line), wall and server CPU seconds, RSS before and peak, the slowest /health.

Goals (PASS/FAIL each; the exit code is 0 either way, this is a measurement):
  - flood: peak RSS <= idle RSS + 200 MiB; the good client's p99 <= 2 s with no failures; the flooders got at least
    one 503/429 and every non-200 answer was a JSON error (and every 503 carried Retry-After);
  - silent: every silent connection closed within serve.read_timeout + 1 s; the good client answered every time;
    the header trickle and the short body closed or answered with a JSON 4xx (408) within serve.read_timeout + 1 s;
  - sigterm: every request answered 200 or with a JSON 503 (no connection errors, no 500, nothing non-JSON), exit
    code 0, exit within serve.shutdown_timeout + 5 s;
  - payloads: each answered 200 or with a JSON 4xx, at most 2 s of server CPU, RSS within idle + 200 MiB, /health
    always answered within 1 s.

The client (bench/abuse_http.py, bench/abuse_clients.py) is asyncio over raw sockets with a minimal HTTP/1.1
client (keep-alive, Content-Length or chunked bodies), so thousands of connections cost it little; its open-files
limit is raised to the hard limit first (the server inherits it). The client shares the machine with the server:
on a small machine it takes CPU from it.

Usage (from the repository root):

    python bench/serve_abuse.py                                      # all three, full size, demo model
    python bench/serve_abuse.py --scenario flood --seconds 10 --flooders 100 --sentences-per-request 20
    python bench/serve_abuse.py --scenario silent --silent 20
    python bench/serve_abuse.py --scenario sigterm --shutdown-requests 20 --shutdown-timeout 5
    python bench/serve_abuse.py --scenario payloads                  # issue 43's attacks (bench/abuse_payloads.py)
    python bench/serve_abuse.py --checkpoint runs/multi30k-en-de/averaged.pt --set serve.read_timeout=5
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import resource
import signal
import statistics
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import abuse_payloads
import httpx
from abuse_clients import (
    GoodRun,
    Tally,
    Watch,
    flooder,
    fmt_counts,
    good_client,
    header_trickle,
    one_shot,
    percentile,
    sample_rss,
    say_nothing,
    short_body,
    watched,
)
from abuse_http import (
    Server,
    connected,
    get_json,
    translate_body,
)
from common import ROOT, table

MULTI30K = ROOT.parent / "shared" / "data" / "multi30k" / "test2016.en"
MIB = 2**20
QUEUE_WAIT = 1.0  # sigterm: longest wait for the requests to show up as queued
RSS_GOAL = 200 * MIB
WARM_UP = 8  # flood: requests sent at once before "idle" is measured, so that the server has run full batches
P99_GOAL = 2.0


# ---- results


@dataclass
class Outcome:
    name: str
    rows: list[tuple[str, str]]
    goals: list[tuple[str, bool]]  # (the goal with what was measured, met)


def mib(n: int | None) -> str:
    return "?" if n is None else f"{n / MIB:,.0f} MiB"


def show(outcome: Outcome) -> None:
    print(f"\n== {outcome.name}")
    print(table(["measure", "value"], [list(r) for r in outcome.rows]))
    for text, ok in outcome.goals:
        print(f"{'PASS' if ok else 'FAIL'}  {text}")


def bodies(lines: list[str], size: int, count: int) -> list[bytes]:
    """`count` request bodies of `size` sentences each, every one starting further along the lines (cyclic)."""
    return [translate_body([lines[(k * size + i) % len(lines)] for i in range(size)]) for k in range(count)]


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ---- scenarios


async def flood(args: argparse.Namespace, lines: list[str]) -> Outcome:
    async with Server(args) as server:
        work = bodies(lines, args.sentences_per_request, args.flooders)
        progress(f"flood: warm-up ({WARM_UP} requests at once), then {args.flooders} flooders x "
                 f"{args.sentences_per_request} sentences "
                 f"for {args.seconds:g} s")
        await asyncio.gather(*(one_shot(server.port, body, 120) for body in work[:WARM_UP]))
        idle, before = server.rss(), await get_json(server.port, "/health")
        samples: list[int] = []
        tally, stop = Tally(), asyncio.Event()
        sampler = asyncio.create_task(sample_rss(server, samples))
        good = asyncio.create_task(good_client(await connected(server.port), lines, stop))
        flooders = [asyncio.create_task(flooder(server.port, body, tally)) for body in work]
        began = time.monotonic()
        await asyncio.sleep(args.seconds)
        stop.set()
        for task in flooders:
            task.cancel()
        await asyncio.gather(*flooders, return_exceptions=True)
        run = await good
        seconds = time.monotonic() - began
        await asyncio.sleep(2.0)
        sampler.cancel()
        end, after = server.rss(), await get_json(server.port, "/health", 30)
        rows = [*run.rows(), *tally.rows(), ("server RSS idle / peak / end",
                                             f"{mib(idle)} / {mib(max(samples, default=None))} / {mib(end)}"),
                translated_row(before, after, seconds), server.log_row()]
    return Outcome(f"flood: {args.flooders} flooders x {args.sentences_per_request} sentences, {args.seconds:g} s",
                   rows, flood_goals(run, tally, idle, samples))


def translated_row(before: dict | None, after: dict | None, seconds: float) -> tuple[str, str]:
    if before is None or after is None:
        return "sentences translated", "? (/health did not answer)"
    n = after["sentences"] - before["sentences"]
    return "sentences translated", f"{n:,} ({n / seconds:,.1f}/s)"


def flood_goals(run: GoodRun, tally: Tally, idle: int | None, samples: list[int]) -> list[tuple[str, bool]]:
    peak = max(samples, default=None)
    p99, failed = percentile(run.latencies, 0.99), sum(run.failures.values())
    refused = tally.statuses[503] + tally.statuses[429]
    return [
        (f"peak RSS <= idle + 200 MiB (idle {mib(idle)}, peak {mib(peak)})",
         idle is not None and peak is not None and peak <= idle + RSS_GOAL),
        (f"good client p99 <= {P99_GOAL:g} s and no failures (p99 {p99:.2f} s, {failed} failures of "
         f"{len(run.latencies)})", p99 <= P99_GOAL and failed == 0),
        (f"flooders got JSON 503/429 ({refused:,}), no non-JSON errors ({tally.non_json_errors}), Retry-After on "
         f"every 503 ({tally.no_retry_after} without)",
         refused > 0 and tally.non_json_errors == 0 and tally.no_retry_after == 0),
    ]


async def silent(args: argparse.Namespace, lines: list[str]) -> Outcome:
    async with Server(args) as server:
        read_timeout = server.limit("read_timeout", 10.0)
        bound, port = read_timeout + 10, server.port
        progress(f"silent: {args.silent} silent connections, a header trickle and a short body "
                 f"(serve.read_timeout={read_timeout:g} s; watching up to {bound:g} s)")
        stop = asyncio.Event()
        good = asyncio.create_task(good_client(await connected(port), lines, stop, pace=1.0))
        trickle = asyncio.create_task(watched(port, bound, header_trickle(port)))
        short = asyncio.create_task(watched(port, bound, short_body(port)))
        watches = await asyncio.gather(*(watched(port, bound, say_nothing) for _ in range(args.silent)))
        slow = {"header trickle (1 byte/s)": await trickle, "Content-Length 1000, 10 bytes sent": await short}
        stop.set()
        run = await good
        rows = [*silent_rows(watches), *((name, w.describe()) for name, w in slow.items()), *run.rows(),
                server.log_row()]
    return Outcome(f"silent: {args.silent} connections that never send (serve.read_timeout={read_timeout:g} s)",
                   rows, silent_goals(watches, slow, run, read_timeout + 1))


def silent_rows(watches: list[Watch]) -> list[tuple[str, str]]:
    closed = [w.closed for w in watches if w.closed is not None]
    times = f"{statistics.median(closed):.2f} / {max(closed):.2f}" if closed else "-"
    answers = Counter(w.answer() for w in watches)
    return [("silent: closed by the server", f"{len(closed)} of {len(watches)}"),
            ("silent: how they ended", fmt_counts(Counter(w.ended for w in watches))),
            ("silent: what the server sent", fmt_counts(answers)),
            ("silent: median / max seconds to close", times)]


def silent_goals(watches: list[Watch], slow: dict[str, Watch], run: GoodRun, limit: float) -> list[tuple[str, bool]]:
    in_time = sum(w.closed is not None and w.closed <= limit for w in watches)
    failed = sum(run.failures.values())
    goals = [(f"silent connections all closed within {limit:g} s ({in_time} of {len(watches)})",
              in_time == len(watches)),
             (f"good client answered every time ({len(run.latencies) - failed} of {len(run.latencies)})",
              failed == 0 and bool(run.latencies))]
    for name, w in slow.items():
        answer = w.answer()
        fine = answer == "none" or (answer.endswith(" JSON") and answer[0] == "4")
        goals.append((f"{name}: closed or a JSON 4xx within {limit:g} s ({w.describe()})",
                      w.reacted is not None and w.reacted <= limit and fine))
    return goals


async def sigterm(args: argparse.Namespace, lines: list[str]) -> Outcome:
    n, grace = args.shutdown_requests, args.shutdown_timeout
    async with Server(args, f"serve.shutdown_timeout={grace:g}") as server:
        progress(f"sigterm: {n} requests x {args.sentences_per_request} sentences, then SIGTERM "
                 f"(serve.shutdown_timeout={grace:g} s)")
        tasks = [asyncio.create_task(one_shot(server.port, body, grace + 30))
                 for body in bodies(lines, args.sentences_per_request, n)]
        queued = await wait_queued(server.port, tasks)
        answered_before = sum(t.done() for t in tasks)
        server.proc.send_signal(signal.SIGTERM)
        took = await server.exited(grace + 30)
        exit_after = f"killed (still running after {grace + 30:g} s)" if took is None else f"{took:.2f} s"
        answers = Counter(await asyncio.gather(*tasks))
        code = server.stop()
        rows = [("at SIGTERM: requests in flight / sentences queued / already answered",
                 f"{queued.get('requests', '?')} / {queued.get('queued', '?')} / {answered_before}"),
                ("answers", fmt_counts(answers)),
                ("SIGTERM to exit", exit_after),
                ("exit code", str(code)), server.log_row()]
    good = answers["200"] + answers["503 JSON"]
    goals = [(f"every request answered 200 or JSON 503 ({good} of {n})", good == n),
             (f"exit code 0 (got {code})", code == 0 and took is not None),
             (f"exit within serve.shutdown_timeout + 5 s = {grace + 5:g} s (took "
              f"{'over ' + format(grace + 30, 'g') if took is None else format(took, '.2f')} s)",
              took is not None and took <= grace + 5)]
    return Outcome(f"sigterm: {n} requests x {args.sentences_per_request} sentences, serve.shutdown_timeout="
                   f"{grace:g} s", rows, goals)


async def wait_queued(port: int, tasks: list[asyncio.Task]) -> dict[str, Any]:
    """Poll /health until every request is in flight or answered, at most QUEUE_WAIT seconds; its last answer."""
    deadline, last = time.monotonic() + QUEUE_WAIT, {}
    while time.monotonic() < deadline:
        last = await get_json(port, "/health", max(0.1, deadline - time.monotonic())) or last
        if last.get("requests", 0) + sum(t.done() for t in tasks) >= len(tasks):
            break
        await asyncio.sleep(0.05)
    return last


async def payloads(args: argparse.Namespace, lines: list[str]) -> Outcome:
    """Each attack of bench/abuse_payloads.py, one at a time, with /health polled meanwhile: its answer, wall and
    server CPU seconds, RSS before and peak, the slowest /health."""
    rows, goals = [], []
    async with Server(args) as server:
        for p in abuse_payloads.payloads():
            progress(f"payloads: {p.name} ({p.size():,} bytes)")
            idle, cpu, samples, latencies, stop = server.rss(), cpu_seconds(server.proc.pid), [], [], asyncio.Event()
            sampler = asyncio.create_task(sample_rss(server, samples))
            poller = asyncio.create_task(poll_health(server.port, latencies, stop))
            began = time.monotonic()
            status, line = await asyncio.to_thread(send_payload, server.port, p)
            took, used = time.monotonic() - began, cpu_seconds(server.proc.pid) - cpu
            stop.set()
            await poller
            sampler.cancel()
            peak, worst = max([*samples, server.rss() or 0]), max(latencies, default=float("inf"))
            rows.append((p.name, f"{status} {line[:90]}; {took:.2f} s wall, {used:.2f} s CPU; RSS {mib(idle)} -> "
                                 f"{mib(peak)}; /health max {worst:.2f} s"))
            fine = status == 200 or (400 <= status < 500 and line != "non-JSON")
            goals.append((f"{p.name}: 200 or JSON 4xx ({status}), CPU <= 2 s ({used:.2f}), RSS <= idle + 200 MiB "
                          f"(+{mib(peak - (idle or peak))}), /health <= 1 s ({worst:.2f})",
                          fine and used <= 2 and idle is not None and peak <= idle + RSS_GOAL and worst <= 1))
        rows.append(server.log_row())
    return Outcome("payloads: the issue-43 attacks, one request each", rows, goals)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def poll_health(port: int, latencies: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        began = time.monotonic()
        answered = await get_json(port, "/health", 10)
        latencies.append(time.monotonic() - began if answered is not None else 10.0)
        await asyncio.sleep(0.05)


def send_payload(port: int, p: abuse_payloads.Payload) -> tuple[int, str]:
    """The status and the error line (or "ok", "non-JSON") of one attack request."""
    url = f"http://127.0.0.1:{port}{p.path}"
    try:
        if p.file is not None:
            reply = httpx.post(url, files={"file": p.file}, data={"source": "en", "target": "de"}, timeout=600)
        else:
            reply = httpx.post(url, json=p.json, timeout=600)
    except httpx.HTTPError as e:
        return 0, f"connection error ({type(e).__name__})"
    try:
        body = reply.json()
    except ValueError:
        return reply.status_code, "non-JSON"
    return reply.status_code, "ok" if reply.status_code == 200 else str(body.get("error", body))


SCENARIOS: dict[str, Callable[[argparse.Namespace, list[str]], Awaitable[Outcome]]] = {
    "flood": flood, "silent": silent, "sigterm": sigterm, "payloads": payloads}


# ---- main


def raise_open_files_limit() -> int:
    """The soft RLIMIT_NOFILE raised to the hard one (thousands of connections); the limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def load_sentences(path: Path) -> list[str]:
    """The non-empty lines of `path`, else made-up short sentences."""
    if path.is_file():
        lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        if lines:
            return lines
    progress(f"{path} not found: made-up sentences")
    who = ["A man", "Two women", "A little girl", "An old dog", "Three boys"]
    what = ["is walking", "are playing", "is sitting", "runs", "is waiting"]
    where = ["in the park", "on the beach", "near a red car", "in a small kitchen", "under a tree"]
    return [f"{a} {b} {c}." for a, b, c in itertools.product(who, what, where)]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", type=Path, default=ROOT / "tests" / "fixtures" / "demo-model.pt")
    p.add_argument("--source", type=Path, default=MULTI30K, help="sentences, one per line")
    p.add_argument("--threads", type=int, default=1, help="the server's torch threads")
    p.add_argument("--dtype", default="fp32", help="as nmt serve --dtype")
    p.add_argument("--scenario", choices=[*SCENARIOS, "all"], default="all")
    p.add_argument("--seconds", type=float, default=60.0, help="flood: how long")
    p.add_argument("--flooders", type=int, default=2000, help="flood: greedy connections")
    p.add_argument("--sentences-per-request", type=int, default=100, help="flood and sigterm: per request")
    p.add_argument("--silent", type=int, default=300, help="silent: connections that never send a byte")
    p.add_argument("--shutdown-requests", type=int, default=200, help="sigterm: requests queued before SIGTERM")
    p.add_argument("--shutdown-timeout", type=float, default=10.0, help="sigterm: serve.shutdown_timeout")
    p.add_argument("--set", action="append", default=[], metavar="serve.KEY=VALUE",
                   help="passed to every server (repeatable)")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    files = raise_open_files_limit()
    lines = load_sentences(args.source)
    names = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    progress(f"{args.checkpoint}, {args.threads} server threads, {len(lines)} sentences of {args.source.name}; "
             f"open-files limit {files}")
    outcomes = [asyncio.run(SCENARIOS[name](args, lines)) for name in names]
    for outcome in outcomes:
        show(outcome)
    failed = [(o.name.split(":")[0], text) for o in outcomes for text, ok in o.goals if not ok]
    total = sum(len(o.goals) for o in outcomes)
    print(f"\noverall: {'PASS' if not failed else 'FAIL'}: {total - len(failed)} of {total} goals met"
          + "".join(f"\n  FAIL {name}: {text}" for name, text in failed))


if __name__ == "__main__":
    main()
