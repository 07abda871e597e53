"""A pod template read with Kubernetes' own rules, before anything is applied.

The shape comes from Kubernetes' published OpenAPI schema, as the `kubernetes-validate` package
ships it (the newest version it has, in its strict form: unknown fields are typos). Reading a
template here, rather than waiting for the API server, turns every mistake into a message that
names the field, instead of a server-side apply that fails on a typed patch.

Beside the shape, it does what Kubernetes' own clients do when they decode a template into
typed objects: numeric quantities (`cpu: 1`, `nvidia.com/gpu: 2`) become strings, as the API
server stores them (so what the operator applies compares equal to what it reads back), and a
whole-number float in an int-or-string (`port: 8080.0`) becomes an integer. It also finds the
duplicate keys that server-side apply still refuses (two containers or two volumes of one
name), which the API server would answer with a 500 "failed to create typed patch object".
Two env entries of one name are allowed by Kubernetes (the last one wins); they are folded
into that last one, with a warning.
"""

from __future__ import annotations

import copy
import difflib
import functools
import json
import re
from dataclasses import dataclass, field
from decimal import Decimal
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

import jsonschema

from tfjob_operator.api.quantity import parse_quantity

ROOT = "io.k8s.api.core.v1.PodTemplateSpec"
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
MAX_PROBLEMS = 5
_VERSION = re.compile(r"^v(\d+)\.(\d+)\.(\d+)-local-strict$")

Json = Any


@dataclass
class Reading:
    """What reading a template found: the normalized template, problems and warnings."""

    template: dict[str, Any]
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@functools.cache
def schema_version() -> str:
    """The Kubernetes version whose schema is used: the newest the package ships."""
    return _schema_dir().name.removeprefix("v").removesuffix("-local-strict")


def _schema_dir() -> Traversable:
    base = resources.files("kubernetes_validate").joinpath("kubernetes-json-schema")
    found: dict[tuple[int, ...], Traversable] = {}
    for d in base.iterdir():
        if version := _VERSION.match(d.name):
            found[tuple(int(x) for x in version.groups())] = d
    if not found:
        raise RuntimeError("kubernetes-validate ships no strict schema")
    return found[max(found)]


@functools.cache
def definitions() -> dict[str, Json]:
    """The definitions a PodTemplateSpec reaches, and no others (the whole file is 1.8 MB)."""
    every = json.loads(_schema_dir().joinpath("_definitions.json").read_text())["$defs"]
    keep: dict[str, Json] = {}
    todo = [ROOT]
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep[name] = every[name]
        todo.extend(_refs(every[name]))
    return keep


def _refs(node: Json) -> list[str]:
    if isinstance(node, dict):
        out = [node["$ref"].rsplit("/", 1)[-1]] if "$ref" in node else []
        for value in node.values():
            out.extend(_refs(value))
        return out
    if isinstance(node, list):
        return [r for item in node for r in _refs(item)]
    return []


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$defs": definitions(),
        "$ref": f"#/$defs/{ROOT}",
    }
    return jsonschema.Draft202012Validator(schema)


def _resolve(node: Json) -> tuple[str | None, Json]:
    """(definition name, schema) of a node that may be a $ref."""
    if isinstance(node, dict) and "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        return name, definitions()[name]
    return None, node


def field_path(base: str, parts: Any) -> str:
    """A field path as users read it: a.b[0].c, with odd keys quoted (limits['nvidia.com/gpu'])."""
    out = base
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", str(p)):
            out += f".{p}"
        else:
            out += f"[{str(p)!r}]"
    return out


_KINDS = {
    "array": "a list",
    "object": "a map",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
}


def _json_kind(value: Json) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


