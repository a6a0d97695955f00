"""A suite's figures (fault trials, hostile inputs), printed after its tests even without -s."""

from __future__ import annotations

import json
import os
from typing import Any


def report_figures(request, line: str, record: dict[str, Any]) -> None:
    """Print a suite's figures after its tests (shown even without -s) and, when NMT_FAULT_REPORT names a
    file, append `record` to it as a JSON line."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.ensure_newline()
            reporter.write_line(line)
    if os.environ.get("NMT_FAULT_REPORT"):
        with open(os.environ["NMT_FAULT_REPORT"], "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
