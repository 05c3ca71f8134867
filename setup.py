"""Only one thing pyproject.toml cannot say: bundle the series (and the example launch script) into the wheel.

patchsets/ and upstream.lock live at the top of the repository (where people edit them); a built
wheel carries copies in rocmpatch/_bundled/ so an installed rocmpatch works outside the repo.
An editable install reads the checkout directly (see rocmpatch/series.py).
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildPyWithSeries(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        bundled = Path(self.build_lib) / "rocmpatch" / "_bundled"
        shutil.rmtree(bundled, ignore_errors=True)
        if (ROOT / "patchsets").is_dir():
            shutil.copytree(ROOT / "patchsets", bundled / "patchsets")
        if (ROOT / "examples" / "pretrain_gpt_rocm.sh").is_file():  # rocmpatch example
            (bundled / "examples").mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / "examples" / "pretrain_gpt_rocm.sh", bundled / "examples" / "pretrain_gpt_rocm.sh")
        if (ROOT / "upstream.lock").is_file():
            bundled.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / "upstream.lock", bundled / "upstream.lock")


setup(cmdclass={"build_py": BuildPyWithSeries})
