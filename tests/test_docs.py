"""The docs match the CLI: every `rocmpatch ...` command line the docs show names a command and options
that exist, every JSON format `--help` points to is in docs/commands.md, no install command names a
package that is not on PyPI, and the dependency instructions are one block per release (docs/install.md),
run for real in a fresh virtual environment by the full-tree test at the end. Each release's
docs/patches-<release>.md says what series.yaml says, as `rocmpatch lock` writes it."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest

from rocmpatch import series_page
from rocmpatch.cli import app
from rocmpatch.schema import load_series
from rocmpatch.series import PACKAGE_DIR, find_patchsets

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "examples" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"```[^\n]*\n(.*?)```", re.S)
INLINE = re.compile(r"`([^`\n]+)`")
# Where a command line ends inside a line of shell: a pipe, a list, a comment, a subshell's end.
ENDS = {"|", "||", "&&", ";", "#", ")", "\\", "<", ">"}
DEPENDENCY_BLOCK = re.compile(r"<!-- dependencies: (\S+) -->\n```bash\n(.*?)```", re.S)


def doc_command_lines() -> list[tuple[str, list[str]]]:
    """(where, words after 'rocmpatch') for each rocmpatch command line in code blocks and inline code."""
    found = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        snippets = FENCE.findall(text)
        snippets += INLINE.findall(FENCE.sub("", text))
        for snippet in snippets:
            for line in snippet.replace("\\\n", " ").splitlines():
                # a command line starts the line, or follows $( && | ; (prose mentioning rocmpatch does not)
                for match in re.finditer(r"(?:^|\$\(|&&|\||;)\s*(?:python -m )?rocmpatch((?: [^\n]*)?)$", line.strip()):
                    try:
                        words = shlex.split(match.group(1), comments=True)
                    except ValueError:
                        words = match.group(1).split()
                    words = [word.rstrip(")\"'") for word in words]
                    found.append((f"{doc.relative_to(ROOT)}: {line.strip()}", words))
    return found


def resolve(words: list[str]) -> tuple[click.Command, list[str]]:
    """The command the words name (walking groups) and the words after its name."""
    command: click.Command = app
    rest = list(words)
    while isinstance(command, click.Group) and rest and not rest[0].startswith("-"):
        sub = command.commands.get(rest[0])
        if sub is None:
            break
        command, rest = sub, rest[1:]
    return command, rest


def option_names(command: click.Command) -> set[str]:
    """The options --help shows (a hidden, deprecated spelling is not for the docs)."""
    names = {"--help", "-h"}
    for param in command.params:
        if getattr(param, "hidden", False):
            continue
        names.update(getattr(param, "opts", ()))
        names.update(getattr(param, "secondary_opts", ()))
    return names


def test_every_command_and_option_the_docs_show_exists():
    lines = doc_command_lines()
    assert len(lines) > 50  # the scan found the docs' command lines
    problems = []
    for where, words in lines:
        if not words or words[0] in ENDS or not re.match(r"^[a-z-]+$|^-", words[0]):
            continue  # prose ("rocmpatch is ..."), a path, a placeholder
        command, rest = resolve(words)
        if isinstance(command, click.Group) and rest and not rest[0].startswith("-"):
            problems.append(f"{where}: no command {rest[0]!r}")
            continue
        known = option_names(command)
        for word in rest:
            if word in ENDS or word == "--" or word.startswith(("-- ", "--=")):
                break
            if word.startswith("-") and not re.match(r"^-\d", word):
                flag = word.split("=", 1)[0]
                if flag not in known and not flag.endswith("..."):
                    problems.append(f"{where}: {command.name} has no option {flag}")
    assert not problems, "\n".join(problems)


def walk(command: click.Command, path: tuple[str, ...] = ()):
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from walk(sub, (*path, name))


def test_every_json_format_the_help_points_to_is_documented():
    """--help says 'format in docs/commands.md': each such command has a section there with its shape."""
    text = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    sections = {heading: body for heading, body in re.findall(r"^## (.*?)\n(.*?)(?=^## |\Z)", text, re.S | re.M)}
    missing = []
    for path, command in walk(app):
        pointing = [p for p in command.params if "docs/commands.md" in (getattr(p, "help", "") or "")]
        if not pointing or not path:
            continue
        name = "rocmpatch " + " ".join(path)
        section = next((body for heading, body in sections.items() if re.search(rf"`{re.escape(name)}[ `\]]", heading)), None)
        if section is None or not ("```json" in section or "--json`: `{" in section or "--json`:" in section):
            missing.append(name)
    assert not missing, f"JSON formats that --help points to but docs/commands.md does not show: {missing}"


def test_no_install_command_names_a_package_that_is_not_on_pypi():
    """rocmpatch is installed from a clone; `pip install rocmpatch` would fetch someone else's package."""
    bad = re.compile(r"\b(?:pip|pipx|pip3)\s+install\s+(?:-U\s+|--upgrade\s+)?rocmpatch\b|\buv\s+(?:tool\s+)?(?:pip\s+)?install\s+rocmpatch\b")
    offenders = [f"{doc.relative_to(ROOT)}: {line.strip()}" for doc in DOCS
                 for line in doc.read_text(encoding="utf-8").splitlines() if bad.search(line)]
    assert not offenders, offenders


