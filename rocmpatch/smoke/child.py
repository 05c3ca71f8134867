"""What every stage child shares: its config, the patched tree first on sys.path, and the result line.

A stage child is `python -m rocmpatch.smoke.<stage> '<config json>'`. It prints whatever it likes, then
its result as one JSON object on its last stdout line ({"status": ..., "detail": ..., ...}); the runner
reads that line. An exception becomes a failed result naming the files of the target it went through,
innermost first, so the runner can say which patch is likely responsible.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Any, Callable

# Top-level modules that exist only for NVIDIA GPUs; any name ending in "_cuda" is one too
# (Megatron's and apex's compiled extensions: scaled_masked_softmax_cuda, fused_layer_norm_cuda, ...).
NVIDIA_ONLY = ("apex", "amp_C", "transformer_engine", "transformer_engine_extensions", "flash_attn",
               "flash_attn_2_cuda", "fused_weight_gradient_mlp_cuda", "fused_layer_norm_cuda")

# What torch and Megatron say when code hard-wired to a GPU runs on a machine without one.
CUDA_ONLY_MESSAGES = ("Torch not compiled with CUDA", "Found no NVIDIA driver", "No CUDA GPUs are available",
                      "no HIP GPUs", "No HIP GPUs")


# A stage says what it is doing with a stderr line starting with this; the runner shows it as progress.
STEP_MARKER = "rocmpatch-smoke-step: "
SLOW_FIRST_IMPORT = ("the first import in a new environment can take a few minutes: Python compiles every module "
                     "to bytecode (.pyc) and the OS reads the libraries from disk for the first time; later runs take seconds")


def step(message: str) -> None:
    """Tell the runner (and the person watching) what this stage is doing now."""
    sys.stderr.write(STEP_MARKER + message + "\n")
    sys.stderr.flush()


def is_nvidia_only(module_name: str) -> bool:
    top = module_name.split(".", 1)[0]
    return top in NVIDIA_ONLY or top.endswith("_cuda")


class StageFailure(Exception):
    """A check said no: `detail` is the one line shown; `extra` goes into the JSON result."""

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra


def put_target_first(target: str) -> None:
    """The patched tree must win over any installed megatron / megatron-core (and over the cwd)."""
    sys.path[:] = [target] + [p for p in sys.path if p not in ("", ".", target)]


def target_root(target: str | Path) -> str:
    return os.path.realpath(target) + os.sep


def in_target(filename: str, root: str) -> str | None:
    """`filename` relative to the target whose target_root is `root`, or None when outside it
    (or a pseudo-file such as <frozen importlib._bootstrap> or <string>)."""
    if filename.startswith("<"):
        return None
    path = os.path.realpath(filename)
    return Path(path[len(root):]).as_posix() if path.startswith(root) else None


def target_files(tb, target: str) -> list[str]:
    """Paths relative to the target of the traceback's frames inside it, innermost first."""
    root = target_root(target)
    seen: list[str] = []
    for frame in reversed(traceback.extract_tb(tb)):
        rel = in_target(frame.filename, root)
        if rel is not None and rel not in seen:
            seen.append(rel)
    return seen


def describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def failure_from_exception(exc: BaseException, target: str | None) -> dict[str, Any]:
    result: dict[str, Any] = {"status": "failed", "detail": describe(exc)}
    if target:
        result["culprits"] = target_files(exc.__traceback__, target)
    if isinstance(exc, ImportError) and exc.name:
        result["missing_module"] = exc.name
    result["traceback"] = "".join(traceback.format_exception(exc))[-4000:]
    return result


def _interrupted(signum, frame) -> None:  # noqa: ARG001 - signal handler protocol
    raise KeyboardInterrupt


def stage_main(body: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """Run one stage body and print its result as the last stdout line, whatever happens."""
    config = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    target = config.get("target")
    # The runner stops a stage with SIGTERM: as a KeyboardInterrupt, so that what the stage started
    # in a session of its own (torchrun) is stopped too (supervise.run_child), before the result line.
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        result = body(config)
        result.setdefault("status", "passed")
    except StageFailure as failure:
        result = {"status": "failed", "detail": failure.detail, **failure.extra}
    except BaseException as exc:  # noqa: BLE001 - a stage must always report, never die silently
        result = failure_from_exception(exc, target)
    sys.stderr.flush()
    sys.stdout.write("\n" + json.dumps(result, default=str) + "\n")
    sys.stdout.flush()
    # Skip interpreter teardown: a wedged GPU runtime or a leftover process group can hang at exit.
    os._exit(0)
