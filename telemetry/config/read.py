"""Reading a config in any of AReaL's forms and validating it against a typed schema.

A config arrives as a mapping, a YAML path, an OmegaConf ``DictConfig``, an AReaL
dataclass instance (read by attributes) or AReaL's whole experiment config. Every form
becomes plain data with ``${...}`` interpolations resolved by OmegaConf, as AReaL resolves
them (an unresolvable one is an error naming its key and the reference). :func:`validate`
then builds a schema class (a frozen pydantic dataclass) and turns pydantic's errors into
one :class:`~telemetry.model.errors.ConfigError` naming each full key, the value and what was
expected. The checks of what a value names (:func:`check_endpoint`, :func:`check_ca_file`,
:func:`check_cert_pair`) raise :class:`FieldRule` from a section's ``__post_init__``, so a
wrong endpoint or TLS file fails when the config is read, naming its key.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import os
import ssl
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError

from telemetry.model.errors import ConfigError

__all__ = [
    "FieldRule",
    "check_ca_file",
    "check_cert_pair",
    "check_endpoint",
    "read_section",
    "resolve",
    "to_plain",
    "validate",
]

logger = logging.getLogger(__name__)
T = TypeVar("T")
SECRET_KEYS = frozenset({"api_key", "wandb_api_key", "headers", "token", "bearer_token"})


class FieldRule(ValueError):
    """A cross-field rule failed; ``field`` is the key it names, relative to its section."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


MAX_PORT = 65535
_NOT_IN_ADDRESS = frozenset(" \t\n/?#@")


def check_endpoint(name: str, value: str) -> None:
    """``value`` is ``HOST:PORT`` or ``http(s)://HOST:PORT`` (IPv6 in brackets), port 1-65535."""
    text = value
    for scheme in ("http://", "https://"):
        if text.startswith(scheme):
            text = text.removeprefix(scheme).removesuffix("/")
    host, sep, port = text.rpartition(":")
    bare = host.removeprefix("[").removesuffix("]")
    bracketed = bare != host
    if (
        not sep
        or not bare
        or _NOT_IN_ADDRESS & set(text)
        or (":" in bare and not bracketed)
        or not (port.isascii() and port.isdigit() and 1 <= int(port) <= MAX_PORT)
    ):
        raise FieldRule(
            name,
            f"must be HOST:PORT or http(s)://HOST:PORT with a port 1-{MAX_PORT} "
            f"(IPv6 as [::1]:4317), got {value!r}",
        )


def _ssl_reason(exc: ssl.SSLError) -> str:
    return exc.reason.lower().replace("_", " ") if exc.reason else str(exc)


def check_ca_file(name: str, value: str) -> None:
    """``value`` names a file of PEM certificates (a CA bundle, or a certificate chain)."""
    if not Path(value).is_file():
        raise FieldRule(name, f"names no file: {value!r}")
    try:
        ssl.create_default_context().load_verify_locations(cafile=value)
    except ssl.SSLError as exc:
        raise FieldRule(
            name, f"is not a PEM certificate file: {value!r} ({_ssl_reason(exc)})"
        ) from None


def check_cert_pair(cert_file: str, key_file: str) -> None:
    """``cert_file`` and ``key_file`` name a PEM certificate and its unencrypted private key;
    the rule names whichever key is wrong (``cert_file`` or ``key_file``)."""
    check_ca_file("cert_file", cert_file)
    if not Path(key_file).is_file():
        raise FieldRule("key_file", f"names no file: {key_file!r}")
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert_file, key_file, b"")
    except ssl.SSLError as exc:
        raise FieldRule(
            "key_file",
            f"is not the unencrypted PEM private key of cert_file: {key_file!r} "
            f"({_ssl_reason(exc)})",
        ) from None


