"""rocmpatch: a pinned, verified patch series that makes Megatron-LM run on ROCm."""

import os

# GitPython refuses to import when git is missing; several modules import it for type hints, so
# set this before any of them does and let rocmpatch.gitcmd report a missing git in one clear line.
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")

__version__ = "0.1.0"
