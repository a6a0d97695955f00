"""The package's shape, by package: every module imports in a fresh interpreter (all but serve's HTTP side without
the serve extra), there is no import cycle, each package imports only the packages below its floor, no module
imports another module's `_private` name, and no file, class or function is too long. Imports inside functions
count too. And the tests' own shape: no test module imports another test module or a conftest.py (what they share is
in tests/helpers/ and the conftest.py files).

The floors (what a package may import besides itself), bottom up:
- the root modules, what every stage shares (the paper's model, its cache and kernels, precision, loss; tokenizer,
  text; checkpoint and run dir; score; errors, io, log, device, langcodes, workbudget), and config/ (the experiment
  config: the checkpoint stores it; config itself imports only nmt.errors);
- demo/, search/ (the model and kernels only: no files, configs or tokenizers);
- data/ (demo: `nmt prepare --demo`); train/ (data, search: validation decodes);
- plot/ (data, train: the paper's pictures draw the real schedule and batches);
- translation/ (data: batches; search; plot: `nmt translate --attention` draws);
- explain/ (translation, search, data); interop/ (root and config only); serve/ (translation, explain);
- distill/ (data: prepare; train; translation: the teacher's and the student's translations; interop: its export
  stage runs `nmt export`);
- cli/ imports every stage and no stage imports it (`python -m nmt` is its entry point)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

NMT = Path(__file__).resolve().parents[1] / "nmt"


def module_name(path: Path) -> str:
    """nmt/serve/app.py -> "serve.app"; a package's __init__ is the package (nmt/serve/__init__.py -> "serve")."""
    parts = path.relative_to(NMT).with_suffix("").parts
    return ".".join(parts[:-1] if len(parts) > 1 and parts[-1] == "__init__" else parts)


FILES = {module_name(p): p for p in sorted(NMT.rglob("*.py"))}
MODULES = sorted(FILES)
PACKAGES = sorted(p.name for p in NMT.iterdir() if (p / "__init__.py").is_file())
ROOT = "root"  # the modules at the top of nmt/
BASE = {ROOT, "config"}
FLOORS = {  # package -> the packages it may import (besides itself and BASE)
    ROOT: set(), "config": set(), "demo": set(), "search": set(),
    "data": {"demo"}, "train": {"data", "search"}, "plot": {"data", "train"},
    "translation": {"data", "search", "plot"}, "explain": {"data", "search", "translation"},
    "interop": set(), "serve": {"translation", "explain"},
    "distill": {"data", "train", "translation", "interop"},
    "cli": set(PACKAGES) | {ROOT},
}
CONFIG_IMPORTS = {"errors"}  # config sits under the root modules that store it
# the core of the core: they know nothing of files, configs or tokenizers (nmt modules they may import)
# (search: its own modules besides)
TORCH_ONLY = {"model": {"kernels", "cache", "packed"}, "cache": set(), "kernels": set(), "packed": set(),
              "int8": set(), "search": {"kernels", "int8"}}
MAX_LINES = 400  # a longer module holds more than one concept
MAX_LINES_IN = {"serve": 250}  # a package's files: one concern each
MAX_CLASS_LINES = 250  # a longer class holds more than one concept: its parts have owners elsewhere
MAX_FUNCTION_LINES = 60  # the body, docstring included; a Typer command's option list is its signature
# without the serve extra (FastAPI, uvicorn) everything imports but the HTTP side of serve
NEEDS_NO_EXTRA = {"serve", "serve.batcher", "serve.worker"}


def package(module: str) -> str:
    """The package a module belongs to: "serve.app" -> "serve"; a root module ("model", "__main__") -> ROOT."""
    first = module.split(".")[0]
    return first if first in PACKAGES else ROOT


def _import_nodes(module: str):
    """(base module, imported names) of each `import`/`from ... import` of nmt in `module` (relative resolved)."""
    path = FILES[module]
    pkg = module if path.name == "__init__.py" and path.parent != NMT else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("nmt."):
                    yield a.name.removeprefix("nmt."), []
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's package, one level up per extra dot
                parts = pkg.split(".") if pkg else []
                base = ".".join([*parts[:len(parts) - (node.level - 1)], *([node.module] if node.module else [])])
            elif node.module and (node.module == "nmt" or node.module.startswith("nmt.")):
                base = node.module.removeprefix("nmt").removeprefix(".")
            else:
                continue
            yield base, [a.name for a in node.names]


def imports(module: str) -> set[str]:
    """The nmt modules `module` imports, anywhere in its source."""
    found = set()
    for base, names in _import_nodes(module):
        if not names:
            found.add(base)
        for name in names:  # `from nmt.serve import app` imports the module nmt.serve.app
            full = f"{base}.{name}" if base else name
            found.add(full if full in FILES else base)
    return found - {module, ""}  # "": a name of nmt/__init__.py (nmt.__version__)


GRAPH = {m: imports(m) for m in MODULES}


def test_every_module_imports_in_a_fresh_interpreter():
    code = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module('nmt.' + m)\n"
    proc = subprocess.run([sys.executable, "-c", code, *MODULES], capture_output=True, text=True, timeout=300,
                          cwd=NMT.parent)
    assert proc.returncode == 0, proc.stderr


def test_only_the_http_side_of_serve_needs_the_serve_extra():
    free = [m for m in MODULES if package(m) != "serve" or m in NEEDS_NO_EXTRA]
    code = ("import importlib, sys\nsys.modules.update(fastapi=None, uvicorn=None)\n"
            "for m in sys.argv[1:]:\n    importlib.import_module('nmt.' + m)\n")
    proc = subprocess.run([sys.executable, "-c", code, *free], capture_output=True, text=True, timeout=300,
                          cwd=NMT.parent)
    assert proc.returncode == 0, proc.stderr


