"""fallback-warnings: on the release's bytes (the megatron-core wheel), without Transformer Engine and
apex, the fallbacks are one line, once per run, on rank 0 (a process started after it, as the
checkpoint writer is, stays quiet; MEGATRON_FALLBACK_WARNINGS=all shows each warning, once per
process, on one line); other warnings are untouched (patch fallback-warnings).

CI: testkit/checks/fallback_warnings.py on the patched wheel tree and on the series up to te-spec-clear-error.
"""

from __future__ import annotations

import pytest

from testkit import harness

pytest.importorskip("torch")  # the child imports megatron.core, which needs PyTorch
pytestmark = harness.releases_with("fallback-warnings")

TORCH_NORM = "UserWarning: Apex is not installed. Falling back to Torch Norm"
NOTICE = "WARNING: Transformer Engine, apex"  # absl-py may follow: installed or not, depending on the machine
NOTICE_END = ("not installed: Megatron uses its torch fallbacks (said once per run, on rank 0; "
              "MEGATRON_FALLBACK_WARNINGS=all shows each module's warning).")


def imports(tree, workdir, groups: str = "all", **env) -> dict:
    return harness.run_checks("checks.fallback_warnings", groups, tree, workdir, env=env or None)


def fallback_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if "Falling back" in line or "is not installed" in line or "are not installed" in line]


def test_the_fallbacks_are_one_line_once_per_run(release, trees, patched_wheel, child_dir):
    # Before: the series up to te-spec-clear-error (the pristine pin does not import without triton).
    without = trees.wheel(release, release.patches(through="te-spec-clear-error"))
    before = imports(without, child_dir)["stderr"].splitlines()
    assert sum(TORCH_NORM in line for line in before) >= 2  # upstream: once per module that falls back
    result = imports(patched_wheel, child_dir, "and-a-later-process", RANK="0")
    assert result["imported"]["megatron.core.models.gpt.gpt_layer_specs"] is None, result["imported"]
    after = result["stderr"].splitlines()
    [notice] = fallback_lines(after)
    assert notice.startswith(NOTICE) and notice.endswith(NOTICE_END), notice
    assert not any("your version is 0.0.0" in line for line in after)
    ordinary = next(n for n, line in enumerate(after) if "an ordinary warning keeps its source line" in line)
    assert after[ordinary + 1].strip().startswith("warnings.warn(")  # every other warning as before
    assert fallback_lines(result["later"].splitlines()) == [], result["later"]  # said once per run


def test_another_rank_says_nothing_and_all_shows_each_once(patched_wheel, child_dir):
    assert fallback_lines(imports(patched_wheel, child_dir, RANK="1")["stderr"].splitlines()) == []
    every = imports(patched_wheel, child_dir, MEGATRON_FALLBACK_WARNINGS="all")["stderr"].splitlines()
    assert sum(TORCH_NORM in line for line in every) == 1 and len(fallback_lines(every)) >= 4
    for number, line in enumerate(every):
        if line in fallback_lines(every):
            assert number + 1 == len(every) or not every[number + 1].strip().startswith("warnings.warn("), every
