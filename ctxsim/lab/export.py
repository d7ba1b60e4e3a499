"""Export a trained run: a learned chain config and a numpy-only deployable policy.

:func:`export_run` reads a training run (``ctxsim.lab.train``: ``config.yaml`` and
``best_model.zip``, or one model zip of the run) and writes, atomically (a
temporary folder renamed into place: a crash never leaves half an export)::

    <out>/chain_config.yaml     a context_config (ctxsim.load_config reads it)
    <out>/learned_rules.yaml    per-situation chains the policy chose (see below)
    <out>/policy/policy.json    the spec of the network (ctxsim.policies.exported)
    <out>/policy/weights.npz    its dense layers

The network is the SB3 policy's actor MLP and action head (PPO, A2C, MaskablePPO)
or its Q-network (DQN), with the VecNormalize observation statistics when the run
saved them (``vecnormalize.pkl``). The exported policy is then run, with numpy
alone, on the run's selection scenarios (``selection_env_config.scenario_names``:
the experiment's validation split, or its held-out split when it names none, as the
run's evaluation callback chose its model; a few context seeds each, one context per
transcript scenario, overflowing contexts only: the chain config is chosen on the
split the run chose its model on, so a held-out split stays the test), every decision's
network outputs checked against the SB3 model's (:func:`check_network`), and its
most frequent chain becomes
``breaking_strategy.chain_order`` with the strategies' parameters and the
``recovery_mode`` of the run's env config.

``ContextConfig`` forbids unknown keys, so the per-situation rules go to the
sibling ``learned_rules.yaml``. The selection episodes are grouped by two
situation features of the original context (:func:`situation`): the overflow
band of ``total tokens / target tokens`` (:data:`OVERFLOW_BANDS`) and the
dominant unit type (most tokens). A group (one feature value, or one pair of
values) becomes a rule when it has at least :data:`MIN_SUPPORT` episodes and its
most frequent chain — chosen in at least :data:`MIN_SHARE` of them and more
often than the chain that applies without the rule — differs from that chain (pair rules: the first matching single-feature
rule, else ``chain_order``). Rules are ordered pairs first; the first rule whose
``when`` matches a context applies. Each rule carries ``share`` (fraction of the
group's episodes with exactly that chain) and ``support`` (episodes in the group).

Importing this module needs the extra ``lab``; :func:`export_run` imports SB3 and torch (``train``).
"""

from __future__ import annotations

import io
import json
import math
import zipfile
from collections import Counter
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from ..atomic import atomic_directory
from ..config import ContextConfig, load_config
from ..episode import EpisodeSettings, settings_subset
from ..errors import LogFormatError, PolicyError, describe_value
from ..model import UNIT_TYPES, ContextState
from ..observe import OBSERVATION_VERSION, ObservationConfig, feature_names
from ..policies import run_episode
from ..policies.exported import FORMAT, FORMAT_VERSION, POLICY_DIR, POLICY_FILE, WEIGHTS_FILE, load, recognizes
from ..transitions import read_transitions
from .contexts import build_context
from .environments.overflow import ENV_ID, ContextOverflowEnv
from .policies import sb3
from .runs import CONFIG_FILE, MODEL_FILE, read_normalization, run_config

DEFAULT_SEEDS = 8
MIN_SUPPORT = 3
MIN_SHARE = 0.5
#: boundaries of the overflow bands of total tokens / target tokens: (1, 1.5], (1.5, 2], (2, 3], (3, inf)
OVERFLOW_BANDS = (1.0, 1.5, 2.0, 3.0)
CHAIN_CONFIG_FILE = "chain_config.yaml"
RULES_FILE = "learned_rules.yaml"
FEATURES = ("overflow_ratio", "dominant_type")


