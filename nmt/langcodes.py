"""Language codes: their one owner. Users write a language many ways (`zh`, `zh-CN`, `zh_TW`, `ZH-hans`, `pt-BR`,
`en-US`); nmt compares, routes and names languages by one canonical code each, the code LibreTranslate lists:

| written (any case, `_` or `-`)                                   | canonical |
| ---------------------------------------------------------------- | --------- |
| zh, zh-CN, zh-SG, zh-Hans, zh-Hans-CN, cmn, zh-cmn-Hans          | zh        |
| zh-TW, zh-HK, zh-MO, zh-Hant, zh-Hant-TW, zt (Argos' code)       | zh-Hant   |
| pt-BR, pb (Argos' code)                                          | pt-BR     |
| he/iw, id/in, jv/jw (ISO 639's withdrawn codes)                  | he, id, jv|
| xx-anything else (en-US, de-AT, pt-PT, sr-Latn, ja-JP)           | xx        |

The rule: a script or region subtag is kept only where it names another written language that LibreTranslate
lists as its own code (Chinese in traditional characters; Brazilian Portuguese); elsewhere it is dropped, so that
`en-US` and `en-GB` both reach an `en` model. For Chinese the script decides (Hant/Hans), else the region (TW, HK,
MO write traditional characters; others simplified). An extended-language subtag counts as the language
(`zh-yue` is `yue`, Cantonese; `zh-cmn-Hant` is `zh-Hant`). "auto" is not a code: callers handle it first.

Also: `language_name` (English names, as LibreTranslate shows them), `written_without_spaces` and `is_cjk` (for
tokenizing and scoring), `script_hint` (what the characters of a text say its language is). No heavy imports.
"""

from __future__ import annotations

import re
from bisect import bisect_right

_SUBTAG = re.compile(r"[a-z0-9]{1,8}")
_PRIMARY = re.compile(r"[a-z]{2,3}")
_ALIASES = {"cmn": "zh", "zt": "zh-Hant", "pb": "pt-BR", "iw": "he", "in": "id", "jw": "jv"}
_TRADITIONAL_REGIONS = {"tw", "hk", "mo"}
_KEPT_REGIONS = {("pt", "br"): "pt-BR"}  # (language, region) -> a code of its own

LANGUAGE_NAMES = dict(pair.split("=") for pair in (
    "af=Afrikaans,am=Amharic,ar=Arabic,az=Azerbaijani,be=Belarusian,bg=Bulgarian,bn=Bengali,bs=Bosnian,ca=Catalan,"
    "cs=Czech,cy=Welsh,da=Danish,de=German,el=Greek,en=English,eo=Esperanto,es=Spanish,et=Estonian,eu=Basque,"
    "fa=Persian,fi=Finnish,fr=French,ga=Irish,gl=Galician,gu=Gujarati,he=Hebrew,hi=Hindi,hr=Croatian,hu=Hungarian,"
    "hy=Armenian,id=Indonesian,is=Icelandic,it=Italian,ja=Japanese,jv=Javanese,ka=Georgian,kk=Kazakh,km=Khmer,"
    "kn=Kannada,ko=Korean,ky=Kyrgyz,lo=Lao,lt=Lithuanian,lv=Latvian,mk=Macedonian,ml=Malayalam,mn=Mongolian,"
    "mr=Marathi,ms=Malay,mt=Maltese,my=Burmese,nb=Norwegian,ne=Nepali,nl=Dutch,pa=Punjabi,pl=Polish,ps=Pashto,"
    "pt=Portuguese,pt-BR=Portuguese (Brazil),ro=Romanian,ru=Russian,si=Sinhala,sk=Slovak,sl=Slovenian,sq=Albanian,"
    "sr=Serbian,sv=Swedish,sw=Swahili,ta=Tamil,te=Telugu,th=Thai,tl=Tagalog,tr=Turkish,uk=Ukrainian,ur=Urdu,"
    "uz=Uzbek,vi=Vietnamese,yue=Cantonese,zh=Chinese,zh-Hant=Chinese (traditional)").split(","))

# languages written without spaces between words: word-level tokenizers and metrics need to split their characters
_WITHOUT_SPACES = {"zh", "zh-Hant", "yue", "ja", "th", "lo", "km", "my"}
_CJK = {"zh", "zh-Hant", "yue", "ja", "ko"}


