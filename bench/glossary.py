"""Terminology on Multi30k test2016: a glossary of terms drawn from the references, obeyed two ways (and the
better-scoring of the two).

    python bench/glossary.py --checkpoint runs/multi30k-en-de/averaged.pt      # after `make multi30k`
    python bench/glossary.py --checkpoint tests/data/demo-model.pt --src data/demo-raw/test.en \\
        --ref data/demo-raw/test.de --train-src data/demo-raw/train.en --train-ref data/demo-raw/train.de

The glossary (seeded, reproducible): source words (4+ letters, not in a short stop list) found in at least two test
sources, each paired with the target word the training data pairs with it most (Dice coefficient over sentence
pairs, at least 0.3; target words counted where they do not start the sentence, so a term is written as it is
inside one) when that word is in at least 80% of the references of the test sentences holding the source
word; `--terms` of them drawn at random. Four runs over the same lines, interleaved per round:
- `none`: no glossary (the baseline);
- `constrained`: `nmt translate --glossary`, i.e. Translator.translate_chunk(glossary=...): lines whose translation
  misses a term searched again by constrained beam search (nmt.constrained);
- `replace`: the baseline translation (with attention) and, for each missed term, the target words aligned to the
  term's source words (nmt.inline_align, the alignment documents use) replaced by the term: "placeholders with
  alignment" without a second search;
- `best`: on each line the two change, whichever of `constrained` and `replace` the model scores higher
  (teacher-forced, length-normalized): equal to `constrained` when the search finds the better-scoring output.
Reported: term success (matches whose target form is in the output, nmt.glossary.obeyed), BLEU of the lines without
terms (must be identical to the baseline's) and of the lines with terms, and seconds (median of the rounds; the
ratio to the baseline)."""

from __future__ import annotations

import argparse
import functools
import json
import random
import re
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import sacrebleu
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nmt.glossary import Glossary, Match, from_pairs, obeyed  # noqa: E402
from nmt.inline_align import aligned  # noqa: E402
from nmt.translator import Translation, Translator  # noqa: E402

M30 = ROOT.parent / "shared" / "data" / "multi30k"
STOP = frozenset("with from that this there their they them into onto while other some where which what".split())
_WORD = re.compile(r"[^\W\d_]+")


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


def draw_glossary(train_src: list[str], train_ref: list[str], src: list[str], ref: list[str], n: int,
                  seed: int) -> Glossary:
    """See the module docstring."""
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
    chosen = random.Random(seed).sample(eligible, min(n, len(eligible)))
    return from_pairs([(a, best[a][1]) for a in sorted(chosen)])


def replace_terms(translator: Translator, r: Translation, matches: list[Match]) -> str:
    """The best translation with each missed term's aligned target words replaced by the term's target."""
    text = r.text[0]
    missed = [m for m in matches if not obeyed(text, m)]
    if not missed or not r.hypotheses:
        return text
    al = aligned(translator.tokenizer, r)
    tgt = text.split()
    if al.scores is None or not tgt:
        return " ".join([text] + [m.forms[0] for m in missed])
    starts = [m.start() for m in re.finditer(r"\S+", r.source)]
    edits = []
    for m in missed:
        cols = [i for i, a in enumerate(starts) if m.start <= a < m.end]
        rows = np.nonzero(al.links[:, cols].any(axis=1))[0].tolist() if al.links is not None else []
        rows = rows or [int(al.scores[:, cols].sum(axis=1).argmax())]
        block = _largest_block(rows)
        edits.append((block[0], block[-1], m.forms[0]))
    for a, b, form in sorted(set(edits), reverse=True):
        tail = re.search(r"[^\w]*$", tgt[b]).group()
        tgt[a:b + 1] = [(form[:1].upper() + form[1:] if a == 0 else form) + tail]
    return " ".join(tgt)


def _largest_block(rows: list[int]) -> list[int]:
    blocks, run = [], [rows[0]]
    for j in rows[1:]:
        if j == run[-1] + 1:
            run.append(j)
        else:
            blocks.append(run)
            run = [j]
    blocks.append(run)
    return max(blocks, key=len)


def corpus_bleu(out: list[str], ref: list[str], rows: list[int]) -> float:
    return sacrebleu.corpus_bleu([out[i] for i in rows], [[ref[i] for i in rows]]).score


@torch.inference_mode()
def forced_score(translator: Translator, src_ids: list[int], text: str) -> float:
    """The model's length-normalized score of `text` as the translation of `src_ids` (teacher-forced)."""
    from nmt.batching import collate
    from nmt.search import length_normalized

    ids, d = translator.special, translator.decode
    tokens = translator.tokenizer.encode_tgt([text])[0]
    batch = collate([src_ids], [tokens], pad=ids.pad, bos=ids.bos, eos=ids.eos)
    logprobs = translator.model(batch.src, batch.tgt_in).float().log_softmax(-1)[0]
    logprob = float(logprobs.gather(1, batch.tgt_out[0][:, None]).sum())
    return length_normalized(logprob, len(tokens) + 1, d.length_penalty, d.length_penalty_type)


