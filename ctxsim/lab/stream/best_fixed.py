"""``best-fixed:<experiment>`` on ConversationStream-v0: the one (break depth, fixed
chain) with the best mean conversation reward on the experiment's training
conversations, chosen there and then used at every event.

On single breaks, ``best-fixed`` (:mod:`ctxsim.lab.policies.best_fixed`) keeps the
chain with the best event reward. Played at the warning threshold through whole
conversations, such a chain cuts just under the threshold and the conversation
overflows again (``reports/stream_eval.md``). On the stream, what one fixed choice
can do is a pair: a depth of the config's ``break_depths`` and a chain of
``max_steps`` action ids played by the fixed-chain rule
(:class:`~ctxsim.policies.baselines.FixedChainPolicy`), at every event.

- Candidates: every depth × every fixed chain (:func:`~ctxsim.policies.baselines.fixed_chains`;
  3 × 216 = 648 under ``envs/stream.yaml``).
- Conversations: the first :data:`FIT_CONVERSATIONS` seeds of each training scenario of
  the experiment (its split: :func:`ctxsim.lab.train.env_configs`), built under the
  evaluation's config (its suite aside), so the pair is best for the reward being
  reported. The policy
  refuses to play a conversation it was fitted on.
- Choice: the highest mean total reward over those conversations; ties go to the
  shallower depth, then to the first chain in the settings' action order.

Cost: every candidate plays every fitting conversation to its end (tens of ms to a few
hundred per play; for ``maskable_ppo_stream_warm``'s 36 conversations the time is in
``reports/stream_eval.md``), the conversations spread over the cores. The fit is
kept in the pool folder (:func:`ctxsim.lab.stream.stored.cache_file`: keyed by the
package's code, the config and the conversations) and read by every later evaluation.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ...atomic import read_or_make
from ...errors import ConfigError, PolicyError
from ...paths import EXPERIMENTS_DIR
from ...policies.baselines import FixedChainPolicy, fixed_chains
from ..parallel import default_workers, process_map
from .play import play, play_event
from .session import StreamSession
from .stored import cache_file

if TYPE_CHECKING:
    from ..environments.conversation_stream import StreamConfig

#: conversation seeds per training scenario a fit plays (the stream teacher's too)
FIT_CONVERSATIONS = 2
#: bumped when the fit's meaning changes (the cache key holds it)
FIT_FORMAT = 1


@dataclass(frozen=True)
class StreamFit:
    """The chosen depth index and chain, their mean conversation reward on the fitting
    conversations (``(scenario, seed)`` pairs), and how many candidates were tried."""

    depth: int
    chain: tuple[str, ...]
    mean_reward: float
    conversations: tuple[tuple[str, int], ...]
    candidates_tried: int


class FixedAtDepth:
    """Plays every event at depth index ``depth`` with the fixed chain ``chain``; refuses
    the conversations in ``fitted_on``."""

    def __init__(self, depth: int, chain: tuple[str, ...], name: str = "", fitted_on: frozenset = frozenset()):
        self.depth, self.name, self.fitted_on = depth, name, fitted_on
        self.player = FixedChainPolicy(chain)
        self.player.name = name or f"{depth}:{'>'.join(chain)}"

    def for_training(self) -> FixedAtDepth:
        """The same player without the refusal, for a teacher's rollout over it: the
        teacher plays the training conversations the pair was chosen on to make training
        data, not to score the pair (:func:`ctxsim.lab.stream.teacher.rollout_values`)."""
        return FixedAtDepth(self.depth, self.player.chain, self.name)

    def play_event(self, session: StreamSession, scenario: str, seed: int) -> float:
        if (scenario, seed) in self.fitted_on:
            raise PolicyError(f"{self.name} chose its depth and chain on this conversation ({scenario}, seed {seed}): "
                              "evaluate it outside its training split (e.g. the held-out scenarios)")
        session.choose_depth(self.depth)
        return play_event(self.player, session, scenario, seed)


def fitting_config(experiment: str, config: StreamConfig) -> StreamConfig:
    """``config`` (the evaluation's) with the suite of the training scenarios of
    ``experiments/<experiment>.yaml``, a ConversationStream-v0 experiment (PolicyError
    otherwise)."""
    from ..environments.conversation_stream import ConversationStreamEnv
    from ..environments.spec import env_class
    from ..train import env_configs, load_experiment

    env_id, train, _, _ = env_configs(load_experiment(EXPERIMENTS_DIR / f"{experiment}.yaml"))
    if not issubclass(env_class(env_id), ConversationStreamEnv):
        raise PolicyError(f"best-fixed:{experiment} trains on {env_id}; on ConversationStream-v0 it needs an experiment "
                          "of ConversationStream-v0 (whose training conversations it is fitted on)", key="policy")
    suite = {"scenarios": train["scenarios"], "scenario_names": train["scenario_names"]}
    try:
        return ConversationStreamEnv.checked_config({**config.model_dump(mode="json"), **suite})
    except ConfigError as exc:
        raise PolicyError(f"best-fixed:{experiment}: its training scenarios under this stream's config: {exc}",
                          key="policy") from None


def fit(checked: StreamConfig, workers: int | None = None) -> StreamFit:
    """The best (depth, chain) on the first :data:`FIT_CONVERSATIONS` conversations of
    each scenario of ``checked``'s suite (module docstring), computed now."""
    from ..environments.conversation_stream import depth_settings

    chains = fixed_chains(depth_settings(checked)[0][0])  # every depth has the same actions and steps
    candidates = [(depth, chain) for depth in range(len(checked.break_depths)) for chain in chains]
    pairs = [(s.name, seed) for s in checked.suite
             for seed in range(min(FIT_CONVERSATIONS, s.context_count(checked.contexts_per_scenario)))]
    config = checked.model_dump(mode="json")
    totals = process_map(_totals, [(config, name, seed, candidates) for name, seed in pairs],
                         workers or default_workers(), preload=["ctxsim.lab.stream.best_fixed"])
    best, best_mean = 0, -float("inf")
    for index in range(len(candidates)):
        mean = sum(row[index] for row in totals) / len(totals)
        if mean > best_mean:
            best, best_mean = index, mean
    depth, chain = candidates[best]
    return StreamFit(depth, chain, best_mean, tuple(pairs), len(candidates))


def _totals(item: tuple[dict[str, Any], str, int, list[tuple[int, tuple[str, ...]]]]) -> list[float]:
    """The total reward of each candidate on one conversation (a worker's item)."""
    from ..environments.conversation_stream import ConversationStreamEnv, build_conversation, make_session

    config, name, seed, candidates = item
    checked = ConversationStreamEnv.checked_config(config)
    scenario = next(s for s in checked.suite if s.name == name)
    conversation = build_conversation(scenario, seed, checked)
    return [play(FixedAtDepth(depth, chain), make_session(conversation, checked), name, seed) for depth, chain in candidates]


def cached_fit(checked: StreamConfig, workers: int | None = None,
               note: Callable[[str], None] | None = None) -> tuple[StreamFit, Path, bool]:
    """:func:`fit`, read from the pool folder when an earlier call made it with the same
    code, config and conversations (written there otherwise; ``note`` hears that it is
    being made); (the fit, its file, computed now)."""
    path = cache_file("best-fixed-stream", checked, {"format": FIT_FORMAT, "conversations": FIT_CONVERSATIONS}, ".json")

    def read(path: Path) -> StreamFit:
        data = json.loads(path.read_text())
        return StreamFit(int(data["depth"]), tuple(data["chain"]), float(data["mean_reward"]),
                         tuple((str(n), int(s)) for n, s in data["conversations"]), int(data["candidates_tried"]))

    def make() -> StreamFit:
        if note is not None:
            note(f"fitting a (depth, chain) on whole conversations of {len(checked.suite)} scenarios, once (then read from {path})")
        return fit(checked, workers)

    fitted, made = read_or_make(path, read, make, lambda fitted: json.dumps(asdict(fitted)).encode())
    return fitted, path, made


def stream_best_fixed(experiment: str, config: StreamConfig) -> FixedAtDepth:
    """The player of ``best-fixed:<experiment>`` on a stream of validated ``config``."""
    note = lambda text: print(f"best-fixed:{experiment}: {text}", file=sys.stderr, flush=True)  # noqa: E731
    fitted = cached_fit(fitting_config(experiment, config), note=note)[0]
    return FixedAtDepth(fitted.depth, fitted.chain, f"best-fixed:{experiment}", frozenset(fitted.conversations))
