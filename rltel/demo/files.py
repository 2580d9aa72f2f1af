"""What one ``rltel demo`` run wrote into its run directory, earlier runs' files left out.

:class:`RunFiles` notes every file of the run directory (path and modification time) before
the run; afterwards the files that are new or changed are this run's. Symbolic links (W&B's
``latest-run``) are neither followed nor listed.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path
from typing import TextIO


def files_in(root: Path) -> dict[Path, int]:
    """``path relative to root -> modification time (ns)`` of every regular file below it."""
    found: dict[Path, int] = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder, name)
            try:
                if not path.is_symlink():
                    found[path.relative_to(root)] = path.stat().st_mtime_ns
            except FileNotFoundError:  # removed while we looked (a sink's temporary file)
                continue
    return found


class RunFiles:
    """The files of ``run_dir`` now; :meth:`written` later lists the ones written since."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.before = files_in(run_dir)

    def written(self) -> list[Path]:
        """Files (relative to the run directory) that are new or changed since the start."""
        now = files_in(self.run_dir)
        return sorted(path for path, mtime in now.items() if self.before.get(path) != mtime)

    def wrote(self, entry: str) -> bool:
        """Whether this run wrote anything below ``entry`` (``tensorboard``, ``wandb``, ...)."""
        return any(path.parts[0] == entry and len(path.parts) > 1 for path in self.written())

    def entries(self) -> list[tuple[Path, int]]:
        """``(entry, files written below it)``: a top-level file or folder of the run
        directory, or one level deeper in a folder that held earlier runs' files."""
        earlier = {path.parts[0] for path in self.before if len(path.parts) > 1}
        counts: Counter[Path] = Counter()
        for path in self.written():
            depth = 2 if path.parts[0] in earlier else 1
            counts[Path(*path.parts[:depth])] += 1
        return sorted(counts.items())

    def show(self, stream: TextIO | None = None) -> None:
        """Print the entries this run wrote."""
        out = stream or sys.stdout
        entries = self.entries()
        if not entries:
            out.write(f"\nthis run wrote no files under {self.run_dir}\n")
            return
        lines = [f"\nrun files this run wrote under {self.run_dir}:"]
        for entry, count in entries:
            path = self.run_dir / entry
            if path.is_dir():
                lines.append(f"  {path}/  ({count} file{'s' if count != 1 else ''})")
            else:
                lines.append(f"  {path}")
        out.write("\n".join(lines) + "\n")
        out.flush()
