"""Argument parsing for the ``rltel`` commands: one-line errors, checked value types, and
the optional libraries a command needs (named with the extra that installs them)."""

from __future__ import annotations

import argparse
import errno
import importlib.util
import math
import socket
from collections.abc import Callable, Iterable
from typing import NoReturn

from telemetry.model.errors import ConfigError

MAX_PORT = 65535
EXTRAS = {
    "wandb": "wandb",
    "swanlab": "swanlab",
    "tensorboard": "tensorboard",
    "trackio": "trackio",
    "matplotlib": "report",
    "transformers": "moe",
}
"""An optional library -> the ``rltel[...]`` extra that installs it (pyproject.toml)."""


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr (no usage block), exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}, got {text!r}")
        return value

    return parse


positive_int = int_at_least(1)
non_negative_int = int_at_least(0)


def seconds(text: str) -> float:
    """A finite number of seconds >= 0."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


def tcp_port(text: str) -> int:
    """A TCP port number, 0 (any free port) to 65535."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_PORT:
        raise argparse.ArgumentTypeError(
            f"must be a TCP port 0-{MAX_PORT} (0: any free port), got {text!r}"
        )
    return value


def port_in_use(host: str, port: int) -> bool:
    """Whether binding ``host:port`` fails now because something listens there.

    Uses SO_REUSEADDR like Python's HTTP servers and gRPC, so a port left in TIME_WAIT counts
    as free. Port 0 (any free port) is never in use; a host that does not resolve or is not
    local is not "in use" (binding it fails with its own error).
    """
    if port == 0:
        return False
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror:
        return False
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def check_bindable(section: str, host: str, port: int) -> None:
    """Raise a ConfigError naming the key to change when ``host:port`` cannot be bound now.

    Checked with sockets of our own before a server binds, so that the user reads one line
    naming ``<section>.host`` (a name that does not resolve, no address of it this machine's)
    or ``<section>.port`` (something listens on one of its addresses), not the server
    library's. Like gRPC, a name passes when one of its addresses binds (``localhost`` on a
    host without IPv6).
    """
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        found = socket.getaddrinfo(bare, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
        raise ConfigError(f"{section}.host: {host} does not resolve ({reason})") from None
    failures: list[OSError] = []
    for family, kind, proto, _, address in found:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                failures.append(exc)
    if any(exc.errno == errno.EADDRINUSE for exc in failures):
        raise ConfigError(
            f"{section}.port: {host}:{port} is in use; choose another port, or 0 for any free port"
        )
    if len(failures) < len(found):
        return
    first = failures[0]
    if first.errno == errno.EADDRNOTAVAIL:
        raise ConfigError(
            f"{section}.host: {host} is not an address of this machine ({first.strerror})"
        )
    raise ConfigError(f"{section}.host/{section}.port: cannot bind {host}:{port}: {first.strerror}")


def missing_libraries(libraries: Iterable[str]) -> list[str]:
    """Those of ``libraries`` that are not installed (found without importing them)."""
    return [name for name in libraries if importlib.util.find_spec(name) is None]


def install_line(libraries: Iterable[str]) -> str:
    """``"a, b not installed: pip install rltel[x,y]"`` for missing optional libraries."""
    names = list(libraries)
    extras = ",".join(sorted({EXTRAS[name] for name in names}))
    return f"{', '.join(names)} not installed: pip install rltel[{extras}]"


def missing_module_line(exc: ModuleNotFoundError) -> str:
    """One line for a failed import: the extra to install, or the module to reinstall."""
    if "pip install" in str(exc):  # the sinks' own messages name their extra
        return str(exc)
    top = (exc.name or "").partition(".")[0]
    if top in EXTRAS:
        return install_line([top])
    return f"module {exc.name!r} is missing: reinstall rltel (pip install -e . in the checkout)"
