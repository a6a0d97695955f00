"""Word alignment, its one owner: which whitespace-separated words of a translation translate which words of its
source, from the model's own cross-attention. nmt.translation.documents places inline formatting on the aligned
words, nmt.translation.terminology puts glossary terms in place of them, and `nmt translate --alignment FILE`
writes them (Pharaoh "i-j" pairs, `format_pharaoh`).

Word scores: a translation's piece attention (Hypothesis.attention, from the search itself: no extra pass)
aggregated to words (`word_scores`: sum over a source word's pieces, mean over a target word's). SentencePiece words
(a piece starting with "▁" starts one: `word_spans`) are the whitespace words of the text on both sides almost
always; where the counts differ (text the tokenizer's cleaning changed, byte pieces) word i takes the pieces of
SentencePiece words i*k/n up to (i+1)*k/n, so every word has pieces and the order is kept. A language code piece
the translator puts before the source (decode.prefix) is not a word.

The hard alignment (`links`, rule "grow-1:1") is symmetrized, as Moses/fast_align symmetrize their two directions:
the intersection of each target word's best source word and each source word's best target word, grown to union
points next to (diagonals included) an agreed point whose target AND source words are both still unaligned (the
usual grow-diag needs only one of them), from scores without a source word's punctuation pieces ("euros." is
"euros") and with each source word's column divided by its sum ** COLUMN_POWER (`balanced`). Why, in a sentence:
the argmax of each target word's row alone lets a sentence-final source word and its "." take the trailing target
words, and a frequent source word take its neighbours' target words; both directions agreeing, one to one, with
balanced columns, undoes most of both. The figures of every rule measured (and how COLUMN_POWER was chosen) are
bench/inline_fidelity.py's, in its docstring."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nmt.tokenizer import Tokenizer
from nmt.translation.documents.inline import Aligned

WORD_START = "\u2581"  # SentencePiece's word-boundary marker "▁"


def aligned(tokenizer: Tokenizer, result: Any, matrix: Any = None, method: str = "grow-1:1",
            punctuation: bool = False, column_power: float | None = None) -> Aligned:
    """The best translation of `result` (a nmt.translation.translator.Translation: source, src_ids, text, hypotheses)
    with its word scores [target words, source words] and `links` by `method` (LINKS). `matrix`: a piece attention
    [target pieces (+ EOS), source ids (+ EOS)] to use instead of the hypothesis's own; `punctuation`: keep a
    source word's punctuation pieces in its scores; `column_power`: of `balanced` (0: rows as they are)."""
    text = result.text[0]
    if not result.hypotheses:
        return Aligned(text)
    hyp = result.hypotheses[0]
    matrix = hyp.attention if matrix is None else matrix
    if matrix is None:
        return Aligned(text)
    src_pieces = tokenizer.src_id_pieces(result.src_ids)
    prefix = max(0, len(result.src_ids) - len(tokenizer.encode_src([result.source])[0]))
    matrix = as_matrix(matrix)[:, prefix:]
    src_pieces = src_pieces[prefix:]
    tgt_pieces = tokenizer.tgt_pieces(hyp.tokens)
    n_src, n_tgt = len(result.source.split()), len(text.split())
    if not src_pieces or not tgt_pieces or not n_src or not n_tgt:
        return Aligned(text)
    src_words = _words(src_pieces, n_src)
    if not punctuation:
        matrix = matrix.copy()
        for a, b in src_words:
            marks = [k for k in range(a, b) if not any(c.isalnum() for c in src_pieces[k])]
            if len(marks) < b - a:
                matrix[:, marks] = 0.0
    scores = word_scores(matrix, src_pieces, tgt_pieces, src_words, _words(tgt_pieces, n_tgt))
    return Aligned(text, scores, links(balanced(scores, column_power), method))


COLUMN_POWER = 0.85  # see the module docstring; bench/inline_fidelity.py measured it


def balanced(scores: np.ndarray, power: float | None = None) -> np.ndarray:
    """Word scores with each source word's column divided by its sum ** `power` (default COLUMN_POWER): a source
    word most target words attend to a little (a sentence-final noun, a frequent verb) stops taking every row's
    argmax."""
    power = COLUMN_POWER if power is None else power
    return scores / np.maximum(scores.sum(axis=0, keepdims=True), 1e-9) ** power if power else scores


LINKS = ("argmax", "intersect", "grow-diag", "grow-diag-final-and", "grow-1:1")


