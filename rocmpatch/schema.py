"""The files rocmpatch reads: patchsets/<release>/series.yaml and release.yaml (written by people),
upstream.lock (written by `rocmpatch lock`, one entry per release) and an overlay's overlay.lock.
Each schema is declared once, with rocmpatch.yamlio's readers; an error names the file, the line
and the key, and what was expected.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from rocmpatch import yamlio as y

SERIES_FILE = "series.yaml"
RELEASE_FILE = "release.yaml"  # beside series.yaml: what rocmpatch knows of the release beyond its patches
PLATFORMS = ("cpu", "rocm", "cuda")
LOCK_FILE = "upstream.lock"
LOCK_VERSION = 2
LOCK_HEADER = "# Written by `rocmpatch lock` from patchsets/<release>/series.yaml; do not edit by hand.\n"
OVERLAY_LOCK_FILE = "overlay.lock"  # beside an overlay's series.yaml
OVERLAY_LOCK_VERSION = 1
OVERLAY_LOCK_HEADER = ("# Written by `rocmpatch lock --overlay DIR` from this folder's series.yaml and patch files;\n"
                       "# do not edit by hand. The overlay's patches apply on top of the release's whole series.\n")

_HEX40 = re.compile(r"[0-9a-f]{40}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]*")
_RELEASE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")
_PATCH_FILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\.(patch|diff)")


@dataclass(frozen=True)
class SeriesEntry:
    """One patch as authored: what it does, why, and where it came from (in the spirit of DEP-3)."""

    name: str
    file: str
    summary: str
    description: str
    why: str
    author: str
    origin: str
    forwarded: str
    last_update: str


@dataclass(frozen=True)
class Series:
    directory: Path
    entries: tuple[SeriesEntry, ...]

    def patch_path(self, entry: SeriesEntry) -> Path:
        return self.directory / entry.file


@dataclass(frozen=True)
class LockedPatch:
    name: str
    file: str
    sha256: str


@dataclass(frozen=True)
class Upstream:
    url: str
    ref: str
    commit: str
    tree: str
    date: str = ""  # the commit's committer date (ISO 8601): orders the lock's and `releases`' listings


@dataclass(frozen=True)
class Lock:
    upstream: Upstream
    patches: tuple[LockedPatch, ...]
    patched_tree: str

    def to_data(self) -> dict:
        return {
            "upstream": {
                "url": self.upstream.url,
                "ref": self.upstream.ref,
                "commit": self.upstream.commit,
                "tree": self.upstream.tree,
                "date": self.upstream.date,
            },
            "patches": [{"name": p.name, "file": p.file, "sha256": p.sha256} for p in self.patches],
            "patched_tree": self.patched_tree,
        }


@dataclass(frozen=True)
class LockFile:
    """upstream.lock: one Lock per release, keyed by the release's folder name in patchsets/."""

    releases: dict[str, Lock]

    def with_release(self, name: str, lock: Lock) -> "LockFile":
        return LockFile({**self.releases, name: lock})

    def to_yaml(self) -> str:
        ordered = sorted(self.releases, key=lambda name: (self.releases[name].upstream.date, name))
        data = {"version": LOCK_VERSION, "releases": {name: self.releases[name].to_data() for name in ordered}}
        return LOCK_HEADER + y.dump(data)


_SERIES_ENTRY = y.Mapping({
    "name": y.String("a short lowercase name such as 'softmax'", pattern=_NAME, what="name"),
    "file": y.String("the patch file name in patchsets/, ending in .patch", pattern=_PATCH_FILE, what="file"),
    "summary": y.Line("one line saying what the patch does"),
    "description": y.String("what the patch changes", strip=True),
    "why": y.String("why the change is needed", strip=True),
    "author": y.String("who wrote it"),
    "origin": y.String("where it comes from ('rocmpatch', or an upstream commit URL)"),
    "forwarded": y.String("'no', 'not-needed', or where it was sent upstream"),
    "last-update": y.String("the date of the last change, YYYY-MM-DD"),
})
_SERIES = y.Mapping({"series": y.ListOf(_SERIES_ENTRY, "a non-empty list of patches", non_empty=True)})


