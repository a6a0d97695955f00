"""The package's shape: every module imports in a fresh interpreter, there is no import cycle, and
dependencies point one way: cli -> commands -> core. Imports inside functions count too."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

NMT = Path(__file__).resolve().parents[1] / "nmt"
MODULES = sorted(p.stem for p in NMT.glob("*.py"))
CLI = {"cli", "__main__"}
COMMANDS = {"prepare", "train", "translate", "info", "marian", "serve"}  # orchestrate the core, never each other
# the core of the core: they know nothing of files, configs or tokenizers (nmt modules they may import):
# the model imports only the kernels and the cache
TORCH_ONLY = {"model": {"kernels", "cache"}, "cache": set(), "kernels": set(), "search": {"kernels"}}


def imports(module: str) -> set[str]:
    """The nmt modules `module` imports, anywhere in its source."""
    tree = ast.parse((NMT / f"{module}.py").read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("nmt.")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "nmt":
                found |= {a.name for a in node.names if a.name in MODULES}
            elif node.module.startswith("nmt."):
                found.add(node.module.split(".")[1])
    return found - {module}


GRAPH = {m: imports(m) for m in MODULES}


def test_every_module_imports_in_a_fresh_interpreter():
    code = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module('nmt.' + m)\n"
    proc = subprocess.run([sys.executable, "-c", code, *MODULES], capture_output=True, text=True, timeout=300,
                          cwd=NMT.parent)
    assert proc.returncode == 0, proc.stderr


def test_no_import_cycle():
    done: set[str] = set()

    def visit(m: str, path: list[str]) -> None:
        assert m not in path, "import cycle: " + " -> ".join([*path[path.index(m):], m])
        if m in done:
            return
        for dep in sorted(GRAPH[m]):
            visit(dep, [*path, m])
        done.add(m)

    for m in MODULES:
        visit(m, [])


def test_dependencies_point_from_cli_to_commands_to_core():
    assert set(MODULES) >= CLI | COMMANDS | set(TORCH_ONLY)
    assert GRAPH["__main__"] == {"cli"}  # `python -m nmt` is the CLI's entry point, nothing more
    for m, deps in GRAPH.items():
        if m in CLI:
            continue
        assert not deps & CLI, f"{m} imports the CLI"
        if m in COMMANDS:
            others = deps & COMMANDS
            assert not others, f"command {m} imports command(s) {others}"
        else:
            assert not deps & COMMANDS, f"core module {m} imports command(s) {deps & COMMANDS}"
    for m, allowed in TORCH_ONLY.items():
        assert GRAPH[m] <= allowed, f"{m} imports {GRAPH[m] - allowed}"
    assert GRAPH["cli"] >= COMMANDS  # the CLI reaches every command


def test_the_graph_sees_function_level_imports():
    assert "plot" in GRAPH["translate"]  # imported inside functions only (matplotlib is optional)
