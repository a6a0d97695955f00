"""Glossaries on the hard cases: are the terms obeyed, and are they put IN PLACE of the word the model would have
written, on three kinds of terms (Multi30k test2016 by default, or the demo corpus):

    python bench/glossary.py --checkpoint runs/multi30k-en-de/averaged.pt          # after `make multi30k`
    python bench/glossary.py --corpus demo --checkpoint tests/fixtures/demo-model.pt   # after `nmt prepare --demo`

Kinds of terms (seeded, reproducible):
- `reference`: source words (4+ letters, not in a short stop list) found in at least two test sources, each paired
  with the target word the training data pairs with it most (Dice over sentence pairs, >= 0.3; counted where it
  does not start a sentence) when that word is in >= 80% of the references of the test lines holding the source
  word; `--terms` of them. The model already writes most of them: the easy case.
- `synonym`: a fixed list of source words with a target the model would not choose (a synonym, a house style:
  "man" -> "Herr", "small" -> "winzig"); the table prints how often the model wrote it unasked.
- `keep`: do-not-translate terms (an empty target: the source word must appear as written): the `reference` draw's
  source words, another seed.
BLEU is computed against references with the terms substituted (the issue's measure, for all three kinds): for each
term a reference line does not already hold as written, the first word sharing a stem with the source word's Dice
translation becomes the term (lines where none is found keep their reference). A `reference` term is one inflected
form ("kleines"), so a line whose reference has another ("kleinen") gets the term's form. The BLEU against the
references as written is printed beside it.

Methods, on the same baseline translation (nmt.translation.terminology's two candidates, computed once per line):
- `none`: no glossary; `replace`: the aligned words replaced by the term; `constrained`: the constrained search's
  best (the replaced candidate where it found none); `sane-search`: the search's best sane output, else the replaced
  candidate (the rule without the scores); `rule`: nmt.translation.terminology's choice, what `nmt translate
  --glossary` does (checked: the product's own output is compared with it and must be identical).
Reported per kind and method: terms obeyed (nmt.translation.glossary.obeyed), lines with terms whose output has as many
words as `none`'s give or take 20%, BLEU of the lines with terms (sacreBLEU), whether lines without terms are identical
to `none` (the product run), and the seconds per line with terms beyond the baseline (medians of --rounds)."""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import sacrebleu
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nmt.translation import terminology  # noqa: E402
from nmt.translation.glossary import Glossary, from_pairs, obeyed  # noqa: E402
from nmt.translation.translator import Translator  # noqa: E402

M30 = ROOT.parent / "shared" / "data" / "multi30k"
DEMO = ROOT / "data" / "demo-raw"
STOP = frozenset("with from that this there their they them into onto while other some where which what".split())
_WORD = re.compile(r"[^\W\d_]+")
SYNONYMS = {  # source word -> a target the model would not choose (checked by the "model unasked" column)
    "multi30k": {"man": "Herr", "woman": "Dame", "men": "Herren", "women": "Damen", "dog": "Köter", "girl": "Mädel",
                 "boy": "Bub", "street": "Fahrbahn", "shirt": "Oberteil", "water": "Gewässer", "car": "Wagen",
                 "building": "Bauwerk", "crowd": "Schar", "grass": "Rasen", "ball": "Kugel", "hat": "Kappe",
                 "little": "winzige", "large": "riesige", "child": "Kleinkind", "people": "Leute"},
    "demo": {"small": "winzig", "euros": "EUR", "green": "gruen", "bought": "erworben", "boat": "Schiff",
             "car": "Wagen", "house": "Gebäude", "fast": "flink", "red": "rot", "big": "riesig"},
}
METHODS = ("none", "replace", "constrained", "sane-search", "rule")


def words(line: str) -> set[str]:
    return set(_WORD.findall(line))


def dice_dictionary(train_src: list[str], train_ref: list[str], candidates: set[str]) -> dict[str, tuple[float, str]]:
    """Each candidate source word (lower case) -> (Dice, the target word the training pairs hold with it most)."""
    pair: Counter = Counter()
    count_s: Counter = Counter()
    count_t: Counter = Counter()
    for s, t in zip(train_src, train_ref):
        ss = {w.lower() for w in words(s)} & candidates
        ts = set(_WORD.findall(t)[1:])  # not the first word: its capital is the sentence's ("Drei" for "drei")
        count_s.update(ss)
        count_t.update(ts)
        pair.update((a, b) for a in ss for b in ts)
    best: dict[str, tuple[float, str]] = {}
    for (a, b), c in pair.items():
        dice = 2 * c / (count_s[a] + count_t[b])
        if dice > best.get(a, (0.0, ""))[0]:
            best[a] = (dice, b)
    return best


