"""Translating paragraphs across their inline formatting: each paragraph's sentences in one batch with attention,
the formatting placed on the words nmt.translation.alignment aligns."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nmt.translation.alignment import COLUMN_POWER, LINKS, aligned, balanced, links  # noqa: F401  (their users import them here)
from nmt.translation.documents.inline import Paragraph
from nmt.translation.glossary import Glossary
from nmt.translation.translator import SentenceTranslator


def translate_paragraphs(translator: SentenceTranslator, paragraphs: Sequence[Paragraph],
                         glossary: Glossary | None = None) -> list[list[Any]]:
    """Each paragraph's texts translated in one batch with attention; returns each paragraph's rendered pieces."""
    texts = [text for p in paragraphs for text in p.texts]
    results = iter(translator.translate_chunk(texts, need_attention=True, glossary=glossary) if texts else [])
    tokenizer = translator.tokenizer
    return [p.render([aligned(tokenizer, next(results)) for _ in p.texts]) for p in paragraphs]
