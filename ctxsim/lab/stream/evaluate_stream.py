"""Policies compared on whole conversations (``ctxsim/ConversationStream-v0``'s evaluation).

:func:`evaluate_stream` plays every policy on every (scenario, seed) conversation
with the environment's own logic (:class:`~ctxsim.lab.stream.StreamSession`): each
overflow event is run by :func:`ctxsim.policies.run_episode` — a policy's
``act(episode)`` returns an action id or its own Strategy (peers), exactly as on
ContextOverflow-v0 — and handed back to the session, at the first break depth;
the per-event maximizers (``oracle``, ``greedy``) and trained stream policies choose
the depth too (:mod:`ctxsim.lab.stream.players`). Policies are ``reset`` at
every event with :func:`~ctxsim.lab.stream.play.event_seed`, so rows are identical from run to run.

Call it as::

    from ctxsim.lab.stream.evaluate_stream import evaluate_stream
    df = evaluate_stream(["seed-chain", "peer:codex", "runs/<run>"], ["gpt4-6000"], 4, {"turns": 60})

``config`` is an override of :meth:`ConversationStreamEnv.default_config` (e.g. an
``envs/stream.yaml`` spec's ``config``); a trained policy must have been trained
with the same ``actions`` (and, for a stream policy, the same ``break_depths`` and
``session_features``).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ...errors import ScenarioError
from ...probes import PROBE_KINDS
from ..environments.conversation_stream import ConversationStreamEnv, build_conversation, make_session
from ..evaluate import load_policies
from ..scenarios import Scenario
from .play import play
from .players import stream_player
from .rollout import Rollout, is_rollout

if TYPE_CHECKING:
    import pandas as pd

#: metrics of :meth:`StreamSession.metrics` reported per row, after policy, scenario, seed and reward
METRICS = (
    "event_reward", "overflow_events", "over_hit_fresh_starts", "forced_recoveries", "compactions", "strategy_steps",
    "probes_asked", "probes_answered", "probe_share", *(f"probe_share_{kind}" for kind in PROBE_KINDS), "facts_retained", "cache_hit_rate", "tokens_sent",
    "cached_tokens", "cost_usd", "max_summary_depth", "max_summary_tokens", "rehydrations", "rehydration_loops",
    "milestones", "break_depth",
)
COLUMNS = ("policy", "run", "scenario", "seed", "reward") + METRICS


def evaluate_stream(
    policies: Sequence[str],
    scenarios: Sequence[str | Scenario],
    seeds: Sequence[int] | int,
    config: dict[str, Any] | None = None,
    note: Callable[[str], None] | None = None,
) -> "pd.DataFrame":
    """One row per (policy, run, scenario, seed), ordered by policy, scenario, seed
    and run; columns :data:`COLUMNS` (``run``: as in :func:`ctxsim.lab.evaluate.evaluate`).

    ``policies``: names for :func:`ctxsim.policies.get_policy` (``seed-chain``,
    ``only:<id>``, ``peer:<system>``, ``greedy``, a trained run directory, …; peers
    whose optional extra is missing are skipped with a ``note``), or
    ``rollout:<one of those>`` (:mod:`ctxsim.lab.stream.rollout`: lookahead to the end of
    the conversation over that base policy) or ``rollout-futures:<one of those>`` (the
    same over sampled futures of the conversation). ``scenarios``:
    names in the config's suite, or Scenario objects. ``seeds``: a list or a count
    (``range(seeds)``). Raises ConfigError / ScenarioError / PolicyError on bad input
    before any conversation is played.
    """
    import pandas as pd

    checked = ConversationStreamEnv.checked_config(config)
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
    names = [str(name) for name in dict.fromkeys(policies)]
    plain = load_policies([n for n in names if not is_rollout(n)], note or (lambda text: print(f"note: {text}", file=sys.stderr)))
    plain = {n: tuple((run, stream_player(policy, checked)) for run, policy in members) for n, members in plain.items()}
    loaded = {n: ((("", Rollout.named(n, checked)),) if is_rollout(n) else plain[n]) for n in names if is_rollout(n) or n in plain}
    rows: dict[tuple[int, int, int, int], dict[str, Any]] = {}
    for si, scenario in enumerate(chosen):
        for ki, seed in enumerate(seeds):
            conversation = build_conversation(scenario, seed, checked)  # built once, played by every policy
            for pi, (name, members) in enumerate(loaded.items()):
                for ri, (run, policy) in enumerate(members):
                    session = make_session(conversation, checked)
                    reward = play(policy, session, scenario.name, seed)
                    metrics = session.metrics()
                    rows[(pi, si, ki, ri)] = {"policy": name, "run": run, "scenario": scenario.name, "seed": seed,
                                              "reward": reward, **{k: metrics[k] for k in METRICS}}
    return pd.DataFrame([rows[k] for k in sorted(rows)], columns=list(COLUMNS))
