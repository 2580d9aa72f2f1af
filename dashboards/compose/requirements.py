"""The collector image's requirements, read from pyproject.toml: every dependency but torch,
plus the W&B, SwanLab and TensorBoard extras.

``python requirements.py pyproject.toml > requirements.txt``: the Dockerfile installs these,
then rltel itself with ``pip install --no-deps``. The collector never imports torch (a test
runs the compose command with torch unimportable), so the image leaves out its gigabytes.
Standard library only (Python 3.11+), so it runs before anything is installed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import tomllib

EXTRAS = ("wandb", "swanlab", "tensorboard")
"""The experiment-tracker bridges the collector runs."""
LEFT_OUT = frozenset({"torch"})
"""Dependencies of the training side only."""


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower()


def collector_requirements(pyproject: Path) -> list[str]:
    """The pinned requirement strings, in pyproject order.

    Raises:
        KeyError: an extra of :data:`EXTRAS` is missing from pyproject.toml.
    """
    project = tomllib.loads(pyproject.read_text())["project"]
    required = [r for r in project["dependencies"] if _name(r) not in LEFT_OUT]
    for extra in EXTRAS:
        required += project["optional-dependencies"][extra]
    return required


def main(argv: list[str] | None = None) -> None:
    """Print the requirements of the pyproject.toml given as the only argument."""
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0] if args else "pyproject.toml")
    print("\n".join(collector_requirements(path)))


if __name__ == "__main__":
    main()
