"""Where the project's shipped files are: the checkout's ``data/``, ``envs/`` and
``experiments/`` folders.

The README's set-up installs the package editable, so they sit beside the
``ctxsim`` package. A plain ``pip install`` copies only the package into
site-packages; then they are looked up in the working directory, so commands run
from a checkout still find the shipped scenarios, env specs and experiments (the
deployable runtime needs none of them).
"""

from __future__ import annotations

from pathlib import Path

#: the folder that holds the ``ctxsim`` package
PACKAGE_PARENT = Path(__file__).resolve().parent.parent


def find_root(package_parent: Path, cwd: Path) -> Path:
    """``package_parent`` when it holds ``data/`` (a checkout), else ``cwd``."""
    return package_parent if (package_parent / "data").is_dir() else cwd


#: the checkout the shipped files are read from (resolved once, at import)
ROOT = find_root(PACKAGE_PARENT, Path.cwd())
DATA_DIR = ROOT / "data"
ENVS_DIR = ROOT / "envs"
EXPERIMENTS_DIR = ROOT / "experiments"
