"""Translating paragraphs across their inline formatting: each paragraph's sentences in one batch with attention,
the formatting placed on the words nmt.translation.alignment aligns."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from nmt.tokenizer import Tokenizer
from nmt.translation.alignment import aligned
from nmt.translation.documents.inline import Paragraph
from nmt.translation.glossary import Glossary
from nmt.translation.translator import SentenceTranslator, Translation


def translate_paragraphs(translator: SentenceTranslator, paragraphs: Sequence[Paragraph],
                         glossary: Glossary | None = None) -> list[list[Any]]:
    """Each paragraph's texts translated in one batch with attention; returns each paragraph's rendered pieces."""
    texts = [text for p in paragraphs for text in p.texts]
    results = translator.translate_chunk(texts, need_attention=True, glossary=glossary) if texts else []
    return render_aligned(translator.tokenizer, paragraphs, results)


def render_aligned(tokenizer: Tokenizer, paragraphs: Sequence[Any], results: Iterable[Translation]) -> list[Any]:
    """Each paragraph's (or HTML fragment's: anything with `texts` and `render`) output from its sentences'
    translations, in order, with attention: the formatting placed on the aligned words."""
    done = iter(results)
    return [p.render([aligned(tokenizer, next(done)) for _ in p.texts]) for p in paragraphs]
