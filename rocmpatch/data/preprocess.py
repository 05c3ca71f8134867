"""The target tree's own tools/preprocess_data.py, run in a child process with this Python.

What a tree accepts is asked of the tree (its `--help`), never looked up by release: the tokenizer
types its --tokenizer-type lists (HuggingFaceTokenizer where it exists, GPT2BPETokenizer otherwise)
and its flags (--log-interval is newer than some trees).
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rocmpatch.data.tokenizer import GPT2_TYPE, HF_TYPE, last_error_line
from rocmpatch.errors import EnvironmentProblem, TargetRefused
from rocmpatch.target import require_tree
from rocmpatch.processes import dying_with_us

SCRIPT = Path("tools") / "preprocess_data.py"
HELP_SECONDS = 300  # the first import of torch and megatron in a fresh environment is slow
PROGRESS = re.compile(r"Processed (\d+) documents")
_FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
_TOKENIZER_TYPES = re.compile(r"--tokenizer-type\s*\{([^}]*)\}")
STOP_GRACE = 5.0
STALLED_SECONDS = 30.0


@dataclass(frozen=True)
class TreeAbilities:
    tokenizer_types: frozenset[str]
    flags: frozenset[str]

    def tokenizer_type(self) -> str:
        """HuggingFaceTokenizer where the tree has it, else GPT2BPETokenizer (vocab.json/merges.txt)."""
        if HF_TYPE in self.tokenizer_types:
            return HF_TYPE
        if GPT2_TYPE in self.tokenizer_types and {"--vocab-file", "--merge-file"} <= self.flags:
            return GPT2_TYPE
        raise TargetRefused(f"the tree's {SCRIPT} takes neither {HF_TYPE} nor {GPT2_TYPE} (it lists: {', '.join(sorted(self.tokenizer_types)) or 'none'})",
                            hint="prepare the data with a tree that has one of them; the .bin/.idx it writes serve any release")


def script_of(tree: Path) -> Path:
    require_tree(tree, SCRIPT.as_posix())  # missing, a file, inside a checkout, or no tools/preprocess_data.py
    return tree / SCRIPT


def child_environment(tree: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The tree first on the path (its script only appends itself: an installed megatron would win),
    output unbuffered (progress a line at a time through the pipe)."""
    path = os.pathsep.join([str(tree), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {**os.environ, **(extra or {}), "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}


def start_help(tree: Path, workdir: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(script_of(tree)), "--help"], cwd=workdir, env=child_environment(tree),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                            errors="replace", start_new_session=True)


def finish_help(tree: Path, child: subprocess.Popen) -> TreeAbilities:
    try:
        output, _ = child.communicate(timeout=HELP_SECONDS)
    except subprocess.TimeoutExpired:
        stop(child)
        raise EnvironmentProblem(f"{tree / SCRIPT} --help gave no answer within {HELP_SECONDS} s") from None
    if child.returncode != 0:
        raise EnvironmentProblem(f"{tree / SCRIPT} --help failed in {sys.executable}: {last_error_line(output)}",
                                 hint="install the tree's dependencies in this Python (docs/install.md, section 5)")
    found = _TOKENIZER_TYPES.search(output)
    types = frozenset(t.strip() for t in found[1].split(",")) if found else frozenset()
    return TreeAbilities(types, frozenset(_FLAG.findall(output)))


def stop(child: subprocess.Popen) -> None:
    """End a child and everything it started (its own session: preprocess_data.py's worker pool)."""
    if child.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, STOP_GRACE), (signal.SIGKILL, None)):
        try:
            os.killpg(child.pid, sig)
        except ProcessLookupError:
            return
        try:
            child.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run(tree: Path, args: list[str], *, workdir: Path, log: Path, env: dict[str, str],
        on_progress: Callable[[int], None]) -> tuple[int, str]:
    """preprocess_data.py ARGS with its output in `log`; on_progress(documents) for each of its
    "Processed N documents" lines as it prints them. Returns (exit code, the last error line).

    Its encoding runs in a multiprocessing child whose failure leaves the main process waiting
    forever for a result: after a traceback and STALLED_SECONDS of silence it is stopped."""
    command = [sys.executable, str(script_of(tree)), *args]
    with open(log, "w", encoding="utf-8") as record:
        record.write("$ " + " ".join(command) + "\n")
        record.flush()
        child = subprocess.Popen(command, cwd=workdir, env=child_environment(tree, env), stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, errors="replace",
                                 bufsize=1, start_new_session=True, preexec_fn=dying_with_us())
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=_pump, args=(child.stdout, lines), daemon=True).start()
        tail: list[str] = []
        failed_at: float | None = None
        try:
            while True:
                try:
                    line = lines.get(timeout=1.0)
                except queue.Empty:
                    if failed_at is not None and time.monotonic() - failed_at > STALLED_SECONDS:
                        stop(child)
                        record.write(f"rocmpatch: stopped it: no output for {STALLED_SECONDS} s after a traceback\n")
                        return child.returncode or 1, last_error_line("".join(tail))
                    continue
                if line is None:
                    break
                record.write(line)
                record.flush()
                tail = (tail + [line])[-50:]
                if line.startswith("Traceback (most recent call last)"):
                    failed_at = time.monotonic()
                elif failed_at is not None:
                    failed_at = time.monotonic()
                found = PROGRESS.search(line)
                if found:
                    on_progress(int(found[1]))
            child.wait()
        finally:
            stop(child)
    return child.returncode, last_error_line("".join(tail))


def _pump(stream, lines: "queue.Queue[str | None]") -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)
