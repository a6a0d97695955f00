"""Word alignments for nmt.inline from the model's own cross-attention: a translation's piece attention
(Hypothesis.attention, from the search itself: no extra pass) aggregated to the whitespace-separated words that
nmt.inline places formatting on (nmt.plot.word_scores: sum over a source word's pieces, mean over a target
word's).

SentencePiece words (a piece starting with "▁" starts one) are the whitespace words of the text on both sides
almost always; where the counts differ (text the tokenizer's cleaning changed, byte pieces) word i takes the
pieces of SentencePiece words i*k/n up to (i+1)*k/n, so every word has pieces and the order is kept. A language
code piece the translator puts before the source (decode.prefix) is not a word."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from nmt.inline import Aligned, Paragraph
from nmt.plot import word_scores, word_spans
from nmt.tokenizer import Tokenizer
from nmt.translator import Translation, Translator


def aligned(tokenizer: Tokenizer, result: Translation, matrix: Any = None) -> Aligned:
    """The best translation of `result` with its word scores [target words, source words]; `matrix`: a piece
    attention [target pieces (+ EOS), source ids (+ EOS)] to use instead of the hypothesis's own."""
    text = result.text[0]
    if not result.hypotheses:
        return Aligned(text)
    hyp = result.hypotheses[0]
    matrix = hyp.attention if matrix is None else matrix
    if matrix is None:
        return Aligned(text)
    src_pieces = tokenizer.src_id_pieces(result.src_ids)
    prefix = max(0, len(result.src_ids) - len(tokenizer.encode_src([result.source])[0]))
    matrix = np.asarray(matrix.float() if hasattr(matrix, "float") else matrix, dtype=np.float64)[:, prefix:]
    src_pieces = src_pieces[prefix:]
    tgt_pieces = tokenizer.tgt_pieces(hyp.tokens)
    n_src, n_tgt = len(result.source.split()), len(text.split())
    if not src_pieces or not tgt_pieces or not n_src or not n_tgt:
        return Aligned(text)
    scores = word_scores(matrix, src_pieces, tgt_pieces, _words(src_pieces, n_src), _words(tgt_pieces, n_tgt))
    return Aligned(text, scores)


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


def translate_paragraphs(translator: Translator, paragraphs: Sequence[Paragraph], **search: Any) -> list[list[Any]]:
    """Each paragraph's texts translated in one batch with attention; returns each paragraph's rendered pieces."""
    texts = [text for p in paragraphs for text in p.texts]
    results = iter(translator.translate_chunk(texts, need_attention=True, **search) if texts else [])
    tokenizer = translator.tokenizer
    return [p.render([aligned(tokenizer, next(results)) for _ in p.texts]) for p in paragraphs]
