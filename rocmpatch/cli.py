"""The command line: declares the commands and their shared options, nothing else.

Click, without a layer above it: a read-only command must answer in 0.3 s, and the CLI framework
is imported by every command (Typer since 0.2x builds a pydantic validator per option, ~0.15 s).
Each command's work is in rocmpatch/commands/<name>.py (imported on use, so `--help` stays fast);
it returns an ExitCode, and error_handler turns errors into one line and a documented code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import click

from rocmpatch.errors import ExitCode

PATH = click.Path(path_type=Path)


# --- usage errors: one line, with what to try ---------------------------------------------------
class OneLineUsageError(click.UsageError):
    """Click's usage error as one line in rocmpatch's form (Click prints usage, a hint and the error
    on three lines): the command, the problem and what to try; exit 2 as before."""

    def show(self, file=None) -> None:
        ctx = self.ctx
        path = ctx.command_path if ctx is not None else "rocmpatch"
        where = path.removeprefix("rocmpatch").strip()
        lists = "commands" if ctx is not None and isinstance(ctx.command, click.Group) else "options"
        tip = f"'{path} --help' lists the {lists}"
        if ctx is not None and self.format_message().startswith(("No such option", "Got unexpected extra")) and any(
                getattr(p, "nargs", 1) == -1 and p.type is click.UNPROCESSED for p in ctx.command.params):
            tip = f"Megatron's own flags go after `--`; {tip}"
        message = self.format_message().rstrip(".")
        click.echo(f"rocmpatch: error: {where + ': ' if where else ''}{message} ({tip})", file=file, err=file is None)


class _OneLineUsage:
    def make_context(self, info_name, args, parent=None, **extra):
        try:
            _interruption_point("command-line")
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as error:
            raise _one_line(error) from None
        except KeyboardInterrupt:  # Click would print `Aborted!` and exit 1
            _interrupted()

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:  # before the command's own handling (rocmpatch.error_handler) began
            _interrupted()


def _interruption_point(name: str) -> None:
    from rocmpatch.processes import interruption_point

    interruption_point(name)


def _interrupted() -> None:
    from rocmpatch.interrupts import interrupted

    interrupted()


def _one_line(error: click.UsageError) -> click.UsageError:
    # Click (8.2 and later) raises a group's help, asked for by no arguments, as a usage error: it stays help.
    if isinstance(error, (OneLineUsageError, getattr(click.exceptions, "NoArgsIsHelpError", OneLineUsageError))):
        return error
    converted = OneLineUsageError(error.format_message(), error.ctx)
    converted.exit_code = error.exit_code
    return converted


class Command(_OneLineUsage, click.Command):
    pass


class Group(_OneLineUsage, click.Group):
    command_class = Command
    group_class = type  # subgroups are Groups too

    def resolve_command(self, ctx, args):
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as error:
            raise _one_line(error) from None


# --- shared options, declared once ------------------------------------------------------------
def target_option(command: Callable | None = None, *, required: bool = True, help: str = "The Megatron-LM checkout.") -> Callable:
    def decorate(command: Callable) -> Callable:
        # A string here: an empty --target would become Path(".") (the current directory) in the conversion.
        return click.option("--target", "-t", "target", type=click.Path(), required=required, help=help)(command)
    return decorate(command) if command is not None else decorate


def upstream_url_option(command: Callable) -> Callable:
    return click.option("--upstream-url", envvar="ROCMPATCH_UPSTREAM_URL", show_envvar=True, metavar="URL",
                        help="Fetch the pinned commit from here instead of the lock's url (a mirror, a path, file:// or https://); the commit must still match.")(command)


def series_dir_option(command: Callable) -> Callable:
    return click.option("--series-dir", envvar="ROCMPATCH_SERIES_DIR", show_envvar=True, metavar="DIR", type=PATH,
                        help="patchsets/ (one folder per release) or one release's folder in it; the lock is upstream.lock beside patchsets/. Default: the checkout's or the bundled patchsets/.")(command)


def release_option(command: Callable) -> Callable:
    return click.option("--release", "-r", envvar="ROCMPATCH_RELEASE", show_envvar=True, metavar="NAME",
                        help="The release (a folder in patchsets/; `rocmpatch releases` lists them). Default: an existing target's own release, else the default release (default: true in its release.yaml).")(command)


def overlay_option(command: Callable) -> Callable:
    return click.option("--overlay", envvar="ROCMPATCH_OVERLAY", show_envvar=True, metavar="DIR", type=PATH,
                        help="A framework's own series on top of the release's: DIR holds series.yaml, patch files and overlay.lock (docs/frameworks.md).")(command)


def json_option(command: Callable) -> Callable:
    return click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout (format in docs/commands.md).")(command)


def nodes_option(command: Callable) -> Callable:
    return click.option("--nodes", type=click.IntRange(min=1), default=1, show_default=True, help="Number of nodes.")(command)


def _warn_gpus_count(_ctx: click.Context, _param: click.Parameter, value: int | None) -> int | None:
    if value is not None:
        from rocmpatch.console import note

        note(f"rocmpatch: warning: --gpus {value} is deprecated here: write --gpus-per-node {value} (a count; smoke's --gpus takes GPU indices)")
    return value


def gpus_per_node_option(default: str) -> Callable[[Callable], Callable]:
    """--gpus-per-node N, a count (smoke's --gpus takes indices), with the old --gpus N kept hidden, warning."""
    def decorate(command: Callable) -> Callable:
        command = click.option("--gpus", "deprecated_gpus", type=click.IntRange(min=1), hidden=True, callback=_warn_gpus_count,
                               expose_value=True)(command)
        return click.option("--gpus-per-node", type=click.IntRange(min=1), metavar="N",
                            help=f"Processes (GPUs) per node [{default}].")(command)
    return decorate


def _run(command: Callable[..., ExitCode], **kwargs) -> None:
    from rocmpatch.error_handler import handled
    from rocmpatch.interrupts import answered

    _interruption_point("command-started")
    with handled():
        if isinstance(kwargs.get("target"), str):  # every --target command takes and refuses the same paths
            from rocmpatch.target import usable_target

            kwargs["target"] = usable_target(kwargs["target"])
        code = answered(command(**kwargs))  # from here a Ctrl-C changes nothing
    raise click.exceptions.Exit(int(code))


def _version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        from rocmpatch.commands.version import run

        _run(run)


@click.group(name="rocmpatch", cls=Group, no_args_is_help=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, is_eager=True, expose_value=False, callback=_version, help="Print the version and the pinned upstream, then exit.")
def app() -> None:
    """Apply, verify and maintain the ROCm patch series for NVIDIA Megatron-LM."""


@app.command()
@upstream_url_option
@series_dir_option
@release_option
def fetch(upstream_url, series_dir, release) -> None:
    """Bring the pinned upstream commit into the local cache (a shallow fetch of exactly that commit)."""
    from rocmpatch.commands.fetch import run

    _run(run, upstream_url=upstream_url, series_dir=series_dir, release=release)


@app.command()
@target_option
@upstream_url_option
@series_dir_option
@release_option
@overlay_option
@click.option("--dry-run", is_flag=True, help="Check that the series applies and say what would change; change nothing.")
def apply(target, upstream_url, series_dir, release, overlay, dry_run) -> None:
    """Make TARGET the pinned commit plus the whole series: create it, or apply what is missing."""
    from rocmpatch.commands.apply import run

    _run(run, target=target, upstream_url=upstream_url, series_dir=series_dir, release=release, overlay=overlay, dry_run=dry_run)


@app.command()
@target_option(required=False, help="The Megatron-LM checkout (or --installed).")
@click.option("--installed", is_flag=True, help="Instead of a checkout: the megatron package that --python imports (core, training; __pycache__ and compiled helpers aside).")
@click.option("--python", "python", metavar="PY", help="With --installed: the interpreter to ask [default: the one running rocmpatch].")
@series_dir_option
@release_option
@overlay_option
@json_option
@upstream_url_option
@click.option("--strict", is_flag=True, help="Also fail on files upstream's .gitignore excludes that Python could import (*.py, *.pyc, *.so, .pth, symlinks), such as __pycache__; with --installed, on bytecode Python would load that is not its module's source compiled.")
def verify(target, installed, python, series_dir, release, overlay, as_json, upstream_url, strict) -> None:
    """Exit 0 only if TARGET (or the installed megatron package) is byte for byte the pin plus the series; else list what differs."""
    from rocmpatch.commands.verify import run

    _run(run, target=target, installed=installed, python=python, series_dir=series_dir, release=release, overlay=overlay,
         as_json=as_json, upstream_url=upstream_url, strict=strict)


@app.group(invoke_without_command=True)
@series_dir_option
@json_option
@click.pass_context
def cache(ctx, series_dir, as_json) -> None:
    """Show what the cache holds (each entry, its size, which release needs it); 'cache prune' removes what none needs."""
    if ctx.invoked_subcommand is None:
        from rocmpatch.commands.cache import show

        _run(show, series_dir=series_dir, as_json=as_json)


@cache.command(name="prune")
@click.option("--history", is_flag=True, help="Also the full upstream histories that drift and rebase fetched.")
@click.option("--all", "everything", is_flag=True, help="Everything: pins still needed too (fetched again when used).")
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
@series_dir_option
@json_option
def cache_prune(history, everything, dry_run, series_dir, as_json) -> None:
    """Remove pins no release here names, leftovers of killed fetches and old crash logs (entries in use are kept)."""
    from rocmpatch.commands.cache import prune

    _run(prune, series_dir=series_dir, everything=everything, history=history, dry_run=dry_run, as_json=as_json)


@app.command()
@target_option
@click.option("--out", "out_dir", type=click.Path(path_type=Path), help="Directory for the wheel, outside the checkout [default: ./dist].")
@click.option("--python", "python", metavar="PY", help="The interpreter to build with: the framework's [default: the one running rocmpatch].")
@click.option("--no-build-isolation", "no_build_isolation", is_flag=True, help="Build with PY's own setuptools, pybind11 and packaging (no package index needed).")
@click.option("--label", metavar="TEXT", help="The local version label [default: rocmpatch.<patched tree id>].")
@series_dir_option
@release_option
@overlay_option
@upstream_url_option
@json_option
def package(target, out_dir, python, no_build_isolation, label, series_dir, release, overlay, upstream_url, as_json) -> None:
    """Build the verified patched checkout as a wheel (X.Y.Z+rocmpatch.<tree>) that a pinned megatron-core==X.Y.Z accepts."""
    from rocmpatch.commands.package import run

    _run(run, target=target, out_dir=out_dir, python=python, build_isolation=not no_build_isolation, label=label, series_dir=series_dir,
         release=release, overlay=overlay, upstream_url=upstream_url, as_json=as_json)


@app.command()
@target_option
@series_dir_option
@release_option
@overlay_option
@json_option
def status(target, series_dir, release, overlay, as_json) -> None:
    """Show each patch of the series as applied, not applied or conflicting, with its files."""
    from rocmpatch.commands.status import run

    _run(run, target=target, series_dir=series_dir, release=release, overlay=overlay, as_json=as_json)


@app.command()
@target_option
@series_dir_option
@release_option
@overlay_option
@click.option("--force", is_flag=True, help="Save uncommitted edits as a patch file (path printed), then unapply.")
def unapply(target, series_dir, release, overlay, force) -> None:
    """Take TARGET back to the pristine pinned commit."""
    from rocmpatch.commands.unapply import run

    _run(run, target=target, series_dir=series_dir, release=release, overlay=overlay, force=force)


@app.command()
@upstream_url_option
@series_dir_option
@release_option
@overlay_option
@json_option
def check(upstream_url, series_dir, release, overlay, as_json) -> None:
    """Apply each release's series (or --release's, or the overlay's release and the overlay) to its pinned commit in memory and report each patch."""
    from rocmpatch.commands.check import run

    _run(run, upstream_url=upstream_url, series_dir=series_dir, release=release, overlay=overlay, as_json=as_json)


@app.command()
@click.option("--check", is_flag=True, help="Change nothing; exit 1 when upstream.lock is stale.")
@upstream_url_option
@series_dir_option
@release_option
@click.option("--url", help="Re-pin: the upstream URL to record.")
@click.option("--ref", help="Re-pin: the tag or branch name to record.")
@click.option("--commit", help="Re-pin: the full 40-hex commit id.")
@overlay_option
def lock(check, upstream_url, series_dir, release, url, ref, commit, overlay) -> None:
    """Regenerate upstream.lock (every release, or --release's entry) from series.yaml, the patch files and the pinned upstream; with --overlay, only DIR/overlay.lock."""
    from rocmpatch.commands.lock import run

    _run(run, check=check, upstream_url=upstream_url, series_dir=series_dir, release=release, url=url, ref=ref, commit=commit, overlay=overlay)


@app.command()
@upstream_url_option
@series_dir_option
@release_option
@overlay_option
@click.option("--ref", help="Walk from the pin to this upstream branch, tag or commit [default: main].")
@click.option("--range", "span", metavar="A..B", help="Walk from A to B instead of from the pin to --ref.")
@json_option
@click.option("--markdown", type=PATH, metavar="FILE", help="Also write the report as a Markdown table to FILE.")
def drift(upstream_url, series_dir, release, overlay, ref, span, as_json, markdown) -> None:
    """Name, per patch, the first upstream commit after the pin that breaks it (exit 1 if any breaks at the tip)."""
    from rocmpatch.commands.drift import run

    _run(run, upstream_url=upstream_url, series_dir=series_dir, release=release, overlay=overlay, ref=ref, span=span, as_json=as_json, markdown=markdown)


@app.command()
@click.option("--onto", metavar="REF", help="The upstream branch, tag or commit to carry the series to.")
@click.option("--continue", "resume", is_flag=True, help="Go on after resolving a conflict in the rebase worktree.")
@click.option("--abort", is_flag=True, help="Give up the stopped rebase; nothing of the project changes.")
@click.option("--into", metavar="NEW_RELEASE", help="Write the carried series as a new release (new folder in patchsets/, new lock entry) instead of rewriting --release's.")
@click.option("--report", is_flag=True, help="With --onto: try every patch onto REF without stopping, print exact / 3-way / conflict per patch and the totals; write nothing.")
@json_option
@upstream_url_option
@series_dir_option
@release_option
@overlay_option
def rebase(onto, resume, abort, into, report, as_json, upstream_url, series_dir, release, overlay) -> None:
    """Carry a release's series (and an overlay's) to a newer upstream with a 3-way merge per patch; rewrite it, or start a new release with --into; --report sizes the port first."""
    from rocmpatch.commands.rebase import run

    _run(run, onto=onto, resume=resume, abort=abort, into=into, report=report, as_json=as_json, upstream_url=upstream_url,
         series_dir=series_dir, release=release, overlay=overlay)


@app.command()
@target_option
@click.option("--gpus", metavar="0,1", help="GPU indices to use (as torch sees them here); default: every visible GPU.")
@click.option("--device", type=click.Choice(["auto", "rocm", "cuda", "cpu"]), default="auto", show_default=True, help="Where to run; auto picks the GPUs of this torch build, else the CPU.")
@click.option("--train-iters", type=click.IntRange(min=2), help="Iterations of each tiny GPT training run; default 20 on GPUs, 10 on CPU.")
@json_option
@series_dir_option
@release_option
def smoke(target, gpus, device, train_iters, as_json, series_dir, release) -> None:
    """Check that the patched TARGET imports, computes, communicates and trains on this machine's GPUs (or CPU)."""
    from rocmpatch.commands.smoke import run

    _run(run, target=target, gpus=gpus, device=device, train_iters=train_iters, as_json=as_json, series_dir=series_dir, release=release)


@app.command()
@series_dir_option
@json_option
def releases(series_dir, as_json) -> None:
    """List the releases: upstream ref, commit, date, number of patches, the default, and where each was validated."""
    from rocmpatch.commands.releases import run

    _run(run, series_dir=series_dir, as_json=as_json)


@app.command()
@json_option
@click.option("--export", is_flag=True, help="Print the recommendations as `export NAME=value` shell lines.")
def env(as_json, export) -> None:
    """Recommend environment variables for Megatron-LM training on this node's GPUs and network."""
    from rocmpatch.commands.env import run

    _run(run, as_json=as_json, export=export)


@app.command()
@gpus_per_node_option("every GPU torch sees here; without any: 2 CPU processes, or 8 with --nodes/--slurm")
@nodes_option
@click.option("--slurm", is_flag=True, help="Print the `srun torchrun` line for a Slurm allocation.")
@click.option("--run", "launch", is_flag=True, help="Start it on this node now (torchrun --standalone) instead of printing the line.")
@click.option("--device", type=click.Choice(["auto", "gpu", "cpu"]), default="auto", show_default=True, help="auto: the GPUs of this torch build, else the CPU with gloo.")
@click.option("--min-of-median", type=float, help="Slow: under this share of the median [0.5].")
@click.option("--min-of-peak", type=float, help="Slow: GEMM under this share of the GPU's bf16 peak [0.25].")
@click.option("--min-busbw", type=float, metavar="GBPS", help="Slow: all-reduce bus bandwidth under this (GB/s).")
@click.option("--json", "json_file", type=PATH, metavar="FILE", help="Rank 0 also writes the report as JSON to FILE (format in docs/commands.md).")
def preflight(gpus_per_node, deprecated_gpus, nodes, slurm, launch, device, min_of_median, min_of_peak, min_busbw, json_file) -> None:
    """Print how to launch the GEMM and all-reduce preflight for N nodes (or --run it here); exit 1 if a rank or node is slow."""
    from rocmpatch.commands.preflight import run

    _run(run, gpus=gpus_per_node or deprecated_gpus, nodes=nodes, slurm=slurm, launch=launch, device=device,
         min_of_median=min_of_median, min_of_peak=min_of_peak, min_busbw=min_busbw, json_file=json_file)


@app.group(no_args_is_help=True)
def recipe() -> None:
    """Training recipes for the newest release: list, show, launch."""


RECIPE_NAME = click.argument("name", metavar="NAME")  # a recipe name from `rocmpatch recipe list`, or a recipe file


@recipe.command("list")
@json_option
def recipe_list(as_json) -> None:
    """List the recipes and their layouts."""
    from rocmpatch.commands.recipe import run_list

    _run(run_list, as_json=as_json)


@recipe.command("show")
@RECIPE_NAME
@json_option
def recipe_show(name, as_json) -> None:
    """Show a recipe's arguments, layouts and memory estimate per GPU (NAME: from `rocmpatch recipe list`, or a recipe file)."""
    from rocmpatch.commands.recipe import run_show

    _run(run_show, name=name, as_json=as_json)


@recipe.command("launch")
@RECIPE_NAME
@target_option
@gpus_per_node_option("the GPUs torch sees here, else 8; 2 processes on the CPU")
@nodes_option
@click.option("--slurm", is_flag=True, help="Start with `srun torchrun` inside a Slurm allocation.")
@click.option("--dry-run", is_flag=True, help="Print the command line; run nothing.")
@click.option("--data-path", metavar="PREFIX", help="Preprocessed data: the prefix of the .bin/.idx pair tools/preprocess_data.py wrote.")
@click.option("--tokenizer", metavar="MODEL", help="The tokenizer the data was preprocessed with: a Hugging Face name or a local folder (--tokenizer-model).")
@click.option("--mock-data", is_flag=True, help="Synthetic data and a NullTokenizer: no files needed.")
@click.option("--save", metavar="DIR", help="Save checkpoints to DIR and resume from it (--save DIR --load DIR, --save-interval: the recipe's --eval-interval); the learning-rate schedule follows this run's flags, so a resumed run may use a larger --train-iters.")
@click.option("--device", type=click.Choice(["auto", "gpu", "cpu"]), default="auto", show_default=True,
              help="auto: the GPUs torch sees here, else the CPU (as smoke and preflight). cpu: the recipe's architecture at a tiny "
                   "size (2 layers, hidden 64), over gloo on this machine's CPU, for a try.")
@click.option("--log", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="Append every line the run prints to FILE too; the console shows Megatron's list of arguments as one line.")
@click.argument("megatron_args_after", nargs=-1, type=click.UNPROCESSED, metavar="[-- MEGATRON_ARGS...]")
def recipe_launch(name, target, gpus_per_node, deprecated_gpus, nodes, slurm, dry_run, data_path, tokenizer, mock_data, save, device,
                  log, megatron_args_after) -> None:
    """Start (or with --dry-run print) torchrun TARGET/pretrain_gpt.py with a recipe's layout for --gpus-per-node x --nodes.

    NAME: a recipe from `rocmpatch recipe list`, or the path of a recipe .yaml file (a copy you edited).
    Megatron flags after `--` replace the recipe's flag of the same name or are added (-- --train-iters 500)."""
    from rocmpatch.commands.recipe import run_launch

    _run(run_launch, name=name, target=target, gpus_per_node=gpus_per_node or deprecated_gpus, nodes=nodes, slurm=slurm,
         dry_run=dry_run, device=device, data_path=data_path, tokenizer=tokenizer, mock_data=mock_data, save=save,
         megatron_args_after=megatron_args_after, log=log)


@app.group(no_args_is_help=True)
def data() -> None:
    """Training data: turn documents into the .bin/.idx pair Megatron reads."""


@data.command("prepare")
@click.argument("inputs", nargs=-1, type=PATH, metavar="[INPUT]...")
@target_option(help="The Megatron-LM checkout whose tools/preprocess_data.py does the tokenizing.")
@click.option("--output", "-o", type=PATH, required=True, metavar="PREFIX",
              help="Writes PREFIX_text_document.bin and .idx (and PREFIX_tokenizer/ with --train-tokenizer).")
@click.option("--tokenizer", metavar="DIR|NAME", help="A local Hugging Face tokenizer folder, or a hub name already in the local Hugging Face cache (never downloaded).")
@click.option("--train-tokenizer", is_flag=True, help="Train a byte-level BPE on the corpus (offline) and save it beside the data.")
@click.option("--vocab-size", type=click.IntRange(min=1), metavar="N", help="With --train-tokenizer: at most N tokens [4096].")
@click.option("--text-key", default="text", show_default=True, metavar="KEY", help="The JSON key (parquet column) holding the text.")
@click.option("--hf-dataset", metavar="NAME", help="Also read a Hugging Face dataset (needs the `datasets` library and the network).")
@click.option("--hf-config", metavar="NAME", help="The dataset's configuration (subset).")
@click.option("--hf-split", default="train", show_default=True, metavar="SPLIT", help="The dataset's split.")
@click.option("--workers", type=click.IntRange(min=1), metavar="N", help="preprocess_data.py's worker processes [up to 8, one per 1000 documents].")
@click.option("--force", is_flag=True, help="Replace existing outputs.")
def data_prepare(inputs, target, output, tokenizer, train_tokenizer, vocab_size, text_key, hf_dataset, hf_config, hf_split, workers, force) -> None:
    """Tokenize documents into Megatron's .bin/.idx with TARGET's tools/preprocess_data.py.

    INPUT: .txt or .md files (one document each), .jsonl/.json (one JSON object per line; .gz too),
    .parquet, or directories of them (recursively, in sorted order)."""
    from rocmpatch.commands.data import run_prepare

    _run(run_prepare, inputs=inputs, target=target, output=output, tokenizer=tokenizer, train_tokenizer=train_tokenizer,
         vocab_size=vocab_size, text_key=text_key, hf_dataset=hf_dataset, hf_config=hf_config, hf_split=hf_split,
         workers=workers, force=force)


@app.command()
@click.option("--write", type=PATH, metavar="DIR", help="Write pretrain_gpt_rocm.sh into DIR (refused if it exists there).")
def example(write) -> None:
    """Print where the launch script pretrain_gpt_rocm.sh is, or write it into DIR (it is not inside the patched tree)."""
    from rocmpatch.commands.example import run

    _run(run, write=write)


def main() -> None:
    from rocmpatch.console import tolerate_any_encoding

    tolerate_any_encoding()
    app(prog_name="rocmpatch")
