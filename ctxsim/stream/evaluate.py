"""Policies compared on whole conversations (``ctxsim/ConversationStream-v0``'s evaluation).

:func:`evaluate_stream` plays every policy on every (scenario, seed) conversation
with the environment's own logic (:class:`~ctxsim.stream.StreamSession`): each
overflow event is run by :func:`ctxsim.policies.run_episode` — a policy's
``act(episode)`` returns an action id or its own Strategy (peers), exactly as on
ContextOverflow-v0 — and handed back to the session. Policies are ``reset`` at
every event with :func:`event_seed`, so rows are identical from run to run.

Call it as::

    from ctxsim.stream.evaluate import evaluate_stream
    df = evaluate_stream(["seed-chain", "peer:codex", "runs/<run>"], ["gpt4-6000"], 4, {"turns": 60})

``config`` is an override of :meth:`ConversationStreamEnv.default_config` (e.g. an
``envs/stream.yaml`` spec's ``config``); a trained policy must have been trained
with the same ``actions``.
"""

from __future__ import annotations

import sys
import zlib
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ..policies import Policy, run_episode
from ..probes import PROBE_KINDS
from ..scenarios import Scenario
from .session import StreamSession

if TYPE_CHECKING:
    import pandas as pd

    from .rollout import Rollout

#: metrics of :meth:`StreamSession.metrics` reported per row, after policy, scenario, seed and reward
METRICS = (
    "event_reward", "overflow_events", "over_hit_fresh_starts", "forced_recoveries", "compactions", "strategy_steps",
    "probes_asked", "probes_answered", "probe_share", *(f"probe_share_{kind}" for kind in PROBE_KINDS), "facts_retained", "cache_hit_rate", "tokens_sent",
    "cached_tokens", "cost_usd", "max_summary_depth", "max_summary_tokens", "rehydrations", "rehydration_loops",
    "milestones",
)
COLUMNS = ("policy", "run", "scenario", "seed", "reward") + METRICS


def event_seed(scenario: str, seed: int, event: int) -> int:
    """The seed a policy's ``reset`` gets at the start of event number ``event``."""
    return zlib.crc32(f"{scenario}/{seed}/event/{event}".encode())


def play(policy: Policy | Rollout, session: StreamSession, scenario: str, seed: int) -> float:
    """Run ``policy`` on every event of ``session`` until the conversation ends; the
    total reward (what the environment would pay over the episode). A rollout
    (:mod:`.rollout`) breaks each event its own way: its ``play_event``."""
    if session.episode is None:  # never overflowed: only the end-of-conversation terms
        return sum(session.final_terms().values())
    event = getattr(policy, "play_event", None) or partial(play_event, policy)
    total = 0.0
    while not session.done:
        total += event(session, scenario, seed)
    return total


def play_event(policy: Policy, session: StreamSession, scenario: str, seed: int) -> float:
    """Let ``policy`` break the pending event of ``session``; the reward then paid."""
    pending = session.episode
    finished = run_episode(
        policy, pending.original, pending.settings, event_seed(scenario, seed, len(session.events)),
        on_step=lambda _episode, step: session.record_step(step),
    )
    return session.resolve(finished).reward


def evaluate_stream(
    policies: Sequence[str],
    scenarios: Sequence[str | Scenario],
    seeds: Sequence[int] | int,
    config: dict[str, Any] | None = None,
    note: Callable[[str], None] | None = None,
) -> "pd.DataFrame":
    """One row per (policy, run, scenario, seed), ordered by policy, scenario, seed
    and run; columns :data:`COLUMNS` (``run``: as in :func:`ctxsim.evaluate.evaluate`).

    ``policies``: names for :func:`ctxsim.policies.get_policy` (``seed-chain``,
    ``only:<id>``, ``peer:<system>``, ``greedy``, a trained run directory, …; peers
    whose optional extra is missing are skipped with a ``note``), or
    ``rollout:<one of those>`` (:mod:`ctxsim.stream.rollout`: lookahead to the end of
    the conversation over that base policy). ``scenarios``:
    names in the config's suite, or Scenario objects. ``seeds``: a list or a count
    (``range(seeds)``). Raises ConfigError / ScenarioError / PolicyError on bad input
    before any conversation is played.
    """
    import pandas as pd

    from ..environments.stream import ConversationStreamEnv, build_conversation, make_session
    from ..errors import ScenarioError
    from ..evaluate import load_policies

    checked = ConversationStreamEnv.checked_config(config)
    resolved = checked.model_dump(mode="json")
    by_name = {s.name: s for s in checked.suite}
    chosen = []
    for item in scenarios:
        if isinstance(item, Scenario):
            chosen.append(item)
        elif item in by_name:
            chosen.append(by_name[item])
        else:
            raise ScenarioError(f"unknown scenario {item!r}; known: {sorted(by_name)}", key="scenarios")
    seeds = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    from .rollout import Rollout, is_rollout

    names = [str(name) for name in dict.fromkeys(policies)]
    plain = load_policies([n for n in names if not is_rollout(n)], note or (lambda text: print(f"note: {text}", file=sys.stderr)))
    loaded = {n: ((("", Rollout.named(n)),) if is_rollout(n) else plain[n]) for n in names if is_rollout(n) or n in plain}
    rows: dict[tuple[int, int, int, int], dict[str, Any]] = {}
    for si, scenario in enumerate(chosen):
        for ki, seed in enumerate(seeds):
            conversation = build_conversation(scenario, seed, resolved)  # built once, played by every policy
            for pi, (name, members) in enumerate(loaded.items()):
                for ri, (run, policy) in enumerate(members):
                    session = make_session(conversation, resolved)
                    reward = play(policy, session, scenario.name, seed)
                    metrics = session.metrics()
                    rows[(pi, si, ki, ri)] = {"policy": name, "run": run, "scenario": scenario.name, "seed": seed,
                                              "reward": reward, **{k: metrics[k] for k in METRICS}}
    return pd.DataFrame([rows[k] for k in sorted(rows)], columns=list(COLUMNS))
