from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nmt.demo.clock import clock_de, generate_splits
from nmt.demo.files import write_demo
from nmt.demo.german import (
    generate_pairs,
    number_to_de,
    number_to_en,
    ordinal_de_stem,
    ordinal_en,
    year_de,
    year_en,
)

NUMBERS = {
    0: ("zero", "null"),
    1: ("one", "eins"),
    17: ("seventeen", "siebzehn"),
    16: ("sixteen", "sechzehn"),
    21: ("twenty-one", "einundzwanzig"),
    30: ("thirty", "dreißig"),
    70: ("seventy", "siebzig"),
    100: ("one hundred", "hundert"),
    101: ("one hundred one", "hunderteins"),
    342: ("three hundred forty-two", "dreihundertzweiundvierzig"),
    1000: ("one thousand", "tausend"),
    1001: ("one thousand one", "tausendeins"),
    21000: ("twenty-one thousand", "einundzwanzigtausend"),
    101000: ("one hundred one thousand", "hunderteintausend"),
    999999: ("nine hundred ninety-nine thousand nine hundred ninety-nine",
             "neunhundertneunundneunzigtausendneunhundertneunundneunzig"),
}


@pytest.mark.parametrize("n", sorted(NUMBERS))
def test_number_words(n):
    assert number_to_en(n) == NUMBERS[n][0]
    assert number_to_de(n) == NUMBERS[n][1]


@pytest.mark.parametrize("n", [-1, 1_000_000])
def test_number_out_of_range(n):
    with pytest.raises(ValueError):
        number_to_en(n)
    with pytest.raises(ValueError):
        number_to_de(n)


