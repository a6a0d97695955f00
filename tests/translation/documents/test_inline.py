"""nmt.translation.documents.inline: a sentence translated once across its inline formatting, each span put on the
target words aligned to its source words. Unit tests on hand-built alignments, then HTML, then the committed demo model
end to end."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

from nmt.translation.documents.html import parse_html
from nmt.translation.documents.inline import Aligned, Paragraph, Piece, Run
from tests.helpers.paths import ROOT


def tagged(pieces: list[Piece]) -> str:
    """Pieces as text with each path element written as <name>…</name> (paths hold plain names here)."""
    out, path = [], ()
    for piece in [*pieces, Piece("", ())]:
        common = 0
        while common < min(len(path), len(piece.path)) and path[common] == piece.path[common]:
            common += 1
        out += [f"</{h}>" for h in reversed(path[common:])] + [f"<{h}>" for h in piece.path[common:]]
        out.append(piece.text)
        path = piece.path
    return "".join(out)


def render(runs: list[Run], text: str, pairs: list[tuple[int, int]]) -> str:
    p = Paragraph(runs)
    return tagged(p.render([Aligned.from_pairs(text, len(p.texts[0].split()), pairs)]))


RED_CAR = [Run("the "), Run("red", ("b",)), Run(" car")]


def test_one_sentence_across_the_tag_translated_once_and_the_span_on_the_aligned_word():
    assert Paragraph(RED_CAR).texts == ["the red car"]
    assert render(RED_CAR, "das rote Auto", [(0, 0), (1, 1), (2, 2)]) == "das <b>rote</b> Auto"
    assert render(RED_CAR, "das Auto rot", [(0, 0), (2, 1), (1, 2)]) == "das Auto <b>rot</b>"  # reordered


def test_an_unchanged_sentence_is_its_source_and_a_plain_string_is_placed_in_order():
    p = Paragraph(RED_CAR)
    assert [piece.source for piece in p.render(["the red car"])] == [(0, 0, 4), (1, 0, 3), (2, 0, 4)]
    assert tagged(p.render(["DAS ROTE AUTO"])) == "DAS <b>ROTE</b> AUTO"


def test_nested_spans_stay_nested_and_each_is_one_interval():
    runs = [Run("x ", ("b",)), Run("y", ("b", "i")), Run(" z")]
    assert render(runs, "Y X Z", [(1, 0), (0, 1), (2, 2)]) == "<b><i>Y</i> X</b> Z"
    # "Z" between the words of <b>: <b> keeps its first block, <i>'s word is outside it, and no word inside attends
    # to "y": <i> takes the free word of <b>'s block aligned nearest to "y" (never opened twice, never "y" again)
    assert render(runs, "X Z Y", [(0, 0), (2, 1), (1, 2)]) == "<b><i>X</i></b> Z Y"


def test_adjacent_spans_swap_places():
    runs = [Run("red", ("b",)), Run(" "), Run("car", ("i",))]
    assert render(runs, "Auto rot", [(1, 0), (0, 1)]) == "<i>Auto</i> <b>rot</b>"


def test_non_contiguous_alignment_takes_the_largest_block():
    runs = [Run("The train "), Run("leaves", ("b",)), Run(" at nine")]
    # "leaves" -> "fährt ... ab": the span takes "fährt" (first of equal blocks), never the words between
    out = render(runs, "Der Zug fährt um neun ab", [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (2, 5)])
    assert out == "Der Zug <b>fährt</b> um neun ab"


def test_whitespace_only_runs_and_a_span_of_whitespace():
    runs = [Run("red", ("b",)), Run("   "), Run(" ", ("u",)), Run(" car")]
    out = render(runs, "rotes Auto", [(0, 0), (1, 1)])
    assert out.startswith("<b>rotes</b>") and "<u> </u>" in out and out.endswith("Auto")


def test_a_span_without_aligned_words_takes_the_word_attending_most_to_it():
    runs = [Run("see the "), Run("link", ("a",))]
    matrix = np.array([[1.0, 0, 0], [0, 1.0, 0], [0, 0.6, 0.4]])  # "Verweis" argmax is "the", not "link"
    out = tagged(Paragraph(runs).render([Aligned("sieh den Verweis", matrix)]))
    assert out == "sieh den <a>Verweis</a>"


def test_a_span_with_no_free_word_is_never_written_in_the_source_language():
    runs = [Run("click", ("a",)), Run(" "), Run("here", ("b",))]
    out = render(runs, "hier", [(1, 0)])
    assert "click" not in out and out.strip() == "<b>hier</b>"
    # an atom inside it is kept, only its text goes
    runs = [Run("click", ("a",)), Run("[img]", ("a",), atom=True), Run(" "), Run("here", ("b",))]
    out = render(runs, "hier", [(1, 0)])
    assert "click" not in out and "<a>[img]</a>" in out and "<b>hier</b>" in out


def test_a_span_without_attention_takes_the_free_word_aligned_nearest_to_it():
    runs = [Run("one two "), Run("three", ("b",)), Run(" four five")]
    p = Paragraph(runs)
    # "three" has no link and no attention: the free word aligned nearest to it in the source is "VIER" (four)
    scores = np.zeros((4, 5))
    for j, i in [(0, 0), (1, 0), (2, 4), (3, 3)]:  # EINS, ZWEI: one; FÜNF: five; VIER: four
        scores[j, i] = 1.0
    out = tagged(p.render([Aligned("EINS ZWEI FÜNF VIER", scores, scores > 0)]))
    assert out == "EINS ZWEI FÜNF <b>VIER</b>"


def test_a_word_split_by_formatting_is_one_word_and_the_inner_span_lands_on_its_target_word():
    runs = [Run("the "), Run("r", ("b",)), Run("ed car")]
    p = Paragraph(runs)
    assert p.texts == ["the red car"]
    assert render(runs, "das rote Auto", [(0, 0), (1, 1), (2, 2)]) == "das <b>rote</b> Auto"
    # a bookmark (a range) in "U|sing": the word is sent whole, the range wraps its target word, no fragment "U"
    runs = [Run("U", ("mark",)), Run("sing it")]
    assert Paragraph(runs).texts == ["Using it"]
    assert render(runs, "es benutzen", [(0, 1), (1, 0)]) == "es <mark>benutzen</mark>"


def test_punctuation_in_a_run_of_its_own_is_written_once():
    # Word's final "." in a run of its own (another rPr): part of the word "emphasis.", never copied again
    runs = [Run("Use "), Run("emphasis", ("i",)), Run(".", ("r",))]
    assert render(runs, "Nutze Betonung.", [(0, 0), (1, 1)]) == "Nutze <i>Betonung</i>."


def test_atoms_keep_their_separators_and_adjacent_atoms_stay_apart():
    # two atoms with text between them anchored at one gap: a space between them, never "EgyptIsrael"
    runs = [Run("of "), Run("Egypt", ("tag1",), atom=True), Run(" died and "), Run("Israel", ("tag2",), atom=True),
            Run(" sighed")]
    p = Paragraph(runs)
    assert p.texts == ["of died and sighed"]
    out = render(runs, "starb und seufzte", [(1, 0), (2, 1), (3, 2)])
    assert out == "<tag1>Egypt</tag1> starb und <tag2>Israel</tag2> seufzte"
    out = render(runs, "seufzte", [(3, 0)])  # both anchored at one gap, before "seufzte"
    assert "Egypt</tag1> <tag2>Israel" in out
    # atoms adjacent in the source stay adjacent
    runs = [Run("see "), Run("A", ("c1",), atom=True), Run("B", ("c2",), atom=True), Run(" now")]
    assert "<c1>A</c1><c2>B</c2>" in render(runs, "siehe jetzt", [(0, 0), (1, 1)])


def test_a_word_after_an_atom_no_word_touched_in_the_source_is_apart_from_it():
    # "marked <code>Not Supported</code>." then a word the model put after the atom: never "Supported</code>der"
    runs = [Run("it is marked "), Run("Not Supported", ("code",), atom=True), Run(".")]
    out = render(runs, "es ist markiert der Tür.", [(0, 0), (1, 1), (2, 2), (2, 3)])
    assert "der <code>Not Supported</code> Tür." in out
    # glued to a letter in the source ("`div`s"): the target word may touch it as the source's did
    runs = [Run("use "), Run("div", ("code",), atom=True), Run("s now")]
    assert "<code>div</code>s" in render(runs, "use s now", [(0, 0), (1, 1), (2, 2)])


def test_atoms_are_never_sent_and_stay_among_their_words():
    runs = [Run("Run "), Run("ls -la", ("code",), atom=True), Run(" now.")]
    p = Paragraph(runs)
    assert p.texts == ["Run now."]
    assert render(runs, "Jetzt ausführen.", [(1, 0), (0, 1)]) == "Jetzt ausführen. <code>ls -la</code>"
    assert render(runs, "Führe jetzt aus.", [(0, 0), (1, 1), (0, 2)]) == "Führe <code>ls -la</code> jetzt aus."


def test_a_span_across_two_sentences_stays_one_element():
    runs = [Run("I see "), Run("the dog. It", ("b",)), Run(" runs.")]
    p = Paragraph(runs)
    assert p.texts == ["I see the dog.", "It runs."]
    one = Aligned.from_pairs("Den Hund sehe ich.", 4, [(2, 0), (3, 1), (1, 2), (0, 3)])
    out = tagged(p.render([one, Aligned.from_pairs("Er läuft.", 2, [(0, 0), (1, 1)])]))
    assert out.count("<b>") == 1 and out.endswith("<b>Den Hund sehe ich. Er</b> läuft.")


def test_punctuation_glued_to_a_word_stays_outside_a_span_that_had_none():
    runs = [Run("Forty-two & "), Run("seven", ("b",)), Run("!")]
    assert tagged(Paragraph(runs).render(["zweiundvierzig & sieben!"])) == "zweiundvierzig & <b>sieben</b>!"


# ---- symmetrized alignment (nmt.translation.alignment.links) on hand-built word scores

# "bought for euros." -> "für Euro gekauft.": the trailing "gekauft." attends most to "euros." (its "." and the
# sentence end), "bought"'s best target word is "gekauft"
BOUGHT = np.array([[0.1, 0.8, 0.1],   # für
                   [0.1, 0.1, 0.8],   # Euro
                   [0.3, 0.0, 0.7]])  # gekauft.


def pairs(links: np.ndarray) -> set[tuple[int, int]]:
    """(target word, source word) pairs."""
    return {(int(j), int(i)) for j, i in zip(*np.nonzero(links))}


def test_symmetrization_keeps_the_pairs_both_directions_agree_on():
    from nmt.translation.alignment import links

    assert pairs(links(BOUGHT, "argmax")) == {(0, 1), (1, 2), (2, 2)}
    assert pairs(links(BOUGHT, "intersect")) == {(0, 1), (1, 2)}  # "euros" has one best word: "Euro"
    # grow-1:1 adds "gekauft"-"euros" only if "euros" were free; grow-diag takes it beside "Euro-euros"
    assert pairs(links(BOUGHT, "grow-1:1")) == {(0, 1), (1, 2)}
    assert pairs(links(BOUGHT, "grow-diag")) == {(0, 1), (1, 2), (2, 2)}
    # final-and: a union pair whose two words are both still unaligned, adjacent or not
    assert pairs(links(BOUGHT, "grow-diag-final-and")) == {(0, 1), (1, 2), (2, 2)}
    with pytest.raises(ValueError, match="unknown alignment"):
        links(BOUGHT, "union")


def test_grow_takes_a_diagonal_neighbour_whose_two_words_are_unaligned():
    from nmt.translation.alignment import links

    red_car = np.array([[0.6, 0.4],     # rote: argmax "red"
                        [0.55, 0.45]])  # Auto: argmax "red" too, but it is "car"'s best word
    assert pairs(links(red_car, "argmax")) == {(0, 0), (1, 0)}
    assert pairs(links(red_car, "intersect")) == {(0, 0)}
    assert pairs(links(red_car, "grow-1:1")) == {(0, 0), (1, 1)}  # (1, 0) is skipped: "red" is aligned
    assert pairs(links(red_car, "grow-diag")) == {(0, 0), (1, 0), (1, 1)}
    assert not links(np.zeros((0, 3)), "grow-1:1").size


def test_a_trailing_word_no_longer_joins_the_span_of_the_last_source_word():
    from nmt.translation.alignment import links

    runs = [Run("bought for "), Run("euros", ("b",)), Run(".")]
    text = "für Euro gekauft."
    assert tagged(Paragraph(runs).render([Aligned(text, BOUGHT)])) == "für <b>Euro gekauft</b>."  # argmax
    grown = Aligned(text, BOUGHT, links(BOUGHT, "grow-1:1"))
    assert tagged(Paragraph(runs).render([grown])) == "für <b>Euro</b> gekauft."
    # a span whose words the symmetrized alignment leaves unaligned still takes the free word attending most
    runs = [Run("bought", ("b",)), Run(" for euros.")]
    assert tagged(Paragraph(runs).render([grown])) == "für Euro <b>gekauft</b>."


def test_a_source_words_punctuation_pieces_are_left_out_of_its_scores():
    from types import SimpleNamespace

    from nmt.translation.alignment import aligned

    pieces = {"src": ["▁bought", "▁euros", "."], "tgt": ["▁Euro", "▁gekauft", "."]}
    tokenizer = SimpleNamespace(src_id_pieces=lambda ids: pieces["src"], tgt_pieces=lambda ids: pieces["tgt"],
                                encode_src=lambda lines: [[1, 2, 3]])
    attention = np.array([[0.1, 0.8, 0.05, 0.05],   # Euro (columns: the source pieces, then EOS)
                          [0.4, 0.1, 0.45, 0.05],   # gekauft
                          [0.1, 0.1, 0.7, 0.1],     # .
                          [0.0, 0.0, 0.0, 1.0]])    # EOS
    hyp = SimpleNamespace(tokens=[4, 5, 6], attention=attention)
    result = SimpleNamespace(source="bought euros.", src_ids=[1, 2, 3], hypotheses=[hyp], text=["Euro gekauft."])
    raw = aligned(tokenizer, result, punctuation=True, method="argmax", column_power=0)
    assert pairs(raw.links) == {(0, 1), (1, 1)}
    assert pairs(aligned(tokenizer, result).links) == {(0, 1), (1, 0)}  # "gekauft." - "bought"


def test_a_source_word_attended_by_every_row_does_not_take_them_all():
    from nmt.translation.alignment import balanced, links

    scores = np.array([[0.7, 0.3], [0.55, 0.45]])  # both rows' best is source word 0, which both attend to
    assert pairs(links(scores, "argmax")) == {(0, 0), (1, 0)}
    assert pairs(links(balanced(scores), "argmax")) == {(0, 0), (1, 1)}
    assert np.array_equal(balanced(scores, 0), scores)


# ---- HTML


def test_html_markup_outside_the_text_is_byte_exact_and_each_tag_written_once():
    fragment = "<p class='x'>The <B data-a=\"1\">red</B > <a href=x?a=1&amp;b=2>car</a> is &quot;here&quot;.</p>"
    doc = parse_html(fragment)
    assert doc.texts == ['The red car is "here".']
    pairs = [(0, 0), (2, 1), (1, 2), (3, 3), (4, 4)]
    out = doc.render([Aligned.from_pairs('Das Auto rot ist "hier".', 5, pairs)])
    assert out == "<p class='x'>Das <a href=x?a=1&amp;b=2>Auto</a> <B data-a=\"1\">rot</B > ist \"hier\".</p>"
    assert doc.render(doc.texts) == fragment


def test_html_broken_and_empty_inline_tags_are_kept_in_place():
    fragment = "<p>One <a name=x></a>two <b>three</i> four</b> five <i>six</p>"
    doc = parse_html(fragment)
    assert doc.texts == ["One two three four five six"]
    out = doc.render(["EINS ZWEI DREI VIER FÜNF SECHS"])
    for tag in ("<a name=x></a>", "<b>", "</i>", "</b>", "<i>", "<p>", "</p>"):
        assert out.count(tag) == fragment.count(tag), tag


# ---- the real model


def test_the_demo_model_puts_each_tag_on_the_translated_words(translator):
    from nmt.translation.alignment import aligned

    fragments = {"<p>the <b>twenty-sixth</b> of <i>December</i> eighteen forty-three</p>":
                 "<p>der <b>sechsundzwanzigste</b> <i>Dezember</i> achtzehnhundertdreiundvierzig</p>",
                 "<p>these <a href=x>red boys</a></p>": "<p>diese <a href=x>roten Junge</a></p>"}
    for fragment, expected in fragments.items():
        doc = parse_html(fragment)
        assert len(doc.texts) == 1  # one sentence across the tags, translated once...
        result = translator.translate_chunk(doc.texts, need_attention=True)[0]
        plain = translator.translate_chunk([doc.texts[0]])[0].text[0]
        assert result.text[0] == plain  # ...exactly as without them
        assert doc.render([aligned(translator.tokenizer, result)]) == expected


def test_fidelity_on_held_out_sentences_has_a_floor(translator):
    spec = importlib.util.spec_from_file_location("inline_fidelity", ROOT / "bench" / "inline_fidelity.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # its dataclasses look their module up
    spec.loader.exec_module(bench)  # type: ignore[union-attr]
    right, judged, _ = bench.measure(translator, bench.cases(40), "search")
    print(f"inline fidelity: {right}/{judged}")
    assert judged >= 25 and right / judged >= 0.8, (right, judged)  # 31/34 with grow-1:1 (argmax: 0.6)