def to_plain(value: Any) -> Any:
    """Plain data (dicts, lists, scalars) from mappings, dataclasses, OmegaConf and models.

    AReaL dataclass instances are read by attributes; enums become their value and paths
    strings. Interpolations in a ``DictConfig`` are resolved (see :func:`resolve`); a missing
    value stays ``"???"`` for :func:`read_section` to judge.
    """
    if _is_omegaconf(value):
        return resolve(value, missing_ok=True)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if hasattr(value, "model_dump") and callable(value.model_dump):
        return to_plain(value.model_dump())
    if isinstance(value, Mapping):
        return {key: to_plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(item) for item in value]
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return value


def _is_omegaconf(value: Any) -> bool:
    return type(value).__module__.startswith("omegaconf")


def resolve(document: Any, missing_ok: bool = False) -> Any:
    """``document`` with every ``${...}`` resolved by OmegaConf (a plain copy).

    With ``missing_ok`` a missing value (``???``) stays ``"???"``.

    Raises:
        ConfigError: an interpolation cannot be resolved or (unless ``missing_ok``) a value
            is missing, naming its full key and the reference.
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if not _is_omegaconf(document):
        if not _has_interpolation(document):
            return document
        try:
            document = OmegaConf.create(document)
        except OmegaConfBaseException as exc:
            raise ConfigError(f"config cannot be read by OmegaConf: {exc.msg}") from None
    try:
        return OmegaConf.to_container(document, resolve=True, throw_on_missing=not missing_ok)
    except OmegaConfBaseException as exc:
        key = str(getattr(exc, "full_key", "") or "")
        raw = _raw_value(document, key)
        if raw == "???":
            raise ConfigError(f"{key}: no value given (???)") from None
        reason = str(getattr(exc, "msg", exc)).splitlines()[0]
        raise ConfigError(f"{key}: cannot resolve interpolation {raw} ({reason})") from None


def _raw_value(document: Any, key: str) -> Any:
    from omegaconf import OmegaConf

    root = document
    while root._get_parent() is not None:
        root = root._get_parent()
    node = root
    for part in key.split("."):
        node = node._get_node(part)
        if node is None:
            return OmegaConf.select(root, key, throw_on_resolution_failure=False)
    return node._value()


def _has_interpolation(value: Any) -> bool:
    if isinstance(value, str):
        return "${" in value or value == "???"
    if isinstance(value, Mapping):
        return any(_has_interpolation(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_interpolation(v) for v in value)
    return False


def read_section(source: Any, root: str) -> tuple[Any, dict | None]:
    """Section ``root`` as plain, resolved data, and the whole document it came from.

    ``source`` is a mapping, a YAML path, a ``DictConfig`` or a dataclass instance holding
    either the section itself or a whole experiment config with a ``root`` key (AReaL's
    ``config``); the whole document is returned only in the second case. Interpolations
    resolve against the whole document, so a section alone that refers to its parents
    (``${experiment_name}``) fails naming the key. Only the section must be complete: a
    missing value (``???``) elsewhere in a whole config stays ``"???"``, as AReaL's
    StatsLogger takes a config whose other sections are unset.

    Raises:
        ConfigError: the file cannot be read or parsed, an interpolation fails, or a value
            of the section is missing.
    """
    document = _load(source, root)
    if isinstance(document, Mapping) and isinstance(document.get(root), Mapping):
        whole = resolve(dict(document), missing_ok=True)
        _require_values(whole[root], root)
        return whole[root], whole
    return resolve({root: document})[root], None


def _require_values(value: Any, key: str) -> None:
    """Raise naming the first missing value (``???``) under ``key``."""
    if value == "???":
        raise ConfigError(f"{key}: no value given (???)")
    if isinstance(value, Mapping):
        for name, item in value.items():
            _require_values(item, f"{key}.{name}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _require_values(item, f"{key}.{index}")


def _where(exc: Exception) -> str:
    """A YAML error in one line: ``line L, column C: what is wrong (while ...)``."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"{where}{problem}" + (f" ({context})" if context else "")


