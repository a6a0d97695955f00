"""Which font is a code font: the one rule the document formats share for "text in a monospaced font among prose is
inline code" (issue 46; nmt.translation.documents.odt_styles applies it to ODT's automatic styles).

A font is monospaced when its family name says so (Courier, Consolas, Menlo, Monaco, Inconsolata, "... Mono",
"... Code", "... Typewriter", "Lucida Console", CSS's generic `monospace`...) or when the document declares it
fixed-pitch (ODF's `style:font-pitch="fixed"`, which LibreOffice writes for fonts it knows). A CJK font is never a
code font: Japanese, Chinese and Korean fonts (MS Gothic, MS Mincho, SimSun, Batang, "... CJK") are fixed-pitch
for their script and set prose. A name alone is trusted without a pitch: LibreOffice declares every font it imports
from a .docx with `style:font-pitch="variable"`, Courier New included."""

from __future__ import annotations

import re

# Whole words of a monospaced family's name ("Monotype Corsiva" and "Code2000" are not: no word ends there).
_MONOSPACED = re.compile(r"\b(?:mono|monospace|monospaced|code|courier|typewriter|console|consolas|menlo|monaco"
                         r"|inconsolata|fixedsys|freemono|cousine|iosevka|hack)\b", re.IGNORECASE)
_CJK = re.compile(r"[\u3000-\u9fff\uac00-\ud7af\uff00-\uffef]|\b(?:cjk|gothic|mincho|ming|mingliu|pmingliu|song"
                  r"|simsun|nsimsun|simhei|hei|kai|han|batang|gulim|dotum|gungsuh|meiryo|osaka|hiragino)\b",
                  re.IGNORECASE)


def monospaced(*names: str, pitch: str | None = None) -> bool:
    """Whether a font (its names: a style's name for it, its family; quoted or not) is a code font; `pitch`: the
    pitch the document declares for it ("fixed", "variable"), if any."""
    text = " ".join(name.replace("'", " ").replace('"', " ") for name in names)
    if _CJK.search(text):
        return False
    return bool(_MONOSPACED.search(text)) or pitch == "fixed"
