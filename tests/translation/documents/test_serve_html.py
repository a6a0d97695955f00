"""nmt.translation.documents.html: `format: "html"` fragments come back byte for byte outside the translated text, with
only prose sent for translation, and sentences split where a reader would split them."""

from __future__ import annotations

import html
import random
import re

import pytest

from nmt.translation.documents.html import parse_html, split_sentences

MASTODON = ('<p>Hello <a href="https://x.example/@bob" class="u-url mention">@<span>bob</span></a>, look at '
            '<code>ls -la</code>!<br>Second line &amp; more.</p><p>Another paragraph. With two sentences.</p>')

TRICKY = [
    MASTODON,
    "<ul>\n  <li>One\n    <ul><li>Nested <b>bold</b> item.</li></ul>\n  </li>\n  <li>Two</li>\n</ul>\n",
    "<table><tr><th>Name</th><td align=left>Value one.</td></tr>\n<tr><td colspan='2'>x</td></tr></table>",
    "<p>Unclosed <b>bold <i>italic</p><div>Stray end</span> tag</div></b",
    "<!DOCTYPE html><!-- a comment with <p>tags</p> --><P CLASS=Intro>Upper case.</P><BR><br/><br />",
    "<a title='a > b' data-x=\"<i>\" href=x?a=1&amp;b=2>Link text</a>",
    "Tom &amp; Jerry&#x27;s &quot;show&quot; &nbsp;&lt;3&gt; &copy; 2024 &bogus; &amp",
    "<p>\u00a0Emoji 👋🏽 and ZWJ 👩‍💻 work.</p>",
    '<p dir="rtl">مرحبا بالعالم. كيف حالك؟</p><p lang="he">שלום עולם.</p>',
    "",
    "Plain text, no tags at all. Second sentence!",
    "<![CDATA[ raw <b> ]]>After CDATA.<?xml version='1.0'?>",
    "<script>if (a < b && c) { x = '</p>'; }</script><style>p > b { x: 1 }</style>Text.",
    "x </> y < z <div class='cut",
    "Line one.\r\nLine two.\r\n<br>\r\n",
]

# Markup tokens for the well-formed test fragments: tags (quoted attribute values may hold '<' and '>') and comments.
MARKUP = re.compile(r"<!--.*?-->|<(?:[^>\"']|\"[^\"]*\"|'[^']*')*>", re.S)


def marker(text: str) -> str:
    """A translation that is easy to spot and has characters that must be escaped."""
    return "<<" + text.upper() + ">>"


def translated(fragment: str) -> str:
    doc = parse_html(fragment)
    return doc.render([marker(t) for t in doc.texts])


@pytest.mark.parametrize("fragment", TRICKY)
def test_identity_render_is_byte_exact(fragment: str) -> None:
    doc = parse_html(fragment)
    assert doc.render(doc.texts) == fragment
    assert all(text and text == text.strip() for text in doc.texts)


def test_identity_render_is_byte_exact_on_random_broken_html() -> None:
    pieces = ["<p>", "</p>", "<br/>", "<BR>", "&amp;", "&nbsp;", "&#x27;", "&bogus;", "&amp", "<!-- c -->", "-->",
              "<a href='x>y'>", "</a>", "<code>", "</code>", " ", "\n", "\r\n", "Hello.", "World", "e.g.", "<", ">",
              "&", "</>", "<![CDATA[x]]>", "<![x[", "<script>", "</script>", "é", "👋", "שלום", "<div", "'", '"',
              "=", "&#1;", "<!", "<?", "Ok!", "&#x;", "<span translate=no>", "</span>", "&NotEqualTilde;"]
    rng = random.Random(1234)
    for _ in range(2000):
        fragment = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 16)))
        doc = parse_html(fragment)
        assert doc.render(doc.texts) == fragment
        assert all(text and text == text.strip() for text in doc.texts)


