"""Terminology (`--glossary`): the file's matching rules, lexically constrained beam search on models whose
probabilities are known, and the Translator, CLI and documents obeying a glossary with the committed demo model
(figures on Multi30k: bench/glossary.py)."""

from __future__ import annotations

import math

import pytest
import torch

from nmt import search as nmt_search
from nmt.errors import NmtError
from nmt.search import SearchSettings, Terms
from nmt.search.constrained import State, advance, allocate
from nmt.translation import glossary, terminology
from nmt.translation.glossary import Glossary, Term, from_pairs, obeyed
from tests.helpers.cli import assert_one_line_error, run_cli
from tests.helpers.paths import DEMO_MODEL
from tests.helpers.tables import EOS, IDS, TableModel, V, beam_search, teacher_forced_logprob

CHECKPOINT = DEMO_MODEL


def search(model, src: torch.Tensor, terms: list, continues: torch.Tensor, *, ends_word: list[bool] | None = None,
           beam: int = 5, **settings) -> list:
    """nmt.search.run's constrained strategy on one sentence: its n-best."""
    return nmt_search.run(model, src, SearchSettings(beam=beam, **settings), IDS,
                          constraints=Terms(terms, continues, ends_word))[0]


A, B_, C, D = 4, 5, 6, 7
NONE_CONTINUES = torch.zeros(V, dtype=torch.bool)


# --------------------------------------------------------------------------- the file and its matching rules


def test_terms_match_whole_words_in_any_case_longest_first(tmp_path):
    path = tmp_path / "terms.tsv"
    path.write_text("# comment\n\ncat\tKatze\nNew  York\tNew York\nyork\tYork-Stadt\niPhone\t\n", encoding="utf-8")
    g = glossary.load(path)
    assert len(g.terms) == 4 and Term("iPhone", "") in g.terms
    found = g.find("Cat and concatenate, a cat in NEW\tYORK, york; an IPHONE.")
    assert [(m.surface, m.term.target) for m in found] == [
        ("Cat", "Katze"), ("cat", "Katze"), ("NEW\tYORK", "New York"), ("york", "York-Stadt"), ("IPHONE", "")]
    assert found[0].forms == ("Katze",) and found[-1].forms == ("IPHONE",)  # do not translate: the source's words
    assert (found[0].start, found[0].end) == (0, 3)
    assert g.find("no terms here") == [] and Glossary().find("cat") == []


def test_a_term_is_obeyed_as_whole_words_with_a_sentence_initial_capital():
    (m,) = from_pairs([("dog", "chien")]).find("the dog")
    assert m.forms == ("chien", "Chien")
    assert obeyed("Le chien dort.", m) and obeyed("Chien !", m)
    assert not obeyed("Les chiens dorment.", m) and not obeyed("CHIEN", m)


def test_terms_in_scripts_without_spaces_need_no_word_boundary():
    g = from_pairs([("红色", "red"), ("car", "车"), ("東京", "Tokyo")])
    assert [m.surface for m in g.find("我看见红色的车。在東京駅")] == ["红色", "東京"]
    (car,) = g.find("the car")
    assert obeyed("我看见红色的车。", car) and not obeyed("我看见红色的汽船。", car)
    assert glossary.ends_word("Hund") and not glossary.ends_word("车")


def test_a_request_glossary_goes_on_top_of_the_servers():
    server = from_pairs([("dog", "Hund"), ("cat", "Katze")])
    both = server.merged(from_pairs({"DOG": "Rüde"}))
    assert {(t.source.lower(), t.target) for t in both.terms} == {("dog", "Rüde"), ("cat", "Katze")}
    assert hash(both) == hash(server.merged(from_pairs({"DOG": "Rüde"})))  # a serve batch is keyed by it


@pytest.mark.parametrize("text, message", [
    ("dog Hund\n", "line 1: no TAB"),
    ("dog\tHund\tx\n", "line 1: more than one TAB"),
    ("\tHund\n", "line 1: the source term is empty"),
    ("dog\tHund\nDog\tRüde\n", "line 2: 'Dog' is already given as 'Hund'"),
])
def test_glossary_mistakes_are_one_line_errors(tmp_path, text, message):
    path = tmp_path / "terms.tsv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(NmtError, match=message):
        glossary.load(path)


def test_a_missing_or_binary_glossary_is_a_one_line_cli_error(tmp_path):
    missing = run_cli("translate", "--checkpoint", CHECKPOINT, "--glossary", tmp_path / "nope.tsv", input="one\n")
    assert_one_line_error(missing, "nope.tsv: no such file")
    (tmp_path / "bin.tsv").write_bytes(b"\xff\xfe\x00dog\tHund")
    assert_one_line_error(run_cli("translate", "--checkpoint", CHECKPOINT, "--glossary", tmp_path / "bin.tsv",
                                  input="one\n"), "bin.tsv: line 1: invalid UTF-8")


# --------------------------------------------------------------------------- the search


