"""Training data for Megatron: documents in, the .bin/.idx pair (and a tokenizer) out (`rocmpatch data prepare`)."""

from __future__ import annotations

import importlib
import sys

from rocmpatch.errors import EnvironmentProblem


def require(module: str, why: str, *, package: str | None = None) -> None:
    """Import `module` (a broken install counts as missing), or one line naming the pip install."""
    try:
        importlib.import_module(module)
    except ImportError:
        package = package or module.split(".")[0]
        raise EnvironmentProblem(f"{why}, which is not installed here: pip install {package}",
                                 hint=f"install it into {sys.executable}'s environment") from None
