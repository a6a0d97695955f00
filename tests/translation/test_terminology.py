"""Glossary terms in place (nmt.translation.terminology): the replaced candidate, the sanity rule, the bounded work per
line, and matching that survives case folding in every script; with the committed demo model (figures on Multi30k and
the demo corpus: bench/glossary.py)."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nmt.translation import terminology
from nmt.translation.glossary import from_pairs, obeyed
from nmt.translation.terminology import Edit, apply_edits, distinct, sane
from nmt.translation.translator import Translation
from nmt.workbudget import WorkBudget, bounded
from tests.helpers.cli import run_cli
from tests.helpers.paths import DEMO_MODEL

CHECKPOINT = DEMO_MODEL


# --------------------------------------------------------------------------- matching in every script


@pytest.mark.parametrize("term, text, surface", [
    ("istanbul", "I love İstanbul.", "İstanbul"),  # Turkish dotted capital I: casefold gives "i" + a combining dot
    ("istanbul", "ISTANBUL and ıstanbul", "ISTANBUL"),  # dotless ı too
    ("straße", "Die STRASSE hier", "STRASSE"),  # German ß folds to ss
    ("σοφοσ", "ΣΟΦΟΣ σοφος", "ΣΟΦΟΣ"),  # Greek final sigma
])
def test_terms_match_through_full_case_folding(term, text, surface):
    found = from_pairs([(term, "X")]).find(text)
    assert found and found[0].surface == surface and text[found[0].start:found[0].end] == surface
    assert found[0].term.target == "X"


def test_a_turkish_capital_is_no_crash_through_the_cli(tmp_path):
    terms = tmp_path / "terms.tsv"
    terms.write_text("istanbul\tIstanbul\n", encoding="utf-8")
    out = run_cli("translate", "--checkpoint", CHECKPOINT, "--glossary", terms, input="I love İstanbul.\n")
    assert out.exit_code == 0, out.stderr
    assert "Istanbul" in out.stdout and out.exception is None


# --------------------------------------------------------------------------- the replaced candidate and the rule


def test_an_edit_replaces_its_block_keeping_punctuation_and_a_sentence_start():
    words = ["Das", "kleine", "Boot", "ist", "im", "Garten."]
    text, removed = apply_edits(words, [Edit(1, 1, "winzig"), Edit(5, 5, "Hof")])
    assert text == "Das winzig Boot ist im Hof." and removed == ["Garten", "kleine"]
    text, removed = apply_edits(["„Kleine", "Boote"], [Edit(0, 0, "winzige")])
    assert text == "„Winzige Boote" and removed == ["Kleine"]


def test_two_terms_on_one_block_and_a_term_aligned_to_nothing_are_inserted_not_appended():
    text, _ = apply_edits(["Ein", "Hund", "läuft."], [Edit(1, 1, "Köter"), Edit(1, 1, "Rüde")])
    assert text == "Ein Köter Rüde läuft."
    text, removed = apply_edits(["Ein", "Hund", "läuft."], [Edit(3, 2, "Bello")])  # an insertion at the end
    assert text == "Ein Hund läuft Bello." and removed == []


def test_sane_refuses_the_model_word_twice_a_wrong_length_and_a_missed_term():
    (small,) = from_pairs([("small", "winzig")]).find("I see the small man.")
    replaced, removed = "Ich sehe den winzig Mann.", ["kleinen"]
    assert sane("Ich sehe den winzigen Mann.", replaced, removed, [small]) is False  # "winzig" not a whole word
    assert sane("Ich sehe den winzig Mann.", replaced, removed, [small])
    assert not sane("Ich sehe den kleinen Mann. winzig kleine Mann.", replaced, removed, [small])  # too long
    assert not sane("Ich sehe den kleinen winzig Mann.", replaced, removed, [small])  # the model's word kept
    assert not sane("Ich sehe den Mann.", replaced, removed, [small])


def test_a_term_the_model_would_not_write_replaces_its_word(translator):
    lines = ["The small boat is in the garden.", "I see blue doors.", "The boat is in the garden."]
    plain = [r.text[0] for r in translator.translate_chunk(lines)]
    glossary = from_pairs([("small", "winzig"), ("boat", "Schiff"), ("doors", "Tore")])
    forced = [r.text[0] for r in translator.translate_chunk(lines, glossary=glossary)]
    for source, before, after in zip(lines, plain, forced):
        assert all(obeyed(after, m) for m in glossary.find(source)), after
        assert abs(len(after.split()) - len(before.split())) <= max(1, 0.2 * len(before.split())), (before, after)
    assert "Boot" in plain[0] and "Boot" not in forced[0] and "Schiff" in forced[0]
    assert "klein" in plain[0].lower() and "klein" not in forced[0].lower()  # not the model's word AND the term
    assert "Tür" in plain[1] and "Tür" not in forced[1]


# --------------------------------------------------------------------------- bounded work


def test_a_term_repeated_500_times_is_one_constraint_and_a_bounded_search(translator, monkeypatch):
    calls = []
    original = terminology.constrained
    monkeypatch.setattr(terminology, "constrained",
                        lambda translator, src, terms, *a, **k: calls.append(terms) or original(
                            translator, src, terms, *a, **k))
    line = " ".join(["dog"] * 500)
    glossary = from_pairs([("dog", "zzqx")])
    assert len(distinct(glossary.find(line))) == 1
    started = time.process_time()
    (r,) = translator.translate_chunk([line], glossary=glossary)
    assert time.process_time() - started < terminology.SEARCH_SECONDS * 2 + 10  # was 126 s with 500 constraints
    assert [len(c) for c in calls] == [1] and "zzqx" in r.text[0]


def test_over_max_constraints_distinct_terms_get_the_replaced_candidate_without_search(translator, monkeypatch):
    monkeypatch.setattr(terminology, "MAX_CONSTRAINTS", 1)
    monkeypatch.setattr(terminology, "constrained", lambda *a, **k: pytest.fail("searched"))
    glossary = from_pairs([("small", "winzig"), ("boat", "Schiff")])
    (r,) = translator.translate_chunk(["The small boat is in the garden."], glossary=glossary)
    assert "winzig" in r.text[0] and "Schiff" in r.text[0]


def test_past_the_work_budgets_deadline_lines_are_not_searched(translator, monkeypatch):
    monkeypatch.setattr(terminology, "constrained", lambda *a, **k: pytest.fail("searched"))
    glossary = from_pairs([("small", "winzig")])
    with bounded(WorkBudget.within("a batch", seconds=-1)):
        (r,) = translator.translate_chunk(["I see the small man."], glossary=glossary)
    assert "winzig" in r.text[0]


def test_the_constrained_search_stops_at_its_deadline(translator):
    import torch

    from nmt import search
    from nmt.search import SearchSettings, Terms

    ids = translator.special
    src = translator.tokenizer.encode_src(["The small boat is in the garden."])[0] + [ids.eos]
    started = time.monotonic()
    terms = Terms([[translator.tokenizer.encode_tgt(["zzqx"])[0]]], translator.continues_word)
    (hyps,) = search.run(translator.model, torch.tensor([src]), SearchSettings(beam=4, deadline=time.monotonic() - 1),
                         ids, constraints=terms)
    assert time.monotonic() - started < 2 and hyps == []  # stopped after its first step, nothing finished


# --------------------------------------------------------------------------- any glossary, any line


_LETTERS = "aeiIİıßsσςΣABklnrt ÄöüÉ中文-'."
_WORDS = ["boat", "small", "the", "İstanbul", "STRASSE", "σοφός", "dog", "车", "a-b", "x"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(terms=st.dictionaries(st.one_of(st.sampled_from(_WORDS), st.text(_LETTERS, min_size=1, max_size=8)),
                             st.one_of(st.just(""), st.sampled_from(_WORDS), st.text(_LETTERS, max_size=8)),
                             min_size=1, max_size=12),
       words=st.lists(st.one_of(st.sampled_from(_WORDS), st.text(_LETTERS, max_size=6)), max_size=14))
def test_random_glossaries_and_lines_raise_nothing_but_one_line_errors(translator, terms, words):
    from nmt.errors import NmtError

    try:
        glossary = from_pairs(terms)
    except NmtError as e:  # an empty source term after whitespace folding, two spellings of one term
        assert "\n" not in str(e)
        return
    line = " ".join(words)
    (r,) = translator.translate_chunk([line], glossary=glossary, decode=translator.decode_with(beam=2))
    assert r.text == [""] if not r.hypotheses else len(r.text) == len(r.hypotheses) >= 1
    for m in glossary.find(line):
        assert line[m.start:m.end] == m.surface


def test_a_repeated_term_is_replaced_where_the_model_translated_it_alike(monkeypatch):
    matches = from_pairs([("man", "Herr")]).find("A man sees a man.")
    monkeypatch.setattr(terminology, "_occurrence_rows", lambda translator, r, missed: [[1], [4]])

    def replaced(text: str) -> str:
        return terminology.replace(None, Translation("A man sees a man.", [], [], [text]), matches)[0]

    assert replaced("Ein Mann sieht einen Mann.") == "Ein Herr sieht einen Herr."  # both, as the model wrote both alike
    assert replaced("Ein Mann sieht einen Hund.") == "Ein Herr sieht einen Hund."  # the model dropped the second
    assert replaced("Ein Herr sieht einen Hund.") == "Ein Herr sieht einen Hund."  # one in place, the other dropped
    r = Translation("A man sees a man.", [], [object()], ["Ein Herr sieht einen Hund."])
    assert terminology.needs(None, r, matches) is None  # left as it is, never searched again
    r.text = ["Ein Mann sieht einen Mann."]
    assert terminology.needs(None, r, matches) == ("terms", ("Ein Herr sieht einen Herr.", ["Mann", "Mann"]))