def test_state_follows_a_term_resets_on_a_detour_and_ends_at_a_word_boundary():
    terms = [[[A, B_]], [[C]]]
    s = advance(State(), A, terms, False)
    assert (s.term, s.k, s.progress) == (0, 1, 1)
    assert advance(s, D, terms, False) == State()  # left half-written: its progress is gone
    done = advance(s, B_, terms, False)
    assert done.met == {0} and done.progress == 2 and not done.complete(2)
    assert advance(done, D, terms, True).met == frozenset()  # "B" + a piece that continues the word: unmet again
    both = advance(advance(done, D, terms, False), C, terms, False)
    assert both.complete(2) and both.progress == 3


def test_the_beam_is_shared_between_banks_of_progress():
    s0, s1, s2 = State(progress=0), State(progress=1), State(progress=2)
    cands = [(-0.1, 0, A, s0), (-0.2, 0, B_, s0), (-0.3, 0, C, s0), (-5.0, 0, D, s1), (-9.0, 1, D, s2)]
    chosen = allocate(cands, 3)
    assert sorted(c[0] for c in chosen) == [-9.0, -5.0, -0.1]  # the best of each bank before a bank's second
    assert [c[0] for c in allocate(cands, 4)] == [-0.1, -0.2, -5.0, -9.0]  # best first


def test_a_term_is_placed_where_the_model_finds_it_most_likely():
    # unconstrained best: A B EOS (0.48); with the term C: A C EOS (0.6 * 0.2) beats C A EOS (0.3 * 0.1)
    model = TableModel({(): {A: 0.6, C: 0.3, D: 0.1}, (A,): {B_: 0.8, C: 0.2}, (A, B_): {EOS: 1.0},
                        (A, C): {EOS: 1.0}, (C,): {A: 0.1, EOS: 0.9}, (C, A): {EOS: 1.0}}, default={EOS: 1.0})
    src = torch.tensor([[A, EOS]])
    assert beam_search(model, src, beam=3, length_penalty=0.0)[0][0].tokens == [A, B_]
    assert search(model, src, [], NONE_CONTINUES, beam=3, length_penalty=0.0)[0].tokens == [A, B_]
    best = search(model, src, [[[C]]], NONE_CONTINUES, beam=3, length_penalty=0.0)[0]
    # C EOS (0.27) is the most likely hypothesis holding C
    assert best.tokens == [C] and best.logprob == pytest.approx(math.log(0.27), abs=1e-5)
    two = search(model, src, [[[A]], [[C]]], NONE_CONTINUES, beam=3, length_penalty=0.0, nbest=2)
    assert [h.tokens for h in two] == [[A, C], [C, A]]
    assert two[0].logprob == pytest.approx(math.log(0.12), abs=1e-5)


def test_a_term_must_end_its_word():
    model = TableModel({(): {C: 0.9, A: 0.1}, (C,): {D: 0.9, EOS: 0.1}, (C, D): {EOS: 1.0}, (A,): {C: 0.5, B_: 0.5},
                        (A, C): {EOS: 1.0}}, default={EOS: 1.0})
    src = torch.tensor([[A, EOS]])
    assert search(model, src, [[[C]]], NONE_CONTINUES, beam=2, length_penalty=0.0)[0].tokens == [C, D]
    continues = NONE_CONTINUES.clone()
    continues[D] = True  # "C" + "D" is one word, another word than "C"
    best = search(model, src, [[[C]]], continues, beam=2, length_penalty=0.0)[0]
    assert best.tokens == [C] and best.logprob == pytest.approx(math.log(0.09), abs=1e-5)
    # a term in a script without spaces ("车" then "辆") ends no word: C D holds it
    assert search(model, src, [[[C]]], continues, beam=2, length_penalty=0.0, ends_word=[False])[0].tokens == [C, D]


def test_a_term_outside_what_the_model_would_say_is_written_and_scored_truly(copy_model):
    model, seqs = copy_model
    src = torch.tensor([seqs[0] + [EOS]])
    absent = next(t for t in range(4, V) if t not in seqs[0])
    free = search(model, src, [], NONE_CONTINUES, beam=4)[0]
    assert free.tokens == seqs[0] == beam_search(model, src, beam=4)[0][0].tokens
    hyp = search(model, src, [[[absent]]], NONE_CONTINUES, beam=4, need_attention=True)[0]
    assert absent in hyp.tokens
    assert hyp.logprob == pytest.approx(teacher_forced_logprob(model, src[0], hyp.tokens), abs=1e-4)
    assert hyp.attention.shape == (len(hyp.tokens) + 1, src.size(1))
    assert torch.allclose(hyp.attention.sum(1), torch.ones(len(hyp.tokens) + 1), atol=1e-5)


