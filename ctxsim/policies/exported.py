"""A learned policy exported from Stable-Baselines3, run with numpy alone.

:func:`ctxsim.lab.export.export_run` writes an export directory; its ``policy/`` folder
holds ``policy.json`` (the spec: format version, observation features and
:data:`~ctxsim.observe.OBSERVATION_VERSION`, actions, the episode settings, whether it
looks ahead, the observation normalization, the network's layers) and ``weights.npz`` (one
``layers.<i>.weight`` / ``layers.<i>.bias`` pair per dense layer). :func:`load`
takes the export directory or its ``policy/`` folder (``get_policy(path)`` too)
and returns an :class:`ExportedPolicy`:

* ``decide(state)`` — the strategy id it picks: :func:`ctxsim.observe.observe`,
  the observation normalization when the run had one, the dense layers, then the
  argmax of the logits (PPO, A2C, MaskablePPO) or Q-values (DQN) over the valid
  actions (ties go to the lower index), as the SB3 adapter acts; the actions are
  checked for validity best score first, down to the first valid one (the whole
  mask only when none is, or on a last step that masks overflowing results);
* ``break_context(state)`` — one :class:`~ctxsim.episode.OverflowEpisode` under the
  policy's own settings (masks, ``max_steps``, forced recovery, the seed reward),
  optionally logged to JSONL in the transition schema of :mod:`ctxsim.transitions`;
  when the spec says ``lookahead`` (the run's experiment did), each step is chosen by
  :func:`ctxsim.policies.lookahead.look_ahead` on the network's ranking, so the break
  avoids a forced recovery its own choices can avoid, and a recovery its ranking puts
  first when a clean break is reachable; the steps it tries and does not take count in
  the break's latency (``decide`` sees one state and takes the top action);
* ``compact_messages(messages, limit)`` — the same on an agent's own chat message
  list, returned as chat messages (:mod:`ctxsim.messages`);
  ``compact_anthropic_messages(messages, limit, system=...)`` on an Anthropic Messages
  API request, returned as one (:mod:`ctxsim.anthropic_messages`), and
  ``compact_response_items(items, limit, instructions=...)`` on an OpenAI Responses API
  input (:mod:`ctxsim.openai_responses`), ``compact_langchain_messages(messages, limit)``
  on LangChain messages (:mod:`ctxsim.langchain_messages`, with langchain-core);
* ``reset`` / ``act`` — the :class:`~ctxsim.policies.Policy` protocol, so
  ``ctxsim evaluate --policy DIR`` and sweeps run it like any other policy.

``load(path, log="decisions.jsonl")`` makes every break without a ``log`` of its
own append to that file, so a :class:`~ctxsim.window.ContextWindow` running the
policy logs each compaction it asks for.

This module and everything it imports need neither torch, stable-baselines3,
gymnasium, pandas nor matplotlib: ``tests/test_numpy_only.py`` runs a policy with
them unimportable (``import ctxsim`` registers the environments only when gymnasium
can be imported); a plain install leaves them out (they are the extra ``train``). A policy
is thread-safe (one lock around its episodes: the episode settings memoize
strategy results) and picklable.
"""

from __future__ import annotations

import json
import threading
from collections.abc import MutableMapping
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Callable, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ..anthropic_messages import compact_anthropic_messages
from ..budget import TokenBudget
from ..episode import EpisodeSettings, OverflowEpisode, Step
from ..episode_config import EpisodeConfig
from ..errors import PolicyError, describe_value
from ..messages import compact_messages
from ..openai_responses import compact_response_items
from ..metrics import BreakingOutcome
from ..model import ContextState
from ..observe import OBSERVATION_VERSION, ObservationConfig, current_break, feature_names, observe
from ..strategies.base import ProgressEvent
from ..transitions import TransitionWriter
from ..validation import check_input, validate
from .lookahead import look_ahead, ranked_actions
from .registry import Policy, register_loader, run_episode

FORMAT = "ctxsim-exported-policy"
FORMAT_VERSION = 1
POLICY_DIR = "policy"
POLICY_FILE = "policy.json"
WEIGHTS_FILE = "weights.npz"
#: strategy results a deployed policy memoizes (an episode needs a few dozen)
CACHE_SIZE = 4096