def _describe(error: jsonschema.ValidationError, base: str) -> str:
    """One line for one schema error, naming the field and what would be valid."""
    path = field_path(base, error.absolute_path)
    kind = error.validator
    if kind == "type":
        wanted = [t for t in _as_list(error.validator_value) if t != "null"]
        want = " or ".join(_KINDS.get(t, t) for t in wanted)
        return f"{path}: must be {want}, not {_KINDS.get(_json_kind(error.instance), 'null')}"
    if kind == "additionalProperties" and isinstance(error.instance, dict):
        known = sorted((error.schema.get("properties") or {}).keys())
        lines = []
        for extra in sorted(set(error.instance) - set(known)):
            close = difflib.get_close_matches(str(extra), known, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            lines.append(f"{field_path(path, [extra])}: unknown field{hint}")
        return "; ".join(lines)
    if kind == "required":
        missing = re.match(r"'([^']*)' is a required property", error.message)
        name = missing.group(1) if missing else error.message
        return f"{field_path(path, [name])}: required"
    if kind == "enum":
        options = ", ".join(str(v) for v in error.validator_value if v is not None)
        return f"{path}: {error.instance!r} is not one of {options}"
    if kind == "oneOf":
        kinds = [t for o in error.validator_value for t in _as_list(o.get("type")) if t != "null"]
        want = " or ".join(_KINDS.get(t, t) for t in kinds)
        return f"{path}: must be {want}, not {_KINDS[_json_kind(error.instance)]}"
    text = error.message if len(error.message) <= 120 else error.message[:119] + "…"
    return f"{path}: {text}"


def _as_list(value: Json) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _quantity_text(value: int | float) -> str:
    """A number as a Kubernetes quantity string: 1 -> '1', 0.5 -> '0.5', 1e21 -> digits."""
    text = format(Decimal(repr(value)), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


class _Walk:
    """One pass over a template along its schema: normalize, and find what SSA refuses."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.problems: list[str] = []
        self.warnings: list[str] = []

    def node(self, schema: Json, value: Json, path: list[Any]) -> Json:
        name, schema = _resolve(schema)
        if name == QUANTITY:
            return self.quantity(value, path)
        if name == INT_OR_STRING:
            if isinstance(value, float) and value.is_integer():
                return int(value)
            return value
        if isinstance(value, dict):
            props = schema.get("properties") or {}
            extra = schema.get("additionalProperties")
            out = {}
            for k, v in value.items():
                sub = props.get(k) if k in props else (extra if isinstance(extra, dict) else None)
                out[k] = self.node(sub, v, [*path, k]) if sub is not None else v
            return out
        if isinstance(value, list) and isinstance(schema.get("items"), dict):
            items = [self.node(schema["items"], v, [*path, i]) for i, v in enumerate(value)]
            keys = schema.get("x-kubernetes-list-map-keys")
            if schema.get("x-kubernetes-list-type") == "map" and keys:
                items = self.unique(items, keys, schema["items"], path)
            return items
        return value

    def quantity(self, value: Json, path: list[Any]) -> Json:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = _quantity_text(value)
        if isinstance(value, str):
            try:
                if value != value.strip() or " " in value:
                    raise ValueError
                parse_quantity(value)
            except ValueError:
                self.problems.append(
                    f"{field_path(self.base, path)}: {value!r} is not a Kubernetes quantity "
                    "(e.g. 4Gi, 500M, 0.5, 250m)"
                )
        return value

    def unique(
        self, items: list[Json], keys: list[str], item_schema: Json, path: list[Any]
    ) -> list[Json]:
        """Entries of a keyed list must have distinct keys; for env, the last one wins."""
        defaults = _key_defaults(item_schema, keys)
        seen: dict[tuple[Any, ...], int] = {}
        dupes: list[tuple[int, int]] = []
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                continue
            key = tuple(item.get(k, defaults.get(k)) for k in keys)
            if key in seen:
                dupes.append((seen[key], i))
            seen[key] = i
        if not dupes:
            return items
        where = field_path(self.base, path)
        if keys == ["name"] and path and path[-1] == "env":
            drop = {first for first, _ in dupes}
            for first, later in dupes:
                name = items[later].get("name")
                self.warnings.append(
                    f"{where}: {name} is set twice; the later entry ([{later}]) is used, as "
                    f"Kubernetes would, and [{first}] is dropped"
                )
            return [item for i, item in enumerate(items) if i not in drop]
        for first, later in dupes:
            shown = ", ".join(f"{k}={items[later].get(k, defaults.get(k))}" for k in keys)
            self.problems.append(
                f"{where}[{later}]: same {'/'.join(keys)} as [{first}] ({shown}); "
                "each entry needs its own"
            )
        return items


def _key_defaults(item_schema: Json, keys: list[str]) -> dict[str, Any]:
    """Keys Kubernetes defaults when they are left out: a port's protocol is TCP."""
    _, schema = _resolve(item_schema)
    props = schema.get("properties") or {}
    return {k: "TCP" for k in keys if k == "protocol" and k in props}


def read(template: Json, base: str) -> Reading:
    """Read a pod template: problems name fields under `base` (the template's own path)."""
    if not isinstance(template, dict):
        return Reading({}, [f"{base}: must be a map (a pod template), not {_json_kind(template)}"])
    errors = sorted(
        _validator().iter_errors(template), key=lambda e: [str(p) for p in e.absolute_path]
    )
    if errors:
        problems = [_describe(e, base) for e in errors[:MAX_PROBLEMS]]
        if len(errors) > MAX_PROBLEMS:
            problems.append(f"{base}: and {len(errors) - MAX_PROBLEMS} more problems")
        return Reading(copy.deepcopy(template), problems)
    walk = _Walk(base)
    normalized = walk.node({"$ref": f"#/$defs/{ROOT}"}, copy.deepcopy(template), [])
    return Reading(normalized, walk.problems, walk.warnings)