def eligible_words(train_src: list[str], train_ref: list[str], src: list[str], ref: list[str]
                   ) -> tuple[list[str], dict[str, tuple[float, str]]]:
    """The `reference` kind's candidates (see the module docstring) and the Dice dictionary."""
    test_src = [{w.lower() for w in words(s)} for s in src]
    test_ref = [words(r) for r in ref]
    where: dict[str, list[int]] = {}
    for i, ws in enumerate(test_src):
        for w in ws:
            if len(w) >= 4 and w not in STOP:
                where.setdefault(w, []).append(i)
    candidates = {w: rows for w, rows in where.items() if len(rows) >= 2}
    best = dice_dictionary(train_src, train_ref, set(candidates))
    eligible = sorted(a for a, (dice, b) in best.items()
                      if dice >= 0.3 and sum(b in test_ref[i] for i in candidates[a]) >= 0.8 * len(candidates[a]))
    return eligible, best


def substituted(ref: str, matches: list, dictionary: dict[str, tuple[float, str]]) -> str:
    """`ref` with, for each term, the first word sharing a stem with the source word's Dice translation replaced by
    the term's target (or the source word, for a do-not-translate term)."""
    tokens = ref.split()
    for m in matches:
        if m.forms[0] in {tok.strip(".,;:!?\"'()") for tok in tokens}:
            continue
        own = dictionary.get(m.surface.lower(), (0.0, ""))[1]
        if not own:
            continue
        stem = own.lower()[:max(3, len(own) - 2)]
        for k, tok in enumerate(tokens):
            core = tok.strip(".,;:!?\"'()")
            if core.lower().startswith(stem):
                tokens[k] = tok.replace(core, m.forms[0] if k or not m.forms[0][:1].isalpha()
                                        else m.forms[0][:1].upper() + m.forms[0][1:])
                break
    return " ".join(tokens)


def glossaries(args: argparse.Namespace, data: dict[str, list[str]]) -> dict[str, tuple[Glossary, list[str]]]:
    """kind -> (glossary, the references to score it against)."""
    eligible, best = eligible_words(data["train_src"], data["train_ref"], data["src"], data["ref"])
    drawn = random.Random(args.seed).sample(eligible, min(args.terms, len(eligible)))
    kept = random.Random(args.seed + 1).sample(eligible, min(args.terms, len(eligible)))
    synonyms = SYNONYMS[args.corpus]
    dictionary = {**best, **dice_dictionary(data["train_src"], data["train_ref"], set(synonyms))}
    kinds = {"reference": from_pairs([(a, best[a][1]) for a in sorted(drawn)]),
             "synonym": from_pairs(sorted(synonyms.items())),
             "keep": from_pairs([(a, "") for a in sorted(kept)])}
    out = {}
    for kind, g in kinds.items():
        out[kind] = (g, [substituted(r, g.find(s), dictionary) for s, r in zip(data["src"], data["ref"])])
    return out


def candidate_outputs(translator: Translator, lines: list[str], glossary: Glossary
                      ) -> tuple[dict[str, list[str]], float]:
    """Every method's output for `lines` from one baseline and one set of candidates; the candidates' seconds."""
    d = translator.decode
    base = translator.translate_chunk(lines, need_attention=True)  # as translate_chunk(glossary=...) searches
    out = {m: [r.text[0] for r in base] for m in METHODS}
    seconds = 0.0
    for i, r in enumerate(base):
        matches = glossary.find(r.source) if r.hypotheses else []
        started = time.perf_counter()
        need = terminology.needs(translator, r, matches)
        if need is None:
            continue
        kind, replaced = need
        terms = terminology.distinct(matches)
        found = terminology.candidates(translator, r, matches, False, d, search=kind == "terms", replaced=replaced)
        seconds += time.perf_counter() - started
        out["replace"][i] = found.replaced_text
        out["constrained"][i] = found.texts[0] if found.texts else found.replaced_text
        out["rule"][i] = found.chosen(terms, 1)[0][1]
        sane = [t for t in found.texts if terminology.sane(t, found.replaced_text, found.removed, terms)]
        out["sane-search"][i] = sane[0] if sane else found.replaced_text
    return out, seconds


