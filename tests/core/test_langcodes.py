"""nmt.langcodes: language codes as users write them, one canonical code each; names; script hints."""

from __future__ import annotations

import subprocess
import sys

import pytest

from nmt.langcodes import LANGUAGE_NAMES, canonical, is_cjk, language_name, script_hint, written_without_spaces

# written -> canonical: the table of the module's docstring, and the spellings clients send
TABLE = {
    "zh": "zh", "zh-CN": "zh", "zh-SG": "zh", "zh-Hans": "zh", "zh-Hans-CN": "zh", "cmn": "zh", "zh-cmn-Hans": "zh",
    "ZH-hans": "zh", "zh_cn": "zh", "Zh-Hans-HK": "zh",  # the script says simplified, whatever the region
    "zh-TW": "zh-Hant", "zh-HK": "zh-Hant", "zh-MO": "zh-Hant", "zh-Hant": "zh-Hant", "zh-Hant-TW": "zh-Hant",
    "zh_TW": "zh-Hant", "ZH-HANT": "zh-Hant", "zh-hant": "zh-Hant", "zt": "zh-Hant", "zh-cmn-Hant": "zh-Hant",
    "zh-yue": "yue", "yue": "yue",
    "ja": "ja", "ja-JP": "ja", "JA": "ja", "ko": "ko", "ko_KR": "ko", "th": "th", "th-TH": "th",
    "pt-BR": "pt-BR", "pt_br": "pt-BR", "PT-BR": "pt-BR", "pb": "pt-BR", "pt-Latn-BR": "pt-BR", "pt-PT": "pt",
    "pt": "pt", "en": "en", "en-US": "en", "en-GB": "en", "EN": "en", "de-AT": "de", "de-CH-1996": "de",
    "sr-Latn": "sr", "es-419": "es", "iw": "he", "in": "id", "jw": "jv", " en ": "en", "ast": "ast",
}


@pytest.mark.parametrize(("written", "code"), TABLE.items())
def test_canonical(written: str, code: str) -> None:
    assert canonical(written) == code
    assert canonical(code) == code  # canonical codes are fixed points: canonicalising twice changes nothing


@pytest.mark.parametrize("bad", ["", "  ", "auto", "e", "english", "en-", "-en", "en--US", "x-klingon", "中文",
                                 "en US", "en.US", "zh-Hant-TW-toolongsubtag", "a" * 100, "en\nde"])
def test_malformed_codes_are_one_line_errors(bad: str) -> None:
    with pytest.raises(ValueError) as caught:
        canonical(bad)
    message = str(caught.value)
    assert "\n" not in message and len(message) < 160
    assert ("empty" in message) if not bad.strip() else ("is not a language code" in message)


def test_language_names() -> None:
    assert language_name("zh") == "Chinese" and language_name("zh-Hant") == "Chinese (traditional)"
    assert language_name("zh-TW") == "Chinese (traditional)" and language_name("zh_CN") == "Chinese"
    assert [language_name(c) for c in ("th", "ja", "ko", "pt-BR", "en-US")] == [
        "Thai", "Japanese", "Korean", "Portuguese (Brazil)", "English"]
    assert language_name("xx") == "xx" and language_name("not a code") == "not a code"  # names itself
    assert all(canonical(code) == code for code in LANGUAGE_NAMES)  # the table is keyed by canonical codes


@pytest.mark.parametrize("code", ["zh", "zh-Hant", "zh-TW", "zh-CN", "ja", "th", "lo", "km", "my", "yue"])
def test_written_without_spaces(code: str) -> None:
    assert written_without_spaces(code)


@pytest.mark.parametrize("code", ["ko", "en", "de", "vi", "pt-BR"])
def test_written_with_spaces(code: str) -> None:
    assert not written_without_spaces(code)  # Korean separates its words by spaces


def test_cjk() -> None:
    assert all(is_cjk(c) for c in ("zh", "zh-Hant", "zh_TW", "ja", "ko", "ko-KR"))
    assert not any(is_cjk(c) for c in ("th", "en", "vi", "my"))
    with pytest.raises(ValueError):
        is_cjk("")


# short everyday texts (about 3 words), where py3langid alone may confuse Chinese and Japanese
HINTS = [
    ("我喜欢猫", "zh"), ("今天天气很好", "zh"), ("我喜歡貓", "zh"),
    ("東京大学", "zh"),  # Han only: even Japanese kanji
    ("猫が好きです", "ja"), ("東京に行きます", "ja"), ("私は学生です", "ja"), ("コーヒーをください", "ja"),
    ("東京都庁の職員", "ja"),  # one kana among six kanji
    ("ｺｰﾋｰ", "ja"),  # halfwidth katakana
    ("고양이를 좋아해요", "ko"), ("안녕하세요 반갑습니다", "ko"), ("韓國語 공부", "ko"),  # Hangul beside hanja
    ("ฉันรักแมว", "th"), ("วันนี้อากาศดี", "th"),
    ("iPhoneを買いました", "ja"),  # half the letters are kana and kanji
    ("I really love ラーメン", None),  # a Japanese word in an English sentence: the script does not decide
    ("The weather is nice today.", None), ("Привет, как дела?", None), ("123 !?", None), ("", None),
]


@pytest.mark.parametrize(("text", "hint"), HINTS)
def test_script_hint(text: str, hint: str | None) -> None:
    assert script_hint(text) == hint


def test_imports_nothing_heavy() -> None:
    # a child process: the suite's own process has torch loaded already
    code = "import sys, nmt.langcodes; assert not {'torch', 'numpy', 'fastapi'} & set(sys.modules), sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)