def test_mastodon_post() -> None:
    doc = parse_html(MASTODON)
    # One sentence across the mention and the code (neither is sent: they stay in place among the words, the comma
    # written against the mention with it); <br> ends the paragraph.
    assert doc.texts == ["Hello look at !", "Second line & more.", "Another paragraph.", "With two sentences."]
    assert translated(MASTODON) == (
        '<p>&lt;&lt;HELLO <a href="https://x.example/@bob" class="u-url mention">@<span>bob</span></a>, LOOK AT '
        "<code>ls -la</code>!&gt;&gt;<br>&lt;&lt;SECOND LINE &amp; MORE.&gt;&gt;</p>"
        "<p>&lt;&lt;ANOTHER PARAGRAPH.&gt;&gt; &lt;&lt;WITH TWO SENTENCES.&gt;&gt;</p>")


def test_mastodon_4_links_hashtags_and_mentions_are_not_sent() -> None:
    post = ('<p><span class="h-card" translate="no"><a href="https://m.example/@Gargron" class="u-url mention">'
            '@<span>Gargron</span></a></span> Look: <a href="https://example.com/long/path" rel="nofollow" '
            'translate="no"><span class="invisible">https://</span><span class="ellipsis">example.com/lo</span>'
            '<span class="invisible">ngpath</span></a> <a href="https://m.example/tags/cats" class="mention hashtag" '
            'rel="tag">#<span>cats</span></a> @alice@other.example https://plain.example/x www.example.org</p>')
    assert parse_html(post).texts == ["Look:"]


@pytest.mark.parametrize("fragment", [f for f in TRICKY if f and "</>" not in f and "<div class='cut" not in f
                                      and "<script>" not in f and "<![" not in f and "</b" not in f[-3:]])
def test_markup_and_surrounding_whitespace_are_kept(fragment: str) -> None:
    out = translated(fragment)
    assert MARKUP.findall(out) == MARKUP.findall(fragment)  # every tag and comment, exactly as sent
    for before, after in zip(MARKUP.split(fragment), MARKUP.split(out), strict=True):
        assert re.match(r"\s*", after).group() == re.match(r"\s*", before).group()
        assert re.search(r"\s*$", after).group() == re.search(r"\s*$", before).group()
        # a text node is untouched or holds translated words (a sentence may span several nodes)
        assert after == before or not any(c.islower() for c in html.unescape(after))


@pytest.mark.parametrize("tag", ["code", "kbd", "samp", "var"])
def test_inline_code_is_kept_in_place_inside_its_sentence(tag: str) -> None:
    fragment = f"<p>Run <{tag} class=x>Do not translate &amp; me.</{tag}> now.</p>"
    assert parse_html(fragment).texts == ["Run now."]
    assert translated(fragment) == f"<p>&lt;&lt;RUN <{tag} class=x>Do not translate &amp; me.</{tag}> " \
                                   "NOW.&gt;&gt;</p>"


@pytest.mark.parametrize("tag", ["pre", "script", "style"])
def test_code_blocks_end_the_paragraph_and_are_not_translated(tag: str) -> None:
    fragment = f"<p>Run <{tag} class=x>Do not translate &amp; me.</{tag}> now.</p>"
    assert parse_html(fragment).texts == ["Run", "now."]
    assert translated(fragment) == f"<p>&lt;&lt;RUN&gt;&gt; <{tag} class=x>Do not translate &amp; me.</{tag}> " \
                                   "&lt;&lt;NOW.&gt;&gt;</p>"


@pytest.mark.parametrize("opening", ['<span translate="no">', "<span TRANSLATE=No>", '<span class="a notranslate">',
                                     "<div class='notranslate'><b>"])
def test_notranslate_and_translate_no_cover_their_whole_subtree(opening: str) -> None:
    fragment = f"<p>Before. {opening}Keep <i>this</i> text.</b></span></div> After.</p>"
    assert parse_html(fragment).texts == ["Before.", "After."]
    assert "Keep <i>this</i> text." in translated(fragment)


def test_an_unclosed_code_ends_with_its_parent() -> None:
    # Browsers close <code> with the <p> around it: the text after </p> is prose again.
    assert parse_html("<p><code>x = 1</p>Then it works.").texts == ["Then it works."]


