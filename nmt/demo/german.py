"""A built-in English→German demo corpus that needs no network.

Rule-based sentences whose translation needs real work from a model, not word-for-word copying:

- cardinal numbers 0..999,999 in words: German writes them as one word and puts units before tens
  ("three hundred forty-two" → "dreihundertzweiundvierzig");
- dates: ordinals, month names, years read in pairs ("the third of May nineteen ninety-four" →
  "der dritte Mai neunzehnhundertvierundneunzig", "on the third of May" → "am dritten Mai");
- noun phrases with gender / number / case agreement ("two red cars" → "zwei rote Autos",
  "I see the old dog." → "Ich sehe den alten Hund.");
- verb-final and separable-verb reordering ("We bought ... for ten euros." → "Wir haben ... für
  zehn Euro gekauft.", "The train leaves at nine o'clock." → "Der Zug fährt um neun Uhr ab.");
- clock times in many sentences, for the training split (generate_splits, clock_pairs): "at four o'clock in
  the afternoon" → "um vier Uhr nachmittags", "I get up at seven o'clock." → "Ich stehe um sieben Uhr auf.".

German number spelling chosen here: "eins" alone and at the end ("hunderteins", "tausendeins") but
"ein" inside ("einundzwanzig", "hunderteintausend"); a leading one is left out before hundred and
thousand ("hundert", "tausend", "tausendhundert"); "ein Uhr". Everything is deterministic by seed.

nmt.demo.files writes it (or nmt.demo.chinese's English→Chinese corpus) into train/valid/test files.
"""

from __future__ import annotations

import random
from collections.abc import Callable

# ---------------------------------------------------------------- numbers

_EN_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
            "fifteen sixteen seventeen eighteen nineteen").split()
_EN_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_DE_ONES = ("null eins zwei drei vier fünf sechs sieben acht neun zehn elf zwölf dreizehn vierzehn "
            "fünfzehn sechzehn siebzehn achtzehn neunzehn").split()
_DE_TENS = "_ _ zwanzig dreißig vierzig fünfzig sechzig siebzig achtzig neunzig".split()


def _en_below_1000(n: int) -> str:
    hundreds, rest = divmod(n, 100)
    words = [f"{_EN_ONES[hundreds]} hundred"] if hundreds else []
    if rest >= 20:
        tens, ones = divmod(rest, 10)
        words.append(_EN_TENS[tens] + (f"-{_EN_ONES[ones]}" if ones else ""))
    elif rest:
        words.append(_EN_ONES[rest])
    return " ".join(words)


def number_to_en(n: int) -> str:
    """0..999,999 in American English words: 342 → "three hundred forty-two", 1001 → "one thousand one"."""
    if not 0 <= n <= 999_999:
        raise ValueError(f"number out of range 0..999999: {n}")
    if n == 0:
        return "zero"
    thousands, rest = divmod(n, 1000)
    words = [f"{_en_below_1000(thousands)} thousand"] if thousands else []
    if rest:
        words.append(_en_below_1000(rest))
    return " ".join(words)


def _de_below_100(n: int, final: bool) -> str:
    """1..99; `final`: nothing follows, so 1 is "eins" (else "ein", as in "eintausend")."""
    if n == 1:
        return "eins" if final else "ein"
    if n < 20:
        return _DE_ONES[n]
    tens, ones = divmod(n, 10)
    if not ones:
        return _DE_TENS[tens]
    return ("ein" if ones == 1 else _DE_ONES[ones]) + "und" + _DE_TENS[tens]


def _de_below_1000(n: int, final: bool) -> str:
    hundreds, rest = divmod(n, 100)
    word = ("" if hundreds == 1 else _DE_ONES[hundreds]) + "hundert" if hundreds else ""
    return word + (_de_below_100(rest, final) if rest else "")


def number_to_de(n: int) -> str:
    """0..999,999 as one German word: 21 → "einundzwanzig", 101 → "hunderteins", 1000 → "tausend"."""
    if not 0 <= n <= 999_999:
        raise ValueError(f"number out of range 0..999999: {n}")
    if n == 0:
        return "null"
    thousands, rest = divmod(n, 1000)
    word = ("" if thousands == 1 else _de_below_1000(thousands, final=False)) + "tausend" if thousands else ""
    return word + (_de_below_1000(rest, final=True) if rest else "")


# ---------------------------------------------------------------- dates