def report(kind: str, glossary: Glossary, refs: list[str], src: list[str], outputs: dict[str, list[str]],
           product: list[str], seconds: list[float], baseline: list[float], raw: list[str]) -> dict:
    matches = [glossary.find(s) for s in src]
    with_terms = [i for i, m in enumerate(matches) if m]
    without = [i for i, m in enumerate(matches) if not m]
    total = sum(len(matches[i]) for i in with_terms)
    none = outputs["none"]
    per_line = statistics.median(seconds) / max(1, len(with_terms))
    print(f"\n{kind}: {len(glossary.terms)} terms; {len(with_terms)} of {len(src)} lines hold {total} occurrences; "
          f"baseline {statistics.median(baseline):.1f} s for all lines, +{per_line * 1000:.0f} ms per line with terms")
    print(f"  {'method':<12} {'obeyed':>14} {'length +-20%':>13} {'BLEU terms':>10} {'as written':>10}")
    row = {"lines_with_terms": len(with_terms), "occurrences": total, "ms_per_line_with_terms": per_line * 1000,
           "identical_without_terms": all(product[i] == none[i] for i in without),
           "product_equals_rule": product == outputs["rule"], "methods": {}}
    for method in METHODS:
        out = outputs[method]
        ok = sum(obeyed(out[i], m) for i in with_terms for m in matches[i])
        close = sum(abs(len(out[i].split()) - len(none[i].split())) <= 0.2 * len(none[i].split()) for i in with_terms)
        bleu = sacrebleu.corpus_bleu([out[i] for i in with_terms], [[refs[i] for i in with_terms]]).score
        written = sacrebleu.corpus_bleu([out[i] for i in with_terms], [[raw[i] for i in with_terms]]).score
        share = 100 * close / max(1, len(with_terms))
        print(f"  {method:<12} {ok:>6}/{total:<4}{100 * ok / max(1, total):5.1f}% {share:12.1f}% {bleu:10.2f}"
              f" {written:10.2f}")
        row["methods"][method] = {"obeyed": ok, "length_within_20pct": close, "bleu_with_terms": bleu,
                                  "bleu_references_as_written": written}
    print(f"  lines without terms identical to none: {row['identical_without_terms']}; "
          f"nmt translate --glossary = rule: {row['product_equals_rule']}")
    return row


def show(src: list[str], glossary: Glossary, outputs: dict[str, list[str]], refs: list[str], n: int) -> None:
    """The first `n` lines whose `rule` output is not within 20% of `none`'s length, then other changed lines."""
    def off(i: int) -> bool:
        a, b = len(outputs["rule"][i].split()), len(outputs["none"][i].split())
        return abs(a - b) > 0.2 * b
    changed = [i for i in range(len(src)) if outputs["constrained"][i] != outputs["none"][i]]
    shown = 0
    for i in sorted(changed, key=lambda i: not off(i)):
        s = src[i]
        if shown >= n:
            break
        shown += 1
        terms = ", ".join(f"{m.surface}->{m.term.target or '(keep)'}" for m in glossary.find(s))
        print(f"    [{terms}] {s}")
        for method in ("none", "constrained", "replace", "rule"):
            print(f"      {method + ':':<13}{outputs[method][i]}")
        print(f"      {'reference:':<13}{refs[i]}")


def load_data(args: argparse.Namespace) -> dict[str, list[str]]:
    read = lambda p: p.read_text(encoding="utf-8").splitlines()  # noqa: E731
    folder, test = (M30, "test2016") if args.corpus == "multi30k" else (DEMO, "test")
    src = read(folder / f"{test}.en")[:args.lines or None]
    ref = read(folder / f"{test}.de")[:args.lines or None]
    return {"src": src, "ref": ref, "train_src": read(folder / "train.en"), "train_ref": read(folder / "train.de")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", type=Path, default=ROOT / "runs" / "multi30k-en-de" / "averaged.pt")
    ap.add_argument("--corpus", choices=("multi30k", "demo"), default="multi30k")
    ap.add_argument("--kinds", default="reference,synonym,keep")
    ap.add_argument("--lines", type=int, default=0, help="The first N test lines only (0: all).")
    ap.add_argument("--terms", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--show", type=int, default=0, help="Print this many lines the constrained search changed.")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    data = load_data(args)
    translator = Translator.load(args.checkpoint)
    record = {}
    for kind, (glossary, refs) in glossaries(args, data).items():
        if kind not in args.kinds.split(","):
            continue
        seconds, baseline = [], []
        for _ in range(args.rounds):
            started = time.perf_counter()
            translator.translate_chunk(data["src"])
            baseline.append(time.perf_counter() - started)
            outputs, s = candidate_outputs(translator, data["src"], glossary)
            seconds.append(s)
        product = [r.text[0] for r in translator.translate_chunk(data["src"], glossary=glossary)]
        record[kind] = report(kind, glossary, refs, data["src"], outputs, product, seconds, baseline, data["ref"])
        show(data["src"], glossary, outputs, refs, args.show)
    print(json.dumps(record))


if __name__ == "__main__":
    main()
