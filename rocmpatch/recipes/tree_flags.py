"""Which command-line flags a Megatron-LM tree's pretrain_gpt.py accepts, read from its argument
parser's source without running it (no torch, no Megatron import): `recipe launch` on a tree of a
release the recipe was not written for passes only what that tree knows.

Megatron declares its flags in megatron/training/arguments.py (megatron/arguments.py before
core_v0.8): `parser.add_argument('--name', ...)` calls, and since core_v0.16 also
`ArgumentGroupFactory(SomeConfig, exclude=[...])`, which adds one flag per field of a dataclass
(`--field-name`; a bool field that defaults to True gives `--no-field-name` and
`--disable-field-name`; a field's `argparse_meta` may name its flags). Both are read here: the
add_argument calls with the ast module, each factory's dataclass (and its base classes) from the
module the arguments file imports it from. What cannot be followed (a class defined elsewhere than
an import says) is listed in `unresolved`: a flag missing from an incomplete reading is not known to
be missing.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from rocmpatch.errors import RocmpatchError
from rocmpatch.files import read_regular_file

ARGUMENT_FILES = ("megatron/training/arguments.py", "megatron/arguments.py")
_MAX_SOURCE = 8 * 1024 * 1024
_MAX_DEPTH = 8  # re-exports and base classes followed


@dataclass(frozen=True)
class KnownFlags:
    source: str  # the arguments file, relative to the tree
    flags: frozenset[str]
    unresolved: tuple[str, ...] = ()  # what could not be followed (then a missing flag is not proof)

    def missing(self, flags) -> list[str]:
        return [flag for flag in flags if flag not in self.flags]


def read(tree: Path) -> KnownFlags | None:
    """The flags of the tree's argument parser; None when the tree has no arguments file."""
    for relative in ARGUMENT_FILES:
        path = tree / relative
        if path.is_file():
            reader = _Reader(tree)
            flags = reader.arguments_file(path, _module_name(relative))
            return KnownFlags(relative, frozenset(flags), tuple(reader.unresolved))
    return None


def _module_name(relative: str) -> str:
    return relative.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def _parse(path: Path) -> ast.Module | None:
    """The module's syntax tree; None for one that cannot be read or parsed (then it is unresolved)."""
    try:
        return ast.parse(read_regular_file(path, limit=_MAX_SOURCE, what="Python file").decode("utf-8", "replace"), str(path))
    except (SyntaxError, ValueError, OSError, RecursionError, MemoryError, RocmpatchError):
        return None


