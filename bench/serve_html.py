"""`nmt serve`'s `format: "html"` against plain text: the time of a Mastodon-sized post (about 500 characters:
paragraphs, a link, a mention, bold, a line break) sent as HTML to LibreTranslate's POST /translate, divided by
the time of the same sentences sent as plain text (one line each). Both requests alternate, one at a time, on
one keep-alive connection to one server (`python -m nmt serve`, a subprocess).

    python bench/serve_html.py --checkpoint tests/fixtures/demo-model.pt --repeats 30

Goal: HTML within 1.5x the plain text's time (what parsing the fragment and putting the markup back may cost).
Reported: medians and spread (min-max) of each, the median of the per-pair ratios, and whether the HTML answer's
text equals the plain answer's sentence by sentence.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import time
from pathlib import Path

from common import ROOT, table
from serve import MULTI30K, Served

sys.path.insert(0, str(ROOT))
from nmt.translation.documents.html import parse_html  # noqa: E402


def post(lines: list[str], link: str) -> str:
    """About 500 characters of a status as Mastodon renders it."""
    first, second, third, fourth, fifth, sixth = lines[:6]
    return (f"<p>{first} <a href=\"https://example.social/@{link}\" class=\"u-url mention\">@<span>{link}</span>"
            f"</a> {second} {third}</p><p><b>{fourth}</b><br>{fifth} {sixth}</p>")


def request(conn: http.client.HTTPConnection, body: dict) -> tuple[float, dict]:
    sent = time.perf_counter()
    conn.request("POST", "/translate", json.dumps(body), {"Content-Type": "application/json"})
    answer = json.loads(conn.getresponse().read())
    return time.perf_counter() - sent, answer


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", type=Path, default=ROOT / "tests" / "fixtures" / "demo-model.pt")
    p.add_argument("--source", type=Path, default=MULTI30K, help="sentences, one per line")
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--dtype", default="fp32")
    args = p.parse_args()
    lines = args.source.read_text(encoding="utf-8").splitlines()
    server = Served(args)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)
    times: dict[str, list[float]] = {"html": [], "text": []}
    same, sizes = 0, []
    try:
        for i in range(args.repeats + 1):  # the first pair warms up, untimed
            html = post(lines[6 * i:6 * i + 6], f"user{i}")
            sentences = parse_html(html).texts
            sizes.append(len(html))
            took_html, got_html = request(conn, {"q": html, "source": "en", "target": "de", "format": "html"})
            took_text, got_text = request(conn, {"q": "\n".join(sentences), "source": "en", "target": "de"})
            if i:
                times["html"].append(took_html)
                times["text"].append(took_text)
                doc = parse_html(html)
                plain = got_text["translatedText"].split("\n")
                same += doc.render(plain) == got_html["translatedText"]
    finally:
        server.stop()
    ratios = [h / t for h, t in zip(times["html"], times["text"])]
    rows = [(kind, f"{statistics.median(xs) * 1000:.1f}", f"{min(xs) * 1000:.1f}-{max(xs) * 1000:.1f}")
            for kind, xs in times.items()]
    print(f"{args.checkpoint}, {args.repeats} posts of {statistics.median(sizes):.0f} characters (median)")
    print(table(["request", "median ms", "min-max ms"], rows))
    ratio = statistics.median(ratios)
    print(f"html / text: median {ratio:.2f} (spread {min(ratios):.2f}-{max(ratios):.2f}); "
          f"answers equal sentence by sentence: {same} of {args.repeats}")
    print(f"{'PASS' if ratio <= 1.5 else 'FAIL'}  HTML within 1.5x of plain text")


if __name__ == "__main__":
    main()
