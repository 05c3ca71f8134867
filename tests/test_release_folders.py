"""A release is one folder (patchsets/<release>/) and a lock entry: every folder has all its parts, and
no code outside the folder names a release.

What a release folder needs (docs/adding-a-release.md):
- series.yaml, loading cleanly, and an entry in upstream.lock with the same patches;
- release.yaml with `wheel:` (the megatron-core wheel CI reads the pinned tree's bytes from, or
  `{none: REASON}`: the series tests then need a mirror), `features:` (which generic series tests,
  tests/series/test_<feature>.py, run against it; `[]` is a declaration too), `install:` (docs/install.md's dependency block; tests/test_docs.py keeps the two equal) and
  `smoke:` (what smoke imports, checks and trains);
- where release.yaml has `upstream-tests:`, its requirements file beside it and baseline patches
  that are in the series;
- with several releases, exactly one release.yaml saying `default: true`.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

from rocmpatch.errors import InvalidInput
from rocmpatch.releases import default_location
from rocmpatch.schema import RELEASE_FILE, SERIES_FILE, load_series
from rocmpatch.series import Location, Patchsets, find_patchsets
from testkit.upstream_units.runner import REQUIREMENTS_FILE

ROOT = Path(__file__).resolve().parents[1]
PATCHSETS = find_patchsets(ROOT / "patchsets")[0]


def missing_parts(location: Location) -> list[str]:
    """What `location` lacks of a complete release folder, one line each."""
    where = f"patchsets/{location.release}"
    if not (location.series_dir / SERIES_FILE).is_file():
        return [f"{where}: no {SERIES_FILE}"]
    missing = []
    names = [entry.name for entry in load_series(location.series_dir).entries]
    lock_file = location.patchsets.lock_file()
    locked = lock_file.releases.get(location.release) if lock_file else None
    if locked is None:
        missing.append(f"{where}: no entry in {location.lock_path.name} (run 'rocmpatch lock --release {location.release}')")
    elif [patch.name for patch in locked.patches] != names:
        missing.append(f"{where}: its {location.lock_path.name} entry lists other patches (run 'rocmpatch lock')")
    info = location.info
    if not info.path.is_file():
        return [*missing, f"{where}: no {RELEASE_FILE}"]
    for key, value in (("wheel", info.wheel or info.no_wheel), ("features", info.features is not None),
                       ("install", info.install), ("smoke", info.smoke)):
        if not value:
            missing.append(f"{where}/{RELEASE_FILE}: no {key}:")
    if info.upstream_tests is not None:
        if not (location.series_dir / REQUIREMENTS_FILE).is_file():
            missing.append(f"{where}: upstream-tests: without {REQUIREMENTS_FILE}")
        unknown = sorted(set(info.upstream_tests.baseline) - set(names))
        if unknown:
            missing.append(f"{where}/{RELEASE_FILE}: upstream-tests.baseline names no patch of the series: {unknown}")
    return missing


def test_every_release_folder_has_its_parts():
    releases = PATCHSETS.releases()
    assert releases, "no release folder in patchsets/"
    problems = [line for name in releases for line in missing_parts(PATCHSETS.location(name))]
    assert not problems, "\n".join(problems)
    if len(releases) > 1:
        default_location(PATCHSETS, [PATCHSETS.location(name) for name in releases])  # exactly one default


def test_a_folder_without_its_parts_is_named(tmp_path):
    root = tmp_path / "patchsets"
    (root / "new_v1").mkdir(parents=True)
    location = Patchsets(root, tmp_path / "upstream.lock").location("new_v1")
    assert missing_parts(location) == ["patchsets/new_v1: no series.yaml"]
    real = PATCHSETS.location(PATCHSETS.releases()[0])
    (location.series_dir / SERIES_FILE).write_bytes((real.series_dir / SERIES_FILE).read_bytes())
    (location.series_dir / RELEASE_FILE).write_text("upstream-tests: {baseline: [nope], subset: [tests/unit_tests], note: x}\n")
    assert missing_parts(location) == [
        "patchsets/new_v1: no entry in upstream.lock (run 'rocmpatch lock --release new_v1')",
        "patchsets/new_v1/release.yaml: no wheel:", "patchsets/new_v1/release.yaml: no features:",
        "patchsets/new_v1/release.yaml: no install:",
        "patchsets/new_v1/release.yaml: no smoke:",
        f"patchsets/new_v1: upstream-tests: without {REQUIREMENTS_FILE}",
        "patchsets/new_v1/release.yaml: upstream-tests.baseline names no patch of the series: ['nope']"]


def test_two_defaults_are_refused_naming_both_files(tmp_path):
    root = tmp_path / "patchsets"
    for name in ("a_v1", "b_v2"):
        (root / name).mkdir(parents=True)
        (root / name / SERIES_FILE).write_text("series: []\n")
        (root / name / RELEASE_FILE).write_text("# the default\ndefault: true\n")
    patchsets = Patchsets(root, tmp_path / "upstream.lock")
    with pytest.raises(InvalidInput, match=r"a_v1/release.yaml:2: default: true here and in .*b_v2/release.yaml:2"):
        default_location(patchsets, [patchsets.location(name) for name in patchsets.releases()])


# ------------------------------------------------------------------ no code names a release

SCANNED = ("rocmpatch", "bench", "tests", "testkit", ".github")
CODE = (".py", ".sh", ".yml", ".yaml")
# Files that still name a release, each waiting for the change that removes the name (this list only
# shrinks: a file here that no longer names one fails the test, so it is taken off).
PENDING = {
    "rocmpatch/commands/drift.py": "--range's help example is an upstream tag (launch-and-inputs owns the command)",
    "rocmpatch/recipes/fit.py": "error examples of a recipe's releases: (launch-and-inputs owns recipes)",
    "rocmpatch/recipes/schema.py": "error examples of a recipe's releases: (launch-and-inputs owns recipes)",
    "tests/recipes/test_launch_other_release.py": "recipes say which releases they fit (issue 30 item 2, launch-and-inputs)",
    "tests/recipes/test_launch_release.py": "recipes say which releases they fit (issue 30 item 2, launch-and-inputs)",
    "tests/recipes/test_recipe_file.py": "recipes say which releases they fit (issue 30 item 2, launch-and-inputs)",
    "tests/recipes/test_recipes.py": "recipes say which releases they fit (issue 30 item 2, launch-and-inputs)",
}


def module_form(name: str) -> str:
    return re.sub(r"[.+-]", "_", name)


def release_names(but: str | None = None) -> re.Pattern:
    """Each release folder's name, and its Python module form (core_v1.2.0 -> core_v1_2_0), but `but`'s."""
    names = set()
    for name in PATCHSETS.releases():
        if name != but:
            names |= {name, module_form(name)}
    return re.compile("|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)) or r"(?!)")


def own_release(relative: str) -> str | None:
    """The release whose own tests folder, tests/series/<release, _ for .>/ or testkit/checks/<release, _ for .>/,
    holds `relative`."""
    found = re.match(r"(?:tests/series|testkit/checks)/([^/]+)/", relative)
    releases = {module_form(name): name for name in PATCHSETS.releases()}
    return releases.get(found[1]) if found else None


def exempt(relative: str) -> bool:
    """The recipes: data that says which releases each fits."""
    return bool(re.fullmatch(r"rocmpatch/recipes/[^/]+\.yaml", relative))


def python_code(text: str):
    """(line, text) of every token of a Python file but its comments and docstrings (a string that is
    a statement on its own)."""
    prose: set[int] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            prose.update(range(node.lineno, node.end_lineno + 1))
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type != tokenize.COMMENT and not (token.type == tokenize.STRING and token.start[0] in prose):
            yield token.start[0], token.string


def other_code(text: str):
    """(line, text) of a shell or YAML file with each line's comment cut off."""
    for number, line in enumerate(text.splitlines(), 1):
        code = re.sub(r"(^|\s)#.*", "", line)
        if code.strip():
            yield number, code