def canonical(code: str) -> str:
    """The canonical code of `code` (see the table above); ValueError (one line) for an empty or malformed one."""
    tags = code.strip().replace("_", "-").lower().split("-")
    if not _PRIMARY.fullmatch(tags[0]) or not all(_SUBTAG.fullmatch(t) for t in tags[1:]):
        shown = code if len(code) <= 40 else code[:40] + "..."
        raise ValueError(f"{shown!r} is not a language code (2-3 letters, then optional subtags: 'en', 'zh-Hant', "
                         "'pt-BR')" if code.strip() else "the language code is empty")
    if tags[0] == "zh" and len(tags) > 1 and len(tags[1]) == 3 and tags[1].isalpha():  # extlang: zh-yue is yue
        tags = tags[1:]
    language = _ALIASES.get(tags[0], tags[0])
    if language == "zh":
        return _chinese(tags[1:])
    region = next((t for t in tags[1:] if len(t) == 2 or (len(t) == 3 and t.isdigit())), None)
    return _KEPT_REGIONS.get((language, region or ""), language)


def _chinese(subtags: list[str]) -> str:
    """zh or zh-Hant: by the script subtag where there is one, else by the region."""
    if "hant" in subtags:
        return "zh-Hant"
    if "hans" in subtags:
        return "zh"
    return "zh-Hant" if any(t in _TRADITIONAL_REGIONS for t in subtags) else "zh"


def canonical_or_none(code: str) -> str | None:
    """`canonical(code)`, or None where `code` is no language code (a file suffix such as "txt" or "english"): for
    callers that fall back on something else rather than refuse."""
    try:
        return canonical(code)
    except ValueError:
        return None


def language_name(code: str) -> str:
    """The English name of a language (LibreTranslate's wording), any alias accepted; an unknown or malformed code
    names itself."""
    return LANGUAGE_NAMES.get(canonical_or_none(code) or code, code)


def written_without_spaces(code: str) -> bool:
    """Whether the language is written without spaces between words (Chinese, Japanese, Thai, Lao, Khmer, Burmese):
    its text is one "word" to a whitespace tokenizer. ValueError for a malformed code."""
    return canonical(code) in _WITHOUT_SPACES


def is_cjk(code: str) -> bool:
    """Chinese (either script), Cantonese, Japanese or Korean. ValueError for a malformed code."""
    return canonical(code) in _CJK


# (first code point, script) of the Unicode ranges script_hint tells apart; what lies between is None
_RANGES = sorted([
    (0x0E00, "th"), (0x0E80, None),  # Thai
    (0x1100, "ko"), (0x1200, None),  # Hangul Jamo
    (0x3005, "han"), (0x3006, None), (0x3007, "han"), (0x3008, None),  # 々 (iteration mark) and 〇
    (0x3040, "ja"), (0x3100, None),  # Hiragana, Katakana
    (0x3130, "ko"), (0x3190, None),  # Hangul Compatibility Jamo
    (0x31F0, "ja"), (0x3200, None),  # Katakana Phonetic Extensions
    (0x3400, "han"), (0x4DC0, None), (0x4E00, "han"), (0xA000, None),  # CJK Unified Ideographs (and ext. A)
    (0xA960, "ko"), (0xA980, None), (0xAC00, "ko"), (0xD800, None),  # Hangul Jamo Ext. A, Syllables, Jamo Ext. B
    (0xF900, "han"), (0xFB00, None),  # CJK Compatibility Ideographs
    (0xFF66, "ja"),  # halfwidth Katakana (to FF9F), then halfwidth Hangul
    (0xFFA0, "ko"), (0xFFDD, None),  # halfwidth Hangul
    (0x20000, "han"), (0x323B0, None),  # CJK Unified Ideographs ext. B-H
], key=lambda r: r[0])
_STARTS = [start for start, _ in _RANGES]


def _script(char: str) -> str | None:
    i = bisect_right(_STARTS, ord(char)) - 1
    return _RANGES[i][1] if i >= 0 else None


def unspaced(char: str) -> bool:
    """Whether `char` is of a script that does not end words with spaces (Han, kana, Thai; Hangul, whose particles
    join the word before them): a term there has no word boundary to match at."""
    return _script(char) is not None


def script_hint(text: str) -> str | None:
    """What the script of `text` says its language is: "ja" for Hiragana or Katakana (even beside more kanji), "ko"
    for Hangul, "th" for Thai, "zh" for Han characters alone, None otherwise. Only letters count, and only when at
    least half of them are in these scripts: a few Japanese words in an English sentence do not make it Japanese.
    Where kana, Hangul and Thai mix, the most frequent decides. Kanji-only Japanese ("東京大学") reads as "zh"."""
    counts: dict[str | None, int] = {}
    letters = 0
    for char in text:
        if char.isalpha():
            letters += 1
            script = _script(char)
            counts[script] = counts.get(script, 0) + 1
    scripted = letters - counts.get(None, 0)
    if not scripted or 2 * scripted < letters:
        return None
    best = max(("ja", "ko", "th"), key=lambda s: counts.get(s, 0))
    return best if counts.get(best) else "zh"
