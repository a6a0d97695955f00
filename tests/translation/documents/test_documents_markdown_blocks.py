"""A translated Markdown paragraph stays one paragraph (markdown-it-py's commonmark_spec.md and strikethrough.md,
issue 46's real documents): the words on either side of a hard break are two words, and a rewritten line that would
open a block (a fence made of two strikethrough marks, a list marker after a hard break) or be blank is written as
text. Translated by the fake translator of the office tests (words reversed and uppercased)."""

from __future__ import annotations

from pathlib import Path

from markdown_it import MarkdownIt

from nmt.translation.documents import md
from nmt.translation.documents.inline import Paragraph, Piece
from tests.helpers.documents import reverse_upper


def translated(tmp_path: Path, text: str, translate=reverse_upper) -> str:
    src, dst = tmp_path / "in.md", tmp_path / "out.md"
    src.write_text(text, encoding="utf-8")
    md.translate(src, dst, translate)
    return dst.read_text(encoding="utf-8")


def blocks(text: str) -> list[str]:
    return [f"{t.type}:{t.level}" for t in md.parser().parse(text)]


def test_nested_strikethrough_moved_to_a_line_start_is_no_code_fence(tmp_path: Path) -> None:
    source = "x ~~foo ~~bar~~~~\n\nafter it\n"
    out = translated(tmp_path, source)
    assert blocks(out) == blocks(source)  # "~~~~BAR..." would open a fence swallowing the rest
    assert out.startswith("\\~~~~BAR") and "IT AFTER" in out


def test_the_words_around_a_hard_break_are_two_words(tmp_path: Path) -> None:
    seen: list[str] = []

    def spy(paragraphs: list[Paragraph]) -> list[list[Piece]]:
        seen.extend(t for p in paragraphs for t in p.texts)
        return reverse_upper(paragraphs)

    out = translated(tmp_path, "one two  \nthree\n\nfour\\\nfive\n", spy)
    assert seen == ["one two three", "four five"]  # not "twothree"
    assert out.startswith("THREE TWO  \n ONE\n")  # the break kept (after the word aligned to "two"), then a space
    assert [c.type for c in MarkdownIt("commonmark").parse(out)[1].children or []].count("hardbreak") == 1


def test_a_list_marker_after_a_hard_break_is_text(tmp_path: Path) -> None:
    source = "x *foo  \nbar* y\n"  # the emphasis ends on the next line; reversed, its "*" starts that line
    out = translated(tmp_path, source)
    assert blocks(out) == blocks(source) == ["paragraph_open:0", "inline:1", "paragraph_close:0"]
    assert "\n\\* X" in out


def test_a_line_left_blank_by_the_translation_keeps_the_paragraph_whole(tmp_path: Path) -> None:
    def drop_middle(paragraphs: list[Paragraph]) -> list[list[Piece]]:
        """"aaa bbb ccc" -> "AAA CCC": the word between two hard breaks is dropped."""
        from nmt.translation.documents.inline import Aligned

        return [p.render([Aligned.from_pairs("AAA CCC", 3, [(0, 0), (2, 1)]) for _ in p.texts])
                for p in paragraphs]

    source = "aaa  \nbbb  \nccc\n"
    out = translated(tmp_path, source, drop_middle)
    assert blocks(out) == blocks(source)  # a line of the two breaks' spaces alone would end the paragraph
    assert "CCC" in out and "AAA" in out


def test_a_heading_or_a_line_as_written_in_the_source_is_not_escaped(tmp_path: Path) -> None:
    out = translated(tmp_path, "# x ~~a ~~b~~~~\n\n- one  \n  2. two\n")
    assert out.startswith("# ~~~~B~~ A~~ X\n")  # a heading's text opens no block
    assert "2\\." not in out.replace("TWO", "")  # (a line the source had is left as it was)