def naming_lines() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for base in SCANNED:
        for path in sorted((ROOT / base).rglob("*")):
            relative = path.relative_to(ROOT).as_posix()
            if path.suffix not in CODE or not path.is_file() or exempt(relative) or "__pycache__" in relative:
                continue
            text = path.read_text(encoding="utf-8")
            lines = python_code(text) if path.suffix == ".py" else other_code(text)
            pattern = release_names(but=own_release(relative))  # a release's own tests may name it
            hits = [f"{relative}:{number}: {code.strip()[:120]}" for number, code in lines if pattern.search(code)]
            if hits:
                found[relative] = hits
    return found


def test_no_code_outside_patchsets_names_a_release():
    """Nothing outside patchsets/ names a release: a release is data, found by listing patchsets/
    (`rocmpatch releases`, Patchsets.releases()), chosen with --release, detected from a tree, or the
    default. The rule, checked over rocmpatch/, bench/, tests/, testkit/ and .github/:

    - code may not hold a release's name (any folder name in patchsets/, or its module form with
      underscores): not in a string, an identifier, a module path, help text or a help example
      (write NAME, <release> or `rocmpatch releases` instead), nor in a workflow or shell script;
    - comments and docstrings may: they cite history ("an H100 run of ... failed"), not behaviour;
    - tests/series/<release, _ for .>/ (what only that release does, on the one harness) and
      testkit/checks/<release, _ for .>/ (their child checks) may name that release, and no other; every other test runs for each release through the harness
      (testkit/harness.py: releases_with(feature));
    - rocmpatch/recipes/*.yaml (data saying which releases a recipe fits) is exempt;
    - docs/ and examples/ are prose and user-facing examples, not scanned;
    - PENDING lists the files still waiting for their change, each with the reason.
    """
    found = naming_lines()
    unexpected = [line for path, lines in found.items() if path not in PENDING for line in lines]
    assert not unexpected, "code names a release (see this test's docstring for the rule):\n" + "\n".join(unexpected)
    done = sorted(set(PENDING) - set(found))
    assert not done, f"these no longer name a release: take them off PENDING: {done}"


