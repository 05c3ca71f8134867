"""A recipe as a launch: its flags for a layout (or its CPU shape), the data and checkpoints, the flags
given after `--`, then torchrun TARGET/pretrain_gpt.py with them (rocmpatch.launchers: no shell), on
GPUs with megatron_args.gpu_launch_environment, on the CPU with every GPU hidden.

Everything Megatron would stumble on is checked before torchrun starts, each a line with the fix: the
device (`auto`: this machine's GPUs, else its CPU), the processes against the GPUs torch sees, the
parallel sizes the flags after `--` set, the learning-rate warmup against the run's length
(recipes/schedule.py), and, for a run on this machine (not --dry-run), the data files, the
tokenizer (recipes/inputs.py) and the split against the data's documents (recipes/splits.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rocmpatch import launchers
from rocmpatch.errors import EnvironmentProblem, UsageError
from rocmpatch.launchers import Launch, torchrun
from rocmpatch.recipes import fit, inputs, schedule, splits
from rocmpatch.megatron_args import gpu_launch_environment, parse_argv, to_argv
from rocmpatch.recipes.catalog import Recipe, layout_problems
from rocmpatch.recipes.schema import typed_command_line_args
from rocmpatch.target import require_tree

DATA_HINT = "docs/training.md, 'Tokenizer and data', says which tokenizer each recipe expects and how to preprocess a corpus"
# Hide every GPU from a --device cpu run: the patched tree trains on CPU only when none is visible.
CPU_ENVIRONMENT = {"CUDA_VISIBLE_DEVICES": "", "HIP_VISIBLE_DEVICES": ""}
CPU_PROCESSES, NODE_GPUS = 2, 8
VISIBILITY = "HIP_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES"


@dataclass(frozen=True)
class LaunchRequest:
    """What `recipe launch` was asked, as given on the command line."""

    target: Path
    gpus_per_node: int | None = None
    nodes: int = 1
    slurm: bool = False
    device: str = "auto"  # auto | gpu | cpu
    data_path: str | None = None
    tokenizer: str | None = None
    mock_data: bool = False
    save: str | None = None
    megatron_args_after: tuple[str, ...] = ()
    dry_run: bool = False  # print the line: nothing of this machine (GPUs, files) is checked

    @property
    def here(self) -> bool:
        """Whether it runs on this machine (one node, not through Slurm)."""
        return self.nodes == 1 and not self.slurm


@dataclass(frozen=True)
class RecipeLaunch:
    launch: Launch
    notes: tuple[str, ...] = ()  # what the user should know before it runs (stderr)


def recipe_args(recipe: Recipe, *, gpus_per_node: int, nodes: int, device: str) -> dict:
    """The recipe's own flags for this layout, or its CPU shape."""
    if device == "cpu":
        return recipe.cpu_args(gpus_per_node)
    return recipe.merged_args(recipe.layout_for(gpus_per_node, nodes))


def megatron_args(recipe: Recipe, base: dict, *, data_path: str | None, tokenizer: str | None, mock_data: bool,
                  save: str | None, extra: dict) -> dict:
    """`base` (recipe_args), the data, the checkpoints, then the flags given after `--`, each
    replacing the recipe's flag of the same name."""
    args = dict(base)
    if mock_data:
        args = {**args, "--tokenizer-type": "NullTokenizer", "--vocab-size": recipe.vocab_size, "--mock-data": True}
    if data_path is not None:
        args["--data-path"] = data_path
    if tokenizer is not None:
        args["--tokenizer-model"] = tokenizer
    if save is not None:
        if not save.strip():
            raise UsageError(f"--save {save!r} names no directory", hint="give the directory to save checkpoints to and resume from")
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
    if not mock and not any(args.get(flag) for flag in inputs.DATA_FLAGS + inputs.LIST_FILE_FLAGS):
        raise UsageError("no data: give --data-path PREFIX and --tokenizer MODEL, or --mock-data for synthetic data", hint=DATA_HINT)
    needs_model = args.get("--tokenizer-type") not in ("NullTokenizer", "GPT2BPETokenizer", None)
    if needs_model and not args.get("--tokenizer-model"):
        raise UsageError(f"no tokenizer: --data-path needs --tokenizer MODEL ({args['--tokenizer-type']}: a Hugging Face name or a local folder)",
                         hint=DATA_HINT)


