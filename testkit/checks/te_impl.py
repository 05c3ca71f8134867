"""Child side of test_te_impl_torch.py: a checkpoint with Transformer Engine's keys, made on the patched
tree without TE, and what pretrain_gpt.py made of it (CPU, gloo, one rank). Groups:
- save: the model pretrain_gpt.py builds from the flags in TE_IMPL_FLAGS (a JSON list;
  --transformer-impl transformer_engine: TE's layer spec from torch modules), its weights set apart
  from any initialization (a seeded normal, the norms 1.5), saved to TE_IMPL_CHECKPOINT as mbridge
  saves a converted Hugging Face model (torch_dist, {"model": ..., "checkpoint_version": 3.0}, in
  release/): the checkpoint's keys;
- compare: the tensors of TE_IMPL_CHECKPOINT's release/ against those of TE_IMPL_TRAINED (the last
  iteration pretrain_gpt.py saved): the largest difference per key, and the keys one lacks.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from testkit.checks import gloo

NORM_VALUE = 1.5  # a norm's weight in the saved checkpoint (an initialized norm holds 1.0)


def init_one_rank() -> None:
    gloo.join()
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")  # what Megatron's argument parsing reads


def check_save() -> dict:
    import torch

    from megatron.core import dist_checkpointing, parallel_state
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed
    from megatron.training.arguments import parse_args, validate_args
    from megatron.training.vocab_utils import calculate_padded_vocab_size

    init_one_rank()
    sys.argv = ["pretrain_gpt.py", *json.loads(os.environ["TE_IMPL_FLAGS"])]
    args = parse_args()
    validate_args(args)
    # What the tokenizer sets in pretrain_gpt.py (set_global_variables, which would also start
    # a checkpoint worker that re-imports this child's __main__).
    args.padded_vocab_size = calculate_padded_vocab_size(
        args.vocab_size, args.make_vocab_size_divisible_by, args.tensor_model_parallel_size)
    parallel_state.initialize_model_parallel(1, 1)
    model_parallel_cuda_manual_seed(args.seed)
    from gpt_builders import gpt_builder  # the tree's root module, as pretrain_gpt.py imports it

    model = gpt_builder(args, pre_process=True, post_process=True)
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.fill_(NORM_VALUE)
            else:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.05)
    directory = Path(os.environ["TE_IMPL_CHECKPOINT"])
    (directory / "release").mkdir(parents=True)
    sharded = model.sharded_state_dict()
    dist_checkpointing.save({"model": sharded, "checkpoint_version": 3.0}, str(directory / "release"))
    (directory / "latest_checkpointed_iteration.txt").write_text("release")
    return {"keys": sorted(sharded),
            "modules": sorted({type(module).__name__ for module in model.modules()})}


def plain_tensors(directory: Path) -> dict:
    from megatron.core import dist_checkpointing

    loaded = dist_checkpointing.load_plain_tensors(str(directory))
    return {key.removeprefix("model."): value for key, value in loaded.items() if hasattr(value, "shape")}


def check_compare() -> dict:
    init_one_rank()
    saved = plain_tensors(Path(os.environ["TE_IMPL_CHECKPOINT"]) / "release")
    trained_dir = Path(os.environ["TE_IMPL_TRAINED"])
    iteration = int((trained_dir / "latest_checkpointed_iteration.txt").read_text())
    trained = {key: value for key, value in plain_tensors(trained_dir / f"iter_{iteration:07d}").items()
               if not key.startswith("optimizer.")}  # the model's tensors, not Adam's moments
    common = sorted(set(saved) & set(trained))
    return {
        "iteration": iteration,
        "only_saved": sorted(set(saved) - set(trained)),
        "only_trained": sorted(set(trained) - set(saved)),
        "max_diff": {key: float((saved[key].float() - trained[key].float()).abs().max()) for key in common
                     if saved[key].is_floating_point() and saved[key].numel()},
    }


CHECKS = {"save": check_save, "compare": check_compare}


def run(groups: str) -> dict:
    return {group: CHECKS[group]() for group in groups.split(",")}
