"""Fixtures of the translation tests (tests/translation/ and tests/translation/documents/)."""

from __future__ import annotations

import pytest

from nmt.translation.translator import Translator
from tests.helpers.paths import DEMO_MODEL


@pytest.fixture(scope="module")
def translator() -> Translator:
    """The committed demo model's Translator, loaded once per test module (test_translate.py has its own: the
    session's demo_run with its own decode settings)."""
    return Translator.load(DEMO_MODEL)