def test_no_file_is_too_long():
    for m, path in FILES.items():
        n, limit = len(path.read_text(encoding="utf-8").splitlines()), MAX_LINES_IN.get(package(m), MAX_LINES)
        assert n <= limit, f"{path.relative_to(NMT.parent)} has {n} lines, over {limit}: split it"


def _definitions(kind: type | tuple[type, ...]):
    for m, path in FILES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, kind):
                yield m, node


def test_no_class_is_too_long():
    long = [f"{m}.{node.name}: {node.end_lineno - node.lineno + 1} lines" for m, node in _definitions(ast.ClassDef)
            if node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES]
    assert not long, f"classes over {MAX_CLASS_LINES} lines: {long}"


def test_no_function_is_too_long():
    long = [f"{m}.{node.name}: {node.end_lineno - node.body[0].lineno + 1} lines"
            for m, node in _definitions((ast.FunctionDef, ast.AsyncFunctionDef))
            if node.end_lineno - node.body[0].lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines (body): {long}"


def test_no_module_imports_another_modules_private_names():
    private = [f"{m}: {name} from nmt.{base}" for m in MODULES for base, names in _import_nodes(m) for name in names
               if name.startswith("_") and not name.startswith("__")]
    assert not private, f"a helper two modules need is public in its owner: {private}"


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


def test_every_package_imports_only_what_is_below_its_floor():
    assert set(FLOORS) == set(PACKAGES) | {ROOT}, "a new package needs its floor here (and in the docstring)"
    wrong = []
    for m, deps in GRAPH.items():
        if m == "__main__":
            continue
        allowed = {package(m)} | BASE | FLOORS[package(m)]
        wrong += [f"{m} -> {d}" for d in deps if package(d) not in allowed]
    config_deps = {d for m in GRAPH if package(m) == "config" for d in GRAPH[m] if package(d) != "config"}
    assert config_deps <= CONFIG_IMPORTS, f"config imports {config_deps - CONFIG_IMPORTS}"
    assert not wrong, f"imports below no floor: {wrong}"


def test_the_core_of_the_core_imports_only_torch():
    for m, deps in GRAPH.items():
        allowed = TORCH_ONLY.get(m, TORCH_ONLY.get(package(m)))
        if allowed is not None:
            outside = {d for d in deps if package(d) != "search"} if package(m) == "search" else deps
            assert outside <= allowed, f"{m} imports {outside - allowed}"


def test_the_cli_is_the_entry_point_and_reaches_every_stage():
    assert GRAPH["__main__"] == {"cli.main"}  # `python -m nmt` is the CLI's entry point, nothing more
    assert not [m for m, deps in GRAPH.items() if package(m) != "cli" and m != "__main__"
                and any(package(d) == "cli" for d in deps)], "a stage imports the CLI"
    reached = {package(d) for m in GRAPH if package(m) == "cli" for d in GRAPH[m]}
    assert reached >= set(PACKAGES) - {"cli", "demo", "search"}


def test_the_graph_sees_function_level_imports_and_package_modules():
    assert "plot.charts" in GRAPH["translation.command"]  # imported inside functions only (matplotlib is optional)
    assert {"serve", "serve.batcher", "serve.worker", "serve.runner"} <= set(MODULES)
    assert GRAPH["serve.worker"] >= {"serve.batcher", "translation.translator"}
    assert "serve" in GRAPH["cli.main"]  # `from nmt.serve import run`
    assert "translation.documents.html" in GRAPH["serve.libretranslate"]


# ---- the tests' own shape: tests/ mirrors the packages, and a test module stands alone

TESTS = NMT.parent / "tests"


def _imported_modules(path: Path) -> list[tuple[int, list[str]]]:
    """(line, the dotted modules and names it imports) of each import in a file, anywhere in its source; relative
    ones resolved against the file's package (`from . import test_x` imports tests.<folder>.test_x)."""
    package = path.relative_to(TESTS.parent).parent.parts
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.append((node.lineno, [a.name for a in node.names]))
        elif isinstance(node, ast.ImportFrom):
            base = [*package[:len(package) - node.level + 1], *(node.module.split(".") if node.module else [])] \
                if node.level else node.module.split(".")
            found.append((node.lineno, [".".join(base)] + [".".join([*base, a.name]) for a in node.names]))
    return found


def _test_module_or_conftest(module: str) -> str | None:
    """What is wrong with importing `module` in a test file: a test module, a conftest.py, or nothing (None)."""
    parts = module.split(".")
    if not (parts[0] in ("tests", "conftest") or parts[0].startswith("test_")):  # or the rootdir's: `import test_x`
        return None
    return "a test module" if any(p.startswith("test_") for p in parts) else "a conftest" if "conftest" in parts \
        else None


def test_no_test_module_imports_another_test_module_or_a_conftest():
    """Shared helpers live in tests/helpers/ and fixtures in a conftest.py: no test_*.py imports a test module or a
    conftest.py, and no conftest.py or helper imports a test module."""
    wrong = []
    for path in sorted(TESTS.rglob("*.py")):
        for line, modules in _imported_modules(path):
            what = {w for m in modules if (w := _test_module_or_conftest(m))}
            if not path.name.startswith("test_"):
                what.discard("a conftest")
            if what:
                wrong.append(f"{path.relative_to(TESTS.parent)}:{line} imports {' and '.join(sorted(what))}")
    assert not wrong, "a helper two test files need belongs in tests/helpers/, a fixture in a conftest.py:\n" + \
        "\n".join(wrong)
