"""JSON form of contexts: what `ctxsim generate --out` writes and what loaders read back.

The form is stable (sorted keys when dumped) so the same state always gives the
same bytes.
"""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from typing import Any

from .errors import ContextError
from .model import Artifact, ContextState, ContextUnit, DroppedSpan, Fact, ToolEnvelope

FORMAT_VERSION = 1


def unit_to_dict(unit: ContextUnit) -> dict[str, Any]:
    data = asdict(unit)
    data["tool"] = asdict(unit.tool) if unit.tool else None
    if unit.tool:
        data["tool"]["key_fields"] = dict(unit.tool.key_fields)
    data["meta"] = dict(unit.meta)
    data["fact_ids"] = list(unit.fact_ids)
    data["source_ids"] = list(unit.source_ids)
    if not unit.attachment_tokens:  # written only when a unit carries attachments (the form before them)
        del data["attachment_tokens"]
    return data


def unit_from_dict(data: dict[str, Any]) -> ContextUnit:
    data = dict(data)
    tool = data.pop("tool", None)
    if tool:
        tool = dict(tool)
        tool["key_fields"] = tuple(sorted((str(k), str(v)) for k, v in (tool.get("key_fields") or {}).items()))
        tool = ToolEnvelope(**tool)
    known = {f.name for f in fields(ContextUnit)}
    unknown = set(data) - known
    if unknown:
        raise ContextError(f"unknown unit keys {sorted(unknown)}", key="units")
    data["fact_ids"] = tuple(data.get("fact_ids", ()))
    data["source_ids"] = tuple(data.get("source_ids", ()))
    data["meta"] = tuple(sorted((data.get("meta") or {}).items()))
    return ContextUnit(tool=tool, **data)


def state_to_dict(state: ContextState) -> dict[str, Any]:
    return {
        "format_version": FORMAT_VERSION,
        "scenario": state.scenario,
        "seed": state.seed,
        "limit": state.limit,
        "min_limit": state.min_limit,
        "warning_threshold": state.warning_threshold,
        "priority_areas": list(state.priority_areas),
        "task": state.task,
        "message_format": state.message_format,
        "total_tokens": state.total_tokens,
        "history": list(state.history),
        "units": [unit_to_dict(u) for u in state.units],
        "facts": [asdict(f) for f in state.fact_table],
        "artifacts": [asdict(a) for a in state.artifacts],
        "dropped": [asdict(d) for d in state.dropped],
    }


def state_from_dict(data: dict[str, Any]) -> ContextState:
    try:
        return ContextState(
            units=tuple(unit_from_dict(u) for u in data["units"]),
            limit=data["limit"],
            min_limit=data.get("min_limit", 3500),
            warning_threshold=data.get("warning_threshold", 0.8),
            priority_areas=tuple(data.get("priority_areas", ())),
            task=data.get("task", ""),
            fact_table=tuple(Fact(**f) for f in data.get("facts", ())),
            artifacts=tuple(
                Artifact(**{**a, "source_ids": tuple(a["source_ids"])}) for a in data.get("artifacts", ())
            ),
            dropped=tuple(
                DroppedSpan(**{**d, "source_ids": tuple(d["source_ids"]), "keywords": tuple(d["keywords"])})
                for d in data.get("dropped", ())
            ),
            history=tuple(data.get("history", ())),
            scenario=data.get("scenario", ""),
            seed=data.get("seed"),
            message_format=data.get("message_format", "openai"),
        )
    except (KeyError, TypeError) as exc:
        raise ContextError(f"malformed context JSON: {exc}") from None


def dumps_state(state: ContextState) -> str:
    return json.dumps(state_to_dict(state), sort_keys=True, indent=1, ensure_ascii=False) + "\n"