def load_series(directory: Path) -> Series:
    records = y.load(directory / SERIES_FILE, _SERIES)["series"]
    for field in ("name", "file"):
        seen: set[str] = set()
        for record in records:
            if record[field] in seen:
                raise record.node.error(f"duplicate {field} {record[field]!r}", key=field)
            seen.add(record[field])
    entries = tuple(SeriesEntry(
        name=r["name"], file=r["file"], summary=r["summary"], description=r["description"], why=r["why"],
        author=r["author"], origin=r["origin"], forwarded=r["forwarded"], last_update=r["last-update"],
    ) for r in records)
    return Series(directory=directory, entries=entries)


SINGLE_RELEASE_HINT = (
    "move patchsets/series.yaml and its patch files into patchsets/<release>/ (named after the pinned tag), "
    "then run 'rocmpatch lock --release <release>' to write the multi-release lock"
)


RELEASE_NAME = y.String("a release name: the name of its folder in patchsets/", pattern=_RELEASE, what="release name")
_REGENERATE = "regenerate it with 'rocmpatch lock'"
_LOCKED_PATCHES = y.ListOf(y.Mapping({
    "name": y.String("the patch name"),
    "file": y.String("the patch file"),
    "sha256": y.String("the file's sha256 (64 hex digits)", pattern=_HEX64),
}), "a list of {name, file, sha256}")
_UPSTREAM = y.Mapping({
    "url": y.String("the upstream git URL"),
    "ref": y.String("the tag or branch name of the pin"),
    "commit": y.String("a full 40-hex commit id", pattern=_HEX40,
                       hint="a ref or branch name belongs in upstream.ref; run 'rocmpatch lock'"),
    "tree": y.String("a full 40-hex tree id", pattern=_HEX40,
                     hint="a ref or branch name belongs in upstream.ref; run 'rocmpatch lock'"),
    "date": y.String("the commit's date (ISO 8601)"),
})
_LOCKED_RELEASE = y.Mapping({
    "upstream": _UPSTREAM,
    "patches": _LOCKED_PATCHES,
    "patched_tree": y.String("the 40-hex tree id of the patched tree", pattern=_HEX40, hint=_REGENERATE),
})
_LOCK = y.Mapping({
    "version": y.Optional(y.Raw("the lock format version")),
    "releases": y.Optional(y.MappingOf(RELEASE_NAME, _LOCKED_RELEASE,
                                       "a mapping of release name to its pin, patches and patched tree", non_empty=True)),
    "upstream": y.Optional(y.Raw("(version 1 only)")),
    "patches": y.Optional(y.Raw("(version 1 only)")),
    "patched_tree": y.Optional(y.Raw("(version 1 only)")),
})


def _version(root: y.Node, expected: int, hint: str) -> None:
    version = root.get("version")
    if version is None or version.value != str(expected):
        raise root.error(f"expected version: {expected}", hint=hint, key="version")


def _lock(record: dict) -> Lock:
    up = record["upstream"]
    return Lock(Upstream(up["url"], up["ref"], up["commit"], up["tree"], up["date"]),
                _patches(record["patches"]), record["patched_tree"])


def _patches(records: list) -> tuple[LockedPatch, ...]:
    return tuple(LockedPatch(r["name"], r["file"], r["sha256"]) for r in records)


