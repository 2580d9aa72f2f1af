"""Local run directories of the file-writing sinks (W&B, SwanLab, TensorBoard)."""

from __future__ import annotations

import os


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
