"""Real upstream bytes in CI for a pin on main, which no megatron-core wheel is built from.

release.yaml says `wheel: {none: ...}`, so the generic series tests read this pin's megatron/ from a
mirror (ROCMPATCH_TEST_UPSTREAM) or skip. What CI can still check against bytes from PyPI: the
upstream files the series changes that are byte-identical in the newest megatron-core wheel
(NEAREST). For each such file, the wheel's bytes hash to the pin's blob (the blob id that the first
patch changing it names in its `index` line), and the series' diffs of that file, applied in order
by rocmpatch's own patching, give exactly the blob ids the patch files name: those diffs apply,
exactly, to upstream's real bytes and produce what was reviewed. The other files are checked only
with a mirror (the full-tree tests, `rocmpatch check`, and the weekly drift workflow, which fetches
the pin from GitHub). With a mirror, the last test proves every `index` line names the pin's blob,
so the first test's claim rests on upstream's tree, not on the patch text.
"""

from __future__ import annotations

import hashlib
import re
import subprocess

from rocmpatch.patching import Patch, apply_patch
from rocmpatch.schema import ReleaseWheel
from testkit.megatron_wheel import wheel_files

# The newest megatron-core on PyPI when the pin was taken (no 0.20 pre-release exists; docs/validation.md).
NEAREST = ReleaseWheel("megatron-core==0.19.2", "3.12")
INDEX = re.compile(r"^index ([0-9a-f]{40})\.\.([0-9a-f]{40})", re.M)


def blob_id(data: bytes) -> str:
    """git's blob id of `data` (what `git hash-object` prints)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def file_chains(release) -> dict[str, list[tuple[str, object, str, str]]]:
    """{path: [(patch name, its FilePatch, old blob, new blob), ...]} in series order, for every
    upstream file the series changes in place (not created by the series, not renamed)."""
    chains: dict[str, list] = {}
    created: set[str] = set()
    for loaded in release.series:
        for file_patch in loaded.patch.files:
            path = file_patch.new_path
            if file_patch.old_path is None:
                created.add(path)
                continue
            if path in created or file_patch.old_path != path:
                continue
            found = INDEX.search(file_patch.diff, *file_patch.span)
            assert found, f"{loaded.name}: {path}: no full 'index' line (git format-patch --full-index)"
            chains.setdefault(path, []).append((loaded.name, file_patch, found[1], found[2]))
    return chains


def identical_in_wheel(release) -> tuple[dict[str, list], dict[str, bytes]]:
    files = wheel_files(NEAREST)
    chains = file_chains(release)
    same = {path: chain for path, chain in chains.items() if path in files and blob_id(files[path]) == chain[0][2]}
    return same, files


def test_the_series_carries_exactly_onto_the_wheels_identical_files(release):
    same, files = identical_in_wheel(release)
    # Measured when the pin was taken: 20 of the 61 files the series changes in place (23 of its 71
    # diffs): every file of 9 patches and some of 8 more (docs/validation.md). Fewer means the series
    # changed what it touches: say so there.
    assert len(same) >= 20, sorted(same)
    for path, chain in same.items():
        data = files[path]
        for name, file_patch, old, new in chain:
            assert blob_id(data) == old, f"{name}: {path}: the bytes before it are not blob {old[:12]}"
            data = apply_patch(Patch(name, name, (file_patch,)), {path: data}.get)[path]
            assert blob_id(data) == new, f"{name}: {path}: the result is not blob {new[:12]} that the patch names"


def test_the_index_lines_name_the_pins_blobs(release, upstream_mirror):
    """With a mirror: the first diff of each file names the pin's own blob, so 'identical in the
    wheel' above means identical to upstream's tree at the pin."""
    listing = subprocess.run(["git", "-C", str(upstream_mirror), "ls-tree", "-r", release.pin],
                             capture_output=True, text=True, check=True).stdout
    pin = {line.split("\t", 1)[1]: line.split()[2] for line in listing.splitlines()}
    wrong = [f"{chain[0][0]}: {path}" for path, chain in file_chains(release).items() if pin.get(path) != chain[0][2]]
    assert not wrong, wrong