def links(scores: np.ndarray, method: str = "grow-1:1") -> np.ndarray:
    """A hard alignment [target words, source words] (bool) from word scores: "argmax", each target word to its
    best source word; "intersect", the pairs that are each other's best; "grow-diag" (-"final-and"), Koehn's
    symmetrization of the two directions; "grow-1:1", the intersection grown only where both words are
    unaligned (see the module docstring)."""
    if method not in LINKS:
        raise ValueError(f"unknown alignment method {method!r}: one of {', '.join(LINKS)}")
    m, n = scores.shape
    rows = np.zeros((m, n), dtype=bool)
    cols = np.zeros((m, n), dtype=bool)
    if not m or not n:
        return rows
    rows[np.arange(m), scores.argmax(axis=1)] = True
    if method == "argmax":
        return rows
    cols[scores.argmax(axis=0), np.arange(n)] = True
    out, union = rows & cols, rows | cols
    if method == "intersect":
        return out
    both = method == "grow-1:1"
    grown = True
    while grown:
        grown = False
        for j, i in zip(*np.nonzero(out)):
            for jj, ii in ((j + dj, i + di) for dj in (-1, 0, 1) for di in (-1, 0, 1)):
                if not (0 <= jj < m and 0 <= ii < n) or out[jj, ii] or not union[jj, ii]:
                    continue
                free_t, free_s = not out[jj].any(), not out[:, ii].any()
                if (free_t and free_s) if both else (free_t or free_s):
                    out[jj, ii] = grown = True
    if method == "grow-diag-final-and":
        for j, i in zip(*np.nonzero(union)):
            if not out[j].any() and not out[:, i].any():
                out[j, i] = True
    return out


def _words(pieces: Sequence[str], n: int) -> list[tuple[int, int]]:
    """[start, end) piece spans of `n` whitespace words (see the module docstring)."""
    spm = word_spans(pieces)
    k = len(spm)
    if k == n:
        return spm
    spans = []
    for i in range(n):
        a = i * k // n
        b = max((i + 1) * k // n, a + 1)
        spans.append((spm[a][0], spm[b - 1][1]))
    return spans


def link_pairs(hard: np.ndarray | None) -> list[tuple[int, int]]:
    """The (source word i, target word j) pairs of a hard alignment [target words, source words] (`links`, or
    Aligned.links), sorted by (i, j) as Pharaoh lists them; None (no alignment) has none."""
    if hard is None:
        return []
    return sorted((int(i), int(j)) for j, i in zip(*np.nonzero(hard), strict=True))


def format_pharaoh(pairs: Sequence[tuple[int, int]]) -> str:
    """Pharaoh format: "i-j" pairs (source word i, target word j, 0-based) separated by spaces, e.g. "0-0 1-2 2-1"."""
    return " ".join(f"{i}-{j}" for i, j in pairs)


def word_spans(pieces: Sequence[str]) -> list[tuple[int, int]]:
    """Group SentencePiece pieces into words: [start, end) piece spans, one per word.

    A piece starting with "▁" starts a new word; the first piece always does.
    """
    starts = [i for i, p in enumerate(pieces) if i == 0 or p.startswith(WORD_START)]
    ends = starts[1:] + [len(pieces)]
    return [(s, e) for s, e in zip(starts, ends[: len(starts)], strict=True)]


def word_scores(matrix: Any, src_pieces: Sequence[str], tgt_pieces: Sequence[str],
                src_words: Sequence[tuple[int, int]] | None = None,
                tgt_words: Sequence[tuple[int, int]] | None = None) -> np.ndarray:
    """Piece attention [T, S] aggregated to words: [target words, source words] (sum over a source word's pieces,
    mean over a target word's pieces). Words are [start, end) piece spans, `word_spans` of the pieces unless given.
    Trailing rows/columns beyond the pieces (the EOS the model adds) are ignored."""
    m = as_matrix(matrix)
    n_tgt, n_src = len(tgt_pieces), len(src_pieces)
    if m.shape[0] < n_tgt or m.shape[1] < n_src:
        raise ValueError(f"attention matrix {tuple(m.shape)} is smaller than {n_tgt} target x {n_src} "
                         "source pieces")
    src_words = word_spans(src_pieces) if src_words is None else src_words
    tgt_words = word_spans(tgt_pieces) if tgt_words is None else tgt_words
    if n_tgt == 0 or n_src == 0 or not src_words or not tgt_words:
        return np.zeros((len(tgt_words) if n_tgt else 0, len(src_words) if n_src else 0))
    m = m[:n_tgt, :n_src]
    by_src = np.stack([m[:, s:e].sum(axis=1) for s, e in src_words], axis=1)  # [T, S_words]
    return np.stack([by_src[s:e].mean(axis=0) for s, e in tgt_words])  # [T_words, S_words]


def as_matrix(x: Any) -> np.ndarray:
    """A 2-D piece attention as float64 numpy: numpy, nested lists or a torch tensor (any device or dtype, bf16
    included); NaN and infinities become 0."""
    if hasattr(x, "detach"):  # torch: bf16 has no numpy dtype and CUDA memory must come home first
        x = x.detach().float().cpu()
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"attention matrix must have 2 dimensions, got shape {tuple(arr.shape)}")
    return np.nan_to_num(arr, nan=0.0, posinf=0.0, neginf=0.0)
