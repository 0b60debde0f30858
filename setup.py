"""Build hook: the wheel carries the notebooks, the data cards and the measured frontiers as package data.

Their home is the top-level ``notebooks/``, ``data_cards/`` and ``benchmarks/`` folders (what a reader of the
repository finds); a build copies ``notebooks/*.ipynb``, ``data_cards/*.md`` and ``benchmarks/frontier-*.json`` (the
points the two_site and eight_cell notebooks draw) into ``islands_kit/_resources/`` inside the wheel, where
``islands_kit.resources`` finds them once installed. An editable install reads the top-level folders directly.
Everything else is in pyproject.toml.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
RESOURCES = {"notebooks": "*.ipynb", "data_cards": "*.md", "benchmarks": "frontier-*.json"}


class build_py_with_resources(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        for folder, pattern in RESOURCES.items():
            files = sorted((ROOT / folder).glob(pattern))
            if not files:
                raise SystemExit(f"setup.py: no {folder}/{pattern} to package (build from the repository or an sdist)")
            dst = Path(self.build_lib) / "islands_kit" / "_resources" / folder
            dst.mkdir(parents=True, exist_ok=True)
            for f in files:
                shutil.copyfile(f, dst / f.name)


setup(cmdclass={"build_py": build_py_with_resources})