def choose_device(request: LaunchRequest, visible: int | None) -> tuple[str, tuple[str, ...]]:
    """gpu or cpu, and the note that says why `auto` chose the CPU. `visible`: the GPUs torch sees
    here (None without torch, or for other nodes: then auto means the GPUs)."""
    if request.device != "auto":
        return request.device, ()
    if not request.here or visible is None or visible > 0:
        return "gpu", ()
    return "cpu", ("no GPU visible to torch here: training on this machine's CPU, as --device cpu does (the recipe's architecture "
                   "at a tiny size, over gloo); --device gpu for a GPU run",)


def refuse_missing_gpus(gpus_per_node: int, visible: int | None) -> None:
    """A GPU run on this machine needs a GPU per process (without torch here, torchrun is refused later)."""
    if visible == 0:
        raise EnvironmentProblem("--device gpu, but torch sees no GPU here (a CPU-only torch build, or none visible)",
                                 hint=f"--device cpu (or leave --device out) to train on the CPU; or check {VISIBILITY}")
    if visible is not None and gpus_per_node > visible:
        raise UsageError(f"--gpus-per-node {gpus_per_node}, but torch sees {visible} GPU(s) here",
                         hint=f"--gpus-per-node {visible} (leave it out for the GPUs torch sees), or make more visible ({VISIBILITY})")


def plan(recipe: Recipe, request: LaunchRequest) -> RecipeLaunch:
    """The launch for `request`, every refusal before anything runs (UsageError, TargetRefused,
    EnvironmentProblem, InvalidInput for the recipe's `releases:` or a tokenizer folder)."""
    visible = launchers.visible_gpus() if request.here and request.device != "cpu" else None
    device, notes = choose_device(request, visible)
    if device == "cpu" and not request.here:
        raise UsageError("--device cpu runs on this machine only", hint="drop --nodes/--slurm")
    gpus_per_node = request.gpus_per_node or (CPU_PROCESSES if device == "cpu" else visible or NODE_GPUS)
    if device == "gpu" and request.here and not request.dry_run:
        refuse_missing_gpus(gpus_per_node, visible)
    base = recipe_args(recipe, gpus_per_node=gpus_per_node, nodes=request.nodes, device=device)
    extra = typed_command_line_args(parse_argv(request.megatron_args_after))
    args = megatron_args(recipe, base, data_path=request.data_path, tokenizer=request.tokenizer, mock_data=request.mock_data,
                         save=request.save, extra=extra)
    if extra:  # flags after -- may change the layout the recipe's own checks passed
        problems = layout_problems(args, gpus_per_node * request.nodes, for_estimate=False)
        if problems:
            on = f"{gpus_per_node} CPU processes" if device == "cpu" else f"{request.nodes} x {gpus_per_node} GPUs"
            raise UsageError(f"after --: {'; '.join(problems)}", hint=f"on {on}; change the flags after --, or --gpus-per-node/--nodes")
    # Given on the command line (after --, or by --data-path, --mock-data, --save...): never left out.
    given = {flag for flag in args if flag in extra or base.get(flag, object()) != args[flag]}
    fitted_schedule = schedule.fit(args, given)
    target = request.target
    require_tree(target, "pretrain_gpt.py")
    fitted = fit.to_tree(recipe, target, fitted_schedule.args, given)
    args = fitted.args
    if not request.dry_run:
        inputs.check_data(args)
        args, split_notes = splits.fit(args, given)
        unchecked = inputs.check_tokenizer(args)
        notes += split_notes + ((unchecked,) if unchecked else ())
    launch = torchrun([str(target / "pretrain_gpt.py"), *to_argv(args)], nproc=gpus_per_node, nodes=request.nodes,
                      slurm=request.slurm, job=f"rocmpatch-{recipe.name}", env=CPU_ENVIRONMENT if device == "cpu" else gpu_launch_environment(args, os.environ))
    return RecipeLaunch(launch, notes + fitted_schedule.notes + fitted.notes)