#: elementwise activations by name; ``param`` is ELU's alpha or LeakyReLU's negative slope
ACTIVATIONS: dict[str, Callable[[np.ndarray, float], np.ndarray]] = {
    "identity": lambda x, _: x,
    "tanh": lambda x, _: np.tanh(x),
    "relu": lambda x, _: np.maximum(x, 0),
    "leaky_relu": lambda x, a: np.where(x >= 0, x, a * x),
    "elu": lambda x, a: np.where(x > 0, x, a * np.expm1(x)),
    "sigmoid": lambda x, _: 1 / (1 + np.exp(-x)),
}


# ---- the spec (policy.json) --------------------------------------------------------------
class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ObservationSpec(_Spec):
    """What the network reads: :func:`~ctxsim.observe.observe` of this version and config."""

    version: int
    config: ObservationConfig
    features: list[str]


class NormalizationSpec(_Spec):
    """VecNormalize's observation statistics: ``clip((obs - mean) / sqrt(var + epsilon), ±clip)``."""

    mean: list[float]
    var: list[float]
    epsilon: Annotated[float, Field(ge=0)]
    clip: Annotated[float, Field(gt=0)]


class LayerSpec(_Spec):
    """One dense layer ``activation(x @ weight.T + bias)``; arrays in weights.npz."""

    weight: str
    bias: str
    inputs: Annotated[int, Field(ge=1)]
    outputs: Annotated[int, Field(ge=1)]
    activation: Literal["identity", "tanh", "relu", "leaky_relu", "elu", "sigmoid"]
    param: float = 0.0


class NetworkSpec(_Spec):
    """The actor (logits) or the Q-network (Q-values), input to output."""

    kind: Literal["logits", "q_values"]
    hidden: list[int]
    activation: str
    layers: Annotated[list[LayerSpec], Field(min_length=1)]


class PolicySpec(_Spec):
    """The content of ``policy.json`` (see the module docstring)."""

    format: Literal["ctxsim-exported-policy"]
    format_version: Literal[1]
    name: str
    algorithm: Literal["PPO", "A2C", "DQN", "MaskablePPO"]
    source: dict[str, Any]
    observation: ObservationSpec
    actions: Annotated[list[str], Field(min_length=1)]
    settings: dict[str, Any]
    lookahead: bool = False
    normalization: NormalizationSpec | None
    network: NetworkSpec


# ---- the network ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Layer:
    """A dense layer (float32 arrays: ``weight`` is outputs × inputs)."""

    weight: np.ndarray
    bias: np.ndarray
    activation: str
    param: float = 0.0

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return ACTIVATIONS[self.activation](x @ self.weight.T + self.bias, self.param)


@dataclass(frozen=True)
class Normalization:
    """Observation normalization (float64 statistics, as VecNormalize keeps them)."""

    mean: np.ndarray
    var: np.ndarray
    epsilon: float
    clip: float

    @classmethod
    def of(cls, spec: NormalizationSpec) -> Normalization:
        return cls(np.asarray(spec.mean, dtype=np.float64), np.asarray(spec.var, dtype=np.float64), spec.epsilon, spec.clip)

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        scaled = (obs - self.mean) / np.sqrt(self.var + self.epsilon)
        return np.clip(scaled, -self.clip, self.clip).astype(np.float32)


def _progress(steps: list[Step]) -> tuple[ProgressEvent, ...]:
    """The progress messages of a break's steps, in order, the context's length checked
    once (each step's own messages start with that check while it is over target)."""
    events = [event for step in steps if step.result is not None for event in step.result.events]
    first = next((k for k, e in enumerate(events) if e.phase == "detection"), len(events))
    return tuple(e for k, e in enumerate(events) if k <= first or e.phase != "detection")


@dataclass(frozen=True)
class BreakResult:
    """What :meth:`ExportedPolicy.break_context` did.

    ``state``: the broken context (with the input's own limits); ``chain``: the
    strategy ids the policy chose, in order (a forced recovery is not in it; see
    ``forced_recovery``); ``outcome`` and ``reward``: design 001's metrics and reward
    against ``target_tokens`` (tokens); ``latency_ms``: the modeled latency (ms), the
    steps the look-ahead tried and did not take included; ``events``: design 001's
    progress messages of the steps taken, in order (the length check, each strategy's
    phase, a recovery and its handover, success: what an agent's status line shows).
    """

    state: ContextState
    chain: tuple[str, ...]
    outcome: BreakingOutcome
    reward: float
    forced_recovery: bool
    target_tokens: int
    latency_ms: float
    events: tuple[ProgressEvent, ...] = ()

    @property
    def success(self) -> bool:
        return self.outcome.success

    @property
    def used_recovery(self) -> bool:
        return self.outcome.used_recovery


