"""What `recipe list` and `recipe show` report: the bundled recipes, and one recipe's memory estimate
per layout with upstream's model of the newest release it fits; plain data and the JSON printed."""

from __future__ import annotations

from dataclasses import dataclass

from rocmpatch.recipes.catalog import Recipe, find, names
from rocmpatch.recipes.fit import release_order
from rocmpatch.recipes.memory import Estimate, upstream_model


def recipes() -> list[Recipe]:
    return [find(name) for name in names()]


def listing_json(found: list[Recipe]) -> list[dict]:
    return [{"name": r.name, "releases": list(r.releases.items), "summary": r.summary, "layouts": [l.name for l in r.layouts]}
            for r in found]


@dataclass(frozen=True)
class Estimated:
    """A recipe and the memory estimate of each of its layouts, in order."""

    recipe: Recipe
    estimates: tuple[Estimate, ...]

    @property
    def source(self) -> str:
        """Where weights and optimizer states were counted (the same for every layout)."""
        return self.estimates[0].source

    def to_json(self) -> dict:
        recipe = self.recipe
        return {"name": recipe.name, "releases": list(recipe.releases.items), "summary": recipe.summary, "vocab_size": recipe.vocab_size,
                "args": recipe.args, "layouts": [{"name": l.name, "nodes": l.nodes, "gpus_per_node": l.gpus_per_node,
                                                  "sized_for": l.sized_for, "gpu_memory_gb": l.gpu_memory_gb,
                                                  "tokens_per_second": l.tokens_per_second, "args": l.args,
                                                  "memory_estimate": e.to_json()} for l, e in zip(recipe.layouts, self.estimates)]}


def estimated(name: str) -> Estimated:
    """The recipe `name`, each layout estimated with upstream's model of the newest release it fits
    (from rocmpatch's cache; without it, rocmpatch's own count)."""
    recipe = find(name)
    fits = recipe.releases.releases(release_order())
    upstream = upstream_model(fits[-1]) if fits else None
    return Estimated(recipe, tuple(recipe.estimate(layout, upstream) for layout in recipe.layouts))