def load_lock_file(path: Path) -> LockFile:
    root = _LOCK.check(y.read_document(path))
    version = root.get("version")
    if version is not None and version.value == "1":
        raise version.error("is the single-release lock of rocmpatch 0.1", hint=SINGLE_RELEASE_HINT)
    _version(root, LOCK_VERSION, _REGENERATE)
    for stray in ("upstream", "patches", "patched_tree"):
        if root.get(stray) is not None:
            raise root.error("belongs inside releases.<release> in version 2", hint=_REGENERATE, key=stray)
    releases = _LOCK.read(root)["releases"]
    if releases is None:
        raise root.error("expected a mapping of release name to its pin, patches and patched tree", key="releases")
    return LockFile({name: _lock(record) for name, record in releases.items()})


@dataclass(frozen=True)
class Validation:
    """One record of the patched tree working somewhere: what ran, on which platform, when."""

    platform: str  # cpu | rocm | cuda
    date: str
    hardware: str
    what: str


@dataclass(frozen=True)
class ReleaseWheel:
    """The megatron-core wheel whose Python files are the pinned tree's bytes: CI's series tests read
    upstream code from it (downloaded once, never installed), having no Megatron-LM mirror."""

    requirement: str  # megatron-core==X.Y.Z
    python: str  # a Python version pip can fetch that wheel for (any one: the .py files are the same)

    @property
    def version(self) -> str:
        return self.requirement.split("==", 1)[1]


# What a release's patched tree does that the series tests check (tests/series/test_<feature>.py runs
# for each release whose release.yaml lists the feature; docs/adding-a-release.md says what each needs).
FEATURES = {
    "triton-optional": "megatron.core imports without triton (the pin does not); a triton-only option is refused naming its flag",
    "te-fallback": "without Transformer Engine the local implementation is taken in one line; asking for TE fails naming the flag",
    "fusion-fallback": "each fusion that needs apex, TE or a CUDA kernel is turned off in one line naming the flag that silences it",
    "fallback-warnings": "each fallback warning is one line, once per process",
    "help-fixed": "pretrain_gpt.py --help formats every argument's help",
    "vision-local": "CLIP and LLaVA build and train on the CPU with the local spec",
    "model-parallel": "tensor (with sequence) and pipeline parallelism off CUDA: the torch norms' gradients are reduced",
    "distopt-resume": "the distributed optimizer's torch Adam step is saved and resumed exactly",
    "sdpa-causal": "attention runs torch SDPA, causal by flag with no mask tensor and grouped heads as they are",
    "fused-adamw": "the optimizer is torch AdamW with fused=True",
    "torch-fusions": "bias-SwiGLU, RoPE, cross-entropy and RMSNorm fusions in torch forms leave the loss unchanged",
    "cpu-training": "pretrain_gpt.py trains on CPU over gloo (torch_dist save and exact resume); no GPU and nccl: one clear error",
    "moe-ep": "MoE with expert parallelism over the alltoall dispatcher on CPU",
    "grouped-gemm": "--moe-grouped-gemm without TE runs the experts as torch grouped GEMMs, exact against SequentialMLP, TE's checkpoint layout",
    "mla": "multi-latent attention (YaRN RoPE, query latent or none) on the local implementation",
    "mtp": "multi-token prediction's loss on CPU",
    "context-parallel": "context parallelism without Transformer Engine (p2p and all_gather rings)",
    "data-prepare": "rocmpatch data prepare writes what the tree's pretrain_gpt.py trains on",
    "fp8": "--fp8-format with --fp8-recipe tensorwise without TE runs the linear layers' GEMMs in FP8 on torch._scaled_mm; what cannot run is refused in one line",
    "te-spec-torch": "without Transformer Engine the TE layer spec builds torch modules with TE's names, equal to the local spec",
    "te-impl-torch": "without Transformer Engine an explicit --transformer-impl transformer_engine trains with TE's spec from torch modules (TE's checkpoint keys) in one line; TE's kernels are refused in one line",
    "selective-recompute": "without TE, --recompute-modules layernorm (CheckpointWithoutOutput) trains with the losses of the run without recompute",
    "legacy-model": "the legacy megatron/model GPT trains on CPU, saves and resumes",
}


