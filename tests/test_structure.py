"""The package's shape: no import circles in rocmpatch/ (every import counted, function-level ones
too: a circle is a circle even when it is deferred), and importing a module changes no global state
of the process that imports it (a framework or a test may import rocmpatch)."""

from __future__ import annotations

import ast
import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "rocmpatch"
# Run by other interpreters as a script (verify --installed's `python -c`), never imported.
SCRIPTS = {"rocmpatch.import_lookup"}


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


@functools.lru_cache(maxsize=None)
def parsed(path: Path) -> ast.Module:
    """Each module parsed once for all the tests here."""
    return ast.parse(path.read_text(encoding="utf-8"))


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The rocmpatch modules `name` imports anywhere in its body (a package's module, else the package)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    wanted: set[str] = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            wanted |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            wanted |= {f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names}
    found = set()
    for wanted_name in wanted:
        while wanted_name and wanted_name not in known:
            wanted_name = wanted_name.rpartition(".")[0]
        if wanted_name and wanted_name != name:
            found.add(wanted_name)
    return found


@functools.lru_cache(maxsize=None)
def import_graph() -> dict[str, set[str]]:
    """Each rocmpatch module -> the rocmpatch modules it imports (built once for the tests here)."""
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circles():
    graph = import_graph()
    assert not circles(graph), f"import circles in rocmpatch/ (move what both need into a module of its own): {circles(graph)}"


def test_the_circle_finder_finds_one():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


CHECK = """
import importlib, json, os, signal, sys
names, changed = json.loads(sys.argv[1]), {}
watched = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
for name in names:
    env, cwd, handlers = dict(os.environ), os.getcwd(), [signal.getsignal(s) for s in watched]
    importlib.import_module(name)
    what = [k for k in sorted(set(env) | set(os.environ)) if env.get(k) != os.environ.get(k)]
    what += ["cwd"] if os.getcwd() != cwd else []
    what += ["signal handlers"] if [signal.getsignal(s) for s in watched] != handlers else []
    if what:
        changed[name] = what
print(json.dumps(changed))
"""


def test_importing_a_module_changes_no_global_state():
    """Environment, working directory and signal handlers are as they were after each import
    (git's safe environment is built per call; `__main__` modules are entry points, not imported)."""
    names = sorted(name for name in modules() if name not in SCRIPTS and not name.endswith("__main__"))
    env = {"PATH": "/usr/bin:/bin", "GIT_DIR": "/nonexistent", "GIT_CONFIG_COUNT": "0", "HOME": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", CHECK, json.dumps(names)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {}


# docs/architecture.md's picture, lowest first: a module may import its own layer and those below.
LAYERS = (
    {"errors", "files", "processes", "console", "yamlio", "interrupts", ""},  # "": the package's __init__
    {"gitcmd"},
    None,  # the core: every module not named in another layer
    {"operations", "recipes", "data", "smoke", "preflight", "env", "launchers", "megatron_args", "installed", "import_lookup",
     "wheels", "tables"},
    {"commands", "error_handler"},
    {"cli", "__main__"},
)


def layer_of(name: str) -> int:
    top = name.split(".")[1] if "." in name else ""
    named = [index for index, members in enumerate(LAYERS) if members is not None and top in members]
    return named[0] if named else LAYERS.index(None)


def test_no_module_imports_a_higher_layer():
    upward = [f"{name} -> {dep}" for name, deps in import_graph().items() for dep in deps if layer_of(dep) > layer_of(name)]
    assert not upward, f"imports against docs/architecture.md's layers: {upward}"


def reached(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module `start` imports, directly or through others."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for dependency in graph[todo.pop()] - seen:
            seen.add(dependency)
            todo.append(dependency)
    return seen


# What torchrun starts once per GPU: each imports what it runs, nothing of the parent's orchestration.
WORKERS = ("rocmpatch.smoke.script", "rocmpatch.smoke.collectives_worker", "rocmpatch.preflight.__main__")
ORCHESTRATION = ("rocmpatch.cli", "rocmpatch.commands", "rocmpatch.operations", "rocmpatch.launchers", "rocmpatch.smoke.runner",
                 "rocmpatch.smoke.launch", "rocmpatch.smoke.supervise", "rocmpatch.recipes", "rocmpatch.gitcmd")


def test_a_torchrun_worker_imports_none_of_the_orchestration():
    graph = import_graph()
    found = {worker: sorted(m for m in reached(graph, worker) if m.startswith(ORCHESTRATION)) for worker in WORKERS}
    assert found == {worker: [] for worker in WORKERS}


def test_a_module_exports_only_what_it_defines():
    """A name is imported from the module that owns it; only a package's __init__ (gitcmd's API) re-exports."""
    borrowed = {}
    for name, path in modules().items():
        if path.name == "__init__.py":
            continue
        tree = parsed(path)
        imported = {(alias.asname or alias.name).split(".")[0] for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))
                    for alias in node.names}
        exported = [ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)]
        if exported and set(exported[0]) & imported:
            borrowed[name] = sorted(set(exported[0]) & imported)
        if "noqa: F401" in path.read_text(encoding="utf-8"):  # an import kept only for others to take from here
            borrowed.setdefault(name, []).append("noqa: F401")
    assert borrowed == {}


