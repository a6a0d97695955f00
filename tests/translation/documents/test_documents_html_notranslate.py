"""HTML's "do not translate" marks (issue 46): an element with translate="no" or class="notranslate" (Google's
convention), whatever its tag, custom elements (<my-widget>) included, is kept with its content as written, and so
is everything under it (the attribute is inherited) unless a descendant says translate="yes", which translates its own
subtree again, as the HTML standard has it; a custom element without the mark is inline, as browsers show it: its
text stays in its sentence. Translated by the fake translator of tests.helpers.documents (words reversed and
uppercased)."""

from __future__ import annotations

from nmt.translation.documents.html import parse_html
from tests.helpers.documents import reverse_upper


def translated(fragment: str) -> str:
    doc = parse_html(fragment)
    paragraphs = doc.paragraphs()
    return doc.write(reverse_upper(paragraphs) if paragraphs else [])


def test_a_custom_element_under_translate_no_is_one_atom_in_its_sentence() -> None:
    widget = '<my-widget translate="no" data-x="1">Save <b>all</b> files</my-widget>'
    fragment = f"<p>Click {widget} to continue now.</p>"
    assert parse_html(fragment).texts == ["Click to continue now."]  # one sentence, the widget never sent
    out = translated(fragment)
    assert out.count(widget) == 1 and "CONTINUE TO CLICK " + widget in out


def test_translate_no_and_notranslate_are_inherited_by_descendants() -> None:
    fragment = ('<div translate="no"><p>Keep <em>this</em> text.</p><ul><li>And this one.</li></ul></div>'
                '<section class="notranslate"><p>Brand <span>Name</span> here.</p></section>'
                '<p>Translate <span class="x notranslate">Acme <i>Corp</i></span> this.</p>')
    assert parse_html(fragment).texts == ["Translate this."]
    out = translated(fragment)
    assert '<div translate="no"><p>Keep <em>this</em> text.</p><ul><li>And this one.</li></ul></div>' in out
    assert '<section class="notranslate"><p>Brand <span>Name</span> here.</p></section>' in out
    assert '<span class="x notranslate">Acme <i>Corp</i></span>' in out and "THIS" in out


def test_a_custom_element_without_the_mark_is_translated_in_its_sentence() -> None:
    fragment = '<p>The <fancy-tag kind="a">red</fancy-tag> car is fast.</p>'
    assert parse_html(fragment).texts == ["The red car is fast."]  # not cut into three paragraphs
    assert '<fancy-tag kind="a">RED</fancy-tag>' in translated(fragment)


def test_translate_yes_inside_a_kept_region_is_translated_and_the_rest_kept() -> None:
    fragment = '<div translate="no">Product: <span translate="yes">a fast car</span> (model 7)</div>'
    assert parse_html(fragment).texts == ["a fast car"]  # the kept text is never sent, nor glued to it
    assert translated(fragment) == ('<div translate="no">Product: <span translate="yes">CAR FAST A</span> (model 7)'
                                    '</div>')


def test_a_translate_yes_part_of_a_kept_atom_is_a_sentence_of_its_own() -> None:
    # The kept span is one atom of "Buy today." (its place among the words), its translate="yes" part a paragraph
    # of its own: "red car" is neither sent with "Buy today." nor with the kept "Acme" and "Corp".
    kept = '<span translate="no">Acme <b translate="yes">red car</b> Corp</span>'
    doc = parse_html(f"<p>Buy {kept} today.</p>")
    assert doc.texts == ["Buy today.", "red car"]
    out = translated(f"<p>Buy {kept} today.</p>")
    assert '<span translate="no">Acme <b translate="yes">CAR RED</b> Corp</span>' in out
    assert "TODAY." in out and "BUY" in out and out.count("<span") == 1


