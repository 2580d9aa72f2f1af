"""The collector's own requirements, read from the installed ``rltel`` distribution.

``python -m collector.requirements`` prints them, one per line: every dependency of rltel
but those of the training side only (:data:`TRAINING_ONLY`), plus the extras of the sinks the
collector runs (:data:`BRIDGES`). The collector image installs rltel's wheel with
``--no-deps``, then these: the metadata of the package as it installs decides, so a new
dependency or extra cannot be left out of the image by a list kept elsewhere.
"""

from __future__ import annotations

import re
from importlib import metadata

DISTRIBUTION = "rltel"
BRIDGES = ("wandb", "swanlab", "tensorboard", "trackio")
"""The experiment-tracker bridges the collector runs (extras of rltel): W&B, SwanLab,
TensorBoard and Trackio."""
TRAINING_ONLY = frozenset({"torch", "tqdm"})
"""Dependencies the collector never imports: torch (recording, reduction) and tqdm (the
demo's progress bar)."""

_EXTRA = re.compile(r"""extra\s*==\s*['"]([^'"]+)['"]""")


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;(]", requirement, maxsplit=1)[0].lower()


def collector_requirements(distribution: str = DISTRIBUTION) -> list[str]:
    """The requirement strings (markers dropped), in the distribution's order.

    Raises:
        PackageNotFoundError: ``distribution`` is not installed.
        KeyError: an extra of :data:`BRIDGES` is not declared by the distribution.
    """
    declared = metadata.metadata(distribution).get_all("Provides-Extra") or []
    missing = [extra for extra in BRIDGES if extra not in declared]
    if missing:
        raise KeyError(f"{distribution} declares no extra {', '.join(missing)}")
    wanted = []
    for requirement in metadata.requires(distribution) or []:
        spec, _, marker = requirement.partition(";")
        extra = _EXTRA.search(marker)
        needed = _name(spec) not in TRAINING_ONLY if extra is None else extra[1] in BRIDGES
        if needed:
            wanted.append(spec.strip())
    return wanted


def main() -> None:
    """Print the collector's requirements, one per line."""
    print("\n".join(collector_requirements()))


if __name__ == "__main__":
    main()