class ExportedPolicy(Policy):
    """An exported network acting greedily under the action mask (module docstring)."""

    def __init__(
        self, spec: PolicySpec, settings: EpisodeSettings, layers: list[Layer], normalization: Normalization | None, name: str
    ) -> None:
        self.spec, self.settings, self.layers, self.normalization, self.name = spec, settings, layers, normalization, name
        self.observation_config = spec.observation.config
        #: the JSONL decision log of every break that names none (see :func:`load`)
        self.log: str | Path | None = None
        self._lock = threading.RLock()

    @property
    def actions(self) -> tuple[str, ...]:
        return self.settings.actions

    @property
    def algorithm(self) -> str:
        return self.spec.algorithm

    # ---- one decision --------------------------------------------------------------
    def observation(self, state: ContextState, steps_taken: int | None = None) -> np.ndarray:
        """The observation the network reads; ``steps_taken`` (see :meth:`decide`)."""
        return observe(current_break(state, _checked_steps(state, steps_taken)), self.observation_config)

    def scores(self, observation: np.ndarray) -> np.ndarray:
        """The network's logits or Q-values (float32, one per action) for one observation."""
        x = np.asarray(observation, dtype=np.float32)
        if self.normalization is not None:
            x = self.normalization(x)
        for layer in self.layers:
            x = layer(x)
        return x

    def decide(self, state: ContextState, *, mask: np.ndarray | None = None, steps_taken: int | None = None) -> str:
        """The strategy id the policy applies next to ``state``.

        ``mask``: valid actions (bools in the order of :attr:`actions`); default:
        the policy's settings decide, as in an episode. ``steps_taken``: how many
        of the last entries of ``state.history`` belong to the current break
        (default: all of them; the observation's step features count only those).
        """
        if not isinstance(state, ContextState):
            raise PolicyError(f"decide() takes a ContextState, got {describe_value(state)}", key="state")
        given = None if mask is None else _checked_mask(mask, len(self.actions))
        steps = _checked_steps(state, steps_taken)
        with self._lock:
            scores = self.scores(self.observation(state, steps)).astype(np.float64)
            if given is None:
                first = self._first_valid(state, steps, scores)
                if first is not None:
                    return first
            valid = self.settings.mask(state, steps) if given is None else given
        return self.actions[int(np.argmax(np.where(valid, scores, -np.inf)))]

    def _first_valid(self, state: ContextState, steps: int, scores: np.ndarray) -> str | None:
        """The argmax of :meth:`decide` under the settings' mask, reading the actions'
        validity in score order (ties: lower index first) down to the first valid one
        (memoized on the state object: an agent's new context costs no fingerprint);
        None when that is not the argmax: no action is valid (the mask then falls back
        to the recovery actions), the last step masks the overflowing results, or a
        score is not finite."""
        settings = self.settings
        if (settings.mask_overflowing_last_step and steps >= settings.max_steps - 1) or not np.isfinite(scores).all():
            return None
        for index in np.argsort(-scores, kind="stable"):
            if settings.valid(self.actions[index], state, by_fingerprint=False):
                return self.actions[index]
        return None

    # ---- the Policy protocol -------------------------------------------------------
    def check(self, settings: EpisodeSettings) -> None:
        if settings.actions != self.actions:
            raise PolicyError(
                f"policy '{self.name}' was exported with the actions {list(self.actions)}, "
                f"the episode has {list(settings.actions)}",
                key="actions",
            )

    def ranked(self, episode: OverflowEpisode) -> list[str]:
        """The episode's valid actions, highest score first (ties: lower index first)."""
        with self._lock:  # the mask, like the observation, reads the settings' memo (as in decide)
            valid = episode.action_mask()
            scores = self.scores(self.observation(episode.state, episode.steps_taken))
        return ranked_actions(self.actions, valid, scores)

    def act(self, episode: OverflowEpisode) -> str:
        self.check(episode.settings)
        if self.spec.lookahead:
            return look_ahead(episode, self.ranked)
        return self.decide(episode.state, mask=episode.action_mask(), steps_taken=episode.steps_taken)

    # ---- a whole break -------------------------------------------------------------
    def break_context(
        self, state: ContextState, *, target_tokens: int | None = None, log: str | Path | None = None
    ) -> BreakResult:
        """Break ``state`` until it fits: one episode under the policy's settings.

        ``target_tokens``: fit this many tokens instead of the settings' target
        (the episode runs on ``state`` with its limit moved so that the settings'
        target is ``target_tokens``; the result keeps the input's limits). ``log``:
        a JSONL file that gets one transition record per decision (appended, one
        episode's records together; episodes numbered on from the file's last);
        default: the policy's :attr:`log`. The log is opened before the break runs,
        so a log that cannot be appended to raises before anything is broken.
        """
        if not isinstance(state, ContextState):
            raise PolicyError(f"break_context() takes a ContextState, got {describe_value(state)}", key="state")
        scoped = state if target_tokens is None else _with_target(state, target_tokens, self.settings)
        steps: list[Step] = []
        log = self.log if log is None else log
        with self._lock, ExitStack() as stack:
            # opened first: a log that cannot be appended to fails before the break runs
            writer = None if log is None else stack.enter_context(TransitionWriter(Path(log), f"exported:{self.spec.name}"))
            episode = run_episode(self, scoped, self.settings, 0, lambda _, step: steps.append(step))
            if writer is not None:
                self._log(writer, episode, steps)
        final = episode.state
        if scoped is not state:
            final = replace(final, limit=state.limit, min_limit=state.min_limit)
        return BreakResult(
            final, episode.chain, episode.outcome, episode.reward, episode.forced_recovery,
            episode.target_tokens, episode.total_ms, _progress(steps),
        )

    def compact_messages(
        self, messages: list[dict[str, Any]], limit: int | TokenBudget, *, log: str | Path | None = None,
        artifacts: MutableMapping[str, str] | None = None, keep_system: bool = True, keep_newest: bool = True,
    ) -> list[dict[str, Any]]:
        """An agent's chat messages broken to fit ``limit`` tokens (or a
        :class:`~ctxsim.budget.TokenBudget`'s room for messages), as chat messages
        (:func:`ctxsim.messages.compact_messages`; decisions go to ``log``, default
        the policy's :attr:`log`; content moved behind ``read_artifact`` pointers into
        ``artifacts``, artifact id -> content; the system messages kept unchanged unless
        ``keep_system`` is False; the newest turn held back from the break unless
        ``keep_newest`` is False)."""
        return compact_messages(self, messages, limit, log=log, artifacts=artifacts, keep_system=keep_system,
                                keep_newest=keep_newest)

    def compact_anthropic_messages(
        self, messages: list[dict[str, Any]], limit: int | TokenBudget, *, system: Any = None,
        log: str | Path | None = None, artifacts: MutableMapping[str, str] | None = None, keep_system: bool = True,
        keep_newest: bool = True,
    ) -> dict[str, Any]:
        """An Anthropic Messages API request (``system``, ``messages``) broken to fit
        ``limit`` tokens, system prompt included: ``{"system"?, "messages"}`` for
        ``client.messages.create(..., **result)``
        (:func:`ctxsim.anthropic_messages.compact_anthropic_messages`; ``log``,
        ``artifacts``, ``keep_system`` and ``keep_newest`` as :meth:`compact_messages` takes them)."""
        return compact_anthropic_messages(self, messages, limit, system=system, log=log, artifacts=artifacts,
                                          keep_system=keep_system, keep_newest=keep_newest)

    def compact_response_items(
        self, items: list[dict[str, Any]], limit: int | TokenBudget, *, instructions: str | None = None,
        log: str | Path | None = None, artifacts: MutableMapping[str, str] | None = None, keep_system: bool = True,
        keep_newest: bool = True,
    ) -> dict[str, Any]:
        """An OpenAI Responses API input (``instructions``, ``input`` items) broken to fit
        ``limit`` tokens, instructions included: ``{"instructions"?, "input"}`` for
        ``client.responses.create(..., **result)``
        (:func:`ctxsim.openai_responses.compact_response_items`; ``log``, ``artifacts``
        ``keep_system`` and ``keep_newest`` as :meth:`compact_messages` takes them)."""
        return compact_response_items(self, items, limit, instructions=instructions, log=log, artifacts=artifacts,
                                      keep_system=keep_system, keep_newest=keep_newest)

    def compact_langchain_messages(
        self, messages: list[Any], limit: int | TokenBudget, *, log: str | Path | None = None,
        artifacts: MutableMapping[str, str] | None = None, keep_system: bool = True, keep_newest: bool = True,
    ) -> list[Any]:
        """An agent's LangChain messages (langchain-core ``BaseMessage`` objects) broken to
        fit ``limit`` tokens, as messages (:func:`ctxsim.langchain_messages.compact_langchain_messages`;
        needs langchain-core, imported only here; ``log``, ``artifacts`` and
        ``keep_system`` and ``keep_newest`` as :meth:`compact_messages` takes them)."""
        from ..langchain_messages import compact_langchain_messages

        return compact_langchain_messages(self, messages, limit, log=log, artifacts=artifacts, keep_system=keep_system,
                                          keep_newest=keep_newest)

    def _log(self, writer: TransitionWriter, episode: OverflowEpisode, steps: list[Step]) -> None:
        """Append the episode's decisions in the schema of :mod:`ctxsim.transitions`."""
        start = len(episode.original.history)
        with writer.episode() as number:
            for index, step in enumerate(steps):
                writer.write_step(
                    step,
                    episode=number,
                    index=index,
                    scenario=episode.original.scenario,
                    seed=episode.original.seed,
                    observe=lambda state: self.observation(state, len(state.history) - start),
                    outcome=episode.outcome.to_dict() if step.done else None,
                )

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()