def test_the_length_limit_ends_a_search_that_cannot_meet_its_terms(copy_model):
    model, seqs = copy_model
    src = torch.tensor([seqs[1] + [EOS]])
    hyp = search(model, src, [[[4, 5, 6, 7, 8, 9]]], NONE_CONTINUES, beam=2, max_len_a=0.0, max_len_b=3)[0]
    assert len(hyp.tokens) <= 3  # returned anyway: the best that ended at the limit


# --------------------------------------------------------------------------- the translator, CLI, documents


LINES = ["The small boat is in the garden.", "I see blue doors.", "forty-two", "The train is next to the house."]
TERMS = from_pairs([("boat", "Schiff"), ("doors", "Tore"), ("garden", "Garten"), ("train", "Zug")])


def test_lines_without_terms_or_already_obeying_them_are_translated_as_without_a_glossary(translator, monkeypatch):
    plain = translator.translate_chunk(LINES)
    assert "Garten" in plain[0].text[0] and "Zug" in plain[3].text[0] and "Tore" not in plain[1].text[0]
    called = []
    original = terminology.constrained
    monkeypatch.setattr(terminology, "constrained", lambda *a, **k: called.append(a) or original(*a, **k))
    kept = translator.translate_chunk(LINES[2:], glossary=TERMS)
    assert [r.text for r in kept] == [r.text for r in plain[2:]] and called == []
    forced = translator.translate_chunk(LINES, glossary=TERMS)
    assert len(called) == 2  # the boat and the doors
    assert all(obeyed(r.text[0], m) for r in forced for m in TERMS.find(r.source))
    assert [r.text for r in forced[2:]] == [r.text for r in plain[2:]]


def test_every_nbest_hypothesis_obeys_and_attention_comes_with_them(translator):
    (r,) = translator.translate_chunk(LINES[1:2], glossary=TERMS, decode=translator.decode_with(beam=4, nbest=3),
                                      need_attention=True)
    assert len(r.text) == 3 and all("Tore" in text for text in r.text)
    assert [h.score for h in r.hypotheses] == sorted((h.score for h in r.hypotheses), reverse=True)
    assert all(h.attention.shape[0] == len(h.tokens) + 1 for h in r.hypotheses)


def test_nmt_translate_glossary_through_the_cli_and_a_document(tmp_path):
    terms = tmp_path / "terms.tsv"
    terms.write_text("boat\tSchiff\nbicycle\t\n", encoding="utf-8")
    out = run_cli("translate", "--checkpoint", CHECKPOINT, "--glossary", terms,
                  input="The small boat is in the garden.\nforty-two\n")
    assert out.exit_code == 0, out.stderr
    first, second = out.stdout.splitlines()
    assert "Schiff" in first and second == "zweiundvierzig"
    page = tmp_path / "page.html"
    page.write_text("<p>The small <b>boat</b> is in the garden.</p><p>I see a fast bicycle.</p>\n", encoding="utf-8")
    done = run_cli("translate", "--checkpoint", CHECKPOINT, "--glossary", terms, "-i", page, "-o", tmp_path / "o.html")
    assert done.exit_code == 0, done.stderr
    html = (tmp_path / "o.html").read_text(encoding="utf-8")
    first, second = html.split("</p>")[:2]
    assert "Schiff" in first and first.count("<b>") == first.count("</b>") == 1 and "bicycle" in second


def test_a_capitalised_form_only_begins_the_translation():
    # the term's forms: C (as written) and D (capitalised: "initial", a sentence's first word only). Unconstrained
    # A D EOS (0.72) would hold D mid-sentence; D may not follow A, so A C EOS (0.135) beats D EOS (0.05)
    model = TableModel({(): {A: 0.9, D: 0.05, C: 0.05}, (A,): {D: 0.8, C: 0.15, EOS: 0.05}, (A, D): {EOS: 1.0},
                        (A, C): {EOS: 1.0}, (D,): {EOS: 1.0}, (C,): {EOS: 1.0}}, default={EOS: 1.0})
    src = torch.tensor([[A, EOS]])
    free = nmt_search.run(model, src, SearchSettings(beam=2, length_penalty=0.0), IDS,
                          constraints=Terms([[[C], [D]]], NONE_CONTINUES))[0][0]
    assert free.tokens == [A, D]
    first_only = nmt_search.run(model, src, SearchSettings(beam=2, length_penalty=0.0), IDS,
                                constraints=Terms([[[C], [D]]], NONE_CONTINUES, initial=frozenset({(0, 1)})))[0][0]
    assert first_only.tokens == [A, C]
    # as the first word it is allowed: a model that starts with D keeps it
    starts = TableModel({(): {D: 0.9, C: 0.1}, (D,): {EOS: 1.0}, (C,): {EOS: 1.0}}, default={EOS: 1.0})
    begun = nmt_search.run(starts, src, SearchSettings(beam=2, length_penalty=0.0), IDS,
                           constraints=Terms([[[C], [D]]], NONE_CONTINUES, initial=frozenset({(0, 1)})))[0][0]
    assert begun.tokens == [D]
