"""Design 002's rehydration: externalized content injected back, ephemerally, when a turn needs it.

A turn *references* an externalized artifact when one of its units names the
artifact id (as a whole word), is a tool call on a target (file path, URL) of a
unit the artifact holds, or names such a target in its text. The artifact's
content is then injected for that turn only — never appended to the canonical log
or the compacted context — under design 002's limits:

* at most ``max_artifacts_per_turn`` artifacts per turn (3), in artifact order;
* each cut to ``max_tokens_per_artifact`` tokens (paragraph-boundary truncation);
* all of them within ``reserve_tokens`` (request tokens, framing included): the
  reserve is left out of the compaction pressure of that turn; the first artifact
  that does not fit stops the injection (design 002's ``break``);
* an artifact injected at turn t is not injected again before turn
  t + ``cooldown_turns`` (2);
* sensitivity gating: only artifacts whose sensitivity is in
  ``auto_rehydrate_sensitivities`` (public, internal) are injected; more sensitive
  ones need an explicit ``read_artifact`` call (counted in ``sensitivity_skips``).

Defaults scale design 002's ``RehydrationConfig`` to the context's limit: its 8,000-token
total budget and 4,000 tokens per artifact are 8 % and 4 % of its 100,000-token
``max_input_tokens``. A *loop* (design 002's oscillation: content externalized, pulled
back, pushed out, pulled back …) is counted once for each rehydrated artifact one of
whose subjects — the files its units target, or its unit ids when they target none —
was first rehydrated on an earlier turn, whether from the same artifact or from
another artifact holding that file (in any order, alone or with other files).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Literal, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from ...model import Artifact, ContextState, ContextUnit
from ...strategies.common import truncate_paragraphs
from ...tokens import count_tokens

#: design 002: total rehydration budget / max_input_tokens (8,000 / 100,000)
RESERVE_SHARE = 0.08
#: design 002: max_tokens_per_artifact / max_input_tokens (4,000 / 100,000)
ARTIFACT_SHARE = 0.04
HEADER = "[Rehydrated Content - artifact:{id}]\n"


class RehydrationConfig(BaseModel):
    """Rehydration limits (tokens; ``None``: design 002's default scaled to the limit)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    enabled: bool = True
    reserve_tokens: Annotated[int, Field(gt=0)] | None = None
    max_tokens_per_artifact: Annotated[int, Field(gt=0)] | None = None
    max_artifacts_per_turn: Annotated[int, Field(ge=1)] = 3
    cooldown_turns: Annotated[int, Field(ge=0)] = 2
    #: a list in YAML/JSON, a tuple in Python (not strict: the env spec round-trips through JSON)
    auto_rehydrate_sensitivities: Annotated[
        tuple[Literal["public", "internal", "confidential", "restricted"], ...], Field(strict=False)
    ] = ("public", "internal")

    def budget(self, limit: int) -> tuple[int, int]:
        """(reserve tokens, max tokens per artifact) for a context of ``limit`` tokens."""
        reserve = self.reserve_tokens if self.reserve_tokens is not None else int(RESERVE_SHARE * limit)
        per_artifact = self.max_tokens_per_artifact if self.max_tokens_per_artifact is not None else int(ARTIFACT_SHARE * limit)
        return reserve, per_artifact


@dataclass(frozen=True)
class Rehydrated:
    """One injection: the artifact, the ephemeral unit that carries it, whether it was cut."""

    artifact_id: str
    unit: ContextUnit
    truncated: bool


class Rehydrator:
    """Rehydration over one conversation: cooldowns and counters (module docstring)."""

    def __init__(self, config: RehydrationConfig, limit: int):
        self.config = config
        self.reserve, self.per_artifact = config.budget(limit)
        self._last: dict[str, int] = {}
        self._targets: dict[str, tuple[str, ...]] = {}
        self._patterns: dict[str, re.Pattern] = {}
        self._first_rehydrated: dict[str, int] = {}  # subject (a file or a unit id) -> turn
        self.rehydrations = 0
        self.tokens = 0
        self.loops = 0
        self.truncated = 0
        self.cooldown_skips = 0
        self.budget_skips = 0
        self.sensitivity_skips = 0
        self.turns = 0

    def targets(self, artifact: Artifact, log: Mapping[str, ContextUnit]) -> tuple[str, ...]:
        """Tool targets (paths, URLs) of the units the artifact holds, in order."""
        if artifact.id not in self._targets:
            units = [log[i] for i in artifact.source_ids if i in log]
            found = [u.tool.target for u in units if u.tool is not None and u.tool.target]
            self._targets[artifact.id] = tuple(dict.fromkeys(found))
        return self._targets[artifact.id]

    def referenced(self, units: Sequence[ContextUnit], state: ContextState, log: Mapping[str, ContextUnit]) -> list[Artifact]:
        """The artifacts of ``state`` that ``units`` reference, in artifact order."""
        out = []
        for artifact in state.artifacts:
            targets = self.targets(artifact, log)
            named = self._patterns.get(artifact.id)
            if named is None:
                named = self._patterns[artifact.id] = re.compile(rf"\b{re.escape(artifact.id)}\b")
            for unit in units:
                if (named.search(unit.content) or (unit.tool is not None and unit.tool.target in targets)
                        or any(t in unit.content for t in targets)):
                    out.append(artifact)
                    break
        return out

    def _unit(self, artifact: Artifact, turn: int, timestamp: float) -> tuple[ContextUnit, bool] | None:
        header = HEADER.format(id=artifact.id)
        room = self.per_artifact - count_tokens(header) - 1  # 1: the join may add a token
        body = truncate_paragraphs(artifact.content, room) if room > 0 else ""
        if not body:
            return None
        unit = ContextUnit(
            id=f"rehydrated-{artifact.id}-t{turn}", type="other", role="assistant", content=header + body,
            turn=turn, timestamp=timestamp, priority=2,
        )
        return unit, body != artifact.content

    def inject(
        self, units: Sequence[ContextUnit], state: ContextState, log: Mapping[str, ContextUnit], turn: int
    ) -> tuple[Rehydrated, ...]:
        """The ephemeral injections for turn ``turn`` whose new ``units`` were just added to ``state``."""
        if not self.config.enabled or not state.artifacts:
            return ()
        wanted = []
        for artifact in self.referenced(units, state, log):
            if artifact.sensitivity not in self.config.auto_rehydrate_sensitivities:
                self.sensitivity_skips += 1
                continue
            last = self._last.get(artifact.id)
            if last is not None and turn - last < self.config.cooldown_turns:
                self.cooldown_skips += 1
                continue
            wanted.append(artifact)
        timestamp = max(u.timestamp for u in units)
        out: list[Rehydrated] = []
        used = 0
        for artifact in wanted[: self.config.max_artifacts_per_turn]:
            made = self._unit(artifact, turn, timestamp)
            if made is None:
                continue
            unit, truncated = made
            cost = state.unit_cost(unit)
            if used + cost > self.reserve:
                self.budget_skips += 1
                break
            used += cost
            out.append(Rehydrated(artifact.id, unit, truncated))
            self._last[artifact.id] = turn
            subjects = set(self.targets(artifact, log) or artifact.source_ids)
            self.loops += any(self._first_rehydrated.get(s, turn) < turn for s in subjects)
            for subject in subjects:
                self._first_rehydrated.setdefault(subject, turn)
            self.truncated += truncated
        self.rehydrations += len(out)
        self.tokens += used
        self.turns += bool(out)
        return tuple(out)
