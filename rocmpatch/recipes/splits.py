"""The train/validation/test split of a launch against the documents of its data, before Megatron
hangs on it.

Megatron cuts each dataset of --data-path by documents (BlendedMegatronDatasetBuilder: a split's
documents run from round(start x N) to round(end x N), its bounds the running sums of the normalised
--split). A part with a weight but no document, asked for samples (the training part always, the
validation and test parts when --eval-iters > 0), makes GPTDataset count epochs of zero tokens
forever: the run stops after "Build and save the GPTDataset valid indices" and never prints again. A
corpus that small (a first try, a handful of files) gets all its documents for training and no
evaluation, said once; a --split or --eval-iters the user gave that leaves a part empty is refused.
"""

from __future__ import annotations

import re
from pathlib import Path

from rocmpatch.data.idx import check_pair
from rocmpatch.errors import UsageError, shown
from rocmpatch.recipes import inputs

PARTS = ("training", "validation", "test")
WHOLE = {"--split": "100,0,0", "--eval-iters": 0}
MEGATRON_DEFAULT = "969,30,1"  # --split when none is given (arguments.py)


def weights(split: str) -> list[float]:
    """--split as Megatron reads it (parse_and_normalize_split): the numbers in it, padded to three, normalised."""
    numbers = [float(number) for number in re.findall(r"[.0-9]+", split)][:3]
    numbers += [0.0] * (3 - len(numbers))
    total = sum(numbers)
    if total <= 0:
        raise UsageError(f"--split {split}: no part has a weight", hint="give three weights, e.g. --split 99,1,0")
    return [number / total for number in numbers]


def documents_per_part(split: str, documents: int) -> list[int | None]:
    """Each part's documents out of `documents` (None: a part of weight 0, which Megatron does not build)."""
    bounds = [0.0]
    for weight in weights(split):
        bounds.append(bounds[-1] + weight)
    return [None if end <= start else int(round(end * documents)) - int(round(start * documents))
            for start, end in zip(bounds[:-1], bounds[1:])]


def fewest_documents(split: str) -> int:
    """The fewest documents that give every weighted part at least one."""
    documents = 1
    while any(count == 0 for count in documents_per_part(split, documents)):
        documents += 1
    return documents


def _empty_parts(args: dict, documents: int) -> list[str]:
    evaluates = int(args.get("--eval-iters") or 0) > 0
    counts = documents_per_part(str(args.get("--split", MEGATRON_DEFAULT)), documents)
    return [part for part, count, asked in zip(PARTS, counts, (True, evaluates, evaluates)) if count == 0 and asked]


def fit(args: dict, given: set[str]) -> tuple[dict, tuple[str, ...]]:
    """`args` with a split that leaves no part Megatron reads empty, and the note that says so;
    UsageError when the data has no document, or the split the user gave leaves a part empty."""
    value = args.get("--data-path")
    if args.get("--mock-data") is True or not value or value is True:
        return args, ()
    for prefix in inputs.prefixes([value] if isinstance(value, str) else [str(v) for v in value]):
        documents = check_pair(Path(prefix + ".bin"), Path(prefix + ".idx")).documents
        if documents == 0:
            raise UsageError(f"--data-path {shown(prefix)}: no document in it", hint="prepare it again from files that hold text")
        empty = _empty_parts(args, documents)
        if not empty:
            continue
        split = args.get("--split", MEGATRON_DEFAULT)
        enough = fewest_documents(split)
        what = f"--data-path {shown(prefix)}: {documents} document(s) leave the {' and '.join(empty)} part{'s' * (len(empty) > 1)} of --split {split} empty"
        if given & set(WHOLE):
            raise UsageError(f"{what} (Megatron would wait forever building it)",
                             hint=f"give at least {enough} documents, or train on all of them: --split 100,0,0 --eval-iters 0")
        return {**args, **WHOLE}, (f"{what}: training on all of them without evaluation (--split 100,0,0 --eval-iters 0); "
                                   f"{enough} documents or more keep the recipe's split",)
    return args, ()
