"""The built-in demo corpus as files: train/valid/test pairs of nmt.demo.german's English→German generator, or of
nmt.demo.chinese's English→Chinese one when a language of the pair is (Simplified) Chinese. `nmt prepare --demo` and
the tests write it here."""

from __future__ import annotations

from pathlib import Path

from nmt.demo.chinese import generate_pairs_zh
from nmt.demo.clock import generate_splits
from nmt.errors import NmtError
from nmt.langcodes import canonical_or_none


class DemoLanguageError(NmtError, ValueError):
    """A language code the built-in demo has no corpus for (one line on the command line, no traceback)."""


def _is_chinese(lang: str) -> bool:
    """Whether `lang` asks for the Chinese demo (zh, zh-CN, zh-Hans...); traditional Chinese is refused."""
    code = canonical_or_none(lang)  # None: a file name rather than a language (the German demo's files, as named)
    if code == "zh-Hant":
        raise DemoLanguageError(f"the built-in Chinese demo is Simplified Chinese (zh, zh-CN, zh-Hans), not '{lang}'")
    return code == "zh"


def write_demo(out_dir: str | Path, n_train: int = 20000, n_valid: int = 500, n_test: int = 500,
               seed: int = 1, src_lang: str = "en", tgt_lang: str = "de") -> dict[str, str]:
    """Write train/valid/test .{src_lang}/.{tgt_lang} files (splits disjoint); return their prefixes.

    The generator makes English→German pairs, or English→Chinese ones when either code is Simplified Chinese
    (zh, zh-CN, zh-Hans; a Traditional one is a DemoLanguageError). With src_lang "de"/Chinese or tgt_lang="en"
    the German/Chinese side becomes the source; any other codes just name the English and the other side's files.
    """
    chinese = _is_chinese(src_lang) | _is_chinese(tgt_lang)  # both checked: either may be refused
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if chinese:
        pairs = generate_pairs_zh(n_train + n_valid + n_test, seed)  # distinct, so the splits are disjoint
        held_out = n_valid + n_test
        splits = {"train": pairs[held_out:], "valid": pairs[:n_valid], "test": pairs[n_valid:held_out]}
    else:  # the same, and clock times spread through the training split (nmt.demo.clock.generate_splits)
        splits = generate_splits(n_train, n_valid, n_test, seed)
    prefixes = {}
    for name, split in splits.items():
        other_source = src_lang == "de" or _is_chinese(src_lang) or tgt_lang == "en"  # German/Chinese → English
        for lang, column in ((src_lang, int(other_source)), (tgt_lang, 1 - int(other_source))):
            text = "".join(pair[column] + "\n" for pair in split)
            (out / f"{name}.{lang}").write_text(text, encoding="utf-8")
        prefixes[name] = str(out / name)
    return prefixes
