"""Local run directories of the file-writing sinks (W&B, SwanLab, TensorBoard)."""

from __future__ import annotations

import os
from pathlib import Path


def writable_dir(path: os.PathLike | str) -> str:
    """Create ``path`` if needed and return it as an absolute path once it is writable.

    Raises:
        OSError: it cannot be created or is not writable; the message names the path.
    """
    path = os.fspath(path)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot create run directory {path}: {exc.strerror}") from exc
    if not os.access(path, os.W_OK):
        raise PermissionError(f"run directory {path} is not writable")
    return os.path.abspath(path)


def link_dir(link: os.PathLike | str, target: os.PathLike | str) -> bool:
    """Make ``link`` a relative symbolic link to the directory ``target`` (it stays right when
    a volume holding both is mounted elsewhere); False when something else is there.

    Nothing to do when ``link`` is ``target`` or holds it; a link to elsewhere is replaced.

    Raises:
        OSError: the link cannot be made.
    """
    link, target = Path(os.path.abspath(link)), Path(os.path.abspath(target))
    if link == target or link in target.parents:
        return True
    if link.is_symlink():
        if link.resolve() == target.resolve():
            return True
    elif link.exists():
        return False
    link.parent.mkdir(parents=True, exist_ok=True)
    fresh = link.with_name(f".{link.name}.{os.getpid()}.link")
    os.symlink(os.path.relpath(target, link.parent), fresh, target_is_directory=True)
    try:
        os.replace(fresh, link)
    except OSError:
        fresh.unlink()
        raise
    return True
