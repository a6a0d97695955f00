"""Fixtures of the explain tests: the headless Chromium the page of `nmt explain` (a file, and served by
`nmt serve`) is checked in."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.browser import browser_or_reason


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    driver, reason = browser_or_reason()  # the serve page's tests' Chromium
    if driver is None:
        pytest.skip(f"no browser to test the page in: {reason}")
    try:
        yield driver
    finally:
        driver.quit()
