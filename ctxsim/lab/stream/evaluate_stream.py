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
from ..parallel import default_workers, process_map
from ..scenarios import Scenario
from .play import play
from .players import stream_player
from .rollout import Rollout, is_rollout

if TYPE_CHECKING:
    import pandas as pd

#: metrics of :meth:`StreamSession.metrics` reported per row, after policy, scenario, seed and reward
METRICS = (
    "event_reward", "overflow_events", "over_hit_fresh_starts", "forced_recoveries", "compactions", "strategy_steps",
    "probes_asked", "probes_answered", "probe_share", *(f"probe_share_{kind}" for kind in PROBE_KINDS), "facts_retained", "rules_retained", "p1_preserved",
    "cache_hit_rate", "tokens_sent",
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
    workers: int | None = None,
) -> "pd.DataFrame":
    """One row per (policy, run, scenario, seed), ordered by policy, scenario, seed
    and run; columns :data:`COLUMNS` (``run``: as in :func:`ctxsim.lab.evaluate.evaluate`).

    ``policies``: names for :func:`ctxsim.policies.get_policy` (``seed-chain``,
    ``only:<id>``, ``peer:<system>``, ``greedy``, a trained run directory, …; peers
    whose optional extra is missing are skipped with a ``note``), or
    ``rollout:<one of those>`` (:mod:`ctxsim.lab.stream.rollout`: lookahead to the end of
    the conversation over that base policy), ``rollout-futures:<one of those>`` (the
    same over sampled futures of the conversation) or ``rollout-past:<one of those>``
    (over futures drawn from the conversation's own past turns). ``scenarios``:
    names in the config's suite, or Scenario objects. ``seeds``: a list or a count
    (``range(seeds)``). Raises ConfigError / ScenarioError / PolicyError on bad input
    before any conversation is played. Each conversation is a work item of
    :func:`ctxsim.lab.parallel.process_map` on ``workers`` processes (default: every
    core), played there by every policy; the rows do not depend on their number (a
    script that calls it needs the usual ``if __name__ == "__main__":`` guard).
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
    names = tuple(str(name) for name in dict.fromkeys(policies))
    config_json = checked.model_dump(mode="json")
    # loaded here first: bad names fail before any conversation, notes are heard once, fits are made (and kept) once;
    # conversations played in this process use them, a worker loads its own
    key = _players_key(names, config_json)
    _PLAYERS[key] = _players(names, checked, note or (lambda text: print(f"note: {text}", file=sys.stderr)))
    items = [(config_json, names, scenario, seed) for scenario in chosen for seed in seeds]
    try:
        played = process_map(_play_conversation, items, workers or default_workers(),
                             preload=["ctxsim.lab.stream.evaluate_stream"])
    finally:
        del _PLAYERS[key]
    rows = {(pi, index, ri): row for index, found in enumerate(played) for pi, ri, row in found}
    return pd.DataFrame([rows[k] for k in sorted(rows)], columns=list(COLUMNS))


def _play_conversation(item: tuple[dict[str, Any], tuple[str, ...], Scenario, int]) -> list[tuple[int, int, dict[str, Any]]]:
    """(policy index, run index, row) of every policy on one conversation (a worker's
    item: config, policy names, scenario, seed); the players are loaded once per process."""
    config, names, scenario, seed = item
    checked = ConversationStreamEnv.checked_config(config)
    key = _players_key(names, config)
    if key not in _PLAYERS:
        _PLAYERS[key] = _players(names, checked, lambda text: None)  # the caller heard the notes
    conversation = build_conversation(scenario, seed, checked)  # built once, played by every policy
    found = []
    for pi, (name, members) in enumerate(_PLAYERS[key].items()):
        for ri, (run, policy) in enumerate(members):
            session = make_session(conversation, checked)
            reward = play(policy, session, scenario.name, seed)
            metrics = session.metrics()
            found.append((pi, ri, {"policy": name, "run": run, "scenario": scenario.name, "seed": seed,
                                   "reward": reward, **{k: metrics[k] for k in METRICS}}))
    return found


#: the players of (policy names, config) this process has loaded (:func:`_players`): in the
#: caller while its evaluation runs, in a worker for the worker's life
_PLAYERS: dict[tuple, dict[str, tuple]] = {}


def _players_key(names: tuple[str, ...], config: dict[str, Any]) -> tuple:
    import json

    return names, json.dumps(config, sort_keys=True)


def _players(names: tuple[str, ...], checked, note: Callable[[str], None]) -> dict[str, tuple]:
    """name -> ((run, player), ...) of every policy that loads (peers without their extra are left out)."""
    plain = load_policies([n for n in names if not is_rollout(n)], note)
    plain = {n: tuple((run, stream_player(policy, checked)) for run, policy in members) for n, members in plain.items()}
    return {n: ((("", Rollout.named(n, checked)),) if is_rollout(n) else plain[n]) for n in names if is_rollout(n) or n in plain}