MONTHS = [("January", "Januar", 31), ("February", "Februar", 28), ("March", "März", 31),
          ("April", "April", 30), ("May", "Mai", 31), ("June", "Juni", 30), ("July", "Juli", 31),
          ("August", "August", 31), ("September", "September", 30), ("October", "Oktober", 31),
          ("November", "November", 30), ("December", "Dezember", 31)]
_EN_ORD = ("_ first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth thirteenth "
           "fourteenth fifteenth sixteenth seventeenth eighteenth nineteenth").split()
_EN_ORD_TENS = {2: "twentieth", 3: "thirtieth"}
_DE_ORD_IRREGULAR = {1: "erst", 3: "dritt", 7: "siebt", 8: "acht"}


def ordinal_en(n: int) -> str:
    """1..39: "first", "twenty-first", "thirtieth"."""
    if n < 20:
        return _EN_ORD[n]
    tens, ones = divmod(n, 10)
    return _EN_ORD_TENS[tens] if not ones else f"{_EN_TENS[tens]}-{_EN_ORD[ones]}"


def ordinal_de_stem(n: int) -> str:
    """1..39 without the case ending: 3 → "dritt" (+e/+en), 21 → "einundzwanzigst"."""
    if n in _DE_ORD_IRREGULAR:
        return _DE_ORD_IRREGULAR[n]
    return number_to_de(n) + ("t" if n < 20 else "st")


def year_en(y: int) -> str:
    """1800..2099 as spoken: 1994 "nineteen ninety-four", 1905 "nineteen oh five", 2014 "twenty fourteen"."""
    century, rest = divmod(y, 100)
    if 2000 <= y < 2010:
        return number_to_en(y)
    if rest == 0:
        return f"{number_to_en(century)} hundred"
    if rest < 10:
        return f"{number_to_en(century)} oh {number_to_en(rest)}"
    return f"{number_to_en(century)} {number_to_en(rest)}"


def year_de(y: int) -> str:
    """1800..2099: 1994 "neunzehnhundertvierundneunzig", 2014 "zweitausendvierzehn"."""
    if y >= 2000:
        return number_to_de(y)
    century, rest = divmod(y, 100)
    return _DE_ONES[century] + "hundert" + (_de_below_100(rest, final=True) if rest else "")


# ---------------------------------------------------------------- noun phrases

# english singular, english plural, german singular, german plural, gender
NOUNS = [
    ("car", "cars", "Auto", "Autos", "n"), ("house", "houses", "Haus", "Häuser", "n"),
    ("book", "books", "Buch", "Bücher", "n"), ("child", "children", "Kind", "Kinder", "n"),
    ("horse", "horses", "Pferd", "Pferde", "n"), ("boat", "boats", "Boot", "Boote", "n"),
    ("girl", "girls", "Mädchen", "Mädchen", "n"), ("window", "windows", "Fenster", "Fenster", "n"),
    ("glass", "glasses", "Glas", "Gläser", "n"), ("bicycle", "bicycles", "Fahrrad", "Fahrräder", "n"),
    ("egg", "eggs", "Ei", "Eier", "n"), ("dog", "dogs", "Hund", "Hunde", "m"),
    ("man", "men", "Mann", "Männer", "m"), ("table", "tables", "Tisch", "Tische", "m"),
    ("chair", "chairs", "Stuhl", "Stühle", "m"), ("bird", "birds", "Vogel", "Vögel", "m"),
    ("apple", "apples", "Apfel", "Äpfel", "m"), ("tree", "trees", "Baum", "Bäume", "m"),
    ("train", "trains", "Zug", "Züge", "m"), ("boy", "boys", "Junge", "Jungen", "m"),
    ("letter", "letters", "Brief", "Briefe", "m"), ("ball", "balls", "Ball", "Bälle", "m"),
    ("shoe", "shoes", "Schuh", "Schuhe", "m"), ("mountain", "mountains", "Berg", "Berge", "m"),
    ("teacher", "teachers", "Lehrer", "Lehrer", "m"), ("key", "keys", "Schlüssel", "Schlüssel", "m"),
    ("cat", "cats", "Katze", "Katzen", "f"), ("woman", "women", "Frau", "Frauen", "f"),
    ("flower", "flowers", "Blume", "Blumen", "f"), ("city", "cities", "Stadt", "Städte", "f"),
    ("bottle", "bottles", "Flasche", "Flaschen", "f"), ("door", "doors", "Tür", "Türen", "f"),
    ("lamp", "lamps", "Lampe", "Lampen", "f"), ("bridge", "bridges", "Brücke", "Brücken", "f"),
    ("street", "streets", "Straße", "Straßen", "f"), ("cup", "cups", "Tasse", "Tassen", "f"),
]
ADJECTIVES = [("red", "rot"), ("blue", "blau"), ("green", "grün"), ("big", "groß"), ("small", "klein"),
              ("old", "alt"), ("new", "neu"), ("young", "jung"), ("black", "schwarz"), ("white", "weiß"),
              ("yellow", "gelb"), ("beautiful", "schön"), ("cheap", "billig"), ("fast", "schnell"),
              ("heavy", "schwer"), ("brown", "braun")]
