"""Fixtures of the interop tests: the models `nmt export` is proven on (tests.helpers.exporting: one of each kind the
exporters must handle) and the 100 test lines they translate, shared by every test_export_*.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import exporting
from tests.helpers.paths import DEMO_MODEL, EXPORT_PRENORM, EXPORT_SEPARATE


@pytest.fixture(scope="session")
def export_lines(demo_raw) -> list[str]:
    """The demo corpus' 100 test sentences (English)."""
    return Path(demo_raw["test"] + ".en").read_text(encoding="utf-8").splitlines()[:100]


@pytest.fixture(scope="session")
def export_models(tmp_path_factory) -> dict[str, Path]:
    """kind -> checkpoint path, for every kind in KINDS: the demo model and the two briefly trained kinds are
    committed in tests/fixtures/ (made by tests/fixtures/make_export_models.py: training them here took about 30 s
    of every run on 2 cores); the committed Marian model is brought in with `nmt import` once per session."""
    root = tmp_path_factory.mktemp("export-models")
    return {"tiny": DEMO_MODEL, "prenorm": EXPORT_PRENORM, "separate": EXPORT_SEPARATE,
            "marian": exporting.marian(root)}