def test_translate_alternating_three_deep_both_ways() -> None:
    fragment = ('<div translate="no"><p>Keep one.</p><p translate="yes">Translate two <span translate="no">keep '
                '<em>three</em> <i translate="yes">translate four</i> keep five</span> here.</p></div>'
                '<p>Translate <b translate="no">keep <i translate="yes">translate <u translate="no">keep '
                'six</u> seven</i></b> now.</p>')
    doc = parse_html(fragment)
    assert doc.texts == ["Translate two here.", "translate four", "Translate now.", "translate seven"]
    out = translated(fragment)
    assert "<p>Keep one.</p>" in out and "keep <em>three</em> " in out and " keep five</span>" in out
    assert '<i translate="yes">FOUR TRANSLATE</i>' in out
    assert '<u translate="no">keep six</u>' in out and "SEVEN" in out and "keep six" in out
    assert "HERE." in out and "NOW." in out


def test_an_invalid_translate_value_inherits() -> None:
    # "maybe" is no state of the attribute: the element has its parent's (kept under "no", translated elsewhere);
    # "" and a bare attribute mean "yes"; the keywords are case-insensitive.
    fragment = ('<p translate="no">Keep <span translate="maybe">this word</span> here.</p>'
                '<p>Go <span translate="maybe">home</span> now.</p>'
                '<p translate="NO">Keep <b translate>bare one</b> <i translate="">empty one</i> <u translate="Yes">'
                'upper one</u>.</p>')
    doc = parse_html(fragment)
    assert doc.texts == ["Go home now.", "bare one", "empty one", "upper one"]
    out = translated(fragment)
    assert '<p translate="no">Keep <span translate="maybe">this word</span> here.</p>' in out
    assert '<span translate="maybe">HOME</span>' in out
    assert "<b translate>ONE BARE</b>" in out and '<u translate="Yes">ONE UPPER</u>' in out


def test_code_stays_kept_whatever_a_translate_yes_inside_says() -> None:
    # code, kbd, a mention...: kept by what they are, not by the attribute, so translate="yes" cannot lift them
    fragment = '<p>Run <code>make <span translate="yes">test</span></code> now.</p>'
    assert parse_html(fragment).texts == ["Run now."]
    assert '<code>make <span translate="yes">test</span></code>' in translated(fragment)


def test_a_kept_region_renders_from_texts_as_serve_does() -> None:
    # nmt serve's html format renders plain translations of `texts` (HtmlDoc.render): the nested part included
    doc = parse_html('<p>Buy <span translate="no">Acme <b translate="yes">red car</b></span> today.</p>')
    out = doc.render(["Kauf heute.", "rotes Auto"])
    assert '<span translate="no">Acme <b translate="yes">rotes Auto</b></span>' in out and "Kauf" in out
    assert doc.render(doc.texts) == '<p>Buy <span translate="no">Acme <b translate="yes">red car</b></span> today.</p>'


def test_xhtml_as_in_an_epub_follows_the_same_inheritance() -> None:
    # An EPUB's XHTML: "<span translate="yes"/>" is an empty element (nothing to translate, kept with its parent)
    fragment = '<p translate="no">Keep <span translate="yes"/> it <b translate="yes">red car</b>.</p>'
    doc = parse_html(fragment, xml=True)
    assert doc.texts == ["red car"]
    assert doc.write(reverse_upper(doc.paragraphs())) == fragment.replace("red car", "CAR RED")


def test_translate_yes_nested_past_the_bound_is_kept_with_its_parent() -> None:
    # no, yes, no, yes... 40 deep: the first MAX_RESUMED "yes" subtrees are translated, deeper ones kept as written
    from nmt.translation.documents.html_source import MAX_RESUMED

    fragment = "<p>" + '<span translate="no">k <b translate="yes">word here ' * 40 + "end" + "</b></span>" * 40 + "</p>"
    doc = parse_html(fragment)
    assert len(doc.texts) == MAX_RESUMED and doc.render(doc.texts) == fragment
    assert translated(fragment).count("HERE WORD") == MAX_RESUMED