def _load(source: Any, root: str) -> Any:
    if source is None:
        return {}
    if isinstance(source, (str, os.PathLike)):
        import yaml

        path = Path(source)
        try:
            text = path.read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read {root} config {str(path)!r}: {exc}") from None
        try:
            return to_plain(yaml.safe_load(text) or {})
        except yaml.YAMLError as exc:
            raise ConfigError(
                f"{root} config {str(path)!r} is not valid YAML: {_where(exc)}"
            ) from None
    return to_plain(source)


def validate(
    cls: type[T], data: Any, root: str, ignored: Mapping[str, frozenset[str]] | None = None
) -> T:
    """``cls`` built from plain ``data``; AReaL keys in ``ignored`` are dropped with a warning.

    Args:
        cls: a frozen pydantic dataclass (the section's schema).
        data: plain data of the section, or an instance of ``cls``.
        root: the section's key (``stats_logger``), the prefix of every key in errors.
        ignored: section path ("" = the root) -> keys AReaL has that rltel does not implement.

    Raises:
        ConfigError: every invalid value, one per line, naming its full key.
    """
    if isinstance(data, cls):
        return data
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{root} must be a mapping, got {type(data).__name__}")
    data = _drop_ignored(dict(data), root, ignored or {})
    try:
        return TypeAdapter(cls).validate_python(data)
    except ValidationError as exc:
        lines = [_message(cls, root, error) for error in exc.errors()]
        raise ConfigError("; ".join(dict.fromkeys(lines))) from None


def _drop_ignored(data: dict, root: str, ignored: Mapping[str, frozenset[str]]) -> dict:
    dropped = []
    for section, keys in ignored.items():
        holder = data
        for part in [p for p in section.split(".") if p]:
            nxt = holder.get(part) if isinstance(holder, dict) else None
            if not isinstance(nxt, Mapping):
                holder = None
                break
            holder[part] = nxt = dict(nxt)
            holder = nxt
        if not isinstance(holder, dict):
            continue
        for key in sorted(keys & set(holder)):
            del holder[key]
            dropped.append(".".join(p for p in (root, section, key) if p))
    if dropped:
        logger.warning(
            "%s: AReaL keys that rltel does not implement are ignored: %s",
            root,
            ", ".join(dropped),
        )
    return data


def _message(cls: type, root: str, error: Mapping[str, Any]) -> str:
    loc = [str(part) for part in error["loc"]]
    kind = error["type"]
    rule = (error.get("ctx") or {}).get("error")
    if isinstance(rule, FieldRule):
        return f"{'.'.join([root, *loc, rule.field])} {rule}"
    path = ".".join([root, *loc])
    value = error.get("input")
    if kind in ("unexpected_keyword_argument", "extra_forbidden"):
        known = ", ".join(_field_names(cls, loc[:-1]))
        return f"unknown key {path} (known: {known})"
    if kind in ("dataclass_type", "dataclass_args_type", "model_type", "dict_type"):
        return f"{path} must be a mapping, got {type(value).__name__} {value!r}"
    shown = "<hidden>" if loc and loc[-1] in SECRET_KEYS else repr(value)
    if kind == "value_error":
        return f"{path}: {error['msg'].removeprefix('Value error, ')}, got {shown}"
    expected = error["msg"].replace("Input should be", "must be")
    return f"{path} {expected}, got {shown}"


def _field_names(cls: Any, loc: Sequence[str]) -> list[str]:
    for part in loc:
        names = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else ()
        if part not in names:
            return []
        cls = _dataclass_in(typing.get_type_hints(cls).get(part))
    return sorted(f.name for f in dataclasses.fields(cls)) if dataclasses.is_dataclass(cls) else []


def _dataclass_in(hint: Any) -> Any:
    if dataclasses.is_dataclass(hint):
        return hint
    for arg in typing.get_args(hint):
        if dataclasses.is_dataclass(arg):
            return arg
    return None
