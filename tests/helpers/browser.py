"""A real headless Chromium for the pages of `nmt serve` and `nmt explain` (Debian's `chromium` +
`chromium-driver`, with selenium), or why there is none: the browser tests skip, saying why."""

from __future__ import annotations

import shutil
import time
from typing import Any

WAIT_S = 30


def browser_or_reason() -> tuple[Any, str | None]:
    try:
        from selenium import webdriver
    except ImportError:
        return None, "selenium is not installed (pip install selenium)"
    binary = next(filter(None, map(shutil.which, ("chromium", "chromium-browser"))), None)
    if binary is None:
        return None, "no chromium on PATH (Debian: apt-get install chromium chromium-driver)"
    driver = shutil.which("chromedriver")
    if driver is None:
        return None, "no chromedriver on PATH (Debian: apt-get install chromium-driver)"
    options = webdriver.ChromeOptions()
    options.binary_location = binary  # with the driver's path given too, selenium never looks for one online
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1200,1000",
                "--force-device-scale-factor=1", "--disable-extensions", "--no-first-run", "--lang=en-US"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=webdriver.ChromeService(executable_path=driver), options=options), None


def wait_for(driver: Any, script: str, seconds: float = 30, *args: Any) -> Any:
    """What `script` returns once it is truthy (or at the deadline)."""
    deadline = time.monotonic() + seconds
    while not (found := driver.execute_script(script, *args)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return found