_EN_VALUES = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen".split())}
_EN_VALUES.update({w: 10 * i for i, w in enumerate(
    "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()) if i >= 2})


def _parse_en(text: str) -> int:
    total = current = 0
    for word in text.split():
        if word == "hundred":
            current *= 100
        elif word == "thousand":
            total, current = (total + current) * 1000, 0
        else:
            current += sum(_EN_VALUES[part] for part in word.split("-"))
    return total + current


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 999_999))
def test_number_properties(n):
    en, de = number_to_en(n), number_to_de(n)
    assert _parse_en(en) == n
    assert " " not in de and de == de.lower()
    assert de.endswith("eins") == (n % 100 == 1)  # "eins" only at the very end
    assert "einsund" not in de and "einstausend" not in de and "einshundert" not in de


def test_dates():
    assert ordinal_en(3) == "third" and ordinal_en(21) == "twenty-first" and ordinal_en(30) == "thirtieth"
    assert [ordinal_de_stem(d) + "e" for d in (1, 3, 7, 8, 19, 20, 31)] == [
        "erste", "dritte", "siebte", "achte", "neunzehnte", "zwanzigste", "einunddreißigste"]
    assert year_en(1994) == "nineteen ninety-four" and year_de(1994) == "neunzehnhundertvierundneunzig"
    assert year_en(1905) == "nineteen oh five" and year_de(1905) == "neunzehnhundertfünf"
    assert year_en(2000) == "two thousand" and year_de(2000) == "zweitausend"
    assert year_en(2014) == "twenty fourteen" and year_de(2014) == "zweitausendvierzehn"


def test_generate_deterministic_distinct_and_short():
    pairs = generate_pairs(3000, seed=7)
    assert pairs == generate_pairs(3000, seed=7)
    assert pairs != generate_pairs(3000, seed=8)
    assert len(set(pairs)) == 3000
    assert max(len(en.split()) for en, _ in pairs) <= 25
    assert all(en and de and "\n" not in en + de for en, de in pairs)
    english = {w for en, _ in pairs for w in en.split()}
    assert 200 <= len(english) <= 1500  # "a few hundred words"


def test_generated_sentences_follow_the_rules():
    pairs = generate_pairs(3000, seed=1)
    numbers = {en: de for en, de in pairs if re.fullmatch(r"[a-z -]+", en) and _is_number(en)}
    assert len(numbers) > 300
    for en, de in numbers.items():
        assert de == number_to_de(_parse_en(en))
    for en, de in pairs:  # agreement: accusative masculine after "I see the"
        if en.startswith("I see the ") and de.split()[2] in ("den", "die", "das"):
            if de.split()[2] == "den":
                assert all(w.endswith("en") for w in de.split()[3:-1])
        if en.startswith("The train leaves at"):
            assert de.startswith("Der Zug fährt um") and de.endswith("Uhr ab.")


def _is_number(text: str) -> bool:
    parts = [part for word in text.split() for part in word.split("-")]
    return all(part in _EN_VALUES or part in ("hundred", "thousand") for part in parts)


def test_write_demo_disjoint_splits(tmp_path):
    prefixes = write_demo(tmp_path / "raw", n_train=400, n_valid=50, n_test=60, seed=3)
    assert prefixes == {s: str(tmp_path / "raw" / s) for s in ("train", "valid", "test")}
    lines = {}
    for split, n in (("train", 400), ("valid", 50), ("test", 60)):
        en = (tmp_path / "raw" / f"{split}.en").read_text(encoding="utf-8").split("\n")
        de = (tmp_path / "raw" / f"{split}.de").read_text(encoding="utf-8").split("\n")
        assert len(en) == len(de) == n + 1 and en[-1] == de[-1] == ""  # trailing newline
        lines[split] = set(en[:-1])
    assert not lines["train"] & lines["valid"]
    assert not lines["train"] & lines["test"]
    assert not lines["valid"] & lines["test"]
    again = tmp_path / "again"
    write_demo(again, n_train=400, n_valid=50, n_test=60, seed=3)
    assert (again / "train.de").read_bytes() == (tmp_path / "raw" / "train.de").read_bytes()
    reverse = tmp_path / "reverse"  # German→English: files still hold the language they are named for
    write_demo(reverse, n_train=400, n_valid=50, n_test=60, seed=3, src_lang="de", tgt_lang="en")
    assert (reverse / "valid.de").read_bytes() == (tmp_path / "raw" / "valid.de").read_bytes()
    write_demo(reverse, n_train=400, n_valid=50, n_test=60, seed=3, src_lang="src", tgt_lang="tgt")
    assert (reverse / "test.src").read_bytes() == (tmp_path / "raw" / "test.en").read_bytes()


_HOURS = {number_to_en(h): h for h in range(1, 13)}


def _clock_hours(pairs: list[tuple[str, str]]) -> list[int]:
    """The hours of every "H o'clock" in `pairs`, checking each German side says them as "H Uhr", in order, with
    "ein Uhr" for one (never "eins Uhr")."""
    hours = []
    for en, de in pairs:
        said = [_HOURS[word] for word in re.findall(r"(\S+) o'clock", en)]
        assert [clock_de(h) for h in said] == re.findall(r"\S+ Uhr", de), (en, de)
        assert "eins Uhr" not in de
        hours += said
    return hours


def test_clock_de():
    assert [clock_de(h) for h in (1, 4, 11, 12)] == ["ein Uhr", "vier Uhr", "elf Uhr", "zwölf Uhr"]


def test_training_split_teaches_every_hour(tmp_path):
    """The clock template alone makes 24 distinct pairs, nearly all used up by the held-out splits (the default
    demo's 20,000 training pairs had 5 clock times, no "four o'clock"): training gets clock sentences of every hour,
    in turn, said one way."""
    splits = generate_splits(20000, 500, 500, seed=1)  # the demo's own (make demo)
    assert splits == generate_splits(20000, 500, 500, seed=1)
    assert splits["valid"] + splits["test"] == generate_pairs(1000, seed=1)  # held out: as before, unchanged
    train = splits["train"]
    assert len(train) == len(set(train)) == 20000
    assert not set(train) & set(splits["valid"] + splits["test"])
    clock = [(en, de) for en, de in train if "o'clock" in en]
    assert len(clock) >= 20000 // 25
    hours = _clock_hours(clock)
    counts = [hours.count(h) for h in range(1, 13)]
    assert min(counts) >= 60 and max(counts) <= 1.25 * min(counts), counts  # every hour, balanced
    assert sum("four o'clock" in en for en, _ in train) >= 60  # the demo's "at four o'clock" was never seen
    assert sum(not en.endswith(".") for en, _ in clock) >= 60  # phrases like the test set's "at four o'clock"
    _clock_hours(splits["valid"] + splits["test"])  # the held-out clock times say them the same way
    # the files: a small corpus gets its share too, spread through the training file
    write_demo(tmp_path, n_train=600, n_valid=50, n_test=50, seed=2)
    en = (tmp_path / "train.en").read_text(encoding="utf-8").splitlines()
    de = (tmp_path / "train.de").read_text(encoding="utf-8").splitlines()
    at = [i for i, line in enumerate(en) if "o'clock" in line]
    assert set(_clock_hours([(en[i], de[i]) for i in at])) == set(range(1, 13))
    assert len(at) >= 600 // 25 and at[0] < 600 // 10 and at[-1] > 600 - 600 // 10
