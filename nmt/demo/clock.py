"""Clock times for the German demo's training split (nmt.demo.german's generator makes the rest), and the three splits
with them spread through training (`generate_splits`, what `nmt prepare --demo` writes)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable

from nmt.demo.german import capitalize, generate_pairs, number_to_de, number_to_en

# ---------------------------------------------------------------- clock times, for the training split

# nmt.demo.german's clock template (_t_train) makes only 24 distinct pairs (12 hours, 2 sentences), so the sampler has
# used them all up within its first ~2,000 draws, most of them in the held-out splits written first: the default
# 20,000 training pairs held 5 clock times, none of them four o'clock. The training split therefore also gets
# one pair in CLOCK_EVERY from these clock sentences: hours in turn (balanced), in many contexts, and always
# "H o'clock" → "H Uhr" with "ein Uhr" for one (the "ein" of "ein Auto", never the "eins" of a bare number).

CLOCK_EVERY = 25

_DAYS = [("today", "heute"), ("tomorrow", "morgen"), ("on Monday", "am Montag"), ("on Friday", "am Freitag"),
         ("on Sunday", "am Sonntag")]
_DAYTIMES = [(("in the morning", "morgens"), range(5, 12)), (("in the afternoon", "nachmittags"), range(1, 7)),
             (("in the evening", "abends"), range(6, 12))]
_DEFINITE_NOM = {"m": "der", "f": "die", "n": "das"}
# english, german, gender; then the verbs they take: english, german and the German separable prefix or ""
_VEHICLES = [("train", "Zug", "m"), ("bus", "Bus", "m"), ("ship", "Schiff", "n"), ("tram", "Straßenbahn", "f")]
_VEHICLE_ADJECTIVES = [("first", "erste"), ("last", "letzte"), ("next", "nächste")]
_VEHICLE_VERBS = [("leaves", "fährt", "ab"), ("arrives", "kommt", "an")]
_EVENTS = [("film", "Film", "m"), ("concert", "Konzert", "n"), ("lesson", "Unterricht", "m"),
           ("meeting", "Treffen", "n"), ("party", "Party", "f"), ("market", "Markt", "m")]
_EVENT_VERBS = [("starts", "beginnt", ""), ("ends", "endet", "")]
_OPENINGS = [("shop", "Laden", "m"), ("bank", "Bank", "f"), ("museum", "Museum", "n"),
             ("library", "Bibliothek", "f"), ("bakery", "Bäckerei", "f")]
_OPENING_VERBS = [("opens", "öffnet", ""), ("closes", "schließt", "")]
# subject: english, german, person (0 "I", 1 "we", 2 "he"/"she"); verb: english base and -s forms, the German
# forms by person, what follows the time in German
_PEOPLE = [("I", "ich", 0), ("we", "wir", 1), ("she", "sie", 2), ("he", "er", 2)]
_PERSON_VERBS = [("get up", "gets up", ("stehe", "stehen", "steht"), "auf"),
                 ("eat", "eats", ("esse", "essen", "isst"), ""),
                 ("come home", "comes home", ("komme", "kommen", "kommt"), "nach Hause"),
                 ("go to bed", "goes to bed", ("gehe", "gehen", "geht"), "ins Bett"),
                 ("work", "works", ("arbeite", "arbeiten", "arbeitet"), "")]


def clock_de(hour: int) -> str:
    """1..12 o'clock in German: 1 → "ein Uhr", 4 → "vier Uhr"."""
    return ("ein" if hour == 1 else number_to_de(hour)) + " Uhr"


def _clock_en(hour: int) -> str:
    return f"{number_to_en(hour)} o'clock"


def _daytime(rng: random.Random, hour: int, p: float) -> tuple[str, str]:
    """With probability `p` a time of day that fits the hour, " in the afternoon" → " nachmittags"; else ""."""
    daytimes = [daytime for daytime, hours in _DAYTIMES if hour in hours]
    if not daytimes or rng.random() >= p:
        return "", ""
    en, de = rng.choice(daytimes)
    return f" {en}", f" {de}"


def _time(rng: random.Random, hour: int, more: float = 0.3) -> tuple[str, str]:
    """ "at four o'clock", with probability `more` each a day before and a time of day after: "tomorrow at four
    o'clock in the afternoon" → "morgen um vier Uhr nachmittags"."""
    en, de = f"at {_clock_en(hour)}", f"um {clock_de(hour)}"
    if rng.random() < more:
        day = rng.choice(_DAYS)
        en, de = f"{day[0]} {en}", f"{day[1]} {de}"
    en_daytime, de_daytime = _daytime(rng, hour, more)
    return en + en_daytime, de + de_daytime


def _c_at(rng: random.Random, hour: int) -> tuple[str, str]:
    return _time(rng, hour, more=0.6)  # a plain "at four o'clock" is one pair per hour: mostly with a day or time