def test_entities_are_decoded_for_translation_and_translations_escaped() -> None:
    fragment = "<p>Tom &amp; Jerry&#x27;s &lt;show&gt;.</p>"
    doc = parse_html(fragment)
    assert doc.texts == ["Tom & Jerry's <show>."]
    assert doc.render(["A & B <i> \"q\""]) == "<p>A &amp; B &lt;i&gt; \"q\"</p>"


def test_only_changed_sentences_are_rewritten() -> None:
    fragment = "<p>It&#x27;s one. It&#39;s two.</p>"
    doc = parse_html(fragment)
    assert doc.texts == ["It's one.", "It's two."]
    # The unchanged first sentence keeps its &#x27;; the changed one is written anew and escaped.
    assert doc.render(["It's one.", "Zwei & mehr."]) == "<p>It&#x27;s one. Zwei &amp; mehr.</p>"


def test_whitespace_around_and_between_sentences_is_kept() -> None:
    fragment = "<p>\n    First one.\n    Second one.  \n</p>"
    doc = parse_html(fragment)
    assert doc.texts == ["First one.", "Second one."]
    assert doc.render(["1", "2"]) == "<p>\n    1\n    2  \n</p>"


def test_nbsp_at_the_edges_is_kept_as_written() -> None:
    assert parse_html("&nbsp;Hi there.&nbsp;").render(["Hallo."]) == "&nbsp;Hallo.&nbsp;"


def test_inner_whitespace_is_collapsed_for_the_model() -> None:
    assert parse_html("<p>A line\n   broken\tin the source.</p>").texts == ["A line broken in the source."]


@pytest.mark.parametrize("text", ["   \n ", "— 42 —", "3.5 / 7", "👋🏽 🎉", "https://example.com/a?b=c", "@bob",
                                  "@alice@social.example", "#caturday", "mailto:x@y.example", "bob@mail.example",
                                  "example.com/path"])
def test_text_without_words_to_translate_is_not_sent(text: str) -> None:
    fragment = f"<p>{text}</p>"
    doc = parse_html(fragment)
    assert doc.texts == []
    assert doc.render([]) == fragment


def test_rtl_and_caseless_scripts_are_split() -> None:
    assert parse_html(TRICKY[8]).texts == ["مرحبا بالعالم.", "كيف حالك؟", "שלום עולם."]


def test_broken_markup_is_never_translated_as_text() -> None:
    doc = parse_html("Good text. <div class='cut off")
    assert doc.texts == ["Good text."]
    assert doc.render(["Guter Text."]) == "Guter Text. <div class='cut off"


def test_render_wants_one_translation_per_text() -> None:
    with pytest.raises(ValueError, match="1 translations for 2 texts"):
        parse_html("One. Two.").render(["Eins."])


def test_split_sentences_basic() -> None:
    assert split_sentences("Hello there. How are you? Fine!") == ["Hello there.", "How are you?", "Fine!"]
    assert split_sentences("She said \"Stop.\" Then (really!) we left. «Oui.» Non. 2 more.") == [
        "She said \"Stop.\"", "Then (really!) we left.", "«Oui.»", "Non.", "2 more."]
    assert split_sentences("日本語です。次の文です。") == ["日本語です。", "次の文です。"]


@pytest.mark.parametrize("text", ["Use a tool, e.g. This one.", "It is 3.5 km away.", "Ask Dr. Smith and Mr. Jones.",
                                  "J. R. R. Tolkien wrote it.", "Made in the U.S. Army base.",
                                  "it ends. and goes on lower case.", "Version 2.0.1 is out."])
def test_split_sentences_does_not_split_abbreviations_decimals_or_lower_case(text: str) -> None:
    assert split_sentences(text) == [text]


@pytest.mark.parametrize("text", ["", "   ", " One.  Two.\n\nThree?! Four… Five", "No end punctuation",
                                  "Trailing space. ", "Ends with 3. 4 starts."])
def test_split_sentences_loses_nothing_but_whitespace(text: str) -> None:
    parts = split_sentences(text)
    assert all(part and part == part.strip() for part in parts)
    assert " ".join(parts).split() == text.split()
