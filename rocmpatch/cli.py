"""The command line: declares the commands and their shared options, nothing else.

Each command's work is in rocmpatch/commands/<name>.py (imported on use, so `--help` stays fast);
it returns an ExitCode, and error_handler turns errors into one line and a documented code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Callable, Literal, Optional

import typer

from rocmpatch.errors import ExitCode

app = typer.Typer(
    name="rocmpatch",
    help="Apply, verify and maintain the ROCm patch series for NVIDIA Megatron-LM.",
    no_args_is_help=True,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

# --- shared options, declared once ------------------------------------------------------------
TargetOption = Annotated[Path, typer.Option("--target", "-t", help="The Megatron-LM checkout.", show_default=False)]
UpstreamUrlOption = Annotated[
    Optional[str],
    typer.Option("--upstream-url", envvar="ROCMPATCH_UPSTREAM_URL", show_envvar=True, metavar="URL",
                 help="Fetch the pinned commit from here instead of the lock's url (a mirror, a path, file:// or https://); the commit must still match."),
]
SeriesDirOption = Annotated[
    Optional[Path],
    typer.Option("--series-dir", envvar="ROCMPATCH_SERIES_DIR", show_envvar=True, metavar="DIR",
                 help="patchsets/ (one folder per release) or one release's folder in it; the lock is upstream.lock beside patchsets/. Default: the checkout's or the bundled patchsets/."),
]
ReleaseOption = Annotated[
    Optional[str],
    typer.Option("--release", "-r", envvar="ROCMPATCH_RELEASE", show_envvar=True, metavar="NAME",
                 help="The release (a folder in patchsets/, e.g. core_v0.19.0). Default: an existing target's own release, else the newest in upstream.lock."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout (format in docs/commands.md).")]


def _run(command: Callable[..., ExitCode], **kwargs) -> None:
    from rocmpatch.error_handler import handled

    with handled():
        code = command(**kwargs)
    raise typer.Exit(int(code))


def _version(value: bool) -> None:
    if value:
        from rocmpatch.commands.version import run

        _run(run)


@app.callback()
def _main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and the pinned upstream, then exit.")] = False,
) -> None:
    pass


@app.command()
def fetch(upstream_url: UpstreamUrlOption = None, series_dir: SeriesDirOption = None, release: ReleaseOption = None) -> None:
    """Bring the pinned upstream commit into the local cache (a shallow fetch of exactly that commit)."""
    from rocmpatch.commands.fetch import run

    _run(run, upstream_url=upstream_url, series_dir=series_dir, release=release)


@app.command()
def apply(
    target: TargetOption,
    upstream_url: UpstreamUrlOption = None,
    series_dir: SeriesDirOption = None,
    release: ReleaseOption = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Check that the series applies and say what would change; change nothing.")] = False,
) -> None:
    """Make TARGET the pinned commit plus the whole series: create it, or apply what is missing."""
    from rocmpatch.commands.apply import run

    _run(run, target=target, upstream_url=upstream_url, series_dir=series_dir, release=release, dry_run=dry_run)


@app.command()
def verify(target: TargetOption, series_dir: SeriesDirOption = None, release: ReleaseOption = None, json: JsonOption = False, upstream_url: UpstreamUrlOption = None) -> None:
    """Exit 0 only if TARGET is byte for byte the pin plus the series; else list what differs."""
    from rocmpatch.commands.verify import run

    _run(run, target=target, series_dir=series_dir, release=release, as_json=json, upstream_url=upstream_url)


@app.command()
def status(target: TargetOption, series_dir: SeriesDirOption = None, release: ReleaseOption = None, json: JsonOption = False) -> None:
    """Show each patch of the series as applied, not applied or conflicting, with its files."""
    from rocmpatch.commands.status import run

    _run(run, target=target, series_dir=series_dir, release=release, as_json=json)


@app.command()
def unapply(
    target: TargetOption,
    series_dir: SeriesDirOption = None,
    release: ReleaseOption = None,
    force: Annotated[bool, typer.Option("--force", help="Save uncommitted edits as a patch file (path printed), then unapply.")] = False,
) -> None:
    """Take TARGET back to the pristine pinned commit."""
    from rocmpatch.commands.unapply import run

    _run(run, target=target, series_dir=series_dir, release=release, force=force)


@app.command()
def check(upstream_url: UpstreamUrlOption = None, series_dir: SeriesDirOption = None, release: ReleaseOption = None, json: JsonOption = False) -> None:
    """Apply each release's series (or --release's) to its pinned commit in memory and report each patch."""
    from rocmpatch.commands.check import run

    _run(run, upstream_url=upstream_url, series_dir=series_dir, release=release, as_json=json)


@app.command()
def lock(
    check: Annotated[bool, typer.Option("--check", help="Change nothing; exit 1 when upstream.lock is stale.")] = False,
    upstream_url: UpstreamUrlOption = None,
    series_dir: SeriesDirOption = None,
    release: ReleaseOption = None,
    url: Annotated[Optional[str], typer.Option("--url", help="Re-pin: the upstream URL to record.")] = None,
    ref: Annotated[Optional[str], typer.Option("--ref", help="Re-pin: the tag or branch name to record.")] = None,
    commit: Annotated[Optional[str], typer.Option("--commit", help="Re-pin: the full 40-hex commit id.")] = None,
) -> None:
    """Regenerate upstream.lock (every release, or --release's entry) from series.yaml, the patch files and the pinned upstream."""
    from rocmpatch.commands.lock import run

    _run(run, check=check, upstream_url=upstream_url, series_dir=series_dir, release=release, url=url, ref=ref, commit=commit)


@app.command()
def drift(
    upstream_url: UpstreamUrlOption = None,
    series_dir: SeriesDirOption = None,
    release: ReleaseOption = None,
    ref: Annotated[Optional[str], typer.Option("--ref", help="Walk from the pin to this upstream branch, tag or commit [default: main].")] = None,
    span: Annotated[Optional[str], typer.Option("--range", metavar="A..B", help="Walk from A to B instead of from the pin to --ref.")] = None,
    json: JsonOption = False,
    markdown: Annotated[Optional[Path], typer.Option("--markdown", metavar="FILE", help="Also write the report as a Markdown table to FILE.")] = None,
) -> None:
    """Name, per patch, the first upstream commit after the pin that breaks it (exit 1 if any breaks at the tip)."""
    from rocmpatch.commands.drift import run

    _run(run, upstream_url=upstream_url, series_dir=series_dir, release=release, ref=ref, span=span, as_json=json, markdown=markdown)


@app.command()
def rebase(
    onto: Annotated[Optional[str], typer.Option("--onto", metavar="REF", help="The upstream branch, tag or commit to carry the series to.")] = None,
    resume: Annotated[bool, typer.Option("--continue", help="Go on after resolving a conflict in the rebase worktree.")] = False,
    abort: Annotated[bool, typer.Option("--abort", help="Give up the stopped rebase; nothing of the project changes.")] = False,
    into: Annotated[Optional[str], typer.Option("--into", metavar="NEW_RELEASE", help="Write the carried series as a new release (new folder in patchsets/, new lock entry) instead of rewriting --release's.")] = None,
    upstream_url: UpstreamUrlOption = None,
    series_dir: SeriesDirOption = None,
    release: ReleaseOption = None,
) -> None:
    """Carry a release's series to a newer upstream with a 3-way merge per patch; rewrite it, or start a new release with --into."""
    from rocmpatch.commands.rebase import run

    _run(run, onto=onto, resume=resume, abort=abort, into=into, upstream_url=upstream_url, series_dir=series_dir, release=release)


@app.command()
def smoke(
    target: TargetOption,
    gpus: Annotated[Optional[str], typer.Option("--gpus", metavar="0,1", help="GPU indices to use (as torch sees them here); default: every visible GPU.")] = None,
    device: Annotated[Literal["auto", "rocm", "cuda", "cpu"], typer.Option("--device", help="Where to run; auto picks the GPUs of this torch build, else the CPU.")] = "auto",
    train_iters: Annotated[Optional[int], typer.Option("--train-iters", min=2, help="Iterations of each tiny GPT training run; default 20 on GPUs, 10 on CPU.")] = None,
    json: JsonOption = False,
    series_dir: SeriesDirOption = None,
    release: ReleaseOption = None,
) -> None:
    """Check that the patched TARGET imports, computes, communicates and trains on this machine's GPUs (or CPU)."""
    from rocmpatch.commands.smoke import run

    _run(run, target=target, gpus=gpus, device=device, train_iters=train_iters, as_json=json, series_dir=series_dir, release=release)


@app.command()
def releases(series_dir: SeriesDirOption = None, json: JsonOption = False) -> None:
    """List the releases: upstream ref, commit, date, number of patches and where each was validated."""
    from rocmpatch.commands.releases import run

    _run(run, series_dir=series_dir, as_json=json)


@app.command()
def env(
    json: JsonOption = False,
    export: Annotated[bool, typer.Option("--export", help="Print the recommendations as `export NAME=value` shell lines.")] = False,
) -> None:
    """Recommend environment variables for Megatron-LM training on this node's GPUs and network."""
    from rocmpatch.commands.env import run

    _run(run, as_json=json, export=export)


@app.command()
def preflight(
    gpus: Annotated[Optional[int], typer.Option("--gpus", min=1, help="Processes (GPUs) per node [every visible GPU with --run, else 8].")] = None,
    nodes: Annotated[int, typer.Option("--nodes", min=1, help="Number of nodes.")] = 1,
    slurm: Annotated[bool, typer.Option("--slurm", help="Print the `srun torchrun` line for a Slurm allocation.")] = False,
    launch: Annotated[bool, typer.Option("--run", help="Start it on this node now (torchrun --standalone) instead of printing the line.")] = False,
    device: Annotated[Literal["auto", "gpu", "cpu"], typer.Option("--device", help="auto: the GPUs of this torch build, else the CPU with gloo.")] = "auto",
    min_of_median: Annotated[Optional[float], typer.Option("--min-of-median", help="Slow: under this share of the median [0.5].")] = None,
    min_of_peak: Annotated[Optional[float], typer.Option("--min-of-peak", help="Slow: GEMM under this share of the GPU's bf16 peak [0.25].")] = None,
    min_busbw: Annotated[Optional[float], typer.Option("--min-busbw", metavar="GBPS", help="Slow: all-reduce bus bandwidth under this (GB/s).")] = None,
) -> None:
    """Print how to launch the GEMM and all-reduce preflight for N nodes (or --run it here); exit 1 if a rank or node is slow."""
    from rocmpatch.commands.preflight import run

    _run(run, gpus=gpus, nodes=nodes, slurm=slurm, launch=launch, device=device,
         min_of_median=min_of_median, min_of_peak=min_of_peak, min_busbw=min_busbw)


recipe_app = typer.Typer(help="Training recipes for the newest release: list, show, launch.", no_args_is_help=True)
app.add_typer(recipe_app, name="recipe")


@recipe_app.command("list")
def recipe_list(json: JsonOption = False) -> None:
    """List the recipes and their layouts."""
    from rocmpatch.commands.recipe import run_list

    _run(run_list, as_json=json)


@recipe_app.command("show")
def recipe_show(name: Annotated[str, typer.Argument(help="A recipe name from `rocmpatch recipe list`.")], json: JsonOption = False) -> None:
    """Show a recipe's arguments, layouts and memory estimate per GPU."""
    from rocmpatch.commands.recipe import run_show

    _run(run_show, name=name, as_json=json)


@recipe_app.command("launch")
def recipe_launch(
    name: Annotated[str, typer.Argument(help="A recipe name from `rocmpatch recipe list`.")],
    target: TargetOption,
    gpus: Annotated[int, typer.Option("--gpus", min=1, help="GPUs per node.")] = 8,
    nodes: Annotated[int, typer.Option("--nodes", min=1, help="Number of nodes.")] = 1,
    slurm: Annotated[bool, typer.Option("--slurm", help="Start with `srun torchrun` inside a Slurm allocation.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the command line; run nothing.")] = False,
    data_path: Annotated[Optional[str], typer.Option("--data-path", metavar="PREFIX", help="Preprocessed data prefix [$DATA_PATH].")] = None,
    tokenizer: Annotated[Optional[str], typer.Option("--tokenizer", metavar="MODEL", help="Hugging Face tokenizer name or path [$TOKENIZER_MODEL].")] = None,
    mock_data: Annotated[bool, typer.Option("--mock-data", help="Synthetic data and a NullTokenizer: no files needed.")] = False,
) -> None:
    """Start (or with --dry-run print) torchrun TARGET/pretrain_gpt.py with a recipe's layout for --gpus x --nodes."""
    from rocmpatch.commands.recipe import run_launch

    _run(run_launch, name=name, target=target, gpus=gpus, nodes=nodes, slurm=slurm, dry_run=dry_run,
         data_path=data_path, tokenizer=tokenizer, mock_data=mock_data)


@app.command()
def example(
    write: Annotated[Optional[Path], typer.Option("--write", metavar="DIR", help="Write pretrain_gpt_rocm.sh into DIR (refused if it exists there).")] = None,
) -> None:
    """Print where the launch script pretrain_gpt_rocm.sh is, or write it into DIR (it is not inside the patched tree)."""
    from rocmpatch.commands.example import run

    _run(run, write=write)


def main() -> None:
    app(prog_name="rocmpatch")
