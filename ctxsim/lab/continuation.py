"""An agent-loop session whose probes are what its own continuation uses again.

With ``probes: continuation`` (:mod:`ctxsim.lab.scenarios`) a scenario's context is made
as a transcript cut is (:mod:`ctxsim.cuts`), from a generated session instead of a
recorded one: the session is generated :data:`STRETCH` times as long as the scenario's
target (same scenario name and seed, so the same repository, bug and task), and the
context is its messages up to the one at which they reach the target, carried on to the
next tool result so that every call keeps its result. The messages after it are the
context's future. Its probes are the context's candidate strings that the future uses
again (:func:`ctxsim.cuts.future_probes`: paths, identifiers, numbers, error lines, task
terms) and, as decision probes, the user's rules the task states (the generator knows
them; a transcript's are not detected). The generator's other planted facts are not
probes here: what the session goes on to need is.

Why: the generated sessions' default probes are planted facts, which follow the
generator's choices rather than what the session reuses; real sessions' probes (the
cuts') are reuse. With this option both kinds of context ask the same kind of question
(reports/heldout_eval.md, "What greedy knows").
"""

from __future__ import annotations

from dataclasses import replace

from ..cuts import future_probes
from ..model import ContextState
from .agent_session import generate_session, holding
from .scenarios import Scenario

#: how much longer than its target the session is generated (the rest is the future)
STRETCH = 1.6


def continued_session(scenario: Scenario, seed: int) -> ContextState:
    """The context of an ``agent_loop`` scenario with ``probes: continuation`` for ``seed``
    (see the module docstring): at least the scenario's target tokens, ending after a
    tool result, at the scenario's limit."""
    target = scenario.resolved_target
    whole = generate_session(scenario.model_copy(update={"target_tokens": round(STRETCH * target)}), seed)
    units = whole.units
    k = cut_after(whole, target)
    context, future = units[:k], units[k:]
    kept = {u.id for u in context}
    rules = tuple(f for f in whole.fact_table if f.kind == "rule" and f.unit_id in kept)
    probes = rules + future_probes(context, future, whole.task)
    return replace(whole, units=tuple(holding(context, probes)), fact_table=probes)


def cut_after(state: ContextState, target: int) -> int:
    """How many of ``state``'s units form the context: up to the first at which their
    request tokens reach ``target``, then on to the next tool result (inclusive); the
    future keeps at least one unit."""
    units, total, k = state.units, 0, len(state.units) - 1
    for i, unit in enumerate(units[:-1]):
        total += state.unit_cost(unit)
        if total >= target:
            k = i + 1
            break
    while k < len(units) - 1 and units[k - 1].tool is None:
        k += 1
    return k