@dataclass(frozen=True)
class InstallStep:
    """One command of docs/install.md's dependency block for this release's tree."""

    command: str
    why: str


@dataclass(frozen=True)
class UpstreamTests:
    """How upstream's own tests/unit_tests run on CPU against this release (tests/upstream_units/)."""

    baseline: tuple[str, ...]  # the patches (by name) without which upstream's tests do not even import
    subset: tuple[str, ...]  # paths under the tree that the full-tree test runs (minutes, not hours)
    note: str  # what the baseline means for this release


@dataclass(frozen=True)
class ReleaseInfo:
    """release.yaml: everything rocmpatch knows about a release beyond its patches."""

    path: Path  # release.yaml (which may not exist: then every field is empty)
    node: y.Node | None = field(default=None, compare=False, repr=False)  # the document, for errors naming a key's line
    default: bool = False  # the release a command takes when none is asked for or detected
    validated: tuple[Validation, ...] = ()
    wheel: ReleaseWheel | None = None
    no_wheel: str = ""  # `wheel: {none: REASON}`: why no megatron-core wheel holds this tree's bytes
    features: tuple[str, ...] | None = None  # FEATURES names; None: release.yaml has no features: key
    install: tuple[InstallStep, ...] = ()
    upstream_tests: UpstreamTests | None = None
    smoke: y.Node | None = None  # the smoke profile, read by rocmpatch.smoke.profile.profile_of


@dataclass(frozen=True)
class OverlayLock:
    """An overlay's lock (DIR/overlay.lock): which release's patched tree its patches apply to, the
    sha256 of each patch file, and the tree after the release's series plus the overlay."""

    release: str
    release_tree: str  # the release's patched_tree when this lock was written
    patches: tuple[LockedPatch, ...]
    patched_tree: str

    def to_yaml(self) -> str:
        data = {
            "version": OVERLAY_LOCK_VERSION,
            "release": self.release,
            "release_tree": self.release_tree,
            "patches": [{"name": p.name, "file": p.file, "sha256": p.sha256} for p in self.patches],
            "patched_tree": self.patched_tree,
        }
        return OVERLAY_LOCK_HEADER + y.dump(data)


_REGENERATE_OVERLAY = "regenerate it with 'rocmpatch lock --overlay DIR'"
_OVERLAY_LOCK = y.Mapping({
    "version": y.Raw(f"the overlay lock format version ({OVERLAY_LOCK_VERSION})"),
    "release": RELEASE_NAME,
    "release_tree": y.String("a full 40-hex tree id (the release's patched tree)", pattern=_HEX40, hint=_REGENERATE_OVERLAY),
    "patches": _LOCKED_PATCHES,
    "patched_tree": y.String("a full 40-hex tree id (after the release's series and the overlay)", pattern=_HEX40,
                             hint=_REGENERATE_OVERLAY),
})


def load_overlay_lock(path: Path) -> OverlayLock:
    root = _OVERLAY_LOCK.check(y.read_document(path))
    _version(root, OVERLAY_LOCK_VERSION, _REGENERATE_OVERLAY)
    lock = _OVERLAY_LOCK.read(root)
    return OverlayLock(lock["release"], lock["release_tree"], _patches(lock["patches"]), lock["patched_tree"])


