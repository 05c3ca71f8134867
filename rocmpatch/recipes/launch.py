"""A recipe as a launch: its flags for a layout (or its CPU shape), the data and checkpoints, the flags
given after `--`, then torchrun TARGET/pretrain_gpt.py with them (rocmpatch.launchers: no shell)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rocmpatch.errors import UsageError
from rocmpatch.launchers import Launch, torchrun
from rocmpatch.recipes import fit
from rocmpatch.recipes.catalog import Recipe, layout_problems, parse_argv, to_argv
from rocmpatch.recipes.schema import typed_command_line_args
from rocmpatch.target import require_tree

DATA_HINT = "docs/training.md, 'Tokenizer and data', says which tokenizer each recipe expects and how to preprocess a corpus"
# Hide every GPU from a --device cpu run: the patched tree trains on CPU only when none is visible.
CPU_ENVIRONMENT = {"CUDA_VISIBLE_DEVICES": "", "HIP_VISIBLE_DEVICES": ""}


@dataclass(frozen=True)
class LaunchRequest:
    """What `recipe launch` was asked, as given on the command line."""

    target: Path
    gpus_per_node: int | None = None
    nodes: int = 1
    slurm: bool = False
    device: str = "gpu"
    data_path: str | None = None
    tokenizer: str | None = None
    mock_data: bool = False
    save: str | None = None
    megatron_args_after: tuple[str, ...] = ()


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
    if not mock and not args.get("--data-path"):
        raise UsageError("no data: give --data-path PREFIX and --tokenizer MODEL, or --mock-data for synthetic data", hint=DATA_HINT)
    needs_model = args.get("--tokenizer-type") not in ("NullTokenizer", "GPT2BPETokenizer", None)
    if needs_model and not args.get("--tokenizer-model"):
        raise UsageError(f"no tokenizer: --data-path needs --tokenizer MODEL ({args['--tokenizer-type']}: a Hugging Face name or a local folder)",
                         hint=DATA_HINT)


def plan(recipe: Recipe, request: LaunchRequest) -> RecipeLaunch:
    """The launch for `request`, every refusal before anything runs (UsageError, TargetRefused,
    InvalidInput for the recipe's `releases:`)."""
    if request.device == "cpu" and (request.nodes != 1 or request.slurm):
        raise UsageError("--device cpu runs on this machine only", hint="drop --nodes/--slurm")
    gpus_per_node = request.gpus_per_node or (2 if request.device == "cpu" else 8)
    base = recipe_args(recipe, gpus_per_node=gpus_per_node, nodes=request.nodes, device=request.device)
    extra = typed_command_line_args(parse_argv(request.megatron_args_after))
    args = megatron_args(recipe, base, data_path=request.data_path, tokenizer=request.tokenizer, mock_data=request.mock_data,
                         save=request.save, extra=extra)
    if request.device != "cpu" and extra:  # flags after -- may change the layout the recipe's own checks passed
        problems = layout_problems(args, gpus_per_node * request.nodes, for_estimate=False)
        if problems:
            raise UsageError(f"after --: {'; '.join(problems)}", hint=f"on {request.nodes} x {gpus_per_node} GPUs; change the flags after --, or --gpus-per-node/--nodes")
    target = request.target
    require_tree(target, "pretrain_gpt.py")
    # Given on the command line (after --, or by --data-path, --mock-data, --save...): never left out.
    given = {flag for flag in args if flag in extra or base.get(flag, object()) != args[flag]}
    fitted = fit.to_tree(recipe, target, args, given)
    launch = torchrun([str(target / "pretrain_gpt.py"), *to_argv(fitted.args)], nproc=gpus_per_node, nodes=request.nodes,
                      slurm=request.slurm, job=f"rocmpatch-{recipe.name}", env=CPU_ENVIRONMENT if request.device == "cpu" else None)
    return RecipeLaunch(launch, fitted.notes)