@dataclass(frozen=True)
class Rollout:
    """One episode of the exported policy on a selection context."""

    scenario: str
    seed: int
    chain: tuple[str, ...]
    situation: tuple[tuple[str, Any], ...]
    reward: float


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export_run` wrote: the folder, the learned chain and its share of
    the selection episodes, the chains' counts (most frequent first) and the rules."""

    out: Path
    algorithm: str
    chain: tuple[str, ...]
    share: float
    episodes: int
    chains: tuple[tuple[tuple[str, ...], int], ...]
    rules: tuple[dict[str, Any], ...]


# ---- situations and rules ------------------------------------------------------------------
def overflow_band(ratio: float) -> tuple[float, float | None]:
    """(above, at_most) of the band of ``ratio`` (``at_most`` None: no upper bound)."""
    for low, high in zip(OVERFLOW_BANDS, OVERFLOW_BANDS[1:]):
        if ratio <= high:
            return (low, high)
    return (OVERFLOW_BANDS[-1], None)


def situation(state: ContextState, target_tokens: int) -> tuple[tuple[str, Any], ...]:
    """The rule features of an overflowing context: ``overflow_ratio`` (its band of
    total tokens / ``target_tokens``) and ``dominant_type`` (the unit type with the
    most tokens; ties go to the first of :data:`~ctxsim.model.UNIT_TYPES`)."""
    by_type = state.tokens_by_type
    dominant = max(UNIT_TYPES, key=lambda t: (by_type.get(t, 0), -UNIT_TYPES.index(t)))
    return (("overflow_ratio", overflow_band(state.total_tokens / target_tokens)), ("dominant_type", dominant))


def _when(items: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for feature, value in items:
        if feature == "overflow_ratio":
            out[feature] = {"above": value[0]} | ({"at_most": value[1]} if value[1] is not None else {})
        else:
            out[feature] = value
    return out


def learned_rules(rollouts: list[Rollout], default: tuple[str, ...]) -> list[dict[str, Any]]:
    """Per-situation rules (module docstring), most specific first."""
    Items = tuple[tuple[str, Any], ...]

    def rule(items: Items, otherwise: tuple[str, ...]) -> tuple[Items, dict[str, Any]] | None:
        group = [r for r in rollouts if set(items) <= set(r.situation)]
        if len(group) < MIN_SUPPORT:
            return None
        counts = Counter(r.chain for r in group)
        chain, count = counts.most_common(1)[0]
        if count <= counts[otherwise] or count / len(group) < MIN_SHARE:  # also when chain == otherwise
            return None
        return items, {"when": _when(items), "chain": list(chain), "share": round(count / len(group), 3), "support": len(group)}

    def values(feature: str) -> list[Any]:
        seen = dict.fromkeys(dict(r.situation)[feature] for r in rollouts)
        return sorted(seen, key=lambda v: v[0]) if feature == "overflow_ratio" else sorted(seen, key=UNIT_TYPES.index)

    singles = [found for f in FEATURES for v in values(f) if (found := rule(((f, v),), default))]
    pairs = []
    for items in product(*[[(f, v) for v in values(f)] for f in FEATURES]):
        parent = next((r["chain"] for its, r in singles if set(its) <= set(items)), default)
        if found := rule(items, tuple(parent)):
            pairs.append(found)
    return [r for _, r in pairs + singles]


# ---- reading the run ---------------------------------------------------------------------------
def _env_config(config: dict[str, Any], file: Path) -> dict[str, Any]:
    """The env config of the run's selection split (``selection_env_config``; a run
    written before that key: ``eval_env_config``, else ``env_config``), resolved against
    the env's defaults."""
    env_id = config.get("env_id", ENV_ID)
    if env_id != ENV_ID:
        raise PolicyError(f"only {ENV_ID} runs can be exported, this run trained on {env_id!r}", source=file, key="env_id")
    key = next((k for k in ("selection_env_config", "eval_env_config") if isinstance(config.get(k), dict)), "env_config")
    if not isinstance(config.get(key), dict):
        raise PolicyError("the run config has no selection_env_config, eval_env_config or env_config mapping",
                          source=file, key=key)
    return ContextOverflowEnv.resolve_config(config[key], source=file, key_prefix=key)


def _settings_mapping(env_config: dict[str, Any]) -> dict[str, Any]:
    """The env config's keys that rebuild the episode settings (the cache size is the
    deployed policy's own)."""
    return {k: v for k, v in settings_subset(env_config).items() if k != "cache_size"}


_ACTIVATIONS = {"Tanh": "tanh", "ReLU": "relu", "LeakyReLU": "leaky_relu", "ELU": "elu", "Sigmoid": "sigmoid"}


def _network(model, algo: str, source: Path) -> tuple[str, list[tuple[np.ndarray, np.ndarray, str, float]]]:
    """(kind, dense layers as (weight, bias, activation, param)) of an SB3 MLP policy."""
    from stable_baselines3.common.torch_layers import FlattenExtractor
    from torch import nn

    policy = model.policy
    if algo == "DQN":
        kind, extractor, modules = "q_values", policy.q_net.features_extractor, list(policy.q_net.q_net)
    else:
        kind, extractor = "logits", policy.pi_features_extractor
        modules = [*policy.mlp_extractor.policy_net, policy.action_net]
    if not isinstance(extractor, FlattenExtractor):
        raise PolicyError(f"only MLP policies can be exported; this one extracts features with {type(extractor).__name__}", source=source)
    layers: list[list[Any]] = []
    for module in modules:
        name = type(module).__name__
        if isinstance(module, nn.Linear):
            weight = module.weight.detach().cpu().numpy()
            bias = module.bias.detach().cpu().numpy() if module.bias is not None else np.zeros(module.out_features)
            layers.append([weight, bias, "identity", 0.0])
        elif isinstance(module, nn.Identity):
            continue
        elif name in _ACTIVATIONS and layers and layers[-1][2] == "identity":
            param = getattr(module, "negative_slope", getattr(module, "alpha", 0.0))
            layers[-1][2:] = [_ACTIVATIONS[name], float(param)]
        else:
            raise PolicyError(f"cannot export the network module {name} (dense layers with {sorted(_ACTIVATIONS)} only)", source=source)
    return kind, [(np.asarray(w, np.float32), np.asarray(b, np.float32), a, p) for w, b, a, p in layers]


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """An ``.npz`` archive of ``arrays`` with fixed timestamps (byte-identical exports)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name in sorted(arrays):
            with archive.open(zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0)), "w") as fh:
                np.lib.format.write_array(fh, np.ascontiguousarray(arrays[name]), allow_pickle=False)
    return buffer.getvalue()


def _policy_files(source: Path) -> tuple[dict[str, Any], dict[str, np.ndarray], dict[str, Any], Any]:
    """(policy.json content, weight arrays, the resolved selection env config, the
    loaded SB3 policy) of a run."""
    if not source.exists() or not sb3.recognizes(source):
        raise PolicyError(f"not a training run directory (with {MODEL_FILE}) or a model .zip", source=source)
    run_dir, model_file = (source, source / MODEL_FILE) if source.is_dir() else (source.parent, source)
    config_file = run_dir / CONFIG_FILE
    trained = sb3.load_sb3_policy(source)
    env_config = _env_config(run_config(run_dir), config_file)
    settings = _settings_mapping(env_config)
    obs_config = ObservationConfig(
        actions=tuple(settings["actions"]), max_steps=settings["max_steps"], target=settings["target"], embedder=settings["embedder"]
    )
    features = feature_names(obs_config)
    model = trained.model
    if tuple(model.observation_space.shape) != (len(features),) or getattr(model.action_space, "n", None) != len(obs_config.actions):
        raise PolicyError(
            f"the model reads {model.observation_space.shape} and acts in {model.action_space}, the run's env has "
            f"{len(features)} features and {len(obs_config.actions)} actions", source=model_file,
        )
    kind, layers = _network(model, trained.algo, model_file)
    arrays, specs = {}, []
    for i, (weight, bias, activation, param) in enumerate(layers):
        arrays[f"layers.{i}.weight"], arrays[f"layers.{i}.bias"] = weight, bias
        specs.append({"weight": f"layers.{i}.weight", "bias": f"layers.{i}.bias", "inputs": weight.shape[1],
                      "outputs": weight.shape[0], "activation": activation, "param": param})
    hidden_acts = sorted({s["activation"] for s in specs[:-1]})
    spec = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "name": run_dir.name,
        "algorithm": trained.algo,
        "source": {"run": run_dir.name, "model": model_file.name, "env_id": ENV_ID,
                   "scenario_names": env_config["scenario_names"]},
        "observation": {"version": OBSERVATION_VERSION, "config": obs_config.model_dump(mode="json"), "features": features},
        "actions": list(obs_config.actions),
        "settings": settings,
        "lookahead": trained.lookahead,
        "normalization": read_normalization(run_dir),
        "network": {"kind": kind, "hidden": [s["outputs"] for s in specs[:-1]],
                    "activation": "+".join(hidden_acts) or "identity",
                    "layers": specs},
    }
    return spec, arrays, env_config, trained


#: largest difference allowed between the exported network's and the SB3 model's
#: outputs (logits centered per observation: a constant shift changes no choice)
MAX_NETWORK_ERROR = 1e-4


def check_network(trained, policy, observations: list[np.ndarray], source: Path) -> float:
    """The largest output difference between the SB3 policy and the exported one on
    ``observations``; PolicyError when it exceeds :data:`MAX_NETWORK_ERROR` (a network
    layout the export misreads is never published)."""
    worst = 0.0
    for obs in observations:
        ours = policy.scores(obs).astype(np.float64)
        theirs = trained.scores(obs).astype(np.float64)
        worst = max(worst, float(np.abs((ours - ours.mean()) - (theirs - theirs.mean())).max()))
    if worst > MAX_NETWORK_ERROR:
        raise PolicyError(f"the exported network differs from the trained model by {worst:.2g} on the selection "
                          f"observations (at most {MAX_NETWORK_ERROR:g} allowed); not exported", source=source)
    return worst


# ---- selection rollouts ---------------------------------------------------------------------------
def selection_rollouts(policy, env_config: dict[str, Any], seeds: int, observations: list | None = None) -> list[Rollout]:
    """The policy's episodes on the scenarios of ``env_config`` (the run's selection split): context seeds
    ``0..seeds-1`` (one context per transcript scenario that is not a family), overflowing
    contexts only. ``observations`` (a list) gets the observation of every decision."""
    suite = ContextOverflowEnv.checked_config(env_config).suite  # the selection split's names only
    settings = policy.settings
    out = []
    for scenario in suite:
        for seed in range(1 if not scenario.varies_by_seed else min(seeds, scenario.context_count(env_config["contexts_per_scenario"]))):
            state = build_context(scenario, seed)
            target = settings.target_tokens(state)
            if state.total_tokens <= target:
                continue
            on_step = None if observations is None else (lambda _, step: observations.append(policy.observation(step.before)))
            episode = run_episode(policy, state, settings, 0, on_step)
            out.append(Rollout(scenario.name, seed, episode.chain, situation(state, target), episode.reward))
    return out


# ---- writing --------------------------------------------------------------------------------------
def _chain_config(chain: tuple[str, ...], strategies: list[str], settings: EpisodeSettings, header: str) -> str:
    """The context_config YAML: the seed example with the learned chain, its strategies'
    parameters, the recovery mode and the reward (profile and weights) of ``settings``,
    under a comment ``header``."""
    config = ContextConfig().model_dump(mode="json")
    params = {sid: settings.strategy(sid).params.model_dump(mode="json") for sid in strategies}
    config["breaking_strategy"] = {"chain_order": list(chain), **params}
    config["recovery_mode"] = settings.recovery_mode
    config["reward"] = settings.reward.model_dump(mode="json")
    return header + yaml.safe_dump({"context_config": config}, sort_keys=False, allow_unicode=True)


def _comment(lines: list[str]) -> str:
    return "".join(f"# {line}\n" if line else "#\n" for line in lines)


def _check_out(out: Path) -> None:
    """Refuse to replace a folder that is not an earlier export."""
    if out.exists() and not (out.is_dir() and (recognizes(out) or not any(out.iterdir()))):
        raise PolicyError("exists and is not an export directory; refusing to replace it", source=out)


def export_run(source: str | Path, out: str | Path, *, seeds: int = DEFAULT_SEEDS) -> ExportResult:
    """Export the run (directory or model zip) ``source`` to the folder ``out``
    (replaced whole if it holds an earlier export). See the module docstring."""
    source, out = Path(source), Path(out)
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise PolicyError(f"seeds must be a positive integer, got {seeds!r}", key="seeds")
    _check_out(out)
    spec, arrays, env_config, trained = _policy_files(source)
    with atomic_directory(out) as tmp:
        (tmp / POLICY_DIR).mkdir()
        (tmp / POLICY_DIR / POLICY_FILE).write_text(json.dumps(spec, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        (tmp / POLICY_DIR / WEIGHTS_FILE).write_bytes(npz_bytes(arrays))
        policy = load(tmp)
        observations: list[np.ndarray] = []
        rollouts = selection_rollouts(policy, env_config, seeds, observations)
        if not rollouts:
            raise PolicyError("no selection context overflows its target; nothing to learn a chain from",
                              source=source, key="selection_env_config")
        check_network(trained, policy, observations, source)
        counts = Counter(r.chain for r in rollouts).most_common()
        chain, count = counts[0]  # never empty: every rollout broke an overflow
        rules = learned_rules(rollouts, chain)
        strategies = list(dict.fromkeys([*chain, *(sid for r in rules for sid in r["chain"])]))
        provenance = [
            f"Learned by ctxsim export from run {spec['name']} ({spec['algorithm']}, model {spec['source']['model']}).",
            f"chain_order: the policy's most frequent chain, {count} of {len(rollouts)} selection episodes",
            f"on {', '.join(dict.fromkeys(r.scenario for r in rollouts))}; strategy parameters and",
            f"recovery_mode from the run's env config; per-situation rules in {RULES_FILE}.",
        ]
        (tmp / CHAIN_CONFIG_FILE).write_text(_chain_config(chain, strategies, policy.settings, _comment(provenance)), encoding="utf-8")
        load_config(tmp / CHAIN_CONFIG_FILE)  # a config the loader rejects is never published
        rules_doc = {
            "learned_rules": {
                "run": spec["name"],
                "algorithm": spec["algorithm"],
                "episodes": len(rollouts),
                "default": {"chain": list(chain), "share": round(count / len(rollouts), 3), "support": len(rollouts)},
                "chains": [{"chain": list(c), "count": n} for c, n in counts],
                "rules": rules,
            }
        }
        explain = [
            "Per-situation chains of the exported policy on the run's selection scenarios.",
            "The first rule whose `when` matches an overflowing context applies its chain; otherwise",
            f"context_config.breaking_strategy.chain_order of {CHAIN_CONFIG_FILE} (= default.chain).",
            "overflow_ratio: total tokens / target tokens of the context, in the band (above, at_most];",
            "dominant_type: the unit type holding the most tokens. share: fraction of the group's",
            "episodes whose chain was exactly `chain`; support: episodes in the group.",
        ]
        (tmp / RULES_FILE).write_text(_comment(explain) + yaml.safe_dump(rules_doc, sort_keys=False), encoding="utf-8")
    return ExportResult(out, spec["algorithm"], chain, count / len(rollouts), len(rollouts), tuple(counts), tuple(rules))


# ---- reading decision logs back ------------------------------------------------------------------
@dataclass(frozen=True)
class LoggedEpisode:
    """One finished episode of a transition log (a deployed policy's or a simulation's)."""

    run_id: str
    scenario: str
    seed: int | None
    chain: tuple[str, ...]
    reward: float
    success: bool
    used_recovery: bool
    #: share of the context's probes answered; None in logs written before probes existed
    probe_score: float | None = None


@dataclass(frozen=True)
class LogStats:
    """Aggregates of some episodes: rates are shares of ``episodes``, reward and probe
    score the means (the probe score over the episodes that logged one; NaN if none did)."""

    name: str
    episodes: int
    success_rate: float
    recovery_rate: float
    mean_reward: float
    mean_probe_score: float = math.nan

    @classmethod
    def of(cls, name: str, episodes: list[LoggedEpisode]) -> "LogStats":
        def mean(values: list[float], empty: float = 0.0) -> float:
            return sum(values) / len(values) if values else empty

        probes = [e.probe_score for e in episodes if e.probe_score is not None]
        return cls(name, len(episodes), mean([e.success for e in episodes]), mean([e.used_recovery for e in episodes]),
                   mean([e.reward for e in episodes]), mean(probes, math.nan))


@dataclass(frozen=True)
class LogSummary:
    """What :func:`summarize_log` found: every finished episode, in log order, and the
    number of records and of unfinished episodes (no terminal record yet)."""

    path: Path
    records: int
    episodes: tuple[LoggedEpisode, ...]
    unfinished: int

    @property
    def overall(self) -> LogStats:
        return LogStats.of("all", list(self.episodes))

    def by(self, attribute: str) -> list[LogStats]:
        """Stats per value of ``run_id`` or ``scenario``, in order of first appearance."""
        groups: dict[str, list[LoggedEpisode]] = {}
        for e in self.episodes:
            groups.setdefault(getattr(e, attribute), []).append(e)
        return [LogStats.of(name, group) for name, group in groups.items()]

    @property
    def chains(self) -> list[tuple[tuple[str, ...], int]]:
        """Chains and their counts, most frequent first (ties: first seen)."""
        return Counter(e.chain for e in self.episodes).most_common()


def _field(record: dict[str, Any], key: str, kinds: tuple[type, ...], path: Path, line: int) -> Any:
    value = record[key]
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        raise LogFormatError(f"line {line}: {key} is {describe_value(value)}, expected {' or '.join(k.__name__ for k in kinds)}", source=path)
    return value


def summarize_log(path: str | Path) -> LogSummary:
    """Read a JSONL transition log (:mod:`ctxsim.transitions`) back into episodes.

    An episode is the consecutive records of one (run_id, episode) up to its
    terminal record, which holds the outcome and the episode's reward. Raises
    LogFormatError (file and line) for a record that breaks the schema.
    """
    path = Path(path)
    records = read_transitions(path)
    open_: dict[tuple[str, Any], list[str]] = {}
    episodes = []
    for line, record in enumerate(records, start=1):
        action = _field(record, "action", (str,), path, line)
        reward = _field(record, "reward", (int, float), path, line)
        try:
            reward = float(reward)
        except OverflowError:  # an integer beyond any float
            reward = math.inf
        if not math.isfinite(reward):
            raise LogFormatError(f"line {line}: reward is {reward}, expected a finite number", source=path)
        key = (str(record["run_id"]), _field(record, "episode", (int,), path, line))
        open_.setdefault(key, []).append(action)
        if not _field(record, "terminated", (bool,), path, line):
            continue
        outcome = _field(record, "outcome", (dict,), path, line)
        flags = [outcome.get(k) for k in ("success", "used_recovery")]
        if not all(isinstance(f, bool) for f in flags):
            raise LogFormatError(f"line {line}: the outcome lacks the booleans success and used_recovery", source=path)
        probe = outcome.get("probe_score")
        if probe is not None and (isinstance(probe, bool) or not isinstance(probe, (int, float)) or not 0 <= probe <= 1):
            raise LogFormatError(f"line {line}: the outcome's probe_score is {describe_value(probe)}, expected a share in [0, 1]",
                                 source=path)
        episodes.append(LoggedEpisode(key[0], str(record["scenario"] or ""), record["seed"], tuple(open_.pop(key)),
                                      reward, *flags, None if probe is None else float(probe)))
    return LogSummary(path, len(records), tuple(episodes), len(open_))
