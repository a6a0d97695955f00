"""Corpus BLEU / chrF / TER through sacreBLEU, with the signatures that make scores comparable (and COMET, with
nmt.comet, for `nmt score --comet`)."""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, NamedTuple

from sacrebleu.metrics import BLEU, CHRF, TER

from nmt.errors import NmtError, first_line
from nmt.io import read_lines

# BLEU tokenizers that split a text without spaces into characters (or words): TER then does too
SPACELESS_TOKENIZERS = ("zh", "ja-mecab", "char")
# Factories take (tokenize, lowercase). TER keeps sacreBLEU's defaults (tercom tokenizer, case-insensitive),
# as `sacrebleu -m ter` does, so its signature matches what papers report; for Chinese/Japanese/Thai (BLEU's
# tokenizer in SPACELESS_TOKENIZERS) it normalizes with asian support, else a one-character miss is a whole line.
_METRICS: dict[str, Callable[[str | None, bool], Any]] = {
    "bleu": lambda tok, lc: BLEU(tokenize=tok, lowercase=lc),
    "chrf": lambda tok, lc: CHRF(lowercase=lc),
    "chrf++": lambda tok, lc: CHRF(word_order=2, lowercase=lc),
    "ter": lambda tok, lc: TER(normalized=True, asian_support=True) if tok in SPACELESS_TOKENIZERS else TER(),
}
METRIC_NAMES = tuple(_METRICS)
# TER's shift search grows about cubically with sentence length (1,000 words: ~15 s; 20,000: hours), so a
# line longer than this is refused rather than left to look like a hang.
TER_MAX_WORDS = 1000


class BleuTokenizer(NamedTuple):
    """The sacreBLEU tokenizer BLEU uses for a target language, and a one-line note where it is a fallback."""

    name: str
    note: str | None = None


# sacreBLEU's own choice by target language (BLEU(trg_lang=...): zh -> zh, ja -> ja-mecab, ko -> ko-mecab, others
# 13a), with a fallback where its extra is missing: 13a splits only at spaces and punctuation, so for a language
# written without spaces a one-character miss would cost the whole sentence (BLEU 0).
_MECAB = {"ja": ("ja-mecab", "char", "sacrebleu[ja]"), "ko": ("ko-mecab", "13a", "sacrebleu[ko]")}


@functools.cache
def _usable(tokenizer: str) -> bool:
    """Whether sacreBLEU can build this tokenizer here (ja-mecab / ko-mecab need their extras and dictionaries)."""
    try:
        BLEU(tokenize=tokenizer)
    except Exception:  # ImportError, or a missing dictionary (RuntimeError from MeCab)
        return False
    return True


def bleu_tokenizer(lang: str | None) -> BleuTokenizer:
    """The BLEU tokenizer for target language `lang` (any spelling nmt.langcodes knows; None or unknown: 13a)."""
    from nmt.langcodes import canonical_or_none, written_without_spaces

    code = (canonical_or_none(lang) if lang else None) or ""
    if code in ("zh", "zh-Hant"):
        return BleuTokenizer("zh")
    if code in _MECAB:
        best, fallback, extra = _MECAB[code]
        if _usable(best):
            return BleuTokenizer(best)
        return BleuTokenizer(fallback, f"BLEU on {code} uses the {fallback} tokenizer: sacreBLEU's {best} needs "
                                       f"pip install '{extra}'")
    if code and written_without_spaces(code):
        return BleuTokenizer("char", f"BLEU on {code} uses the char tokenizer (sacreBLEU has no word tokenizer for "
                                     "it; --tokenize flores200 is an alternative)")
    return BleuTokenizer("13a")


def language_of_file(path: str | os.PathLike[str]) -> str | None:
    """The language a file's suffix names (test.zh -> zh, newstest.zh-Hant -> zh-Hant), or None."""
    from nmt.langcodes import canonical_or_none

    suffix = Path(path).suffix[1:]
    return canonical_or_none(suffix) if 2 <= len(suffix) <= 7 else None


