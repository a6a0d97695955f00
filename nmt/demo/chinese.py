"""The built-in demo corpus, English→Chinese (Simplified): the English side of nmt.demo.german, in Chinese words.

What the model must learn, beyond word-for-word copying:

- cardinal numbers 0..999,999 grouped by 万 (ten thousand), not by thousand: "three hundred forty-two
  thousand one" → "三十四万二千零一";
- dates read largest unit first, the year digit by digit: "the third of May nineteen ninety-four" →
  "一九九四年五月三日";
- measure words chosen by the noun (辆 cars, 只 dogs, 本 books, 个 generic...), adjectives before the noun
  with 的 ("two red cars" → "两辆红色的汽车");
- reordering: time and price before the verb ("The train leaves at nine o'clock." → "火车九点出发。",
  "We bought two books for ten euros." → "我们花十欧元买了两本书。").

Number rule chosen here: 二 in every number, alone or inside one (二, 十二, 二百, 二千, 二万, 二十二万); 两 only
for a count of exactly two directly before a measure word or unit (两本书, 两点, 两欧元, 两天). Zeros: one 零
for each run of zeros between nonzero digits, across 万 too (1001 "一千零一", 10010 "一万零一十", 100100
"十万零一百"); 十 without 一 only at the very start (10 "十", 15 "十五", 110 "一百一十", 100000 "十万"). Years
are read digit by digit with 〇 for zero ("二〇〇五年"). Sentences end with the full-width "。". No Arabic
digits anywhere. Everything is deterministic by seed.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from nmt.demo.german import (
    ADJECTIVES,
    MONTHS,
    NOUNS,
    PLACES,
    distinct_pairs,
    number_to_en,
    ordinal_en,
    random_number,
    year_en,
)

# ---------------------------------------------------------------- numbers

_ZH_DIGITS = "零一二三四五六七八九"
_ZH_UNITS = ("千", "百", "十", "")


def _zh_below_10000(n: int, leading: bool) -> str:
    """1..9999; `leading`: nothing comes before it, so 10..19 is "十..." (else "一十...")."""
    digits = (n // 1000, n // 100 % 10, n // 10 % 10, n % 10)
    words: list[str] = []
    zero_pending = False
    for digit, unit in zip(digits, _ZH_UNITS, strict=True):
        if not digit:
            zero_pending = bool(words)  # a 零 only between two nonzero digits, never at the end
            continue
        if zero_pending:
            words.append("零")
            zero_pending = False
        one_ten = digit == 1 and unit == "十" and leading and not words
        words.append(unit if one_ten else _ZH_DIGITS[digit] + unit)
    return "".join(words)


def number_to_zh(n: int) -> str:
    """0..999,999 in Chinese words: 342 → "三百四十二", 1001 → "一千零一", 20000 → "二万", 10 → "十"."""
    if not 0 <= n <= 999_999:
        raise ValueError(f"number out of range 0..999999: {n}")
    if n == 0:
        return "零"
    wan, rest = divmod(n, 10_000)
    if not wan:
        return _zh_below_10000(rest, leading=True)
    head = _zh_below_10000(wan, leading=True) + "万"
    if not rest:
        return head
    return head + ("零" if rest < 1000 else "") + _zh_below_10000(rest, leading=False)


def count_zh(n: int) -> str:
    """A count before a measure word or unit: 两 for exactly two (两本书), else the number (十二本书)."""
    return "两" if n == 2 else number_to_zh(n)


def year_zh(y: int) -> str:
    """Digit by digit, 〇 for zero: 1994 "一九九四", 2005 "二〇〇五" (the 年 is the caller's)."""
    return "".join("〇" if d == "0" else _ZH_DIGITS[int(d)] for d in str(y))


def date_zh(day: int, month: int, year: int | None = None) -> str:
    """Largest unit first: (3, 5, 1994) → "一九九四年五月三日"; without a year "五月三日"."""
    return (f"{year_zh(year)}年" if year is not None else "") + f"{number_to_zh(month)}月{number_to_zh(day)}日"


# ---------------------------------------------------------------- noun phrases

# english singular (nmt.demo.german's nouns) → (chinese noun, measure word, animate?)
_NOUNS_ZH = {
    "car": ("汽车", "辆", False), "house": ("房子", "座", False), "book": ("书", "本", False),
    "child": ("孩子", "个", True), "horse": ("马", "匹", True), "boat": ("船", "条", False),
    "girl": ("女孩", "个", True), "window": ("窗户", "扇", False), "glass": ("玻璃杯", "个", False),
    "bicycle": ("自行车", "辆", False), "egg": ("鸡蛋", "个", False), "dog": ("狗", "只", True),
    "man": ("男人", "个", True), "table": ("桌子", "张", False), "chair": ("椅子", "把", False),
    "bird": ("鸟", "只", True), "apple": ("苹果", "个", False), "tree": ("树", "棵", False),
    "train": ("火车", "列", False), "boy": ("男孩", "个", True), "letter": ("信", "封", False),
    "ball": ("球", "个", False), "shoe": ("鞋", "只", False), "mountain": ("山", "座", False),
    "teacher": ("老师", "位", True), "key": ("钥匙", "把", False), "cat": ("猫", "只", True),
    "woman": ("女人", "个", True), "flower": ("花", "朵", False), "city": ("城市", "座", False),
    "bottle": ("瓶子", "个", False), "door": ("门", "扇", False), "lamp": ("灯", "盏", False),
    "bridge": ("桥", "座", False), "street": ("街", "条", False), "cup": ("杯子", "个", False),
}
# english (nmt.demo.german's adjectives) → (form before 的, short form in 又…又…); a one-character form attaches
# to the noun directly, as Chinese does ("大狗", "新书"), a longer one takes 的 ("红色的汽车")
_ADJECTIVES_ZH = {
    "red": ("红色", "红"), "blue": ("蓝色", "蓝"), "green": ("绿色", "绿"), "big": ("大", "大"),
    "small": ("小", "小"), "old": ("旧", "旧"), "new": ("新", "新"), "young": ("年轻", "年轻"),
    "black": ("黑色", "黑"), "white": ("白色", "白"), "yellow": ("黄色", "黄"), "beautiful": ("漂亮", "漂亮"),
    "cheap": ("便宜", "便宜"), "fast": ("快速", "快"), "heavy": ("沉重", "重"), "brown": ("棕色", "棕"),
}
_OLD_ANIMATE = ("老", "老")  # people and animals are 老, things 旧
_PLACES_ZH = {
    "here": "这里", "there": "那里", "in the garden": "花园里", "in the city": "城里",
    "on the table": "桌子上", "next to the house": "房子旁边", "behind the door": "门后面",
    "on the street": "街上",
}
_EN_ADJECTIVES = [en for en, _ in ADJECTIVES]
_EN_PLACES = [en for en, _ in PLACES]


def _adjective_zh(en: str, animate: bool) -> tuple[str, str]:
    return _OLD_ANIMATE if en == "old" and animate else _ADJECTIVES_ZH[en]


def _modified_noun(noun: str, adjectives: list[tuple[str, str]]) -> str:
    """Adjectives before the noun: "红色的汽车", "大狗", "红色的大汽车", "又大又新的房子"."""
    if not adjectives:
        return noun
    if len(adjectives) == 1:
        full = adjectives[0][0]
        return full + noun if len(full) == 1 else f"{full}的{noun}"
    short = [a for a in adjectives if len(a[0]) == 1]
    if len(short) == 1:  # the one with 的 first, the bare one next to the noun
        long = next(a for a in adjectives if len(a[0]) > 1)
        return f"{long[0]}的{short[0][0]}{noun}"
    return f"又{adjectives[0][1]}又{adjectives[1][1]}的{noun}"


def _noun_phrase(rng: random.Random, count: int | None = None) -> tuple[str, str, bool]:
    """(english, chinese, plural?) for a random noun phrase; `count`: a number of things."""
    en_sg, en_pl = rng.choice(NOUNS)[:2]
    noun, measure, animate = _NOUNS_ZH[en_sg]
    en_adjectives = rng.sample(_EN_ADJECTIVES, rng.choice((0, 1, 1, 1, 2)))
    zh = _modified_noun(noun, [_adjective_zh(a, animate) for a in en_adjectives])
    kind = "count" if count is not None else rng.choice(("the", "the", "a", "this", "these", "count", "bare"))
    if kind == "count" and count is None:
        count = random_number(rng) if rng.random() < 0.5 else rng.randint(2, 12)
    if kind == "count" and count == 1:
        kind = "one"
    plural = kind in ("these", "count", "bare") or (kind == "the" and rng.random() < 0.4)
    if kind in ("the", "bare"):  # Chinese has no article and no plural: a bare noun
        en_det, zh_det = ("the" if kind == "the" else ""), ""
    elif kind in ("a", "one"):
        first = en_adjectives[0] if en_adjectives else en_sg
        en_det = "one" if kind == "one" else "an" if first[0] in "aeio" else "a"
        zh_det = "一" + measure
    elif kind == "this":
        en_det, zh_det = "this", "这" + measure
    elif kind == "these":
        en_det, zh_det = "these", "这些"
    else:
        assert count is not None
        en_det, zh_det = number_to_en(count), count_zh(count) + measure
    en = " ".join(w for w in (en_det, *en_adjectives, en_pl if plural else en_sg) if w)
    return en, zh_det + zh, plural


def _date(rng: random.Random) -> tuple[int, int, str, int]:
    """(day, month 1..12, english month name, year)."""
    month = rng.randrange(12)
    en_month, _, days = MONTHS[month]
    return rng.randint(1, days), month + 1, en_month, rng.randint(1800, 2099)


# ---------------------------------------------------------------- templates


def _t_number(rng: random.Random) -> tuple[str, str]:
    n = random_number(rng)
    return number_to_en(n), number_to_zh(n)


def _t_counted(rng: random.Random) -> tuple[str, str]:
    n = random_number(rng)
    en_sg, en_pl, zh_unit = rng.choice([("euro", "euros", "欧元"), ("person", "people", "人"),
                                        ("kilometer", "kilometers", "公里"), ("year", "years", "年"),
                                        ("day", "days", "天"), ("page", "pages", "页")])
    return f"{number_to_en(n)} {en_sg if n == 1 else en_pl}", count_zh(n) + zh_unit


def _t_date(rng: random.Random) -> tuple[str, str]:
    day, month, en_month, year = _date(rng)
    zh = date_zh(day, month, year)
    if rng.random() < 0.5:
        return f"the {ordinal_en(day)} of {en_month} {year_en(year)}", zh
    return f"{en_month} {ordinal_en(day)}, {year_en(year)}", zh


def _t_on_date(rng: random.Random) -> tuple[str, str]:
    day, month, en_month, year = _date(rng)
    if rng.random() < 0.5:
        return f"on the {ordinal_en(day)} of {en_month}", "在" + date_zh(day, month)
    return (f"I was born on the {ordinal_en(day)} of {en_month} {year_en(year)}.",
            f"我是{date_zh(day, month, year)}出生的。")  # the time before the verb


def _t_year(rng: random.Random) -> tuple[str, str]:
    year = rng.randint(1800, 2099)
    return f"in the year {year_en(year)}", f"在{year_zh(year)}年"


def _t_phrase(rng: random.Random) -> tuple[str, str]:
    en, zh, _ = _noun_phrase(rng)
    return en, zh


def _t_see(rng: random.Random) -> tuple[str, str]:
    en, zh, _ = _noun_phrase(rng)
    return f"I see {en}.", f"我看见{zh}。"


def _t_place(rng: random.Random) -> tuple[str, str]:
    en, zh, plural = _noun_phrase(rng)
    place = rng.choice(_EN_PLACES)
    return f"{en} {'are' if plural else 'is'} {place}.", f"{zh}在{_PLACES_ZH[place]}。"


def _t_bought(rng: random.Random) -> tuple[str, str]:
    count = rng.randint(1, 12) if rng.random() < 0.5 else random_number(rng) or 1  # nobody buys zero things
    en, zh, _ = _noun_phrase(rng, count=count)
    price = random_number(rng) or 1
    euros = "euro" if price == 1 else "euros"
    return (f"We bought {en} for {number_to_en(price)} {euros}.",
            f"我们花{count_zh(price)}欧元买了{zh}。")  # the price before the verb


def _t_train(rng: random.Random) -> tuple[str, str]:
    hour = rng.randint(1, 12)
    clock = f"{number_to_en(hour)} o'clock", count_zh(hour) + "点"  # 点 is a measure word: 两点
    if rng.random() < 0.5:
        return f"at {clock[0]}", clock[1]
    en_subject, zh_subject = rng.choice([("train", "火车"), ("bus", "公共汽车"), ("plane", "飞机")])
    en_verb, zh_verb = rng.choice([("leaves", "出发"), ("arrives", "到达")])
    return f"The {en_subject} {en_verb} at {clock[0]}.", f"{zh_subject}{clock[1]}{zh_verb}。"


_TEMPLATES: list[tuple[Callable[[random.Random], tuple[str, str]], int]] = [
    (_t_number, 6), (_t_counted, 2), (_t_date, 3), (_t_on_date, 2), (_t_year, 1), (_t_phrase, 3),
    (_t_see, 2), (_t_place, 2), (_t_bought, 2), (_t_train, 1),
]


def generate_pairs_zh(n: int, seed: int = 1) -> list[tuple[str, str]]:
    """`n` distinct (english, chinese) pairs, the same for the same seed."""
    return distinct_pairs(_TEMPLATES, n, seed)
