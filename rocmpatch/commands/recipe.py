"""`rocmpatch recipe list | show NAME | launch NAME`: rocmpatch.recipes called, its answers printed."""

from __future__ import annotations

from pathlib import Path

from rocmpatch.console import emit_json, note, out
from rocmpatch.errors import ExitCode
from rocmpatch.launchers import run
from rocmpatch.megatron_args import to_argv
from rocmpatch.recipes import launch, overview
from rocmpatch.recipes.catalog import find
from rocmpatch.recipes.launch import LaunchRequest
from rocmpatch.recipes.run_output import RunOutput, refuse_log_inside
from rocmpatch.tables import Table


def run_list(*, as_json: bool) -> ExitCode:
    found = overview.recipes()
    if as_json:
        emit_json(overview.listing_json(found))
        return ExitCode.OK
    table = Table("recipe", "releases", "layouts", "model", whole=("recipe", "releases"))
    for r in found:
        table.add_row(r.name, str(r.releases), ", ".join(l.name for l in r.layouts), r.summary)
    out.print(table)
    return ExitCode.OK


def run_show(*, name: str, as_json: bool) -> ExitCode:
    shown = overview.estimated(name)
    if as_json:
        emit_json(shown.to_json())
        return ExitCode.OK
    recipe = shown.recipe
    out.print(f"{recipe.name} ({recipe.releases}): {recipe.summary}", markup=False)
    out.print(f"file: {recipe.path}", markup=False)
    table = Table("layout", "GPUs", "params/GPU", "weights+grads", "optimizer", "activations", "total GiB", "tokens/s/GPU", whole=("layout",))
    for l, e in zip(recipe.layouts, shown.estimates):
        table.add_row(l.name, f"{l.nodes} x {l.gpus_per_node}", f"{e.params_per_gpu / 1e9:.2f} B",
                      f"{e.weights_and_grads_gib:.1f}", f"{e.optimizer_gib:.1f}", f"{e.activations_gib:.1f}", f"{e.total_gib:.1f}",
                      "not measured" if l.tokens_per_second is None else str(l.tokens_per_second))
    out.print(table)
    for l in recipe.layouts:
        out.print(f"{l.name}: sized for {l.sized_for}", markup=False)
    out.print("memory: an estimate per GPU for the torch path (rocmpatch/recipes/memory.py); add a few GiB for the runtime "
              f"and RCCL buffers; weights and optimizer states: {shown.source}", markup=False)
    out.print("megatron args: " + " ".join(to_argv(recipe.args)), markup=False)
    return ExitCode.OK


def run_launch(*, name: str, target: Path, gpus_per_node: int | None, nodes: int, slurm: bool, dry_run: bool, device: str,
               data_path: str | None, tokenizer: str | None, mock_data: bool, save: str | None,
               megatron_args_after: tuple[str, ...] = (), log: Path | None = None) -> ExitCode:
    request = LaunchRequest(target, gpus_per_node, nodes, slurm, device, data_path, tokenizer, mock_data, save, tuple(megatron_args_after),
                            dry_run=dry_run)
    if log is not None:
        refuse_log_inside(log, target)
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
