"""One line of text as every stage sees it: controls removed, vertical whitespace made a space, Unicode normalized
as the data dir asks. Its own module because reading a corpus (nmt.data.corpus) and the tokenizer at translation
time (nmt.tokenizer) must clean text the same way."""

from __future__ import annotations

import re
import unicodedata
from typing import Any

# Vertical whitespace becomes a space (a value from a dataset may hold "a\nb"); other controls go.
_SPACE_CHARS = "\n\r\v\f\x1c\x1d\x1e\x1f\x85\u2028\u2029"
_CONTROLS = [*range(0x20), 0x7F, *range(0x80, 0xA0), 0xFEFF]
_CLEAN_TABLE: dict[int, Any] = {c: None for c in _CONTROLS if c != 0x09}
_CLEAN_TABLE.update({ord(c): " " for c in _SPACE_CHARS})
_NEEDS_CLEANING = re.compile("[" + re.escape("".join(map(chr, _CLEAN_TABLE))) + "]")


def clean_text(text: str) -> str:
    """One line of text: controls removed (TAB kept), vertical whitespace → space, stripped."""
    if _NEEDS_CLEANING.search(text):  # rare: a regex scan is much cheaper than translate()
        text = text.translate(_CLEAN_TABLE)
    return text.strip()


def normalize(text: str, form: str | None) -> str:
    """Unicode normalization (NFC/NFKC/NFD/NFKD); `None` leaves the text as is."""
    if not form or unicodedata.is_normalized(form, text):
        return text
    return unicodedata.normalize(form, text)