def _metric_names(metrics: str | Sequence[str]) -> list[str]:
    if isinstance(metrics, str):
        metrics = metrics.split(",")
    names = [m.strip().lower() for m in metrics if m.strip()]
    if not names:
        raise NmtError(f"no metric given (valid: {', '.join(METRIC_NAMES)})")
    for m in names:
        if m not in _METRICS:
            raise NmtError(f"unknown metric {m!r} (valid: {', '.join(METRIC_NAMES)})")
    return list(dict.fromkeys(names))


def _details(result: Any) -> dict[str, Any]:
    """The numbers behind a score, as JSON-ready Python values."""
    if hasattr(result, "precisions"):  # BLEU
        return {
            "precisions": [float(p) for p in result.precisions],
            "bp": float(result.bp),
            "ratio": float(result.ratio),
            "hyp_len": int(result.sys_len),
            "ref_len": int(result.ref_len),
        }
    if hasattr(result, "num_edits"):  # TER
        return {"num_edits": float(result.num_edits), "ref_length": float(result.ref_length)}
    return {}


def score(
    hyps: Sequence[str],
    refs: Sequence[Sequence[str]],
    *,
    metrics: str | Sequence[str] = ("bleu", "chrf", "ter"),
    tokenize: str | None = None,
    lowercase: bool = False,
    ref_names: Sequence[str] | None = None,
) -> dict[str, dict[str, Any]]:
    """Corpus scores of ``hyps`` against one or more reference sets (``refs[k][i]`` is ref set k, line i).

    Returns ``{metric: {"name", "score", "signature", "text", ...details}}`` in the order asked.
    ``tokenize`` is BLEU's tokenizer (default 13a; `bleu_tokenizer` chooses one for a language); ``lowercase``
    applies to BLEU and chrF (TER is case-insensitive by sacreBLEU default). ``ref_names`` name the reference sets
    in error messages.
    An empty corpus scores 0 (sacreBLEU itself cannot score zero lines)."""
    names = _metric_names(metrics)
    if refs and isinstance(refs[0], str):  # a single reference set given flat
        refs = [refs]  # type: ignore[list-item]
    if not refs:
        raise NmtError("no reference given: at least one reference set is needed")
    given = list(ref_names or [])
    for k, ref in enumerate(refs):
        if len(ref) != len(hyps):
            ref_name = given[k] if k < len(given) else f"#{k + 1}"
            raise NmtError(f"hypothesis has {len(hyps)} lines but reference {ref_name} has {len(ref)} lines")
    hyps, refs = list(hyps), [list(r) for r in refs]
    if not hyps:  # one empty line scores like an empty corpus (0 BLEU/chrF, 0 edits) and yields a signature
        hyps, refs = [""], [[""] for _ in refs]
    if "ter" in names:
        _check_ter_lengths(hyps, refs, given)
    if tokenize is not None and tokenize not in BLEU.TOKENIZERS:
        raise NmtError(f"unknown BLEU tokenizer {tokenize!r} (valid: {', '.join(BLEU.TOKENIZERS)})")
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        try:
            metric = _METRICS[name](tokenize, lowercase)
        except Exception as e:  # e.g. ja-mecab / spm tokenizers missing their extra package or model
            raise NmtError(f"cannot set up {name} (tokenize={tokenize}): {first_line(e)}") from None
        result = metric.corpus_score(hyps, refs)
        out[name] = {
            "name": result.name,
            "score": float(result.score),
            "signature": str(metric.get_signature()),
            "text": str(result),
            **_details(result),
        }
    return out


def _check_ter_lengths(hyps: list[str], refs: list[list[str]], ref_names: list[str]) -> None:
    names = ["hypothesis"] + [ref_names[k] if k < len(ref_names) else f"reference #{k + 1}" for k in range(len(refs))]
    for name, lines in zip(names, [hyps, *refs]):
        for number, line in enumerate(lines, 1):
            words = len(line.split())
            if words > TER_MAX_WORDS:
                raise NmtError(f"{name}: line {number} has {words:,} words; TER cannot score lines over "
                               f"{TER_MAX_WORDS:,} words in reasonable time (use --metrics bleu,chrf)")


