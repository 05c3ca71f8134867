"""Run a script of the target (pretrain_gpt.py) as a torchrun worker: `python -m rocmpatch.smoke.script
TARGET SCRIPT ARGS...`. The target goes first on sys.path (as when the script is run from the tree) and
the worker dies with torchrun (processes.die_with_parent).
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

from rocmpatch.smoke.child import put_target_first
from rocmpatch.processes import die_with_parent

if __name__ == "__main__":
    die_with_parent()
    target, script, *args = sys.argv[1:]
    put_target_first(target)
    path = str(Path(target) / script)
    sys.argv = [path, *args]
    runpy.run_path(path, run_name="__main__")
