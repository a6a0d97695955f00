"""A suite's figures (fault trials, hostile inputs), printed after its tests even without -s. Under pytest-xdist
(`make test`) a worker prints nothing: it hands its lines to the controller (config.workeroutput), which prints them
when the worker ends (tests/conftest.py's pytest_testnodedown)."""

from __future__ import annotations

import json
import os
from typing import Any

WORKER_KEY = "nmt_figures"  # config.workeroutput's list of a worker's figure lines


def print_worker_figures(node) -> None:
    """The figure lines a finished pytest-xdist worker handed over, printed by the controller."""
    reporter = node.config.pluginmanager.get_plugin("terminalreporter")
    for line in getattr(node, "workeroutput", {}).get(WORKER_KEY, []):
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_line(line)


def report_figures(request, line: str, record: dict[str, Any]) -> None:
    """Print a suite's figures after its tests (shown even without -s) and, when NMT_FAULT_REPORT names a
    file, append `record` to it as a JSON line."""
    worker_output = getattr(request.config, "workeroutput", None)
    if worker_output is not None:
        worker_output.setdefault(WORKER_KEY, []).append(line)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.ensure_newline()
            reporter.write_line(line)
    if os.environ.get("NMT_FAULT_REPORT"):
        with open(os.environ["NMT_FAULT_REPORT"], "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
