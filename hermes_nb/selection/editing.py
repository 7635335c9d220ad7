"""Reading and editing the run config: field names, text coercion, validation, all-or-nothing application.

Fields are named ``section.key`` (``env.group_size``, ``trainer.learning_rate``, ``wandb.project``) or by the bare
key when only one section has it. Every function here is pure: it takes a ``SessionState`` and returns a new one,
so an edit that fails anywhere leaves the stored state exactly as it was. ``trainer`` and ``wandb`` values are
validated by their pydantic models; ``env`` values by a model built from the environment's JSON schema (read in
a child process), with the same constraints (``group_size >= 2`` ...).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, Field, ValidationError, create_model

from hermes_nb.config import (
    LOCKED_FIELDS,
    BaseEnvConfig,
    HealthConfig,
    RunConfig,
    TinkerConfig,
    TrainerConfig,
    WandbConfig,
    format_validation_error,
)
from hermes_nb.errors import (
    HermesNBError,
    InvalidValueError,
    LockedFieldError,
    NoEnvironmentSelectedError,
    UnknownFieldError,
)
from hermes_nb.frameworks import registry
from hermes_nb.selection.discovery import EnvironmentInfo
from hermes_nb.selection.results import ConfigField, ConfigView, LockedField
from hermes_nb.selection.schema import EnvSchema
from hermes_nb.selection.session import SessionState

# The sections of RunConfig a user edits besides ``env``, each a pydantic model.
MODEL_SECTIONS: dict[str, type[BaseModel]] = {
    "trainer": TrainerConfig,
    "wandb": WandbConfig,
    "tinker": TinkerConfig,
    "health": HealthConfig,
}
SECTIONS = ("env", *MODEL_SECTIONS)
NULL_WORDS = frozenset({"none", "null", "~"})
# JSON schema keyword -> pydantic Field keyword, for the constraints pydantic itself writes into schemas.
CONSTRAINT_KEYWORDS = {
    "minimum": "ge",
    "exclusiveMinimum": "gt",
    "maximum": "le",
    "exclusiveMaximum": "lt",
    "minLength": "min_length",
    "maxLength": "max_length",
    "pattern": "pattern",
    "minItems": "min_length",
    "maxItems": "max_length",
}
JSON_TYPES: dict[str, Any] = {"integer": int, "number": float, "boolean": bool, "string": str, "null": type(None)}
SELECT_FIRST = "select an environment first with rl_select_environment(name)"


@dataclass(frozen=True)
class FieldSpec:
    section: str
    key: str
    prop: dict[str, Any]  # the field's JSON schema, $refs resolved
    default: Any

    @property
    def name(self) -> str:
        return f"{self.section}.{self.key}"


# ---------------------------------------------------------------- the catalogue of fields


def _deref(prop: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """``prop`` with ``$ref`` (enums, nested models) replaced by the definition, recursively through anyOf."""
    if "$ref" in prop:
        target = defs.get(prop["$ref"].rsplit("/", 1)[-1], {})
        merged = {**target, **{k: v for k, v in prop.items() if k != "$ref"}}
        return _deref(merged, defs)
    for union in ("anyOf", "oneOf"):
        if union in prop:
            return {**prop, union: [_deref(p, defs) for p in prop[union]]}
    if "allOf" in prop and len(prop["allOf"]) == 1:
        return _deref({**prop["allOf"][0], **{k: v for k, v in prop.items() if k != "allOf"}}, defs)
    return prop


def _specs_from_schema(section: str, schema: dict[str, Any], values: dict[str, Any]) -> list[FieldSpec]:
    defs = schema.get("$defs", {})
    return [
        FieldSpec(section, key, _deref(prop, defs), values.get(key, prop.get("default")))
        for key, prop in schema.get("properties", {}).items()
    ]


@cache
def _model_specs(section: str) -> tuple[FieldSpec, ...]:
    model = MODEL_SECTIONS[section]
    return tuple(_specs_from_schema(section, model.model_json_schema(), model().model_dump(mode="json")))


def field_specs(env_schema: EnvSchema | None) -> dict[str, FieldSpec]:
    """Every field by dotted name, locked ones included: env (when selected), trainer, wandb."""
    specs: list[FieldSpec] = []
    if env_schema is not None:
        specs += _specs_from_schema("env", env_schema.json_schema, env_schema.values)
    specs += [spec for section in MODEL_SECTIONS for spec in _model_specs(section)]
    return {spec.name: spec for spec in specs}


# ---------------------------------------------------------------- types and constraints from a JSON schema


def _branches(prop: dict[str, Any]) -> list[dict[str, Any]]:
    for union in ("anyOf", "oneOf"):
        if union in prop:
            return [b for p in prop[union] for b in _branches(p)]
    if isinstance(prop.get("type"), list):
        return [{**prop, "type": t} for t in prop["type"]]
    return [prop]


def _constraints(prop: dict[str, Any]) -> dict[str, Any]:
    return {CONSTRAINT_KEYWORDS[k]: v for k, v in prop.items() if k in CONSTRAINT_KEYWORDS}


def _branch_type(prop: dict[str, Any]) -> Any:
    if "enum" in prop:
        return Literal[tuple(prop["enum"])]
    if "const" in prop:
        return Literal[prop["const"]]
    kind = prop.get("type")
    if kind == "array":
        base: Any = list[Any]
    elif kind == "object":
        base = dict[str, Any]
    else:
        base = JSON_TYPES.get(str(kind), Any)
    limits = _constraints(prop)
    return Annotated[base, Field(**limits)] if limits else base


def python_type(prop: dict[str, Any]) -> Any:
    """The annotation that validates like the field the schema was written from."""
    types = [_branch_type(b) for b in _branches(prop)]
    if not types:
        return Any
    return types[0] if len(types) == 1 else Union[tuple(types)]  # noqa: UP007 - built from a runtime tuple


def type_text(prop: dict[str, Any]) -> str:
    names = {"integer": "int", "number": "float", "boolean": "bool", "string": "str", "null": "None"}
    parts = []
    for branch in _branches(prop):
        if "enum" in branch:
            parts.append("Literal[" + ", ".join(repr(v) for v in branch["enum"]) + "]")
        else:
            kind = branch.get("type")
            parts.append(names.get(str(kind), {"array": "list", "object": "dict"}.get(str(kind), "any")))
    return " | ".join(parts) or "any"


def constraint_summary(prop: dict[str, Any]) -> dict[str, Any]:
    """ge/gt/le/lt/min_length/max_length/pattern, and ``choices`` for an enum, merged over union branches."""
    out: dict[str, Any] = {}
    for branch in _branches(prop):
        out.update(_constraints(branch))
        if "enum" in branch:
            out["choices"] = list(branch["enum"])
    return out


def coerce_text(value: Any, prop: dict[str, Any]) -> Any:
    """Text from a magic or the CLI into a value: ``none`` for nullable fields, YAML for lists and dicts.

    Numbers and booleans ("1e-4", "true") are left as text: pydantic's own parsing of them is the one rule.
    """
    if not isinstance(value, str):
        return value
    kinds = {b.get("type") for b in _branches(prop)}
    text = value.strip()
    if "null" in kinds and text.lower() in NULL_WORDS:
        return None
    if kinds & {"array", "object"} and text[:1] in "[{":
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError:
            return value  # let validation report it against the expected type
    if kinds and kinds <= {"integer", "number", "boolean", "null"}:
        return text
    return value


# ---------------------------------------------------------------- names


def parse_assignments(items: Sequence[str]) -> dict[str, str]:
    """``["group_size=8", "trainer.learning_rate=1e-4"]`` (from a magic or the CLI) -> ``{name: text}``.

    Values stay text: ``apply_edits`` gives each the type of its field.
    """
    edits: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise HermesNBError(f"expected field=value (e.g. group_size=8 or trainer.learning_rate=1e-4), got {item!r}")
        edits[name.strip()] = value
    return edits


def _suggestions(name: str, specs: dict[str, FieldSpec]) -> list[str]:
    candidates = {**{s.name: s.name for s in specs.values()}, **{s.key: s.name for s in specs.values()}}
    close = difflib.get_close_matches(name, list(candidates), n=3, cutoff=0.6)
    return list(dict.fromkeys(candidates[c] for c in close))


def resolve_name(name: str, specs: dict[str, FieldSpec], env_selected: bool) -> str:
    """The dotted name ``name`` refers to; raises for unknown, ambiguous, or env fields with no selection."""
    name = name.strip()
    if name in specs or name in LOCKED_FIELDS:
        return name
    if "." not in name:
        matches = [s.name for s in specs.values() if s.key == name]
        matches += [f for f in LOCKED_FIELDS if f.rsplit(".", 1)[-1] == name and f not in matches]
        # Only locked candidates (tokenizer_name is env.* and infra.*): refused either way, show the first.
        if len(matches) == 1 or (matches and all(m in LOCKED_FIELDS for m in matches)):
            return sorted(matches)[0]
        if matches:
            raise UnknownFieldError(f"field {name!r} is ambiguous: write one of {', '.join(sorted(matches))}")
    wants_env = name.startswith("env.") or (name in BaseEnvConfig.model_fields and "." not in name)
    if wants_env and not env_selected:
        raise NoEnvironmentSelectedError(f"{name} is an environment field: {SELECT_FIRST}")
    hint = _suggestions(name, specs)
    also = f"; did you mean {', '.join(hint)}?" if hint else ""
    raise UnknownFieldError(f"unknown config field {name!r}{also} (rl_get_current_config() lists the fields)")


def locked_value(config: RunConfig, name: str) -> Any:
    if name == "environment":
        return config.environment.name if config.environment else None
    section, _, key = name.partition(".")
    if section == "env":
        return config.env.get(key)
    return getattr(getattr(config, section), key, None)


# ---------------------------------------------------------------- applying edits


def apply_edits(state: SessionState, edits: dict[str, Any]) -> tuple[SessionState, dict[str, Any], dict[str, Any]]:
    """A new state with ``edits`` applied, and the changed fields' new and previous values (dotted names).

    Raises before anything is built if any edit is refused: unknown, locked, or invalid (all problems listed).
    """
    specs = field_specs(state.env_schema)
    resolved = _resolve_all(state, edits, specs)
    by_section: dict[str, dict[str, Any]] = {s: {} for s in SECTIONS}
    for name, value in resolved.items():
        spec = specs[name]
        by_section[spec.section][spec.key] = coerce_text(value, spec.prop)
    problems: list[str] = []
    env_values = _validate_env(by_section["env"], specs, problems)
    data = state.config.model_dump(mode="json")
    data["env"] = {**data["env"], **env_values}
    for section in MODEL_SECTIONS:
        data[section] = {**data[section], **by_section[section]}
    new_config = _validate_config(data, problems)
    if problems or new_config is None:
        raise InvalidValueError("; ".join(problems))
    before = state.config.model_dump(mode="json")
    after = new_config.model_dump(mode="json")
    changed = {n: after[s][k] for n in resolved for s, k in [n.split(".", 1)] if after[s][k] != before[s].get(k)}
    previous = {n: before[n.split(".", 1)[0]].get(n.split(".", 1)[1]) for n in changed}
    return state.model_copy(update={"config": new_config}), changed, previous


def _resolve_all(state: SessionState, edits: dict[str, Any], specs: dict[str, FieldSpec]) -> dict[str, Any]:
    resolved: dict[str, Any] = {}
    for raw_name, value in edits.items():
        if not isinstance(raw_name, str):
            raise UnknownFieldError(f"field names are text, got {raw_name!r}")
        name = resolve_name(raw_name, specs, state.env_schema is not None)
        if name in LOCKED_FIELDS:
            shown = locked_value(state.config, name)
            raise LockedFieldError(f"{name} is locked (value: {shown!r}): the run system sets it; it cannot be edited")
        if name in resolved:
            raise UnknownFieldError(f"{name} is given twice in one edit (as {raw_name!r} too)")
        resolved[name] = value
    return resolved


def _validate_env(values: dict[str, Any], specs: dict[str, FieldSpec], problems: list[str]) -> dict[str, Any]:
    if not values:
        return {}
    fields: dict[str, Any] = {key: (python_type(specs[f"env.{key}"].prop), ...) for key in values}
    model = create_model("EnvEdit", **fields)
    try:
        checked = model.model_validate(values)
    except ValidationError as exc:
        problems.append(_prefixed(exc, "env"))
        return {}
    dumped: dict[str, Any] = checked.model_dump(mode="json")
    return dumped


def _validate_config(data: dict[str, Any], problems: list[str]) -> RunConfig | None:
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        problems.append(format_validation_error(exc))
        return None


def _prefixed(exc: ValidationError, section: str) -> str:
    return "; ".join(f"{section}.{part}" for part in format_validation_error(exc).split("; "))


# ---------------------------------------------------------------- selection, reset, view


def selected_state(state: SessionState, info: EnvironmentInfo, env_schema: EnvSchema) -> SessionState:
    """``state`` with ``info`` selected: its ``config_init()`` values; trainer and W&B settings kept."""
    ref: dict[str, Any] = {"name": info.name, "class_name": info.class_name, "file": info.file}
    ref |= {"framework": info.framework, "needs": env_schema.needs}
    values = registry.adapter(info.framework).selection_values(env_schema.values)
    data = {**state.config.model_dump(mode="json"), "environment": ref, "env": values}
    if base_model := env_schema.needs.get("base_model"):  # the model it is written for, as it declares
        data["trainer"] = {**data["trainer"], "base_model": base_model}
    config = RunConfig.model_validate(data)
    return SessionState(environment=info, env_schema=env_schema, config=config)


def reset_state(state: SessionState) -> SessionState:
    """Defaults everywhere: the selected environment's ``config_init()`` values, trainer and W&B defaults."""
    if state.environment is None or state.env_schema is None:
        return SessionState()
    return selected_state(SessionState(), state.environment, state.env_schema)


def build_view(state: SessionState) -> ConfigView:
    specs = field_specs(state.env_schema)
    current = state.config.model_dump(mode="json")
    configurable = [
        ConfigField(
            name=spec.name,
            type=type_text(spec.prop),
            default=spec.default,
            value=current[spec.section].get(spec.key),
            description=spec.prop.get("description", ""),
            constraints=constraint_summary(spec.prop),
        )
        for spec in specs.values()
        if spec.name not in LOCKED_FIELDS
    ]
    locked_names = sorted(n for n in LOCKED_FIELDS if state.env_schema is not None or not n.startswith("env."))
    locked = [LockedField(name=n, value=locked_value(state.config, n)) for n in locked_names]
    env_name = state.environment.name if state.environment else None
    return ConfigView(environment=env_name, configurable=configurable, locked=locked)
