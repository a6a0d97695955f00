"""Fixtures of the interop tests: the models `nmt export` is proven on (tests.helpers.exporting: one of each kind the
exporters must handle) and the 100 test lines they translate, built once per session and shared by every
test_export_*.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import exporting
from tests.helpers.paths import DEMO_MODEL


@pytest.fixture(scope="session")
def export_lines(demo_raw) -> list[str]:
    """The demo corpus' 100 test sentences (English)."""
    return Path(demo_raw["test"] + ".en").read_text(encoding="utf-8").splitlines()[:100]


@pytest.fixture(scope="session")
def export_models(tmp_path_factory, demo_raw, demo_data) -> dict[str, Path]:
    """kind -> checkpoint path, for every kind in KINDS (built on first use, once per session)."""
    root = tmp_path_factory.mktemp("export-models")
    return {"tiny": DEMO_MODEL, "prenorm": exporting.prenorm(root, demo_data),
            "separate": exporting.separate(root, demo_raw), "marian": exporting.marian(root)}