_VALIDATION = y.Mapping({
    "platform": y.Enum(PLATFORMS),
    "date": y.String("YYYY-MM-DD", strip=True),
    "hardware": y.String("the machine: CPU model or GPU and count", strip=True),
    "what": y.String("what ran and what it showed", strip=True),
})
_PATCH_NAMES = y.Strings("patch name", pattern=_NAME, non_empty=True, unique=True)
_RELEASE_INFO = y.Mapping({
    "default": y.Optional(y.Bool("whether a command takes this release when none is asked for or detected "
                                 "(exactly one release says true)"), False),
    "wheel": y.Optional(y.Mapping({
        "requirement": y.Optional(y.String("megatron-core==VERSION, the wheel whose .py files are the pinned tree's",
                                           pattern=re.compile(r"megatron-core==[0-9][0-9A-Za-z.+-]*"), what="requirement")),
        "python": y.Optional(y.String("a Python version pip can fetch that wheel for, such as '3.12'",
                                      pattern=re.compile(r"3\.[0-9]+"), what="Python version")),
        "none": y.Optional(y.Line("why no megatron-core wheel holds this tree's bytes")),
    })),
    "features": y.Optional(y.Strings("feature name", pattern=_NAME, unique=True)),
    "install": y.Optional(y.ListOf(y.Mapping({
        "command": y.Line("a pip install command run beside the tree, such as pip install -r Megatron-LM/requirements.txt",
                          pattern=re.compile(r"pip install \S.*"), what="install command"),
        "why": y.Line("what it installs and why"),
    }), "a list of {command, why}: docs/install.md's dependency block", non_empty=True), ()),
    "upstream-tests": y.Optional(y.Mapping({
        # Empty where the pristine pin's tests import as they are.
        "baseline": y.Strings("patch name", pattern=_NAME, unique=True),
        "subset": y.Strings("path under the tree", pattern=re.compile(r"tests/[A-Za-z0-9_./-]+"), non_empty=True, unique=True),
        "note": y.Line("what the baseline means for this release"),
    })),
    "validated": y.Optional(y.ListOf(_VALIDATION, "a list of {platform, date, hardware, what}"), []),
    "smoke": y.Optional(y.Raw("the smoke profile (rocmpatch/smoke/profile.py)")),
})


def load_release_info(directory: Path) -> ReleaseInfo:
    """patchsets/<release>/release.yaml; a release without one is the default nowhere, was validated
    nowhere and has no test wheel, install block, upstream test profile or smoke profile."""
    path = directory / RELEASE_FILE
    if not path.exists():
        return ReleaseInfo(path)
    info = y.load(path, _RELEASE_INFO)
    wheel, tests = info["wheel"], info["upstream-tests"]
    if wheel is not None:
        _check_wheel(wheel)
    if info["features"] is not None:
        _check_features(info.node.get("features"))
    return ReleaseInfo(
        path, info.node, default=info["default"], validated=tuple(Validation(**record) for record in info["validated"]),
        wheel=ReleaseWheel(wheel["requirement"], wheel["python"]) if wheel and wheel["requirement"] else None,
        no_wheel=(wheel or {}).get("none") or "", features=info["features"],
        install=tuple(InstallStep(step["command"], step["why"]) for step in info["install"]),
        upstream_tests=UpstreamTests(tests["baseline"], tests["subset"], tests["note"]) if tests else None,
        smoke=info["smoke"],
    )


def _check_wheel(wheel: y.Record) -> None:
    """`wheel:` is {requirement, python} or {none: REASON}, not a mix."""
    if wheel["none"] is not None:
        extra = [key for key in ("requirement", "python") if wheel[key] is not None]
        if extra:
            raise wheel.node.error(f"none: and {extra[0]}: together", hint="keep {requirement, python} or {none: REASON}",
                                   key=extra[0])
        return
    for key in ("requirement", "python"):
        if wheel[key] is None:
            raise wheel.node.error("missing; expected {requirement, python}, or {none: REASON} where no wheel holds "
                                   "this tree's bytes", hint=f"add {key}: to it", key=key)


def _check_features(node: y.Node) -> None:
    for item in node.value:
        if item.value not in FEATURES:
            raise item.error(f"unknown feature {item.value!r}; expected one of {', '.join(FEATURES)}",
                             hint="docs/adding-a-release.md lists the features and the tests each runs")


def is_release_name(value: str) -> bool:
    return bool(_RELEASE.fullmatch(value))


def is_full_commit_id(value: str) -> bool:
    return bool(_HEX40.fullmatch(value))