# A command parses, calls core functions, prints and returns an exit code: it runs nothing itself.
NOT_IN_COMMANDS = ("rocmpatch.gitcmd", "rocmpatch.moves", "rocmpatch.patching", "rocmpatch.trees", "rocmpatch.yamlio",
                   "subprocess", "shutil", "yaml", "json")
COMMAND_LINES = 130  # the longest command (smoke: its stage lines and the summary) has 122


def test_commands_are_thin():
    found = {}
    for name, path in modules().items():
        if not name.startswith("rocmpatch.commands"):
            continue
        tree = parsed(path)
        used = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        used |= {f"{node.module}.{alias.name}" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names}
        wrong = sorted(u for u in used if any(u == banned or u.startswith(banned + ".") for banned in NOT_IN_COMMANDS))
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if wrong or lines > COMMAND_LINES:
            found[name] = (wrong, lines)
    assert found == {}, "move the work into rocmpatch/operations (or the feature's package); the command only prints its result"


def test_only_the_table_module_builds_rich_tables():
    """Rich cuts a cell with an ellipsis; rocmpatch.tables.Table never cuts what a user copies."""
    direct = [name for name, path in modules().items()
              if name != "rocmpatch.tables" and any(isinstance(node, ast.ImportFrom) and node.module == "rich.table"
                                                   for node in ast.walk(parsed(path)))]
    assert direct == []


# tests/ is pytest's own (and a Megatron tree has a `tests` package that shadows ours wherever the tree
# comes first on sys.path); testkit/ is what tests/ and bench/ share and what runs in their child
# processes, never shipped: rocmpatch/ imports neither, bench/ and testkit/ never import tests/.
NOT_IMPORTED = {"rocmpatch": {"tests", "testkit"}, "bench": {"tests"}, "testkit": {"tests"}}
# The pytest plugin that runs inside a Megatron tree, where `tests` is upstream's own tests/unit_tests.
IN_THE_TREE = {"testkit/upstream_units/megatron_on_cpu.py"}


def imported_packages(tree: ast.Module) -> set[str]:
    """The top-level package of every absolute import anywhere in `tree`, importlib.import_module("...") of a
    literal name included."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.add(node.args[0].value.split(".")[0])
    return found


def test_the_import_scan_sees_deferred_and_importlib_imports():
    text = ("import os\ndef f():\n    from tests.series import harness\n"
            "    return importlib.import_module('testkit.checks.x')\nfrom . import sibling\n")
    assert imported_packages(ast.parse(text)) == {"os", "tests", "testkit"}


def test_tests_and_testkit_are_imported_only_where_they_belong():
    found = {}
    for folder, banned in NOT_IMPORTED.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            wrong = imported_packages(parsed(path)) & (banned - ({"tests"} if relative in IN_THE_TREE else set()))
            if wrong:
                found[relative] = sorted(wrong)
    assert found == {}, f"imports across the line docs/architecture.md draws (testkit/): {found}"


def test_the_wheel_ships_rocmpatch_only():
    """pyproject.toml's package list takes rocmpatch and its subpackages, not testkit/ or tests/."""
    tomllib = pytest.importorskip("tomllib")
    find_packages = pytest.importorskip("setuptools").find_packages  # a Python 3.12 venv has no setuptools

    found = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"]["find"]
    shipped = find_packages(str(ROOT), include=found["include"])
    assert shipped and all(name.split(".")[0] == "rocmpatch" for name in shipped), shipped