def dependency_lines() -> dict[str, list[tuple[str, str]]]:
    """docs/install.md's dependency blocks: release -> [(command, its comment)]."""
    text = (ROOT / "docs" / "install.md").read_text(encoding="utf-8")
    blocks: dict[str, list[tuple[str, str]]] = {}
    for release, body in DEPENDENCY_BLOCK.findall(text):
        assert release not in blocks, f"two dependency blocks for {release}"
        pairs = [line.partition("#")[::2] for line in body.splitlines() if line.split("#", 1)[0].strip()]
        blocks[release] = [(command.strip(), why.strip()) for command, why in pairs]
    return blocks


def dependency_blocks() -> dict[str, list[str]]:
    return {release: [command for command, _ in lines] for release, lines in dependency_lines().items()}


def test_one_dependency_block_per_release_and_nowhere_else():
    """Each block is its release.yaml's `install:` list, command for command, comment for why."""
    patchsets, _ = find_patchsets(PACKAGE_DIR.parent / "patchsets" if (PACKAGE_DIR.parent / "patchsets").is_dir() else None)
    blocks = dependency_lines()
    assert sorted(blocks) == sorted(patchsets.releases())
    for release, lines in blocks.items():
        install = patchsets.location(release).info.install
        assert lines == [(step.command, step.why) for step in install], (
            f"docs/install.md's block for {release} is not its release.yaml install: list")
        assert lines and all(command.startswith("pip install ") for command, _ in lines), (release, lines)
    # Other pages point to install.md instead of keeping lists of their own that drift apart.
    # (validation.md records what was run, not instructions.)
    elsewhere = [f"{doc.relative_to(ROOT)}: {line.strip()}" for doc in DOCS if doc.name not in ("install.md", "validation.md")
                 for line in doc.read_text(encoding="utf-8").splitlines()
                 if re.search(r"pip install (-r \S*Megatron-LM|psutil|pybind11 einops|numpy|transformers|nltk)", line)]
    assert not elsewhere, elsewhere


def test_each_release_page_says_what_its_series_yaml_says():
    """docs/patches-<release>.md holds one block per patch, written from series.yaml by `rocmpatch lock`
    (the rest of the page is prose kept as it is): an edit of series.yaml without `lock` fails here."""
    patchsets, _ = find_patchsets(ROOT / "patchsets")
    stale = []
    for release in patchsets.releases():
        page = series_page.page_path(patchsets.root, release)
        assert page.is_file(), f"{page.relative_to(ROOT)}: missing (create it with a title line, then run 'rocmpatch lock --release {release}')"
        line = series_page.refresh(page, load_series(patchsets.location(release).series_dir), write=False)
        if line:
            stale.append(f"{page.relative_to(ROOT)}:{line}: not what patchsets/{release}/series.yaml gives (run 'rocmpatch lock --release {release}')")
    assert patchsets.releases() and not stale, "\n".join(stale)


# ------------------------------------------------------------------ full tree: the blocks, for real

IMPORTS = ("import sys; sys.path.insert(0, 'Megatron-LM'); sys.argv = ['x']; "
           "import pretrain_gpt; print('pretrain_gpt imports')")  # it imports the training code of its release


@pytest.mark.upstream
@pytest.mark.parametrize("release", sorted(dependency_blocks()))
def test_dependency_block_installs_what_the_tree_needs_in_a_fresh_venv(release, upstream_mirror, tmp_path):
    """docs/install.md's block for the release, run in a new venv (torch installed first, as the docs
    say: the ROCm build there, the CPU wheel here), then pretrain_gpt.py and tools/preprocess_data.py of
    that release's tree import."""
    from click.testing import CliRunner

    import torch

    applied = CliRunner().invoke(app, ["apply", "-t", str(tmp_path / "Megatron-LM"), "--release", release,
                                       "--upstream-url", str(upstream_mirror)])
    assert applied.exit_code == 0, applied.stderr
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"

    def sh(command: str, timeout: float = 900) -> str:
        done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        return done.stdout

    sh(f"pip install -q torch=={torch.__version__.split('+')[0]}")
    for command in dependency_blocks()[release]:
        sh(command + " -q")
    assert "pretrain_gpt imports" in sh(f"python -c {shlex.quote(IMPORTS)}")
    assert "--output-prefix" in sh("python Megatron-LM/tools/preprocess_data.py --help")


def test_validation_opens_with_every_release_current_state():
    """docs/validation.md's first table has a row per pinned release, with the patch count and the
    patched tree (its first 8 hex digits) that upstream.lock records now: the first screen is current."""
    from rocmpatch.schema import load_lock_file

    text = (ROOT / "docs" / "validation.md").read_text(encoding="utf-8")
    table = text.split("## Current state, per release", 1)[1].split("\n## ", 1)[0]
    rows = {line.split("|")[1].split()[0]: [cell.strip() for cell in line.split("|")[2:4]]
            for line in table.splitlines() if line.startswith("| ") and not line.startswith(("| release", "| ---"))}
    for name, lock in load_lock_file(ROOT / "upstream.lock").releases.items():
        assert name in rows, f"docs/validation.md: no row for {name} in 'Current state, per release'"
        assert rows[name] == [str(len(lock.patches)), f"`{lock.patched_tree[:8]}`"], (name, rows[name])
