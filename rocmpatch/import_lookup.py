"""Run by the interpreter `verify --installed` asks (`python -c <this file's text> MODE OUT`), never
imported by rocmpatch: what that interpreter's import system would load for each module name of
the tree, found the way `import` finds it, without importing anything.

MODE `resolve`: stdin is a JSON list of dotted names (parents before children). Each is looked up
as importlib's _find_spec does: sys.modules first (a module a .pth file or sitecustomize imported
at start-up is what `import` returns), then every finder on sys.meta_path in order (the path
finder, and any hook a site installed), given the parent's search locations. No module is
executed: a parent's locations come from its spec, not from importing it.
MODE `bytecode`: stdin is a JSON list of source files; for each, every bytecode file that Python
could load instead of compiling it (`__pycache__/NAME.TAG[.opt-N].pyc`) is read and compared, as
code objects, with the source compiled by this interpreter (compile() parses, it runs nothing).

The answer goes to the file OUT (never stdout, which a site's code may print to), as JSON: one
object for `resolve`; one line per source for `bytecode`, written as each is done, so that a
bytecode file that crashes the interpreter's unmarshaller is known by the line missing.
Written for any Python >= 3.7.
"""

import importlib.machinery
import importlib.util
import json
import marshal
import os
import sys
import types

try:
    import _frozen_importlib_external as _external
except ImportError:  # pragma: no cover - not CPython
    from importlib import _bootstrap_external as _external

_NAMESPACE_LOADERS = tuple(c for c in (getattr(_external, "NamespaceLoader", None), getattr(_external, "_NamespaceLoader", None)) if c)
_FILE_LOADERS = {
    importlib.machinery.SourceFileLoader: "source",
    importlib.machinery.ExtensionFileLoader: "extension",
    importlib.machinery.SourcelessFileLoader: "sourceless",
}


def _describe(name, spec):
    """What `import name` would load, as plain data."""
    loader = spec.loader
    locations = spec.submodule_search_locations
    answer = {"kind": "other", "origin": spec.origin if isinstance(spec.origin, str) else None,
              "loader": "%s.%s" % (type(loader).__module__, type(loader).__qualname__) if loader is not None else None,
              "locations": [str(p) for p in locations] if locations is not None else None}
    if locations is not None and spec.origin in (None, "namespace") and (loader is None or type(loader) in _NAMESPACE_LOADERS):
        answer["kind"] = "namespace"
    elif type(loader) in _FILE_LOADERS and getattr(loader, "name", None) == name and getattr(loader, "path", None) == spec.origin:
        answer["kind"] = _FILE_LOADERS[type(loader)]  # the very class, for this name and this file
    return answer


def resolve(names):
    found = {}
    for name in names:
        parent = name.rpartition(".")[0]
        if parent and (parent not in found or found[parent].get("locations") is None):
            found[name] = {"kind": "unreachable"}  # the parent is no package: nothing below it imports
            continue
        module = sys.modules.get(name)
        if module is not None:
            spec = getattr(module, "__spec__", None)
            found[name] = dict(_describe(name, spec) if spec is not None else {"origin": getattr(module, "__file__", None)}, kind="preloaded")
            module_path = getattr(module, "__path__", None)  # where `import` looks for its submodules
            found[name]["locations"] = [str(p) for p in module_path] if module_path is not None else None
            continue
        path = found[parent]["locations"] if parent else None
        if parent and parent not in sys.modules:
            # What `import` has by now, the parent module, stands in as an empty module with the
            # parent's search locations: the path finder reads a namespace package's parent path
            # from sys.modules. Nothing runs; the process ends after the lookup.
            stand_in = types.ModuleType(parent)
            stand_in.__path__ = list(path)
            sys.modules[parent] = stand_in
        spec, error = None, None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            try:
                spec = find(name, path, None)
            except Exception as exc:  # a site's hook that fails: `import` would fail there too
                error = "%s: %s" % (type(exc).__name__, exc)
                break
            if spec is not None:
                break
        if error is not None:
            found[name] = {"kind": "error", "detail": error}
        elif spec is None:
            found[name] = {"kind": "missing"}
        else:
            found[name] = _describe(name, spec)
    return {"executable": sys.executable, "version": "%d.%d.%d" % sys.version_info[:3],
            "extension_suffixes": list(importlib.machinery.EXTENSION_SUFFIXES), "modules": found}


def _bytecode_verdict(source, pyc, optimize):
    """"same" (the compiled source, or a file Python never loads), or why not."""
    try:
        with open(pyc, "rb") as stream:
            data = stream.read()
    except OSError as exc:
        return "unreadable: %s" % exc.strerror
    if len(data) < 16 or data[:4] != importlib.util.MAGIC_NUMBER:
        return "same"  # another Python's, or cut short: this one recompiles the source
    flags = int.from_bytes(data[4:8], "little")
    if flags & ~0b11:
        return "same"  # invalid flags: refused, the source is compiled
    try:
        with open(source, "rb") as stream:
            text = stream.read()
        info = os.stat(source)
    except OSError as exc:
        return "unreadable source: %s" % exc.strerror
    if flags == 0 and (int.from_bytes(data[8:12], "little") != int(info.st_mtime) & 0xFFFFFFFF
                       or int.from_bytes(data[12:16], "little") != info.st_size & 0xFFFFFFFF):
        return "same"  # a stale timestamp: never loaded
    # Loaded: a timestamp that matches, or a hash-based file (an unchecked one always; a checked
    # one whenever the hash matches, or always with --check-hash-based-pycs never).
    kind = "timestamp" if flags == 0 else ("checked-hash" if flags & 0b10 else "unchecked-hash")
    if flags & 0b10 and data[8:16] != importlib.util.source_hash(text):
        kind += " (stale; loaded only with --check-hash-based-pycs never)"
    try:
        compiled = compile(text, source, "exec", dont_inherit=True, optimize=optimize)
    except Exception as exc:  # SyntaxError, ValueError (a NUL byte), RecursionError, ...
        return "differs: %s bytecode of a source that does not compile (%s)" % (kind, type(exc).__name__)
    try:
        code = marshal.loads(data[16:])
    except Exception as exc:
        return "differs: %s bytecode that does not load (%s)" % (kind, type(exc).__name__)
    if code != compiled:
        return "differs: %s bytecode whose code is not the source's" % kind
    return "same"


def bytecode(sources, out):
    for source in sources:
        checked = []
        for optimization, optimize in (("", 0), (1, 1), (2, 2)):
            try:
                pyc = importlib.util.cache_from_source(source, optimization=optimization)
            except (NotImplementedError, ValueError):
                continue
            if os.path.lexists(pyc):
                checked.append({"pyc": pyc, "verdict": _bytecode_verdict(source, pyc, optimize)})
        out.write(json.dumps({"source": source, "bytecode": checked}) + "\n")
        out.flush()


def main():
    mode, out_path = sys.argv[1], sys.argv[2]
    request = json.loads(sys.stdin.read())
    if mode == "resolve":
        answer = resolve(request)
        with open(out_path, "w") as out:
            json.dump(answer, out)
    else:
        with open(out_path, "a") as out:
            bytecode(request, out)


if __name__ == "__main__":
    main()
