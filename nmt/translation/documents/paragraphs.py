"""Translating paragraphs across their inline formatting: each paragraph's sentences in one batch with attention,
the formatting placed on the words nmt.translation.alignment aligns."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nmt.translation.alignment import aligned
from nmt.translation.documents.inline import Paragraph
from nmt.translation.translator import Translator


def translate_paragraphs(translator: Translator, paragraphs: Sequence[Paragraph], **search: Any) -> list[list[Any]]:
    """Each paragraph's texts translated in one batch with attention; returns each paragraph's rendered pieces."""
    texts = [text for p in paragraphs for text in p.texts]
    results = iter(translator.translate_chunk(texts, need_attention=True, **search) if texts else [])
    tokenizer = translator.tokenizer
    return [p.render([aligned(tokenizer, next(results)) for _ in p.texts]) for p in paragraphs]