def _checked_steps(state: ContextState, steps_taken: int | None) -> int:
    """``steps_taken`` of :meth:`ExportedPolicy.decide`, checked (None: the whole history)."""
    if steps_taken is None:
        return len(state.history)
    if isinstance(steps_taken, bool) or not isinstance(steps_taken, (int, np.integer)) or not 0 <= steps_taken <= len(state.history):
        raise PolicyError(
            f"steps_taken must be an integer in 0..{len(state.history)} (the state's history), "
            f"got {describe_value(steps_taken)}", key="steps_taken",
        )
    return int(steps_taken)


def _checked_mask(mask: Any, size: int) -> np.ndarray:
    valid = np.asarray(mask)
    if valid.shape != (size,) or valid.dtype != np.bool_:
        raise PolicyError(f"mask must be {size} bools, got {describe_value(mask)}", key="mask")
    if not valid.any():
        raise PolicyError("mask allows no action", key="mask")
    return valid


def _with_target(state: ContextState, target_tokens: int, settings: EpisodeSettings) -> ContextState:
    """``state`` with the limit under which the settings' target is ``target_tokens``:
    the limit itself, or (target ``warning``) the largest limit whose warning
    threshold is at most ``target_tokens``."""
    if isinstance(target_tokens, bool) or not isinstance(target_tokens, (int, np.integer)) or target_tokens <= 0:
        raise PolicyError(f"target_tokens must be a positive integer, got {describe_value(target_tokens)}", key="target_tokens")
    limit = int(target_tokens)
    if settings.target == "warning":
        limit = int((limit + 1) / state.warning_threshold)
        while int(limit * state.warning_threshold) > target_tokens:
            limit -= 1
    return replace(state, limit=limit, min_limit=min(state.min_limit, limit))


