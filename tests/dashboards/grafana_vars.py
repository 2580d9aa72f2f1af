"""Template variables in a Prometheus query, substituted as Grafana's data source does.

``interpolateQueryExpr`` in Grafana's ``datasource.ts``: a variable that allows several
values or "All" has each value regex-escaped for PromQL (``prometheusSpecialRegexEscape``)
and several values joined as ``(a|b)``; any other variable has only backslashes and quotes
escaped (``prometheusRegularEscape``). Built-in variables (``$__rate_interval``, ...) are
given by the caller; ``$name`` and ``${name}`` are both replaced, an unknown name raises.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")
_REGEX_SPECIAL = re.compile(r"[$^*{}\[\]'+?.()|]")
_LABEL_VALUES = re.compile(r"label_values\((.*),\s*(\w+)\)", re.DOTALL)


def formatted(variable: dict, values: Sequence[str]) -> str:
    """The text Grafana puts in a query for ``variable`` set to ``values``."""
    if not variable.get("multi") and not variable.get("includeAll"):
        (value,) = values
        return value.replace("\\", "\\\\").replace("'", "\\\\'")
    escaped = [
        _REGEX_SPECIAL.sub(r"\\\\\g<0>", value.replace("\\", "\\\\\\\\")) for value in values
    ]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def interpolate(
    expr: str,
    variables: Sequence[dict],
    chosen: Mapping[str, Sequence[str]],
    builtins: Mapping[str, str],
) -> str:
    """``expr`` with every variable replaced.

    Args:
        expr: a target's ``expr`` or a variable's ``definition``.
        variables: the dashboard's ``templating.list``.
        chosen: variable name -> the values selected.
        builtins: Grafana's own variables without the ``$`` (``__rate_interval`` -> ``4s``).

    Raises:
        KeyError: a variable that is neither a built-in nor chosen.
    """
    by_name = {variable["name"]: variable for variable in variables}

    def value(match: re.Match) -> str:
        name = match.group(1) or match.group(2)
        if name in builtins:
            return builtins[name]
        return formatted(by_name[name], chosen[name])

    return _VARIABLE.sub(value, expr)


def label_values_query(definition: str) -> tuple[str, str]:
    """``(series selector, label)`` of a ``label_values(selector, label)`` definition."""
    match = _LABEL_VALUES.fullmatch(definition.strip())
    if match is None:
        raise ValueError(f"not a label_values() query: {definition!r}")
    return match.group(1).strip(), match.group(2)
