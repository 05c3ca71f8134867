from __future__ import annotations

import subprocess
from pathlib import Path

from rich.table import Table

from rocmpatch.console import emit_json, note, out
from rocmpatch.errors import ExitCode, TargetRefused
from rocmpatch.launchers import preamble, render, torchrun
from rocmpatch.recipes.catalog import Recipe, find, names, to_argv

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
    if as_json:
        emit_json({"name": recipe.name, "release": recipe.release, "summary": recipe.summary, "vocab_size": recipe.vocab_size,
                   "args": recipe.args, "layouts": [{"name": l.name, "nodes": l.nodes, "gpus_per_node": l.gpus_per_node,
                                                     "sized_for": l.sized_for, "gpu_memory_gb": l.gpu_memory_gb,
                                                     "tokens_per_second": l.tokens_per_second, "args": l.args,
                                                     "memory_estimate": recipe.estimate(l).to_json()} for l in recipe.layouts]})
        return ExitCode.OK
    out.print(f"{recipe.name} ({recipe.release}): {recipe.summary}", markup=False)
    out.print(f"file: {recipe.path}", markup=False)
    table = Table("layout", "GPUs", "params/GPU", "weights+grads", "optimizer", "activations", "total GiB", "tokens/s/GPU")
    for l in recipe.layouts:
        e = recipe.estimate(l)
        table.add_row(l.name, f"{l.nodes} x {l.gpus_per_node}", f"{e.params_per_gpu / 1e9:.2f} B",
                      f"{e.weights_and_grads_gib:.1f}", f"{e.optimizer_gib:.1f}", f"{e.activations_gib:.1f}", f"{e.total_gib:.1f}",
                      "not measured" if l.tokens_per_second is None else str(l.tokens_per_second))
    out.print(table)
    for l in recipe.layouts:
        out.print(f"{l.name}: sized for {l.sized_for}", markup=False)
    out.print("memory: a rough estimate per GPU (rocmpatch/recipes/memory.py); add a few GiB for the runtime and RCCL buffers", markup=False)
    out.print("megatron args: " + " ".join(to_argv(recipe.args)), markup=False)
    return ExitCode.OK


def command_line(recipe: Recipe, *, target: Path, gpus: int, nodes: int, slurm: bool,
                 data_path: str | None, tokenizer: str | None, mock_data: bool) -> list[str]:
    layout = recipe.layout_for(gpus, nodes)
    args = recipe.merged_args(layout)
    if mock_data:
        args = {**args, "--tokenizer-type": "NullTokenizer", "--vocab-size": recipe.vocab_size, "--mock-data": True}
    else:
        args = {**args, "--tokenizer-model": tokenizer or "$TOKENIZER_MODEL", "--data-path": data_path or "$DATA_PATH"}
    return [*torchrun(gpus, nodes, slurm=slurm, job=f"rocmpatch-{recipe.name}"), str(target / "pretrain_gpt.py"), *to_argv(args)]


def run_launch(*, name: str, target: Path, gpus: int, nodes: int, slurm: bool, dry_run: bool,
               data_path: str | None, tokenizer: str | None, mock_data: bool) -> ExitCode:
    recipe = find(name)
    if not (target / "pretrain_gpt.py").is_file():
        raise TargetRefused(f"{target}: no pretrain_gpt.py here", hint="give --target the Megatron-LM checkout patched by `rocmpatch apply`")
    argv = command_line(recipe, target=target, gpus=gpus, nodes=nodes, slurm=slurm, data_path=data_path, tokenizer=tokenizer, mock_data=mock_data)
    lines = preamble(nodes, slurm=slurm) + [render(argv)]
    if dry_run:
        out.print("\n".join(lines), markup=False)
        return ExitCode.OK
    note(f"running: {lines[-1]}")
    done = subprocess.run(["bash", "-c", lines[-1]])
    return ExitCode.OK if done.returncode == 0 else ExitCode.CHECK_FAILED