# ---- loading ---------------------------------------------------------------------------------
def policy_dir(path: str | Path) -> Path:
    """The folder holding policy.json: ``path`` itself or its ``policy/`` folder."""
    path = Path(path)
    return path if (path / POLICY_FILE).is_file() else path / POLICY_DIR


def recognizes(path: Path) -> bool:
    """An export directory or its ``policy/`` folder."""
    return path.is_dir() and (policy_dir(path) / POLICY_FILE).is_file()


def _read_spec(file: Path) -> PolicySpec:
    check_input(file, "exported policy", PolicyError)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PolicyError(f"cannot read file ({exc.strerror or exc})", source=file) from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise PolicyError(f"not JSON ({exc})", source=file) from None
    if not isinstance(data, dict):
        raise PolicyError(f"expected a JSON object, got {describe_value(data)}", source=file)
    if data.get("format") != FORMAT or data.get("format_version") != FORMAT_VERSION:
        raise PolicyError(
            f"not a {FORMAT} version {FORMAT_VERSION} file (format {describe_value(data.get('format'))}, "
            f"format_version {describe_value(data.get('format_version'))})", source=file, key="format",
        )
    return validate(PolicySpec, data, file, PolicyError)


def _settings(spec: PolicySpec, file: Path) -> EpisodeSettings:
    """The episode settings of the spec, checked against its observation config."""
    obs = spec.observation
    if obs.version != OBSERVATION_VERSION:
        raise PolicyError(
            f"exported for observation version {obs.version}; this ctxsim computes version {OBSERVATION_VERSION} "
            "(export the run again)", source=file, key="observation.version",
        )
    if obs.features != feature_names(obs.config):
        raise PolicyError("the feature names differ from ctxsim.observe's; export the run again", source=file, key="observation.features")
    if list(obs.config.actions) != spec.actions:
        raise PolicyError(f"observation actions {list(obs.config.actions)} differ from {spec.actions}", source=file, key="actions")
    settings = EpisodeSettings.of(EpisodeConfig.checked({**spec.settings, "cache_size": CACHE_SIZE}, file, PolicyError, "settings"))
    seen = (list(settings.actions), settings.max_steps, settings.target, settings.embedder)
    wanted = (spec.actions, obs.config.max_steps, obs.config.target, obs.config.embedder)
    if seen != wanted:
        raise PolicyError(f"settings {seen} disagree with the observation config {wanted}", source=file, key="settings")
    return settings