def score_files(
    hyp: str | os.PathLike[str] | IO[Any], refs: Sequence[str | os.PathLike[str]], **kwargs: Any
) -> dict[str, dict[str, Any]]:
    """``score`` on files (hyp may be "-" or a stream); errors name the reference files."""
    if not refs:
        raise NmtError("no reference file given")
    ref_lines = [read_lines(r) for r in refs]
    return score(read_lines(hyp), ref_lines, ref_names=[str(r) for r in refs], **kwargs)


class CometOptions(NamedTuple):
    """`nmt score --comet DIR --src FILE`: the COMET model dir, the sources, the batch size and the device."""

    model: str | os.PathLike[str]
    src: str | os.PathLike[str] | None
    batch_size: int = 16
    device: str = "cpu"


def run(refs: Sequence[str | os.PathLike[str]], hyp: str | os.PathLike[str] | None, *, metrics: Sequence[str],
        tokenize: str | None, lowercase: bool, json_out: bool, tgt_lang: str | None = None,
        comet: CometOptions | None = None) -> str:
    """The `nmt score` command: the report for a hypothesis file (stdin when None) against references. BLEU's
    tokenizer: `tokenize`, else chosen for `tgt_lang`, else for the language the first reference's suffix names.
    With `comet`, COMET too (nmt.comet), after the others."""
    if tgt_lang is not None:
        from nmt.langcodes import canonical

        try:
            canonical(tgt_lang)
        except ValueError as e:
            raise NmtError(f"--tgt-lang: {e}") from None
    if tokenize is None and {"bleu", "ter"} & set(metrics):
        chosen = bleu_tokenizer(tgt_lang or (language_of_file(refs[0]) if refs else None))
        tokenize = chosen.name
        if chosen.note:
            print(f"note: {chosen.note}", file=sys.stderr)
    uses_references = comet_references(comet, len(refs)) if comet is not None else False
    hyps = read_lines(hyp if hyp is not None else sys.stdin)
    ref_lines = [read_lines(r) for r in refs]
    result = score(hyps, ref_lines, metrics=tuple(metrics), tokenize=tokenize, lowercase=lowercase,
                   ref_names=[str(r) for r in refs])
    if comet is not None:
        result["comet"] = comet_score(comet, hyps, ref_lines[0] if uses_references else None)
    return format_json(result) if json_out else format_text(result)


def comet_references(comet: CometOptions, refs: int) -> bool:
    """Whether the COMET model scores against a reference (COMET-QE models do not); its dir checked, and the
    options, before any text is read."""
    from nmt.comet import open_dir

    if comet.src is None:
        raise NmtError("COMET scores a translation with its source: give --src FILE (one line per hypothesis line)")
    uses_references = open_dir(comet.model).uses_references
    if uses_references and refs != 1:
        raise NmtError(f"COMET scores against one reference, but --ref is given {refs} times")
    return uses_references


def comet_score(comet: CometOptions, hyps: list[str], refs: list[str] | None) -> dict[str, Any]:
    from nmt.comet import corpus_score
    from nmt.log import show_progress

    assert comet.src is not None
    sources = read_lines(comet.src)
    if len(sources) != len(hyps):
        raise NmtError(f"--src {comet.src} has {len(sources):,} lines but the hypothesis has {len(hyps):,}")
    return corpus_score(comet.model, sources, hyps, refs, batch_size=comet.batch_size, device=comet.device,
                        progress=show_progress(None))


def corpus_bleu(hyps: Sequence[str], refs: Sequence[str] | Sequence[Sequence[str]], tokenize: str = "13a") -> float:
    """Corpus BLEU (mixed case); ``refs`` is one reference list or a list of reference sets."""
    return score(hyps, refs, metrics=("bleu",), tokenize=tokenize)["bleu"]["score"]  # type: ignore[arg-type]


def format_text(result: dict[str, dict[str, Any]]) -> str:
    """One line per metric in sacreBLEU's own style: ``BLEU|nrefs:1|...|version:2.6.0 = 34.12 ...``."""
    lines = []
    for r in result.values():
        name, sep, rest = r["text"].partition(" = ")
        lines.append(f"{name}|{r['signature']} = {rest}" if sep else f"{r['text']} ({r['signature']})")
    return "\n".join(lines)


def format_json(result: dict[str, dict[str, Any]]) -> str:
    """The whole result as one JSON line."""
    return json.dumps(result, ensure_ascii=False)