def test_a_release_folder_of_tests_may_name_its_own_release_only():
    first, *others = PATCHSETS.releases()
    mine = f"tests/series/{module_form(first)}/test_x.py"
    assert own_release(mine) == first and own_release("tests/series/test_x.py") is None
    assert own_release(f"testkit/checks/{module_form(first)}/x_checks.py") == first
    assert own_release("testkit/checks/x.py") is None
    assert not release_names(but=own_release(mine)).search(f'"{first}"')
    for other in others:
        assert release_names(but=own_release(mine)).search(f'"{other}"')


def test_every_tests_series_folder_is_a_releases():
    """tests/series/ holds the generic tests and one folder per release with tests only that release
    has; testkit/checks/ holds the generic child checks and one folder per release with that
    release's own; a folder of no release is a leftover."""
    allowed = {"__pycache__"} | {module_form(name) for name in PATCHSETS.releases()}
    for folder in ("tests/series", "testkit/checks"):
        strays = [p.name for p in (ROOT / folder).iterdir() if p.is_dir() and p.name not in allowed]
        assert not strays, f"{folder}/ folders of no release in patchsets/: {strays}"


def test_every_feature_has_its_tests_and_its_docs():
    """A feature a release.yaml may declare (rocmpatch.schema.FEATURES) runs
    tests/series/test_<feature>.py, parametrised by harness.releases_with(feature), and
    docs/adding-a-release.md says what it checks."""
    from rocmpatch.schema import FEATURES

    docs = (ROOT / "docs" / "adding-a-release.md").read_text(encoding="utf-8")
    for feature in FEATURES:
        test = ROOT / "tests" / "series" / f"test_{feature.replace('-', '_')}.py"
        assert test.is_file(), f"feature {feature}: no {test.relative_to(ROOT)}"
        assert f'releases_with("{feature}"' in test.read_text(encoding="utf-8"), f"{test.relative_to(ROOT)} does not run for {feature}"
        assert f"| `{feature}` |" in docs, f"docs/adding-a-release.md's features table lacks {feature}"


def test_the_scan_sees_names_in_code_but_not_in_prose(tmp_path):
    name = PATCHSETS.releases()[0]
    text = (f'"""Cites {name} in a docstring."""\n# and {name} in a comment\n'
            f'RELEASE = "{name}"\nfrom tests.series.{re.sub(r"[.+-]", "_", name)} import x\n')
    hits = [number for number, code in python_code(text) if release_names().search(code)]
    assert hits == [3, 4]
    assert [n for n, code in other_code(f"a: 1  # {name}\nb: [{name}]\n") if release_names().search(code)] == [2]


def test_a_session_runs_the_default_release_fully_and_the_others_cheap_tests(monkeypatch):
    """Without ROCMPATCH_TEST_RELEASES (CI) the default release runs every series test, another
    release its own folder's tests and its generic tests marked every_release; with it, the releases
    it names run every test and no other does; a name patchsets/ lacks is refused naming the variable."""
    from testkit import harness

    default = harness.default_release()
    other = next(name for name in PATCHSETS.releases() if name != default)

    def runs(release: str, value: str | None, *, generic: bool = True, every_release: bool = False) -> bool:
        if value is None:
            monkeypatch.delenv(harness.RELEASES_VARIABLE, raising=False)
        else:
            monkeypatch.setenv(harness.RELEASES_VARIABLE, value)
        harness.named_releases.cache_clear()
        return harness.not_run_here(release, generic=generic, every_release=every_release) is None

    try:
        assert runs(default, None) and runs(other, None, every_release=True) and runs(other, None, generic=False)
        assert not runs(other, None)
        assert runs(other, other) and not runs(default, other, every_release=True) and not runs(default, other, generic=False)
        assert runs(other, "all") and runs(default, "all")
        with pytest.raises(pytest.UsageError, match=harness.RELEASES_VARIABLE):
            runs(other, "no-such-release")
    finally:
        monkeypatch.undo()
        harness.named_releases.cache_clear()
