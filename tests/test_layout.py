"""The package's shape: every module imports in a fresh interpreter (all but serve's HTTP side without the
serve extra), there is no import cycle, dependencies point one way: cli -> commands -> core, and no file is
too long. Imports inside functions count too. A subpackage is its top-level name's: the modules of nmt/serve/
are the command `serve` (free to import each other)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

NMT = Path(__file__).resolve().parents[1] / "nmt"


def module_name(path: Path) -> str:
    """nmt/serve/app.py -> "serve.app"; a subpackage's __init__ is the package (nmt/serve/__init__.py -> "serve")."""
    parts = path.relative_to(NMT).with_suffix("").parts
    return ".".join(parts[:-1] if len(parts) > 1 and parts[-1] == "__init__" else parts)


FILES = {module_name(p): p for p in sorted(NMT.rglob("*.py"))}
MODULES = sorted(FILES)
CLI = {"cli", "cli_common", "cli_tools", "__main__"}
# orchestrate the core, never each other
COMMANDS = {"prepare", "train", "translate", "info", "marian", "serve", "export"}
# the core of the core: they know nothing of files, configs or tokenizers (nmt modules they may import):
# the model imports only the kernels and the cache
TORCH_ONLY = {"model": {"kernels", "cache"}, "cache": set(), "kernels": set(), "search": {"kernels"}}
MAX_LINES = 400  # a longer module holds more than one concept
MAX_LINES_IN = {"serve": 250}  # a package's files: one concern each
MAX_CLASS_LINES = 250  # a longer class holds more than one concept: its parts have owners elsewhere
# without the serve extra (FastAPI, uvicorn) everything imports but the HTTP side of serve
NEEDS_NO_EXTRA = {"serve", "serve.batcher", "serve.worker"}


def top(module: str) -> str:
    """The top-level name a module belongs to: "serve.app" -> "serve"."""
    return module.split(".")[0]


def imports(module: str) -> set[str]:
    """The nmt modules `module` imports, anywhere in its source (relative imports resolved)."""
    path = FILES[module]
    package = module if path.name == "__init__.py" and path.parent != NMT else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name.removeprefix("nmt.") for a in node.names if a.name.startswith("nmt.")}
            continue
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:  # relative: from the module's package, one level up per extra dot
            parts = package.split(".") if package else []
            base = ".".join([*parts[:len(parts) - (node.level - 1)], *([node.module] if node.module else [])])
        elif node.module and (node.module == "nmt" or node.module.startswith("nmt.")):
            base = node.module.removeprefix("nmt").removeprefix(".")
        else:
            continue
        for a in node.names:  # `from nmt.serve import app` imports the module nmt.serve.app
            name = f"{base}.{a.name}" if base else a.name
            found.add(name if name in FILES else base)
    return found - {module, ""}  # "": a name of nmt/__init__.py (nmt.__version__)


GRAPH = {m: imports(m) for m in MODULES}


def test_every_module_imports_in_a_fresh_interpreter():
    code = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module('nmt.' + m)\n"
    proc = subprocess.run([sys.executable, "-c", code, *MODULES], capture_output=True, text=True, timeout=300,
                          cwd=NMT.parent)
    assert proc.returncode == 0, proc.stderr


def test_only_the_http_side_of_serve_needs_the_serve_extra():
    free = [m for m in MODULES if top(m) != "serve" or m in NEEDS_NO_EXTRA]
    code = ("import importlib, sys\nsys.modules.update(fastapi=None, uvicorn=None)\n"
            "for m in sys.argv[1:]:\n    importlib.import_module('nmt.' + m)\n")
    proc = subprocess.run([sys.executable, "-c", code, *free], capture_output=True, text=True, timeout=300,
                          cwd=NMT.parent)
    assert proc.returncode == 0, proc.stderr


def test_no_file_is_too_long():
    for m, path in FILES.items():
        n, limit = len(path.read_text(encoding="utf-8").splitlines()), MAX_LINES_IN.get(top(m), MAX_LINES)
        assert n <= limit, f"{path.relative_to(NMT.parent)} has {n} lines, over {limit}: split it"


def test_no_class_is_too_long():
    long = []
    for m, path in FILES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES:
                long.append(f"{m}.{node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert not long, f"classes over {MAX_CLASS_LINES} lines: {long}"


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
        outside = {top(d) for d in deps} - {top(m)}  # what it imports beyond its own package
        assert not outside & CLI, f"{m} imports the CLI"
        if top(m) in COMMANDS:
            others = outside & COMMANDS
            assert not others, f"command {m} imports command(s) {others}"
        else:
            assert not outside & COMMANDS, f"core module {m} imports command(s) {outside & COMMANDS}"
    for m, allowed in TORCH_ONLY.items():
        assert GRAPH[m] <= allowed, f"{m} imports {GRAPH[m] - allowed}"
    assert {top(d) for m in CLI for d in GRAPH[m]} >= COMMANDS  # the CLI reaches every command


def test_the_graph_sees_function_level_imports():
    assert "plot" in GRAPH["translate"]  # imported inside functions only (matplotlib is optional)


def test_the_graph_sees_the_modules_of_packages():
    assert {"serve", "serve.batcher", "serve.worker", "serve.runner"} <= set(MODULES)
    assert GRAPH["serve.worker"] >= {"serve.batcher", "translator"}
    assert "serve" in GRAPH["cli"]  # `from nmt.serve import run`


def test_documents_are_core_shared_by_translate_and_serve():
    # nmt/documents/ is a core package (the format modules of `nmt translate`'s documents and of serve's HTML)
    assert "documents" not in COMMANDS and "documents.html" in set(MODULES)
    assert "documents" in GRAPH["translate"] and "documents.html" in GRAPH["serve.libretranslate"]