def _name_of(node: ast.expr) -> str | None:
    """`X` or `a.b.X` -> 'X'."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _strings(node: ast.expr | None) -> list[str] | None:
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)) and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return [e.value for e in node.elts]
    return None


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _calls_by_scope(tree: ast.Module) -> list[tuple[ast.AST, list[ast.Call]]]:
    """Each function (and the module) with the calls made directly in it (a factory's `exclude=NAME`
    is the list assigned to NAME in the same function)."""
    scopes: list[tuple[ast.AST, list[ast.Call]]] = []

    def visit(scope: ast.AST) -> None:
        calls: list[ast.Call] = []
        scopes.append((scope, calls))
        stack = list(ast.iter_child_nodes(scope))
        while stack:
            node = stack.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(node)
                continue
            if isinstance(node, ast.Call):
                calls.append(node)
            stack.extend(ast.iter_child_nodes(node))

    visit(tree)
    return scopes


class _Module:
    """One parsed module: its classes and the names it imports (name -> (module, name there))."""

    def __init__(self, name: str, tree: ast.Module, is_package: bool) -> None:
        self.name, self.tree = name, tree
        self.classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
        self.imports: dict[str, tuple[str, str]] = {}
        package = name if is_package else name.rpartition(".")[0]
        for node in ast.walk(tree):  # imports inside functions count: arguments.py imports configs there
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    parent = ".".join(parts[:len(parts) - node.level + 1])
                    base = f"{parent}.{base}" if base else parent
                for alias in node.names:
                    self.imports[alias.asname or alias.name] = (base, alias.name)


class _Reader:
    def __init__(self, tree: Path) -> None:
        self.tree = tree
        self.modules: dict[str, _Module | None] = {}
        self.unresolved: list[str] = []

    def module(self, name: str) -> _Module | None:
        if not name or not all(part.isidentifier() for part in name.split(".")):
            return None  # a relative import above the tree's top: nothing of the tree
        if name not in self.modules:
            base = self.tree / name.replace(".", "/")
            for path, package in ((base.with_suffix(".py"), False), (base / "__init__.py", True)):
                if path.is_file():
                    parsed = _parse(path)
                    self.modules[name] = _Module(name, parsed, package) if parsed is not None else None
                    break
            else:
                self.modules[name] = None
        return self.modules[name]

    def arguments_file(self, path: Path, name: str) -> set[str]:
        parsed = _parse(path)
        if parsed is None:
            self.unresolved.append(f"{path.name} does not parse")
            return set()
        module = _Module(name, parsed, False)
        self.modules[name] = module
        flags: set[str] = set()
        for scope, calls in _calls_by_scope(parsed):
            lists = {t.id: _strings(a.value) for a in ast.walk(scope) if isinstance(a, ast.Assign)
                     for t in a.targets if isinstance(t, ast.Name) and _strings(a.value) is not None}
            for call in calls:
                function = _name_of(call.func)
                if function == "add_argument" and isinstance(call.func, ast.Attribute):
                    names = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-")]
                    flags.update(names)
                    action = _keyword(call, "action")
                    if action is not None and _name_of(action) == "BooleanOptionalAction":  # --x and --no-x
                        flags.update("--no-" + name[2:] for name in names if name.startswith("--"))
                elif function == "ArgumentGroupFactory" and call.args:
                    exclude_node = _keyword(call, "exclude") or (call.args[1] if len(call.args) > 1 else None)
                    exclude = _strings(exclude_node) or (lists.get(exclude_node.id) if isinstance(exclude_node, ast.Name) else None) or []
                    flags.update(self.dataclass_flags(module, _name_of(call.args[0]), set(exclude)))
        return flags

    def find_class(self, module: _Module, name: str | None, depth: int = 0) -> tuple[_Module, ast.ClassDef] | None:
        if name is None or depth > _MAX_DEPTH:
            return None
        if name in module.classes:
            return module, module.classes[name]
        if name in module.imports:
            source, original = module.imports[name]
            other = self.module(source)
            if other is not None:
                return self.find_class(other, original, depth + 1)
        return None

    def dataclass_flags(self, module: _Module, name: str | None, exclude: set[str]) -> set[str]:
        found = self.find_class(module, name)
        if found is None:
            self.unresolved.append(f"the dataclass {name}")
            return set()
        flags: set[str] = set()
        for field_name, names in self.fields(*found).items():
            if field_name not in exclude:
                flags.update(names)
        return flags

    def fields(self, module: _Module, cls: ast.ClassDef, depth: int = 0) -> dict[str, list[str]]:
        """Each init field of the dataclass (its bases' first) -> the flags ArgumentGroupFactory gives it."""
        result: dict[str, list[str]] = {}
        for base in cls.bases:
            base_name = _name_of(base)
            if base_name in (None, "object", "Generic", "ABC"):
                continue
            found = self.find_class(module, base_name) if depth < _MAX_DEPTH else None
            if found is None:
                self.unresolved.append(f"the base class {base_name} of {cls.name}")
                continue
            result.update(self.fields(*found, depth + 1))
        for statement in cls.body:
            if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                names = _field_flags(statement)
                if names is not None:
                    result[statement.target.id] = names
        return result


def _field_flags(statement: ast.AnnAssign) -> list[str] | None:
    """The flags of one dataclass field; None for a field that is no init argument (no flag)."""
    name = statement.target.id
    annotation = ast.unparse(statement.annotation).replace(" ", "")
    if annotation.startswith(("ClassVar", "typing.ClassVar", "InitVar", "dataclasses.InitVar")):
        return None
    default: ast.expr | None = statement.value
    if isinstance(default, ast.Call) and _name_of(default.func) == "field":
        init = _keyword(default, "init")
        if isinstance(init, ast.Constant) and init.value is False:
            return None
        metadata = _keyword(default, "metadata")
        if isinstance(metadata, ast.Dict):
            for key, value in zip(metadata.keys, metadata.values):
                if isinstance(key, ast.Constant) and key.value == "argparse_meta" and isinstance(value, ast.Dict):
                    for meta_key, meta_value in zip(value.keys, value.values):
                        if isinstance(meta_key, ast.Constant) and meta_key.value == "arg_names" and _strings(meta_value):
                            return _strings(meta_value)
        default = _keyword(default, "default")
    flag = "--" + name.replace("_", "-")
    if annotation in ("bool", "Optional[bool]", "bool|None", "None|bool", "typing.Optional[bool]"):
        value = default.value if isinstance(default, ast.Constant) else None
        negative = ["--no-" + name.replace("_", "-"), "--disable-" + name.replace("_", "-")]
        if value is False:
            return [flag]
        if value is True:
            return negative
        return [flag, *negative]  # a default argparse cannot be read here: either form may be the tree's
    return [flag]