def _layers(spec: PolicySpec, weights: Path) -> list[Layer]:
    check_input(weights, "exported policy", PolicyError)
    try:
        data = np.load(weights, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):  # a lone .npy array
            raise ValueError("a single NumPy array, not a .npz archive of the network's arrays")
        with data:
            arrays = {name: data[name] for name in data.files}
    except Exception as exc:  # noqa: BLE001 - empty, cut short or damaged (zipfile and zlib raise a dozen kinds)
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise PolicyError(f"cannot read the weights ({reason[:200]})", source=weights) from None
    layers, width = [], len(spec.observation.features)
    for i, ls in enumerate(spec.network.layers):
        key = f"network.layers[{i}]"
        if ls.inputs != width:
            raise PolicyError(f"takes {ls.inputs} inputs, the layer before gives {width}", source=weights, key=key)
        for name, shape in ((ls.weight, (ls.outputs, ls.inputs)), (ls.bias, (ls.outputs,))):
            if name not in arrays:
                raise PolicyError(f"array {name!r} is missing", source=weights, key=key)
            array = arrays[name]
            if array.shape != shape:
                raise PolicyError(f"array {name!r} has shape {array.shape}, expected {shape}", source=weights, key=key)
            if not np.issubdtype(array.dtype, np.floating):
                raise PolicyError(f"array {name!r} holds {array.dtype} values, expected floats", source=weights, key=key)
            if not np.isfinite(array).all():
                raise PolicyError(f"array {name!r} holds values that are not finite (NaN or infinite)", source=weights,
                                  key=key)
        layers.append(Layer(arrays[ls.weight].astype(np.float32), arrays[ls.bias].astype(np.float32), ls.activation, ls.param))
        width = ls.outputs
    if width != len(spec.actions):
        raise PolicyError(f"the network gives {width} outputs for {len(spec.actions)} actions", source=weights, key="network.layers")
    return layers


def _normalization(spec: PolicySpec, file: Path) -> Normalization | None:
    norm = spec.normalization
    if norm is None:
        return None
    size = len(spec.observation.features)
    if len(norm.mean) != size or len(norm.var) != size:
        raise PolicyError(f"needs {size} means and variances, got {len(norm.mean)} and {len(norm.var)}", source=file, key="normalization")
    return Normalization.of(norm)


def build_policy(spec: PolicySpec, weights: Path, name: str, source: Path) -> ExportedPolicy:
    """An :class:`ExportedPolicy` from a spec and its weights file (both checked)."""
    return ExportedPolicy(spec, _settings(spec, source), _layers(spec, weights), _normalization(spec, source), name)


def load(path: str | Path, *, log: str | Path | None = None) -> ExportedPolicy:
    """The exported policy of an export directory or of its ``policy/`` folder.

    ``log``: a JSONL file every :meth:`~ExportedPolicy.break_context` appends its
    decisions to unless it names another — so a ``ContextWindow`` running the
    policy logs each compaction it asks for.

    Raises PolicyError naming the file and key when a file is missing or invalid,
    or when the policy was exported for another observation version.
    """
    folder = policy_dir(path)
    file = folder / POLICY_FILE
    if not file.is_file():
        raise PolicyError(f"no {POLICY_DIR}/{POLICY_FILE} here; is this a ctxsim export directory?", source=path)
    policy = build_policy(_read_spec(file), folder / WEIGHTS_FILE, str(path), file)
    policy.log = log
    return policy


register_loader(recognizes, load)
