"""Which of the user's instructions, and whether the task, each policy's break still holds.

On a transcript cut the probes are the strings the rest of the session uses again
(:mod:`ctxsim.cuts`), the task line, and the user's instructions only where the cut
scenario names a hand-made list of them (``instructions``; the shipped cut families
name ``data/transcripts/instructions.yaml``); before the measure had those, a break
that dropped the first user message of a real session (the task statement and every
instruction of the agent's template) could score as high as one that kept it. This
script shows, beside the reward, what a break keeps by the strategies' own detector,
independent of any list:

* ``instructions``: the share of the instruction sentences of the context's user
  messages (found by :func:`ctxsim.summarize.rules.user_rule_sentences`, the detector
  the strategies use; outside quoted demonstrations) that the result still holds
  verbatim (contexts without any: left out of the mean);
* ``task``: whether the result still holds the task line (``ContextState.task``: the
  issue title or the task message's first line) verbatim;
* ``p1`` and ``probes``: as in every result table.

    python examples/instructions_kept.py [--experiment FILE] [--split train|validation]
        [--names NAME ...] [--first-seed K] [--seeds N] --policy NAME [--policy NAME ...] [--out CSV]

Only contexts over their target are played (as in a pool). Needs the ``peers`` extra for
``peer:langchain-trim`` (part of ``dev``).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd

from ctxsim.atomic import atomic_write_text
from ctxsim.episode import EpisodeSettings
from ctxsim.lab.contexts import build_context
from ctxsim.lab.environments.spec import env_class
from ctxsim.lab.evaluate import episode_seed, load_policies
from ctxsim.lab.train import env_configs, load_experiment
from ctxsim.model import ContextState
from ctxsim.policies.registry import run_episode
from ctxsim.summarize.rules import user_rule_sentences

DEFAULT_EXPERIMENT = "experiments/maskable_ppo_default.yaml"


def instructions(state: ContextState) -> list[str]:
    """The instruction sentences of ``state``'s user messages, in order."""
    return [sentence for unit in state.units if unit.role == "user" for sentence in user_rule_sentences(unit)]


def kept_row(state: ContextState, final: ContextState) -> dict:
    """What ``final`` (a break of ``state``) still holds of its instructions and task."""
    rendered = final.render()
    said = instructions(state)
    return {
        "instructions": sum(s in rendered for s in said) / len(said) if said else math.nan,
        "n_instructions": len(said),
        "task": float(bool(state.task.strip()) and state.task.strip() in rendered),
    }


def split_settings(experiment: str, split: str):
    """(episode settings, scenarios) of one split of an experiment, as ``ctxsim evaluate
    --experiment FILE --split SPLIT`` plays it."""
    env_id, train, held_out, selection = env_configs(load_experiment(experiment))
    config = {"train": train, "validation": selection}[split]
    checked = env_class(env_id).checked_config(config, experiment)
    return EpisodeSettings.of(checked), list(checked.suite)


def play(policies: list[str], names: list[str], seeds: range, *, experiment: str = DEFAULT_EXPERIMENT,
         split: str = "train") -> pd.DataFrame:
    """One row per (policy, run, scenario, seed) of the contexts over their target."""
    settings, suite = split_settings(experiment, split)
    scenarios = [s for s in suite if s.name in names]
    missing = sorted(set(names) - {s.name for s in scenarios})
    if missing:
        raise SystemExit(f"{experiment}: no scenario {', '.join(missing)} in its {split} split")
    loaded = load_policies(policies, print)
    rows = []
    for scenario in scenarios:
        for seed in seeds:
            state = build_context(scenario, seed)
            if state.total_tokens <= settings.target_tokens(state):
                continue
            for name, members in loaded.items():
                for run, policy in members:
                    episode = run_episode(policy, state, settings, episode_seed(scenario.name, seed), None)
                    rows.append({"policy": name, "run": run, "scenario": scenario.name, "seed": seed,
                                 "reward": episode.reward, "p1": episode.outcome.p1_preserved,
                                 "probes": episode.outcome.probe_score, **kept_row(state, episode.state),
                                 "chain": ">".join(episode.chain)})
    return pd.DataFrame(rows)


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """Means by scenario and policy (policies in the order given)."""
    order = {name: k for k, name in enumerate(dict.fromkeys(df["policy"]))}
    table = df.groupby(["scenario", "policy"], sort=False)[["reward", "instructions", "task", "p1", "probes"]].mean()
    return table.sort_index(level=1, key=lambda level: level.map(order), sort_remaining=False).sort_index(
        level=0, sort_remaining=False).round(3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default=DEFAULT_EXPERIMENT)
    parser.add_argument("--split", choices=["train", "validation"], default="train",
                        help="never the held-out split: this is for choosing, not for the final table")
    parser.add_argument("--names", nargs="+", default=["swe-train"])
    parser.add_argument("--first-seed", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--policy", action="append", required=True)
    parser.add_argument("--out", type=Path, help="also write the rows as CSV")
    args = parser.parse_args(argv)
    df = play(args.policy, args.names, range(args.first_seed, args.first_seed + args.seeds), experiment=args.experiment,
              split=args.split)
    if args.out:
        atomic_write_text(args.out, df.to_csv(index=False))
    print(summary(df).to_string())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