PLACES = [("here", "hier"), ("there", "dort"), ("in the garden", "im Garten"),
          ("in the city", "in der Stadt"), ("on the table", "auf dem Tisch"),
          ("next to the house", "neben dem Haus"), ("behind the door", "hinter der Tür"),
          ("on the street", "auf der Straße")]

# (article, adjective ending) by determiner, gender ("pl" = plural), case
_DEFINITE = {("m", "nom"): ("der", "e"), ("m", "acc"): ("den", "en"), ("f", "nom"): ("die", "e"),
             ("f", "acc"): ("die", "e"), ("n", "nom"): ("das", "e"), ("n", "acc"): ("das", "e"),
             ("pl", "nom"): ("die", "en"), ("pl", "acc"): ("die", "en")}
_THIS = {("m", "nom"): ("dieser", "e"), ("m", "acc"): ("diesen", "en"), ("f", "nom"): ("diese", "e"),
         ("f", "acc"): ("diese", "e"), ("n", "nom"): ("dieses", "e"), ("n", "acc"): ("dieses", "e"),
         ("pl", "nom"): ("diese", "en"), ("pl", "acc"): ("diese", "en")}
_INDEFINITE = {("m", "nom"): ("ein", "er"), ("m", "acc"): ("einen", "en"), ("f", "nom"): ("eine", "e"),
               ("f", "acc"): ("eine", "e"), ("n", "nom"): ("ein", "es"), ("n", "acc"): ("ein", "es")}


def random_number(rng: random.Random) -> int:
    """Log-uniform over 0..999,999 so short and long numbers are equally common."""
    digits = rng.randint(1, 6)
    return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)


def _noun_phrase(rng: random.Random, case: str, count: int | None = None) -> tuple[str, str, bool]:
    """(english, german, plural?) for a random noun phrase in nominative or accusative."""
    en_sg, en_pl, de_sg, de_pl, gender = rng.choice(NOUNS)
    adjectives = rng.sample(ADJECTIVES, rng.choice((0, 1, 1, 1, 2)))
    kind = "count" if count is not None else rng.choice(("the", "the", "a", "this", "these", "count", "bare"))
    if kind == "count" and count is None:
        count = random_number(rng) if rng.random() < 0.5 else rng.randint(2, 12)
    if kind == "count" and count == 1:
        kind, en_det = "a", "one"
    else:
        en_det = None
    plural = kind in ("these", "count", "bare") or (kind == "the" and rng.random() < 0.4)
    key = ("pl" if plural else gender, case)
    if kind == "the":
        (article, ending), en_det = _DEFINITE[key], "the"
    elif kind in ("this", "these"):
        (article, ending), en_det = _THIS[key], kind
    elif kind == "a":
        article, ending = _INDEFINITE[key]
        first = adjectives[0][0] if adjectives else en_sg
        en_det = en_det or ("an" if first[0] in "aeio" else "a")
    elif kind == "count":
        article, ending, en_det = number_to_de(count), "e", number_to_en(count)
    else:  # bare plural: strong declension
        article, ending, en_det = "", "e", ""
    en = " ".join(w for w in (en_det, *(a[0] for a in adjectives), en_pl if plural else en_sg) if w)
    de = " ".join(w for w in (article, *(a[1] + ending for a in adjectives), de_pl if plural else de_sg) if w)
    return en, de, plural


def _date(rng: random.Random) -> tuple[int, str, str, int]:
    month = rng.randrange(12)
    return rng.randint(1, MONTHS[month][2]), MONTHS[month][0], MONTHS[month][1], rng.randint(1800, 2099)


# ---------------------------------------------------------------- templates


def _t_number(rng: random.Random) -> tuple[str, str]:
    n = random_number(rng)
    return number_to_en(n), number_to_de(n)


