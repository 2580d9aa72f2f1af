"""A dashboard written as TypeScript that Grafana's own schema types check.

One ``.ts`` file per dashboard: each panel's ``options`` ``satisfies`` its panel kind's
``Options`` and its ``fieldConfig.defaults.custom`` the kind's ``FieldConfig`` (both from
``@grafana/schema``'s raw composable types), each unit Grafana's unit list, each panel
``Panel`` (or ``RowPanel``), each template variable ``VariableModel``, and the dashboard,
built from those named parts, ``Dashboard``. ``tsc`` names only the first unknown key of an
object literal, so every one of those objects is a statement of its own; every value is on
a line of its own, and :class:`Source` says what each line holds, so a finding names the
board, the panel and the key.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

UNIT_KEYS = (("fieldConfig", "defaults", "unit"), ("options", "yAxis", "unit"),
             ("options", "cellValues", "unit"))  # fmt: skip
"""Where a panel names a unit (besides ``unit`` field overrides)."""
NOTHING = "Record<string, never>"
"""The type of options a panel kind does not declare: any key is a finding."""
UNKNOWN_KIND = '"a panel kind of @grafana/schema"'
"""The type a panel's ``type`` is checked against when the package has no types for it."""


@dataclass(frozen=True, slots=True)
class PanelKind:
    """A panel plugin's generated types: the module, and which of the two it declares."""

    module: str
    options: bool
    field_config: bool


@dataclass(frozen=True, slots=True)
class Source:
    """TypeScript text and, for each of its lines, the dashboard place that line holds."""

    text: str
    where: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Ref:
    """A constant declared earlier in the file, used by name inside a literal."""

    name: str


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.where: list[str] = []

    def emit(self, text: str, where: str) -> None:
        self.lines.append(text)
        self.where.append(where)

    def statement(self, name: str, value: object, type_: str, where: str) -> None:
        """``const name: type_ = <value>;`` over as many lines as the value needs.

        Typed, not inferred: where the constant is used in a later literal, its type is
        ``type_``, so a finding about the value is reported once, here.
        """
        self._value(value, where, 0, f"const {name}: {type_} = ", ";")

    def satisfies(self, name: str, value: object, type_: str, where: str) -> None:
        """``export const name = <value> satisfies type_;``."""
        self._value(value, where, 0, f"export const {name} = ", f" satisfies {type_};")

    def _value(self, value: object, where: str, depth: int, head: str, tail: str) -> None:
        pad = "  " * depth
        if isinstance(value, dict) and value:
            self.emit(f"{pad}{head}{{", where)
            for key, item in value.items():
                self._value(item, f"{where}.{key}", depth + 1, f"{json.dumps(key)}: ", ",")
            self.emit(f"{pad}}}{tail}", where)
        elif isinstance(value, list) and value:
            self.emit(f"{pad}{head}[", where)
            for i, item in enumerate(value):
                self._value(item, f"{where}[{i}]", depth + 1, "", ",")
            self.emit(f"{pad}]{tail}", where)
        elif isinstance(value, _Ref):
            self.emit(f"{pad}{head}{value.name}{tail}", where)
        else:
            self.emit(f"{pad}{head}{json.dumps(value)}{tail}", where)


def _alias(kind: str) -> str:
    return "kind_" + "".join(ch if ch.isalnum() else "_" for ch in kind)


def units(panel: dict) -> Iterator[tuple[str, object]]:
    """``(key path, unit)`` of every unit a panel names."""
    for keys in UNIT_KEYS:
        node: object = panel
        for key in keys:
            node = node.get(key) if isinstance(node, dict) else None
        if node is not None:
            yield ".".join(keys), node
    overrides = panel.get("fieldConfig", {}).get("overrides", [])
    for i, override in enumerate(overrides):
        for j, prop in enumerate(override.get("properties", [])):
            if prop.get("id") == "unit":
                yield f"fieldConfig.overrides[{i}].properties[{j}].value", prop.get("value")


def _panel(w: _Writer, board: str, index: int, panel: dict, kinds: Mapping[str, PanelKind]) -> _Ref:
    """The statements of one panel; the reference to its constant."""
    name = f"panel_{index}"
    where = f"{board}: panel {panel.get('id')} {panel.get('title')!r} ({panel.get('type')})"
    for i, (path, unit) in enumerate(units(panel)):
        w.statement(f"{name}_unit_{i}", unit, "Unit", f"{where}.{path}")
    if panel.get("type") == "row":
        w.statement(name, panel, "Json<RowPanel>", where)
        return _Ref(name)
    body = dict(panel)
    kind = kinds.get(str(panel.get("type")))
    if kind is None:  # no generated types for it: a finding of its own
        w.emit(f"const {name}_kind: {UNKNOWN_KIND} = {json.dumps(panel.get('type'))};", where)
        kind = PanelKind("", options=False, field_config=False)
    alias = _alias(str(panel["type"]))
    if "options" in panel:
        options_type = f"Json<{alias}.Options>" if kind.options else NOTHING
        w.statement(f"{name}_options", panel["options"], options_type, f"{where}.options")
        body["options"] = _Ref(f"{name}_options")
    defaults = panel.get("fieldConfig", {}).get("defaults", {})
    if isinstance(defaults, dict) and "custom" in defaults:
        custom_type = f"Json<{alias}.FieldConfig>" if kind.field_config else NOTHING
        custom_where = f"{where}.fieldConfig.defaults.custom"
        w.statement(f"{name}_custom", defaults["custom"], custom_type, custom_where)
        body["fieldConfig"] = {
            **panel["fieldConfig"],
            "defaults": {**defaults, "custom": _Ref(f"{name}_custom")},
        }
    w.statement(name, body, "Json<Panel>", where)
    return _Ref(name)


def board_source(board_name: str, board: dict, kinds: Mapping[str, PanelKind]) -> Source:
    """The TypeScript of one dashboard; ``kinds``: panel type -> its generated types."""
    w = _Writer()
    w.emit('import type { Dashboard, Panel, RowPanel, VariableModel } from "@grafana/schema";', "")
    w.emit('import type { Json } from "./json";', "")
    w.emit('import type { Unit } from "./units";', "")
    used = sorted({str(p.get("type")) for p in board.get("panels", [])} & set(kinds))
    for kind in used:
        w.emit(f'import type * as {_alias(kind)} from "{kinds[kind].module}";', "")
    top = dict(board)
    panels = board.get("panels")
    if isinstance(panels, list):
        top["panels"] = [_panel(w, board_name, i, p, kinds) for i, p in enumerate(panels)]
    variables = board.get("templating", {}).get("list")
    if isinstance(variables, list):
        refs = []
        for i, variable in enumerate(variables):
            where = f"{board_name}: variable {variable.get('name')!r}"
            w.statement(f"variable_{i}", variable, "Json<VariableModel>", where)
            refs.append(_Ref(f"variable_{i}"))
        top["templating"] = {**board["templating"], "list": refs}
    w.satisfies("dashboard", top, "Json<Dashboard>", f"{board_name}: dashboard")
    return Source("\n".join(w.lines) + "\n", tuple(w.where))
