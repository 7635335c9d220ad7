"""The results of selection's ``rl_*`` calls: the environment list, the config view, a selection, an edit."""

from __future__ import annotations

import html
import json
from typing import Any

from pydantic import BaseModel, Field

from hermes_nb.frameworks import registry
from hermes_nb.results import Result, html_table, value_text
from hermes_nb.selection.discovery import DiscoveryProblem, EnvironmentInfo


class EnvironmentList(Result):
    environments: list[EnvironmentInfo] = Field(default_factory=list)
    errors: list[DiscoveryProblem] = Field(default_factory=list)

    def _dict(self) -> dict[str, Any]:
        return {
            "environments": [_entry(env) for env in self.environments],
            "count": len(self.environments),
            "errors": [e.model_dump(mode="json") for e in self.errors],
            "tips": ["Use rl_select_environment(name) to select an environment (select_as where a name is shared)"],
        }

    def _text_lines(self) -> list[str]:
        lines = [f"{len(self.environments)} environment(s):"]
        width = max((len(env.name) for env in self.environments), default=0)
        for env in self.environments:
            lines.append(f"  {env.name:<{width}}  {_framework_mark(env)}{_described(env)}")
            if env.shared:  # the bare name selects none of them: say where each comes from and how to name it
                lines.append(f"  {'':<{width}}    from {env.source}: select as {env.qualified_name}")
        lines += [f"  ! {e.file}:{e.line or '?'}: {e.message}" for e in self.errors]
        return lines

    def _html_body(self) -> str:
        rows = [[e.selector, e.class_name, _framework_mark(e) + _described(e), e.source] for e in self.environments]
        out = html_table(["name", "class", "description", "from"], rows)
        if self.errors:
            out += "<p><b>Not scanned:</b></p>" + html_table(
                ["file", "line", "problem"], [[e.file, e.line or "", e.message] for e in self.errors]
            )
        return out


def _entry(env: EnvironmentInfo) -> dict[str, Any]:
    """One environment as the agent tool lists it; where it comes from and how to name it only where its name is
    shared, why it cannot run only where it cannot."""
    entry = {
        "name": env.name,
        "class_name": env.class_name,
        "file_path": env.file,
        "description": env.description,
        "config_class": env.config_class,
    }
    if env.shared:
        entry |= {"source": env.source, "select_as": env.qualified_name}
    if env.unsupported:
        entry["unsupported"] = env.unsupported
    return entry


def _described(env: EnvironmentInfo) -> str:
    """Its description, or for one that cannot run here, why not."""
    return f"cannot run here: {env.unsupported}" if env.unsupported else env.description


def _framework_mark(env: EnvironmentInfo) -> str:
    """Its framework's mark before an environment's description (``[atroposlib] ``: it runs in the environment
    Python); none for hermes-nb's own."""
    return registry.adapter(env.framework).recognition.mark


class ConfigField(BaseModel):
    name: str  # dotted: env.group_size, trainer.learning_rate, wandb.project
    type: str
    default: Any = None
    value: Any = None
    description: str = ""
    constraints: dict[str, Any] = Field(default_factory=dict)


class LockedField(BaseModel):
    name: str
    value: Any = None


