"""Markdown as pandoc's manual and GitHub READMEs write it (issue 46): shortcut and collapsed reference links
("[text]", "[text][]") resolve by their text, so a translated one is written as a full reference to the source's
label ("[translated][text]") and every link still resolves; adjacent code spans keep their separators."""

from __future__ import annotations

from pathlib import Path

from markdown_it import MarkdownIt

from nmt.translation.documents import md
from tests.helpers.documents import reverse_upper

DEFINITIONS = """
[the manual]: https://pandoc.org/MANUAL.html
[The Guide]: https://example.org/guide "Guide"
[ref]: https://example.org/ref
[long label]: https://example.org/long
[**bold** text]: https://example.org/bold
[logo]: logo.png
"""


def translated(tmp_path: Path, text: str) -> str:
    src, dst = tmp_path / "in.md", tmp_path / "out.md"
    src.write_text(text, encoding="utf-8")
    md.translate(src, dst, reverse_upper)
    return dst.read_text(encoding="utf-8")


def links(text: str) -> list[str]:
    """The targets of the links that resolve, in order."""
    tokens = MarkdownIt("commonmark").parse(text)
    return [c.attrs["href"] for t in tokens for c in t.children or [] if c.type == "link_open"]


def test_every_reference_link_still_resolves(tmp_path: Path) -> None:
    source = ("See [the manual] and [the guide][] or [this page][ref], then go.\n\n"
              "> A quoted [long\n> label] here.\n\n"
              "Some [**bold** text] in a link and ![logo][] too.\n" + DEFINITIONS)
    out = translated(tmp_path, source)
    assert sorted(links(out)) == sorted(links(source)) == [
        "https://example.org/bold", "https://example.org/guide", "https://example.org/long", "https://example.org/ref",
        "https://pandoc.org/MANUAL.html"]  # (the fake translator reverses each sentence)
    assert "[MANUAL THE][the manual]" in out and "[GUIDE THE][the guide]" in out  # the source's label, as written
    assert "THIS][ref]" in out  # a full reference keeps its own label
    assert "[LABEL LONG][long label]" in out  # a label over two lines (and a quote's "> ") written on one
    assert "][**bold** text]" in out and "![logo][]" in out  # formatting in the label; an image is kept whole
    assert out.endswith(DEFINITIONS)  # definitions untouched


def test_an_unchanged_reference_link_is_written_as_it_was(tmp_path: Path) -> None:
    source = "See [the manual].\n\n[1984]\n\n[1984]: https://example.org/1984\n" + DEFINITIONS
    out = translated(tmp_path, source)
    assert links(out) == links(source)
    assert "\n\n[1984]\n\n" in out  # digits alone are not sent: the paragraph and its link are kept as written


def test_adjacent_code_spans_keep_their_separators(tmp_path: Path) -> None:
    # pandoc doc/getting-started.md: the demo model glued these into "`Applications``Utilities`" (one span).
    source = "Open a Finder window and go to `Applications`, then `Utilities`.  Then run `a` `b` (`c`).\n"
    out = translated(tmp_path, source)
    codes = [c.content for t in MarkdownIt("commonmark").parse(out) for c in t.children or []
             if c.type == "code_inline"]
    assert sorted(codes) == ["Applications", "Utilities", "a", "b", "c"]
    assert "`Applications`," in out and "`a` `b`" in out and "(`c`)" in out


def test_a_link_around_code_alone_is_one_atom_with_its_separators(tmp_path: Path) -> None:
    # pandoc's MANUAL lists LaTeX packages as "[`bookmark`], [`xcolor`],\n[`soul`]": the demo model glued two into
    # "[`xcolor`][`soul`]", a full reference to the wrong label (88 of 205 links lost; now none).
    source = ("Packages: [`bookmark`], [`xcolor`],\n[`soul`] and [the `y` tool] here.\n\n"
              "Either `$`...`$` or `${`...`}` may be used.\n\n"
              "[`bookmark`]: https://ctan.org/pkg/bookmark\n[`xcolor`]: https://ctan.org/pkg/xcolor\n"
              "[`soul`]: https://ctan.org/pkg/soul\n[the `y` tool]: https://example.org/y\n")
    out = translated(tmp_path, source)
    assert sorted(links(out)) == sorted(links(source)) and len(links(source)) == 4
    assert "[`bookmark`], [`xcolor`],\n[`soul`]" in out  # kept together, as written
    assert "[TOOL THE `y`][the `y` tool]" in out  # a link with a word in it is translated
    assert "`$`...`$`" in out and "`${`...`}`" in out  # "..." between two atoms ends no sentence
