"""Sentence boundaries in plain text, as character offsets: the splitter of `nmt serve`'s HTML path and of
nmt.translation.documents.inline (text joined across inline formatting). Rule-based, the same on every machine, no
download: end punctuation, whitespace, then a capital or a digit, unless the dot is an abbreviation's or an initial's;
CJK end punctuation always ends a sentence."""

from __future__ import annotations

import re

# Words before a "." that do not end a sentence ("Dr. Smith"); tokens with inner dots ("e.g", "U.S") count too.
ABBREVIATIONS = frozenset({"mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "etc", "cf", "fig", "no", "nr",
                           "vol", "approx", "ca", "inc", "ltd", "co", "corp", "dept", "gen", "lt", "col", "rev", "bzw",
                           "usw", "vgl", "ggf", "mme", "mlle", "sra"})

# End punctuation then whitespace (Latin-like scripts), or CJK end punctuation, which needs no space after it.
_BREAK = re.compile(r"[.!?…؟।]+[\"'”’»)\]]*(?=\s)|[。！？]+[」』”’）)]*(?=\s*\S)")
OPENERS = "\"'“‘«([¿¡"
_NEXT_WORD = re.compile(rf"\s*[{re.escape(OPENERS)}]*(\S)")  # the next word's first character, after its quotes


def split_sentences(text: str) -> list[str]:
    """The sentences of plain `text`, stripped, none empty (end punctuation, whitespace, then upper case or a digit)."""
    return [text[a:b] for a, b in sentence_spans(text)]


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence of `text`, whitespace around it left out."""
    cuts = [0] + [m.end() for m in _BREAK.finditer(text) if _ends_sentence(text, m)] + [len(text)]
    spans = []
    for a, b in zip(cuts, cuts[1:]):
        piece = text[a:b]
        stripped = piece.strip()
        if stripped:
            start = a + len(piece) - len(piece.lstrip())
            spans.append((start, start + len(stripped)))
    return spans


def _ends_sentence(text: str, match: re.Match[str]) -> bool:
    """Whether the end punctuation of `match` ends a sentence: CJK always; otherwise when the next word starts with
    a capital (or a caseless letter) or a digit, and the punctuation is not the dot of an abbreviation or initial."""
    if match.group()[0] in "。！？":
        return True
    following = _NEXT_WORD.match(text, match.end())
    first = following.group(1) if following else ""
    if not (first.isdigit() or (first.isalpha() and not first.islower())):
        return False
    if match.group() != ".":
        return True
    word = text[max(0, match.start() - 40):match.start()].split()[-1:] or [""]
    token = word[0].lstrip(OPENERS).lower()
    is_initial = len(token) == 1 and token.isalpha()
    dotted = "." in token and all(part.isalpha() and len(part) <= 2 for part in token.split("."))  # e.g, u.s, z.b
    return not (token in ABBREVIATIONS or is_initial or dotted)
