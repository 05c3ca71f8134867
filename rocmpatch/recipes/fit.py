"""Which releases a recipe fits (its `releases:`), and what `recipe launch` passes to a tree of
another release: the recipe's flags that tree's Megatron knows (rocmpatch.recipes.tree_flags), the
others left out and named; a flag given on the command line, or one that sets the model's size,
parallel layout or batch, is refused instead, naming it.

`releases:` is a list of release names (folders in patchsets/) and ranges: `A..B` is every release
from A to B, `A..` A and every later one, `..B` B and every earlier one, ordered as upstream.lock
orders them (by the date of each release's pinned commit, then by name). A single name or range
may be written without the list.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from rocmpatch.errors import InvalidInput, UsageError

_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_+-]|\.(?!\.))*")  # a release name without '..'

# Never left out: without one of these the run would not be the recipe's model, parallel layout or
# batch (the flags the memory estimate and the layout checks read).
SHAPE_FLAGS = frozenset((
    "--num-layers", "--hidden-size", "--ffn-hidden-size", "--num-attention-heads", "--group-query-attention",
    "--num-query-groups", "--kv-channels", "--seq-length", "--max-position-embeddings", "--swiglu", "--normalization",
    "--position-embedding-type", "--untie-embeddings-and-output-weights", "--disable-bias-linear", "--qk-layernorm",
    "--num-experts", "--moe-router-topk", "--moe-ffn-hidden-size", "--moe-layer-freq", "--moe-shared-expert-intermediate-size",
    "--multi-latent-attention", "--q-lora-rank", "--kv-lora-rank", "--qk-head-dim", "--qk-pos-emb-head-dim", "--v-head-dim",
    "--mtp-num-layers", "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
    "--expert-model-parallel-size", "--expert-tensor-parallel-size", "--sequence-parallel",
    "--num-layers-per-virtual-pipeline-stage", "--micro-batch-size", "--global-batch-size", "--vocab-size",
    "--make-vocab-size-divisible-by", "--bf16", "--fp16", "--distributed-backend",
))


# Flags every release's Megatron parses but only a series with the feature runs without Transformer
# Engine; on another, upstream trains without them and says nothing (--fp8-format: in BF16).
NEEDS_FEATURE = {"--fp8-format": "fp8"}


@dataclass(frozen=True)
class ReleaseSpan:
    """A recipe's `releases:` as written; `where` ('FILE:LINE: releases') names it in errors."""

    items: tuple[str, ...]
    where: str

    @classmethod
    def parse(cls, items: Sequence[str], where: str) -> "ReleaseSpan":
        """ValueError naming the item that is neither a release name nor a range of two."""
        if not items:
            raise ValueError("expected a release name (core_v0.19.0), a range (core_v0.16.1..core_v0.19.0) or a list of them")
        for item in items:
            low, dots, high = item.partition("..")
            if not (_NAME.fullmatch(item) or (dots and (low or high) and all(_NAME.fullmatch(end) for end in (low, high) if end))):
                raise ValueError(f"{item!r} is neither a release name (core_v0.19.0) nor a range of two (core_v0.16.1..core_v0.19.0, core_v0.16.1..)")
        return cls(tuple(items), where)

    def __str__(self) -> str:
        return ", ".join(self.items)

    def releases(self, order: Sequence[str]) -> list[str]:
        """The releases of `order` (oldest first) this span covers, in that order. InvalidInput for a
        name `order` does not hold: a range needs its ends' places, and a typo would fit nothing."""
        covered: set[str] = set()
        for item in self.items:
            low, dots, high = item.partition("..")
            for end in (low, high):
                if end and end not in order:
                    raise InvalidInput(self.where, f"{end!r} is no release upstream.lock pins (known: {', '.join(order)})",
                                       hint="name releases as their folders in patchsets/ are named")
            if not dots:
                covered.add(item)
                continue
            first = order.index(low) if low else 0
            last = order.index(high) if high else len(order) - 1
            if first > last:
                raise InvalidInput(self.where, f"{item!r}: {low} is newer than {high}", hint="write a range oldest..newest")
            covered.update(order[first:last + 1])
        return [name for name in order if name in covered]


def release_order() -> list[str]:
    """The releases upstream.lock pins, oldest first (by their pinned commit's date, then name)."""
    from rocmpatch.series import find_patchsets

    patchsets, _ = find_patchsets(None)
    lock_file = patchsets.lock_file()
    if lock_file is None:
        return []
    return sorted(lock_file.releases, key=lambda name: (lock_file.releases[name].upstream.date, name))


@dataclass(frozen=True)
class Fitted:
    args: dict  # what to pass
    notes: tuple[str, ...] = ()  # what the user should know, said before it runs


def to_tree(recipe, target: Path, args: dict, given: set[str]) -> Fitted:
    """`args` for the tree at `target`: as they are on a release the recipe fits; on another, the
    flags its Megatron does not know left out (UsageError for one in `given` or in SHAPE_FLAGS)."""
    from rocmpatch.recipes import tree_flags
    from rocmpatch.releases import detect
    from rocmpatch.series import find_patchsets

    order = release_order()
    fits = recipe.releases.releases(order)
    patchsets = find_patchsets(None)[0]
    detected = detect(patchsets, target)
    if detected is None:
        return Fitted(args, (f"{target}: not a checkout made by `rocmpatch apply` (or of no known release); "
                             f"recipe {recipe.name} is written for {recipe.releases}",))
    release, why = detected
    features = patchsets.location(release).info.features or ()
    for flag, feature in NEEDS_FEATURE.items():
        if args.get(flag) not in (None, False) and feature not in features:
            having = [name for name in patchsets.releases() if feature in (patchsets.location(name).info.features or ())]
            instead = f"a tree of {having[-1]} (rocmpatch apply --target DIR --release {having[-1]})" if having else "a tree with TE"
            raise UsageError(f"{flag}: the series of {release} has no {feature}, so without Transformer Engine its Megatron would "
                             f"run without it and say nothing", hint=f"drop {flag}, or use {instead}")
    if release in fits:
        return Fitted(args)
    written = f"recipe {recipe.name} is written for {recipe.releases}, and {why}, so it is {release}"
    use_instead = f"use a tree of {fits[-1]} (rocmpatch apply --target DIR --release {fits[-1]})" if fits else "use a recipe written for it"
    known = tree_flags.read(target)
    if known is None:
        raise UsageError(f"{written}; which flags its Megatron knows cannot be read: it has no {' or '.join(tree_flags.ARGUMENT_FILES)}",
                         hint=use_instead)
    missing = known.missing(flag for flag, value in args.items() if value is not False and value is not None)
    if missing and known.unresolved:
        raise UsageError(f"{written}; {release}'s {known.source} does not show {missing[0]}, and its parser could not be read whole "
                         f"({known.unresolved[0]})", hint=use_instead)
    refused = [flag for flag in missing if flag in given or flag in SHAPE_FLAGS]
    if refused:
        flag = refused[0]
        more = f" (nor {', '.join(refused[1:])})" if refused[1:] else ""
        why_kept = ("it was given on the command line: drop it" if flag in given
                    else "it sets the model's size, parallel layout or batch, so leaving it out would train another model")
        raise UsageError(f"{release}'s Megatron has no {flag}{more}: {written}", hint=f"{why_kept}; or {use_instead}")
    if not missing:
        return Fitted(args, (f"{written}: its Megatron knows every flag of the recipe ({known.source})",))
    kept = {flag: value for flag, value in args.items() if flag not in missing}
    return Fitted(kept, (f"{written}: not passing {', '.join(missing)} ({release}'s Megatron does not know them: {known.source})",))
