from __future__ import annotations

import subprocess
from pathlib import Path

from rich.table import Table

from rocmpatch.console import emit_json, note, out
from rocmpatch.errors import ExitCode, TargetRefused, UsageError
from rocmpatch.launchers import preamble, render, torchrun
from rocmpatch.recipes.catalog import Recipe, find, names, parse_argv, to_argv
from rocmpatch.recipes.memory import upstream_model

GB_PER_GIB = (1 << 30) / 1e9


def run_list(*, as_json: bool) -> ExitCode:
    recipes = [find(name) for name in names()]
    if as_json:
        emit_json([{"name": r.name, "release": r.release, "summary": r.summary,
                    "layouts": [l.name for l in r.layouts]} for r in recipes])
        return ExitCode.OK
    table = Table("recipe", "release", "layouts", "model")
    for r in recipes:
        table.add_row(r.name, r.release, ", ".join(l.name for l in r.layouts), r.summary)
    out.print(table)
    return ExitCode.OK


def run_show(*, name: str, as_json: bool) -> ExitCode:
    recipe = find(name)
    upstream = upstream_model(recipe.release)
    if as_json:
        emit_json({"name": recipe.name, "release": recipe.release, "summary": recipe.summary, "vocab_size": recipe.vocab_size,
                   "args": recipe.args, "layouts": [{"name": l.name, "nodes": l.nodes, "gpus_per_node": l.gpus_per_node,
                                                     "sized_for": l.sized_for, "gpu_memory_gb": l.gpu_memory_gb,
                                                     "tokens_per_second": l.tokens_per_second, "args": l.args,
                                                     "memory_estimate": recipe.estimate(l, upstream).to_json()} for l in recipe.layouts]})
        return ExitCode.OK
    out.print(f"{recipe.name} ({recipe.release}): {recipe.summary}", markup=False)
    out.print(f"file: {recipe.path}", markup=False)
    table = Table("layout", "GPUs", "params/GPU", "weights+grads", "optimizer", "activations", "total GiB", "tokens/s/GPU")
    for l in recipe.layouts:
        e = recipe.estimate(l, upstream)
        table.add_row(l.name, f"{l.nodes} x {l.gpus_per_node}", f"{e.params_per_gpu / 1e9:.2f} B",
                      f"{e.weights_and_grads_gib:.1f}", f"{e.optimizer_gib:.1f}", f"{e.activations_gib:.1f}", f"{e.total_gib:.1f}",
                      "not measured" if l.tokens_per_second is None else str(l.tokens_per_second))
    out.print(table)
    for l in recipe.layouts:
        out.print(f"{l.name}: sized for {l.sized_for}", markup=False)
    out.print("memory: an estimate per GPU for the torch path (rocmpatch/recipes/memory.py); add a few GiB for the runtime "
              f"and RCCL buffers; weights and optimizer states: {recipe.estimate(recipe.layouts[0], upstream).source}", markup=False)
    out.print("megatron args: " + " ".join(to_argv(recipe.args)), markup=False)
    return ExitCode.OK


DATA_HINT = "docs/training.md, 'Tokenizer and data', says which tokenizer each recipe expects and how to preprocess a corpus"
# Hide every GPU from a --device cpu run: the patched tree trains on CPU only when none is visible.
CPU_ENVIRONMENT = ["CUDA_VISIBLE_DEVICES=", "HIP_VISIBLE_DEVICES="]


def megatron_args(recipe: Recipe, *, gpus_per_node: int, nodes: int, device: str, data_path: str | None,
                  tokenizer: str | None, mock_data: bool, save: str | None, extra: dict) -> dict:
    """The recipe's flags for this layout (or its CPU shape), the data, the checkpoints, then the
    flags given after `--`, each replacing the recipe's flag of the same name."""
    if device == "cpu":
        args = recipe.cpu_args(gpus_per_node)
    else:
        args = recipe.merged_args(recipe.layout_for(gpus_per_node, nodes))
    if mock_data:
        args = {**args, "--tokenizer-type": "NullTokenizer", "--vocab-size": recipe.vocab_size, "--mock-data": True}
    if data_path:
        args["--data-path"] = data_path
    if tokenizer:
        args["--tokenizer-model"] = tokenizer
    if save:
        interval = extra.get("--save-interval") or args.get("--save-interval") or args.get("--eval-interval") or 1000
        # The schedule comes from this run's flags, not the checkpoint's: a resumed run may go on with a
        # larger --train-iters (Megatron otherwise asserts that the decay iterations did not change).
        args = {**args, "--save": save, "--load": save, "--save-interval": interval, "--override-opt_param-scheduler": True}
    args = {**args, **extra}
    _refuse_missing_data(args)
    return args


