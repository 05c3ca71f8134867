"""The learning-rate schedule of a launch against its length, before Megatron asserts on it.

Megatron needs fewer warmup iterations than decay iterations (OptimizerParamScheduler: `lr_warmup_steps
< lr_decay_steps`; the decay spans --lr-decay-iters, else --train-iters), and takes either
--lr-warmup-iters or --lr-warmup-fraction. A recipe's warmup (500 iterations; 2 in the CPU shape) is
sized for its own run: a shorter run given on the command line gets a tenth of its length instead,
said once. A warmup the user gave that does not fit is refused, naming both flags.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rocmpatch.errors import UsageError

WARMUP, FRACTION = "--lr-warmup-iters", "--lr-warmup-fraction"


@dataclass(frozen=True)
class Schedule:
    args: dict
    notes: tuple[str, ...] = ()


def _iterations(args: dict, flag: str) -> int | None:
    value = args.get(flag)
    return None if value is None or value is False else int(value)


def short_run_warmup(decay: int) -> int:
    """A tenth of the decay iterations (at least one where there is room), always fewer than them."""
    return max(0, min(decay - 1, math.ceil(decay / 10)))


def fit(args: dict, given: set[str]) -> Schedule:
    """`args` with a warmup that fits the run; `given`: the flags from the command line."""
    if FRACTION in args and WARMUP in args and (FRACTION in given) != (WARMUP in given):
        chosen, dropped = (FRACTION, WARMUP) if FRACTION in given else (WARMUP, FRACTION)
        kept = {flag: value for flag, value in args.items() if flag != dropped}
        return Schedule(kept, (f"not passing the recipe's {dropped}: {chosen} was given (Megatron takes one of them)",))
    if FRACTION in args and WARMUP in args:
        raise UsageError(f"{WARMUP} and {FRACTION} exclude each other (Megatron takes one)", hint="give one of them")
    warmup = _iterations(args, WARMUP)
    decay_flag = "--lr-decay-iters" if _iterations(args, "--lr-decay-iters") is not None else "--train-iters"
    decay = _iterations(args, decay_flag)
    if warmup is None or decay is None or warmup < decay:
        return Schedule(args)
    if WARMUP in given:
        raise UsageError(f"{WARMUP} {warmup} is not below {decay_flag} {decay}: Megatron needs fewer warmup than decay iterations",
                         hint=f"give {WARMUP} {short_run_warmup(decay)} (or fewer), or a longer run")
    fitted = short_run_warmup(decay)
    return Schedule({**args, WARMUP: fitted},
                    (f"{decay_flag} {decay} is a short run: {WARMUP} {warmup} (the recipe's) lowered to {fitted}, a tenth of it "
                     f"(Megatron needs fewer warmup than decay iterations; give {WARMUP} after -- to choose)",))
