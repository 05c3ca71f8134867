"""Child side of test_fallback_warnings.py: what importing megatron.core's modules prints as warnings
without Transformer Engine and apex (refused by the child runner), captured from stderr; then what a
process it starts afterwards (as the checkpoint writer is started) prints."""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import subprocess
import sys
import warnings

MODULES = ("megatron.core", "megatron.core.models.backends", "megatron.core.models.gpt.gpt_layer_specs",
           "megatron.core.optimizer", "megatron.core.models.hybrid.hybrid_layer_specs")


def run(groups: str) -> dict:
    warnings.resetwarnings()  # the child runner starts with PYTHONWARNINGS=ignore
    warnings.simplefilter("default")  # Python's own default: once per place
    captured = io.StringIO()
    imported = {}
    with contextlib.redirect_stderr(captured):
        for name in MODULES:
            try:
                importlib.import_module(name)
                imported[name] = None
            except Exception as exc:  # noqa: BLE001 - report, the parent decides
                imported[name] = f"{type(exc).__name__}: {exc}"
        warnings.warn("an ordinary warning keeps its source line")
    later = subprocess.run([sys.executable, "-W", "default", "-c", "import megatron.core.optimizer"], env={**os.environ, "PYTHONWARNINGS": "default"},
                           capture_output=True, text=True, check=False, cwd=os.getcwd()) if groups == "and-a-later-process" else None
    return {"stderr": captured.getvalue(), "imported": imported, "later": later.stderr if later else None}
