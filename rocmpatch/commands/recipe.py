from __future__ import annotations

from pathlib import Path

from rocmpatch.console import emit_json, note, out
from rocmpatch.errors import ExitCode, UsageError
from rocmpatch.launchers import run
from rocmpatch.recipes import launch
from rocmpatch.megatron_args import to_argv
from rocmpatch.recipes.catalog import find, names
from rocmpatch.recipes.fit import release_order
from rocmpatch.recipes.launch import LaunchRequest
from rocmpatch.recipes.memory import upstream_model
from rocmpatch.recipes.run_output import RunOutput
from rocmpatch.tables import Table

GB_PER_GIB = (1 << 30) / 1e9


def run_list(*, as_json: bool) -> ExitCode:
    recipes = [find(name) for name in names()]
    if as_json:
        emit_json([{"name": r.name, "releases": list(r.releases.items), "summary": r.summary,
                    "layouts": [l.name for l in r.layouts]} for r in recipes])
        return ExitCode.OK
    table = Table("recipe", "releases", "layouts", "model", whole=("recipe", "releases"))
    for r in recipes:
        table.add_row(r.name, str(r.releases), ", ".join(l.name for l in r.layouts), r.summary)
    out.print(table)
    return ExitCode.OK


def run_show(*, name: str, as_json: bool) -> ExitCode:
    recipe = find(name)
    fits = recipe.releases.releases(release_order())
    upstream = upstream_model(fits[-1]) if fits else None  # the newest release it fits
    if as_json:
        emit_json({"name": recipe.name, "releases": list(recipe.releases.items), "summary": recipe.summary, "vocab_size": recipe.vocab_size,
                   "args": recipe.args, "layouts": [{"name": l.name, "nodes": l.nodes, "gpus_per_node": l.gpus_per_node,
                                                     "sized_for": l.sized_for, "gpu_memory_gb": l.gpu_memory_gb,
                                                     "tokens_per_second": l.tokens_per_second, "args": l.args,
                                                     "memory_estimate": recipe.estimate(l, upstream).to_json()} for l in recipe.layouts]})
        return ExitCode.OK
    out.print(f"{recipe.name} ({recipe.releases}): {recipe.summary}", markup=False)
    out.print(f"file: {recipe.path}", markup=False)
    table = Table("layout", "GPUs", "params/GPU", "weights+grads", "optimizer", "activations", "total GiB", "tokens/s/GPU", whole=("layout",))
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


def run_launch(*, name: str, target: Path, gpus_per_node: int | None, nodes: int, slurm: bool, dry_run: bool, device: str,
               data_path: str | None, tokenizer: str | None, mock_data: bool, save: str | None,
               megatron_args_after: tuple[str, ...] = (), log: Path | None = None) -> ExitCode:
    request = LaunchRequest(target, gpus_per_node, nodes, slurm, device, data_path, tokenizer, mock_data, save, tuple(megatron_args_after),
                            dry_run=dry_run)
    if log is not None and log.resolve().is_relative_to(target.resolve()):
        raise UsageError(f"--log {log}: inside the checkout {target}", hint="write the log outside the tree (verify counts any file in it as an edit)")
    planned = launch.plan(find(name), request)
    for line in planned.notes:
        note(line)
    if dry_run:
        out.print("\n".join(planned.launch.lines()), markup=False)
        return ExitCode.OK
    running = f"running: {planned.launch.line()}"
    note(running)
    output = RunOutput(log)
    try:
        output.header(running)
        return ExitCode.OK if run(planned.launch, on_line=output) == 0 else ExitCode.CHECK_FAILED
    finally:
        output.close()
