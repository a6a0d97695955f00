"""docs/paper.md, the map from the paper to the code and the tests, is what tests/paper_map.py makes of the code now.
When one fails after moving code, run `python -m tests.paper_map`; when a symbol or a test is gone, fix PAPER there."""

from __future__ import annotations

import difflib

from tests import paper_map

FIX = f"fix PAPER in tests/paper_map.py, then run `{paper_map.COMMAND}`"


def test_every_symbol_exists_in_this_repository():
    missing = paper_map.missing_symbols()
    assert not missing, f"the paper map names code that is not there ({FIX}):\n" + "\n".join(missing)


def test_every_test_id_names_a_test():
    missing = paper_map.missing_tests()
    assert not missing, f"the paper map names tests that do not exist ({FIX}):\n" + "\n".join(missing)


def test_every_section_has_code_and_a_test():
    bare = paper_map.untested_sections()
    assert not bare, f"every entry of the paper map needs code and a test ({FIX}):\n" + "\n".join(bare)


def test_every_test_of_test_paper_py_is_on_the_map():
    """tests/test_paper.py holds the tests written for the map: each one proves an entry."""
    mapped = {t.partition("::")[2] for e in paper_map.PAPER for t in e.tests if t.startswith("tests/test_paper.py::")}
    unmapped = paper_map.collected_tests(paper_map.ROOT / "tests" / "test_paper.py") - mapped
    assert not unmapped, f"tests/test_paper.py tests that no entry cites ({FIX}): {sorted(unmapped)}"


def test_docs_paper_md_is_up_to_date():
    try:
        expected = paper_map.render()
    except paper_map.MapError as e:
        raise AssertionError(f"cannot render docs/paper.md: {e} ({FIX})") from None
    actual = paper_map.DOC.read_text(encoding="utf-8") if paper_map.DOC.is_file() else ""
    diff = list(difflib.unified_diff(actual.splitlines(), expected.splitlines(), "docs/paper.md", "generated",
                                     lineterm="", n=0))
    assert actual == expected, (f"docs/paper.md is out of date with the code (a symbol moved?): run "
                                f"`{paper_map.COMMAND}`\n" + "\n".join(diff[:40]))