def _c_it_is(rng: random.Random, hour: int) -> tuple[str, str]:
    en_daytime, de_daytime = _daytime(rng, hour, 0.6)
    return f"It is {_clock_en(hour)}{en_daytime}.", f"Es ist {clock_de(hour)}{de_daytime}."


def _c_thing(rng: random.Random, hour: int) -> tuple[str, str]:
    """The (next) train leaves / the film starts / the bank opens at ...: German keeps a separable prefix last."""
    nouns, verbs = rng.choice([(_VEHICLES, _VEHICLE_VERBS), (_EVENTS, _EVENT_VERBS), (_OPENINGS, _OPENING_VERBS)])
    en_noun, de_noun, gender = rng.choice(nouns)
    en_verb, de_verb, prefix = rng.choice(verbs)
    en_subject, de_subject = en_noun, de_noun
    if nouns is _VEHICLES and rng.random() < 0.5:
        en_adjective, de_adjective = rng.choice(_VEHICLE_ADJECTIVES)
        en_subject, de_subject = f"{en_adjective} {en_noun}", f"{de_adjective} {de_noun}"
    en_time, de_time = _time(rng, hour)
    return (f"the {en_subject} {en_verb} {en_time}.",
            " ".join(w for w in (_DEFINITE_NOM[gender], de_subject, de_verb, de_time, prefix) if w) + ".")


def _c_person(rng: random.Random, hour: int) -> tuple[str, str]:
    en_subject, de_subject, person = rng.choice(_PEOPLE)
    en_base, en_s, de_forms, rest = rng.choice(_PERSON_VERBS)
    en_time, de_time = _time(rng, hour)
    return (f"{en_subject} {en_s if person == 2 else en_base} {en_time}.",
            " ".join(w for w in (de_subject, de_forms[person], de_time, rest) if w) + ".")


def _c_open(rng: random.Random, hour: int) -> tuple[str, str]:
    """Two times: "The bank is open from nine o'clock to four o'clock." → "Die Bank ist von neun Uhr bis vier Uhr
    geöffnet." (the second hour 2 to 10 hours later)."""
    en_noun, de_noun, gender = rng.choice(_OPENINGS)
    until = (hour + rng.randint(2, 10) - 1) % 12 + 1  # 2 to 10 hours later
    return (f"the {en_noun} is open from {_clock_en(hour)} to {_clock_en(until)}.",
            f"{_DEFINITE_NOM[gender]} {de_noun} ist von {clock_de(hour)} bis {clock_de(until)} geöffnet.")


_CLOCK_TEMPLATES: list[tuple[Callable[[random.Random, int], tuple[str, str]], int]] = [
    (_c_at, 3), (_c_it_is, 1), (_c_thing, 4), (_c_person, 3), (_c_open, 1),
]


def clock_pairs(n: int, seed: int, exclude: Iterable[tuple[str, str]] = ()) -> list[tuple[str, str]]:
    """`n` distinct clock-time pairs, none in `exclude`, the same for the same seed; the hours take turns
    (1, 2, ... 12, 1, ...), so each is as common as the others."""
    rng = random.Random(f"clock {seed}")
    functions, weights = zip(*_CLOCK_TEMPLATES, strict=True)
    seen = set(exclude)
    pairs: list[tuple[str, str]] = []
    attempts = 0
    while len(pairs) < n:
        attempts += 1
        if attempts > 20 * n + 1000:  # tens of thousands of sentences: only absurd n gets here
            raise ValueError(f"cannot generate {n} distinct clock pairs")
        en, de = rng.choices(functions, weights)[0](rng, len(pairs) % 12 + 1)
        if en.endswith("."):
            en, de = capitalize(en), capitalize(de)
        if (en, de) not in seen:
            seen.add((en, de))
            pairs.append((en, de))
    return pairs


def generate_splits(n_train: int, n_valid: int, n_test: int,
                    seed: int = 1) -> dict[str, list[tuple[str, str]]]:
    """The German demo's train/valid/test pairs, all distinct (the splits are disjoint). Valid and test are the
    first pairs of generate_pairs; training is the pairs after them, with one line in CLOCK_EVERY from clock_pairs
    spread evenly among them."""
    n_clock = n_train // CLOCK_EVERY
    held_out = n_valid + n_test
    pairs = generate_pairs(held_out + n_train - n_clock, seed)
    clock = clock_pairs(n_clock, seed, exclude=pairs)
    stream, train, start = pairs[held_out:], [], 0
    for i, pair in enumerate(clock):  # evenly spread: clock pair i after (i + 1/2) / n_clock of the stream
        end = (2 * i + 1) * len(stream) // (2 * n_clock)
        train += [*stream[start:end], pair]
        start = end
    train += stream[start:]
    return {"train": train, "valid": pairs[:n_valid], "test": pairs[n_valid:held_out]}
