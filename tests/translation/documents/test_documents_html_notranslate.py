"""HTML's "do not translate" marks (issue 46): an element with translate="no" or class="notranslate" (Google's
convention), whatever its tag, custom elements (<my-widget>) included, is kept with its content as written, and so
is everything under it (the attribute is inherited); a custom element without the mark is inline, as browsers show
it: its text stays in its sentence. Translated by the fake translator of tests.helpers.documents (words reversed and
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
    # translate="yes" inside a kept element is kept with it: the atom is written whole
    kept = '<span translate="no">Acme <b translate="yes">Corp</b></span>'
    assert parse_html(f"<p>Hello {kept} team.</p>").texts == ["Hello team."]