class ConfigView(Result):
    environment: str | None = None
    configurable: list[ConfigField] = Field(default_factory=list)
    locked: list[LockedField] = Field(default_factory=list)

    def _dict(self) -> dict[str, Any]:
        return {
            "environment": self.environment,
            "configurable_fields": [
                {**f.model_dump(mode="json"), "current_value": _jsonable(f.value)} for f in self.configurable
            ],
            "locked_fields": [{**f.model_dump(mode="json"), "locked_value": _jsonable(f.value)} for f in self.locked],
            "tip": "Use rl_edit_config(field, value) to change any configurable field.",
        }

    def values(self) -> dict[str, Any]:
        """Current value of every configurable field, by dotted name."""
        return {f.name: f.value for f in self.configurable}

    def _text_lines(self) -> list[str]:
        lines = [f"environment: {self.environment or '(none selected)'}"]
        names = [f.name for f in self.configurable] + [f.name for f in self.locked]
        width = max((len(n) for n in names), default=0)
        for f in self.configurable:
            mark = "" if f.value == f.default else f"   (default {value_text(f.default)})"
            lines.append(f"  {f.name:<{width}} = {value_text(f.value)}{mark}")
        lines.append("locked:")
        lines += [f"  {f.name:<{width}} = {value_text(f.value)}" for f in self.locked]
        return lines

    def _html_body(self) -> str:
        rows = [
            [f.name, f.value, f.default, f.type, _constraint_text(f.constraints), f.description]
            for f in self.configurable
        ]
        title = f"<p><b>environment:</b> {html.escape(self.environment or '(none selected)')}</p>"
        locked = html_table(["locked field", "value"], [[f.name, f.value] for f in self.locked])
        return title + html_table(["field", "value", "default", "type", "accepted", "description"], rows) + locked


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _constraint_text(constraints: dict[str, Any]) -> str:
    symbols = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
    parts = [f"{symbols.get(k, k)} {value_text(v)}" for k, v in constraints.items() if k != "choices"]
    if "choices" in constraints:
        parts.append("one of " + ", ".join(value_text(c) for c in constraints["choices"]))
    return ", ".join(parts)


class SelectionResult(Result):
    environment: EnvironmentInfo
    config: ConfigView
    message: str = ""

    def _dict(self) -> dict[str, Any]:
        return {
            "message": self.message,
            "environment": self.environment.name,
            "file_path": self.environment.file,
            "class_name": self.environment.class_name,
            "config_class": self.environment.config_class,
            "configurable_fields": len(self.config.configurable),
        }

    def _text_lines(self) -> list[str]:
        count = len(self.config.configurable)
        return [
            self.message,
            f"  class: {self.environment.class_name} ({self.environment.file})",
            f"  {count} configurable fields: rl_get_current_config() shows them, rl_edit_config() changes them",
        ]

    def _html_body(self) -> str:
        return f"<p>{html.escape(self.message)}</p>" + self.config._html_body()


class EditResult(Result):
    changed: dict[str, Any] = Field(default_factory=dict)  # dotted name -> new value
    previous: dict[str, Any] = Field(default_factory=dict)  # dotted name -> value before
    ignored: list[str] = Field(default_factory=list)  # locked fields a loaded file carried (not applied)
    source: str | None = None  # the config file, for rl_load_config
    config: ConfigView

    @property
    def message(self) -> str:
        if not self.changed:
            return "No change" + (f" from {self.source}" if self.source else "")
        if len(self.changed) == 1:
            ((field, value),) = self.changed.items()
            updates = f"{field} = {value_text(value)}"
        else:
            updates = f"{len(self.changed)} fields"
        return f"Updated {updates}" + (f" from {self.source}" if self.source else "")

    def _dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"message": self.message}
        if len(self.changed) == 1:
            ((field, value),) = self.changed.items()
            out.update(field=field, value=_jsonable(value))
        out.update(
            changed=_jsonable(self.changed),
            previous=_jsonable(self.previous),
            ignored=self.ignored,
            source=self.source,
            config=_jsonable(self.config.values()),
        )
        return out

    def _text_lines(self) -> list[str]:
        lines = [self.message]
        lines += [f"  {k}: {value_text(self.previous.get(k))} -> {value_text(v)}" for k, v in self.changed.items()]
        if self.ignored:
            lines.append("  not applied (locked): " + ", ".join(self.ignored))
        return lines

    def _html_body(self) -> str:
        rows = [[k, self.previous.get(k), v] for k, v in self.changed.items()]
        note = f"<p>not applied (locked): {html.escape(', '.join(self.ignored))}</p>" if self.ignored else ""
        table = html_table(["field", "was", "now"], rows) if rows else ""
        return f"<p>{html.escape(self.message)}</p>" + table + note
