"""A scenario's contexts: :func:`build_context` turns a scenario and a seed into the
overflowing :class:`~ctxsim.model.ContextState` that environments, evaluation,
pools and the CLI start from.

A scenario (:mod:`ctxsim.lab.scenarios`) only describes a context; the three ways of
making one live in their own modules and this one picks between them: the synthetic
generator (:mod:`ctxsim.lab.generator`), the agent-loop session (:mod:`ctxsim.lab.agent_session`;
with ``probes: continuation``, cut from a longer one: :mod:`ctxsim.lab.continuation`)
and a recorded transcript (:mod:`ctxsim.transcripts`).
"""

from __future__ import annotations

from dataclasses import replace

from .agent_session import generate_session
from .continuation import continued_session
from .generator import generate
from ..model import ContextState
from .scenarios import Scenario
from ..transcripts import load_transcript


def build_context(scenario: Scenario, seed: int) -> ContextState:
    """The overflowing context of ``scenario``: generated with ``seed`` (a family's
    scenario drawn with it first), or read from its transcript (deterministic, so
    ``seed`` is not used)."""
    if scenario.is_transcript:
        drawn = scenario.draw(seed)
        state = load_transcript(
            drawn.transcript_path,
            limit=drawn.resolved_limit,
            min_limit=drawn.min_limit if "min_limit" in drawn.model_fields_set else None,
            warning_threshold=drawn.warning_threshold,
            name=drawn.name,
            cut=drawn.cut,
            instructions=drawn.instruction_sentences,
        )
        return replace(state, seed=seed) if scenario.is_family else state
    drawn = scenario.draw(seed)
    if drawn.session == "agent_loop":
        return continued_session(drawn, seed) if drawn.probes == "continuation" else generate_session(drawn, seed)
    return generate(drawn, seed)