def _refuse_missing_data(args: dict) -> None:
    """Megatron would start and then print its usage, or train on a literal '$DATA_PATH': refuse first."""
    mock = args.get("--mock-data") is True
    if mock and args.get("--data-path"):
        raise UsageError("--mock-data and --data-path exclude each other", hint="give one")
    if not mock and not args.get("--data-path"):
        raise UsageError("no data: give --data-path PREFIX and --tokenizer MODEL, or --mock-data for synthetic data", hint=DATA_HINT)
    needs_model = args.get("--tokenizer-type") not in ("NullTokenizer", "GPT2BPETokenizer", None)
    if needs_model and not args.get("--tokenizer-model"):
        raise UsageError(f"no tokenizer: --data-path needs --tokenizer MODEL ({args['--tokenizer-type']}: a Hugging Face name or a local folder)",
                         hint=DATA_HINT)


def command_line(recipe: Recipe, *, target: Path, gpus_per_node: int, nodes: int, slurm: bool, device: str,
                 args: dict) -> list[str]:
    launcher = torchrun(gpus_per_node, nodes, slurm=slurm, job=f"rocmpatch-{recipe.name}")
    prefix = CPU_ENVIRONMENT if device == "cpu" else []
    return [*prefix, *launcher, str(target / "pretrain_gpt.py"), *to_argv(args)]


def _refuse_other_release(recipe: Recipe, target: Path) -> None:
    """A recipe names the release whose flags it uses; a tree of another release would reject them."""
    from rocmpatch.releases import detect
    from rocmpatch.series import find_patchsets

    patchsets, _ = find_patchsets(None)
    detected = detect(patchsets, target)
    if detected is None:
        note(f"{target}: not a checkout made by `rocmpatch apply` (or of no known release); recipe {recipe.name} is written for {recipe.release}")
        return
    release, why = detected
    if release != recipe.release:
        raise UsageError(f"recipe {recipe.name} is written for {recipe.release}, but {why}, so it is {release}",
                         hint=f"use a {recipe.release} tree (rocmpatch apply --target DIR --release {recipe.release}), or a recipe written for {release}")


def run_launch(*, name: str, target: Path, gpus_per_node: int | None, nodes: int, slurm: bool, dry_run: bool, device: str,
               data_path: str | None, tokenizer: str | None, mock_data: bool, save: str | None,
               megatron_args_after: tuple[str, ...] = ()) -> ExitCode:
    recipe = find(name)
    if device == "cpu" and (nodes != 1 or slurm):
        raise UsageError("--device cpu runs on this machine only", hint="drop --nodes/--slurm")
    gpus_per_node = gpus_per_node or (2 if device == "cpu" else 8)
    args = megatron_args(recipe, gpus_per_node=gpus_per_node, nodes=nodes, device=device, data_path=data_path,
                         tokenizer=tokenizer, mock_data=mock_data, save=save, extra=parse_argv(megatron_args_after))
    if not (target / "pretrain_gpt.py").is_file():
        raise TargetRefused(f"{target}: no pretrain_gpt.py here", hint="give --target the Megatron-LM checkout patched by `rocmpatch apply`")
    _refuse_other_release(recipe, target)
    argv = command_line(recipe, target=target, gpus_per_node=gpus_per_node, nodes=nodes, slurm=slurm, device=device, args=args)
    lines = preamble(nodes, slurm=slurm) + [render(argv)]
    if dry_run:
        out.print("\n".join(lines), markup=False)
        return ExitCode.OK
    note(f"running: {lines[-1]}")
    done = subprocess.run(["bash", "-c", lines[-1]])
    return ExitCode.OK if done.returncode == 0 else ExitCode.CHECK_FAILED