def _t_counted(rng: random.Random) -> tuple[str, str]:
    n = random_number(rng)
    en_unit, de_unit = rng.choice([("euros", "Euro"), ("people", "Menschen"), ("kilometers", "Kilometer"),
                                   ("years", "Jahre"), ("days", "Tage"), ("pages", "Seiten")])
    return f"{number_to_en(n)} {en_unit}", f"{number_to_de(n)} {de_unit}"


def _t_date(rng: random.Random) -> tuple[str, str]:
    day, en_month, de_month, year = _date(rng)
    de = f"der {ordinal_de_stem(day)}e {de_month} {year_de(year)}"
    if rng.random() < 0.5:
        return f"the {ordinal_en(day)} of {en_month} {year_en(year)}", de
    return f"{en_month} {ordinal_en(day)}, {year_en(year)}", de


def _t_on_date(rng: random.Random) -> tuple[str, str]:
    day, en_month, de_month, year = _date(rng)
    if rng.random() < 0.5:
        return f"on the {ordinal_en(day)} of {en_month}", f"am {ordinal_de_stem(day)}en {de_month}"
    return (f"I was born on the {ordinal_en(day)} of {en_month} {year_en(year)}.",
            f"Ich wurde am {ordinal_de_stem(day)}en {de_month} {year_de(year)} geboren.")


def _t_year(rng: random.Random) -> tuple[str, str]:
    year = rng.randint(1800, 2099)
    return f"in the year {year_en(year)}", f"im Jahr {year_de(year)}"


def _t_phrase(rng: random.Random) -> tuple[str, str]:
    en, de, _ = _noun_phrase(rng, "nom")
    return en, de


def _t_see(rng: random.Random) -> tuple[str, str]:
    en, de, _ = _noun_phrase(rng, "acc")
    return f"I see {en}.", f"Ich sehe {de}."


def _t_place(rng: random.Random) -> tuple[str, str]:
    en, de, plural = _noun_phrase(rng, "nom")
    en_place, de_place = rng.choice(PLACES)
    return (f"{en} {'are' if plural else 'is'} {en_place}.",
            f"{de} {'sind' if plural else 'ist'} {de_place}.")


def _t_bought(rng: random.Random) -> tuple[str, str]:
    count = rng.randint(1, 12) if rng.random() < 0.5 else random_number(rng)
    en, de, _ = _noun_phrase(rng, "acc", count=count)
    price = random_number(rng)
    return (f"We bought {en} for {number_to_en(price)} euros.",
            f"Wir haben {de} für {number_to_de(price)} Euro gekauft.")


def _t_train(rng: random.Random) -> tuple[str, str]:
    hour = rng.randint(1, 12)
    de_hour = "ein" if hour == 1 else number_to_de(hour)
    if rng.random() < 0.5:
        return f"at {number_to_en(hour)} o'clock", f"um {de_hour} Uhr"
    return f"The train leaves at {number_to_en(hour)} o'clock.", f"Der Zug fährt um {de_hour} Uhr ab."


_TEMPLATES: list[tuple[Callable[[random.Random], tuple[str, str]], int]] = [
    (_t_number, 6), (_t_counted, 2), (_t_date, 3), (_t_on_date, 2), (_t_year, 1), (_t_phrase, 3),
    (_t_see, 2), (_t_place, 2), (_t_bought, 2), (_t_train, 1),
]


def capitalize(text: str) -> str:
    return text[:1].upper() + text[1:]


def distinct_pairs(templates: list, n: int, seed: int) -> list[tuple[str, str]]:
    """`n` distinct pairs drawn from weighted (template, weight) generators, the same for the same seed. A full
    sentence starts with a capital (a no-op for scripts without case)."""
    rng = random.Random(seed)
    functions, weights = zip(*templates, strict=True)
    seen: set[tuple[str, str]] = set()
    pairs: list[tuple[str, str]] = []
    attempts = 0
    while len(pairs) < n:
        attempts += 1
        if attempts > 20 * n + 1000:  # the space has millions of pairs; only absurd n gets here
            raise ValueError(f"cannot generate {n} distinct demo pairs")
        en, other = rng.choices(functions, weights)[0](rng)
        if en.endswith("."):
            en, other = capitalize(en), capitalize(other)
        if (en, other) not in seen:
            seen.add((en, other))
            pairs.append((en, other))
    return pairs


def generate_pairs(n: int, seed: int = 1) -> list[tuple[str, str]]:
    """`n` distinct (english, german) pairs, the same for the same seed."""
    return distinct_pairs(_TEMPLATES, n, seed)