def run(translator: Translator, lines: list[str], glossary: Glossary, method: str) -> tuple[list[str], float]:
    started = time.perf_counter()
    if method == "none":
        out = [r.text[0] for r in translator.translate_chunk(lines)]
    elif method == "constrained":
        out = [r.text[0] for r in translator.translate_chunk(lines, glossary=glossary)]
    elif method == "replace":
        results = translator.translate_chunk(lines, need_attention=True)
        out = [replace_terms(translator, r, glossary.find(r.source)) for r in results]
    else:  # the constrained search's best or the replaced baseline, whichever the model scores higher
        plain = translator.translate_chunk(lines, need_attention=True)
        forced = translator.translate_chunk(lines, glossary=glossary)
        out = []
        for p, f in zip(plain, forced):
            if p.text == f.text:
                out.append(p.text[0])
                continue
            replaced = replace_terms(translator, p, glossary.find(p.source))
            better = forced_score(translator, p.src_ids, replaced) > f.hypotheses[0].score
            out.append(replaced if better else f.text[0])
    return out, time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", type=Path, default=ROOT / "runs" / "multi30k-en-de" / "averaged.pt")
    ap.add_argument("--src", type=Path, default=M30 / "test2016.en")
    ap.add_argument("--ref", type=Path, default=M30 / "test2016.de")
    ap.add_argument("--train-src", type=Path, default=M30 / "train.en")
    ap.add_argument("--train-ref", type=Path, default=M30 / "train.de")
    ap.add_argument("--terms", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--glossary-out", type=Path, help="Write the drawn glossary here (TSV).")
    ap.add_argument("--show", type=int, default=0, help="Print this many lines the glossary changed.")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    read = lambda p: p.read_text(encoding="utf-8").splitlines()  # noqa: E731
    src, ref = read(args.src), read(args.ref)
    glossary = draw_glossary(read(args.train_src), read(args.train_ref), src, ref, args.terms, args.seed)
    if args.glossary_out:
        args.glossary_out.write_text("".join(f"{t.source}\t{t.target}\n" for t in glossary.terms), encoding="utf-8")
    translator = Translator.load(args.checkpoint)
    matches = [glossary.find(s) for s in src]
    with_terms = [i for i, m in enumerate(matches) if m]
    without = [i for i, m in enumerate(matches) if not m]
    methods = ("none", "constrained", "replace", "best")
    outputs: dict[str, list[str]] = {}
    seconds: dict[str, list[float]] = {m: [] for m in methods}
    for _ in range(args.rounds):
        for method in methods:
            outputs[method], s = run(translator, src, glossary, method)
            seconds[method].append(s)
    print(f"glossary: {len(glossary.terms)} terms; {len(with_terms)} of {len(src)} lines hold "
          f"{sum(map(len, matches))} term occurrences")
    print(f"{'method':<12} {'terms obeyed':>14} {'BLEU no-term':>13} {'BLEU term':>10} {'seconds':>9} {'x none':>7}")
    record = {"terms": len(glossary.terms), "lines_with_terms": len(with_terms), "methods": {}}
    base = statistics.median(seconds["none"])
    for method in methods:
        out = outputs[method]
        ok = sum(obeyed(out[i], m) for i in with_terms for m in matches[i])
        total = sum(len(matches[i]) for i in with_terms)
        bleu = functools.partial(corpus_bleu, out, ref)
        same = all(out[i] == outputs["none"][i] for i in without)
        sec = statistics.median(seconds[method])
        print(f"{method:<12} {ok:>6}/{total:<4} {100 * ok / total:5.1f}% {bleu(without):>8.2f}{'' if same else '*'}"
              f"     {bleu(with_terms):>6.2f} {sec:>9.1f} {sec / base:>7.2f}")
        record["methods"][method] = {"obeyed": ok, "occurrences": total, "bleu_without_terms": bleu(without),
                                     "identical_without_terms": same, "bleu_with_terms": bleu(with_terms),
                                     "seconds": seconds[method]}
    print("(* lines without terms differ from the baseline)")
    changed = [i for i in with_terms if outputs["constrained"][i] != outputs["none"][i]]
    for i in changed[:args.show]:
        terms = ", ".join(f"{m.surface}->{m.term.target}" for m in matches[i])
        print(f"\n[{terms}] {src[i]}\n  none:        {outputs['none'][i]}\n  constrained: {outputs['constrained'][i]}"
              f"\n  replace:     {outputs['replace'][i]}\n  reference:   {ref[i]}")
    print(json.dumps(record))


if __name__ == "__main__":
    main()
