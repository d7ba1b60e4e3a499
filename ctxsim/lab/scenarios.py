"""Overflow scenarios: the YAML schema, the loader and the suite shipped in data/scenarios.

A scenario describes one overflowing context, either *generated* (by
:mod:`ctxsim.lab.generator`) or read from a chat *transcript* (:mod:`ctxsim.transcripts`).

Generated scenario keys (tokens are cl100k tokens, shares are in [0, 1]):

- ``name`` (required), ``description``;
- exactly one of ``limit`` (tokens) or ``model`` (a model id of ``data/models.yaml``);
- exactly one of ``target_tokens`` (tokens) or ``overflow`` (target / limit, at most
  :data:`MAX_OVERFLOW`);
- ``mix``: share of tokens per unit type (message, code, plan_ref, log, tool_result,
  other), summing to 1 within 1e-6. Shares are measured over the units of those
  types by their true type (see :func:`ctxsim.lab.generator.token_mix`); prior summaries
  count toward the target but not toward the mix;
- ``p1_ratio``: share of units tagged P1;
- ``facts`` (planted facts + rules, default 8, a third of them rules, rounded),
  ``duplicates`` (older copies of repeated identical tool reads), ``superseded_writes``
  (file writes read back later), ``writes`` (files written per cycle by planted
  write_file calls, each an artifact probe; default 1 when the mix has a tool_result
  share, else 0), ``errors`` (failed tool calls), ``pinned`` (pinned
  instruction units), ``misclassified`` (share of units with a wrong type label),
  ``prior_summaries`` (summary units already in the context);
- ``unit_tokens: {min, max}``: typical size of a generated unit (tokens);
- ``min_limit`` (default 3,500, design 001's floor), ``warning_threshold`` (default 0.8),
  ``task`` (the current task text; generated when absent).

Scenario family keys (:mod:`ctxsim.lab.families`): ``name``, ``description``, ``sample`` (the
ranges each context seed draws limit, overflow, mix, P1 share, unit sizes and planted
material from; ``{}`` takes every default range), ``min_limit``, ``warning_threshold``,
``task``. The generated keys above are drawn, so they may not be given beside ``sample``.

``session: agent_loop`` draws the context from the agent-loop session model
(:mod:`ctxsim.lab.agent_session`: a bash-only coding agent's session on a fake repository,
fitted to real sessions) instead. Without further keys the session is the fitted one;
these keys shape it (:data:`AGENT_LOOP_KEYS`; ``writes`` and ``task`` do not apply):

- ``mix``: share of the session's step tokens (every unit after the task) per kind of
  step: ``code`` (file views and written scripts), ``log`` (test, script and pip runs),
  ``tool_result`` (grep, find, ls, git), ``plan_ref`` (the agent's plan updates),
  ``message`` (the agent's analyses, the user's follow-ups), ``other`` (config and data
  files shown); measured by :func:`ctxsim.lab.agent_options.step_mix`. With a mix, tool
  outputs are typed by their kind of step (``code``, ``log``, ``other``; searches stay
  ``tool_result``), so content-type strategies see the kinds the mix asked for;
- ``p1_ratio`` with ``p1_placement`` (``task``, the default: P1 is the system prompt,
  the task and its rules, as in real sessions; ``spread``: further units evenly over the
  session; ``recent``: the latest units) — ``p1_ratio`` is then the share of units P1;
- ``facts`` (a third of them rules in the task, the rest values tool outputs show),
  ``duplicates`` (exact re-reads of unchanged file views), ``superseded_writes``
  (helper files written and later shown again with ``cat``), ``errors`` (extra failed
  commands), ``pinned`` (the system prompt, the task, then pinned instruction messages
  from the user), ``misclassified``, ``prior_summaries`` (summaries of earlier turns
  after the task), ``unit_tokens`` (typical tool output size; the harness's output
  limit grows to fit);
- ``user_turns`` (later user messages with follow-up requests, instead of the 0-2
  format reminders) and ``worked_example`` (a P3 demonstration before the task) — keys
  of an ``agent_loop`` session only;
- ``probes`` (an ``agent_loop`` session or family only): ``planted`` (the default: the
  generator's ground truth, :mod:`ctxsim.lab.agent_session`) or ``continuation``: the
  probes are what the session's own continuation uses again, as a transcript cut's are
  (:mod:`ctxsim.lab.continuation`), with the user's rules as decision probes.

As a family, an ``agent_loop`` scenario's ``sample`` draws only ``limit`` and ``overflow``.

Any scenario may set ``contexts``: how many distinct contexts (seeds ``0..contexts-1``)
an environment draws from it (default: the environment's ``contexts_per_scenario``).

Transcript scenario keys: ``name``, ``transcript`` (a chat JSONL path relative to the
scenario file), ``limit`` or ``model`` (optional: without them the limit is the
transcript's size), ``description``, ``min_limit``, ``warning_threshold``. A
transcript builds one context whatever the seed, unless it is a *transcript family*:
with ``sample: {overflow: {min, max}}`` (or ``{limit: {min, max}}``) instead of
``limit``/``model``, each seed draws the limit, so one conversation gives contexts at
many severities of overflow.

A transcript scenario may set ``cut``: the share of its messages that form the
context (in (0, 1); :func:`ctxsim.cuts.cut_index`), the rest being the context's
future, whose reused strings become its probes (:mod:`ctxsim.cuts`). A transcript
family may give ``cut: {min, max}`` instead: each seed draws its cut (before its
limit). With a cut, the limit (and a family's overflow) is measured against the
cut context, not the whole conversation. A scenario with a cut may name an
``instructions`` file (relative to the scenario file): the user's instructions of its
agent templates, listed by hand as ``instructions: [sentence, ...]``
(``data/transcripts/instructions.yaml``); each one a user message of the cut states
is a decision probe (:func:`ctxsim.cuts.stated_probes`).

A *corpus family* sets ``corpus`` (a folder of chat JSONL sessions with a
``splits.yaml``, :mod:`ctxsim.lab.corpus`, relative to the scenario file) and optionally
``split`` (``train``, ``validation`` or ``held_out``; default every session) instead of
``transcript``, with ``sample`` (and ``cut``) as a transcript family: each seed draws
one session of the split, then its cut and limit as that session's transcript family
would. The sessions are read once per process.

Every number must be finite; a family's sampled ``overflow`` is bounded like ``overflow``.

A file holds one scenario mapping or a list of them under ``scenarios``. A chat
JSONL file (``*.jsonl``) given where scenarios are expected is two transcript
families named after the file: the conversation at a limit drawn per seed, 1.1-2.5x
overflow, 32 contexts (:data:`~ctxsim.lab.families.TRANSCRIPT_FILE_SAMPLE`), and the same
cut after 30-80 % of its messages (``<name>-cut``,
:data:`~ctxsim.lab.families.TRANSCRIPT_FILE_CUT`), so an agent's own logs can be
evaluated as they are, and judged by their own future. Every invalid file raises :class:`~ctxsim.errors.ScenarioError` naming the file, the key
path and the value in one line.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, StrictStr, model_validator

from ..config import model_limit
from .corpus import corpus_files, has_agent_turn
from ..errors import ScenarioError, describe_value
from .families import (
    MAX_OVERFLOW,
    TRANSCRIPT_FILE_CONTEXTS,
    TRANSCRIPT_FILE_CUT,
    TRANSCRIPT_FILE_SAMPLE,
    TRANSCRIPT_SAMPLE_KEYS,
    Range,
    SampleRanges,
    draw_rng,
)
from ..model import DEFAULT_MIN_LIMIT, DEFAULT_WARNING_THRESHOLD, MAX_CONTEXTS, MAX_TOKENS
from ..paths import DATA_DIR
from ..transcripts import load_transcript
from ..validation import KeyedValueError, join_key, load_yaml, validate

#: the folder of scenarios shipped with ctxsim (one YAML file per scenario)
DEFAULT_SUITE = DATA_DIR / "scenarios"

MixType = Literal["message", "code", "plan_ref", "log", "tool_result", "other"]
MIX_TYPES: tuple[str, ...] = MixType.__args__  # type: ignore[attr-defined]
MIX_TOLERANCE = 1e-6

Share = Annotated[float, Field(ge=0, le=1)]
Count = Annotated[int, Field(ge=0)]
Tokens = Annotated[int, Field(gt=0)]
Limit = Annotated[int, Field(gt=0, le=MAX_TOKENS)]

#: keys that only make sense for generated scenarios
_GENERATED_KEYS = frozenset(
    {
        "target_tokens", "overflow", "mix", "p1_ratio", "facts", "duplicates", "superseded_writes", "writes",
        "errors", "pinned", "misclassified", "prior_summaries", "unit_tokens", "task", "session",
        "p1_placement", "user_turns", "worked_example",
    }
)
#: keys an ``agent_loop`` session uses beside its size (see the module docstring)
AGENT_LOOP_KEYS = frozenset(
    {
        "mix", "p1_ratio", "p1_placement", "facts", "duplicates", "superseded_writes", "errors", "pinned",
        "misclassified", "prior_summaries", "unit_tokens", "user_turns", "worked_example",
    }
)
#: keys of an ``agent_loop`` session only
_AGENT_LOOP_ONLY = frozenset({"p1_placement", "user_turns", "worked_example"})
P1Placement = Literal["task", "spread", "recent"]
#: what an ``agent_loop`` family draws per seed (the session model decides the rest)
AGENT_LOOP_SAMPLE_KEYS = ("limit", "overflow")


def _plain(value: float | Range) -> float | dict:
    """A cut as the file gave it (a range as ``{min, max}``), for error messages."""
    return value.model_dump(include={"min", "max"}) if isinstance(value, Range) else value


class UnitTokens(BaseModel):
    """Typical size of one generated unit, in tokens (``min`` <= ``max``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    min: Tokens
    max: Tokens

    @model_validator(mode="after")
    def _ordered(self) -> UnitTokens:
        if self.min > self.max:
            raise KeyedValueError("min", self.min, f"must not exceed max ({self.max})")
        return self


class Scenario(BaseModel):
    """One overflow scenario (see the module docstring for the keys)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)

    name: Annotated[StrictStr, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
    description: StrictStr = ""
    limit: Limit | None = None
    model: Annotated[StrictStr, Field(min_length=1)] | None = None
    target_tokens: Limit | None = None
    overflow: Annotated[float, Field(gt=0, le=MAX_OVERFLOW, description=f"target / limit; finite, at most {MAX_OVERFLOW:g}")] | None = None
    mix: dict[MixType, Share] | None = None
    p1_ratio: Share | None = None
    facts: Count = 8
    duplicates: Count = 0
    superseded_writes: Count = 0
    writes: Count | None = None
    errors: Count = 0
    pinned: Count = 0
    misclassified: Annotated[float, Field(ge=0, lt=1)] = 0.0
    prior_summaries: Count = 0
    unit_tokens: UnitTokens | None = None
    min_limit: Limit = DEFAULT_MIN_LIMIT
    warning_threshold: Annotated[float, Field(gt=0, le=1)] = DEFAULT_WARNING_THRESHOLD
    task: Annotated[StrictStr, Field(min_length=1)] | None = None
    transcript: Annotated[StrictStr, Field(min_length=1)] | None = None
    corpus: Annotated[StrictStr, Field(min_length=1)] | None = None
    split: Literal["train", "validation", "held_out"] | None = None
    sample: SampleRanges | None = None
    cut: Annotated[float, Field(gt=0, lt=1)] | Range | None = None
    instructions: Annotated[StrictStr, Field(min_length=1)] | None = None
    contexts: Annotated[int, Field(ge=1, le=MAX_CONTEXTS)] | None = None
    session: Literal["agent_loop"] | None = None
    p1_placement: P1Placement | None = None
    user_turns: Annotated[int, Field(ge=0, le=100)] | None = None
    worked_example: bool = False
    probes: Literal["planted", "continuation"] = "planted"

    _source: Path | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        if "probes" in self.model_fields_set and self.session is None:
            raise KeyedValueError("probes", self.probes, "only an agent_loop session has it (session: agent_loop)")
        if self.limit is not None and self.model is not None:
            raise KeyedValueError("model", self.model, f"give either 'limit' or 'model', not both (limit={self.limit})")
        if self.limit is not None and self.limit < self.min_limit:
            raise KeyedValueError("limit", self.limit, f"below min_limit {self.min_limit}")
        if not self.is_transcript and self.cut is not None:
            raise KeyedValueError("cut", _plain(self.cut), "only a transcript scenario has a cut (the share of its messages)")
        if self.instructions is not None and self.cut is None:
            raise KeyedValueError("instructions", self.instructions, "the instructions are probes of a cut: give 'cut' too")
        if self.split is not None and self.corpus is None:
            raise KeyedValueError("split", self.split, "only a corpus family has a split (give 'corpus')")
        if self.corpus is not None:
            if self.transcript is not None:
                raise KeyedValueError("corpus", self.corpus, f"give either 'transcript' or 'corpus', not both (transcript={self.transcript!r})")
            if self.sample is None:
                raise KeyedValueError("corpus", self.corpus, "a corpus family draws a session per seed: give 'sample' too")
        if self.is_transcript:
            extra = sorted(self.model_fields_set & _GENERATED_KEYS)
            if extra:
                raise KeyedValueError(extra[0], getattr(self, extra[0]), "not allowed in a transcript scenario")
            if isinstance(self.cut, Range):
                if self.sample is None:
                    raise KeyedValueError("cut", _plain(self.cut), "a {min, max} cut is drawn per seed: give it in a "
                                          "transcript family (with sample), else give one share")
                if self.cut.min <= 0 or self.cut.max >= 1:
                    raise KeyedValueError("cut", _plain(self.cut), "must lie within (0, 1)")
            if self.sample is not None:
                self._check_transcript_sample()
            return self
        if self.sample is not None:
            extra = sorted(self.model_fields_set & (_GENERATED_KEYS | {"limit", "model"}) - {"task", "session"})
            if extra:
                raise KeyedValueError(extra[0], getattr(self, extra[0]), "drawn by 'sample' in a scenario family; remove it")
            if self.sample.limit.min < self.min_limit:  # a draw under the floor would be raised to it
                raise KeyedValueError("sample.limit.min", self.sample.limit.min, f"below min_limit {self.min_limit}")
            limit, overflow = self.sample.limit.max, self.sample.overflow.max
            if limit * overflow > MAX_TOKENS:
                raise KeyedValueError("sample.limit.max", limit, f"x sample.overflow.max {overflow:g} exceeds {MAX_TOKENS:,} tokens")
            other = sorted(self.sample.model_fields_set - set(AGENT_LOOP_SAMPLE_KEYS)) if self.session else []
            if other:
                raise KeyedValueError(f"sample.{other[0]}", getattr(self.sample, other[0]).model_dump(),
                                      f"an agent_loop family draws only {' and '.join(AGENT_LOOP_SAMPLE_KEYS)}")
            return self
        if self.limit is None and self.model is None:
            raise KeyedValueError("limit", None, "exactly one of 'limit' or 'model' is required")
        if (self.target_tokens is None) == (self.overflow is None):
            value = None if self.target_tokens is None else (self.target_tokens, self.overflow)
            raise KeyedValueError("target_tokens", value, "exactly one of 'target_tokens' or 'overflow' is required")
        if self.overflow is not None and self.limit is not None and self.limit * self.overflow > MAX_TOKENS:
            raise KeyedValueError("overflow", self.overflow, f"x the limit {self.limit:,} exceeds {MAX_TOKENS:,} tokens")
        if self.session is not None:
            self._check_agent_loop()
            return self
        only = sorted(self.model_fields_set & _AGENT_LOOP_ONLY)
        if only:
            raise KeyedValueError(only[0], getattr(self, only[0]), "only an agent_loop session has it (session: agent_loop)")
        for key in ("mix", "p1_ratio"):
            if getattr(self, key) is None:
                raise KeyedValueError(key, None, "required key is missing")
        total = sum(self.mix.values())
        if abs(total - 1) > MIX_TOLERANCE:
            raise KeyedValueError("mix", self.mix, f"shares must sum to 1, they sum to {total:.6g}")
        if (self.duplicates or self.superseded_writes or self.writes or self.errors) and not self.mix.get("tool_result"):
            raise KeyedValueError(
                "mix", self.mix, "planted tool calls (duplicates, superseded_writes, writes, errors) need a tool_result share"
            )
        return self

    def _check_agent_loop(self) -> None:
        """An ``agent_loop`` scenario sets only its size and the keys of :data:`AGENT_LOOP_KEYS`."""
        extra = sorted(self.model_fields_set & _GENERATED_KEYS - AGENT_LOOP_KEYS - {"target_tokens", "overflow", "session"})
        if extra:
            raise KeyedValueError(extra[0], getattr(self, extra[0]), f"not used by session {self.session!r}; remove it")
        if self.mix is not None:
            total = sum(self.mix.values())
            if abs(total - 1) > MIX_TOLERANCE:
                raise KeyedValueError("mix", self.mix, f"shares must sum to 1, they sum to {total:.6g}")
        if self.p1_ratio is not None and self.p1_placement == "task":
            raise KeyedValueError("p1_placement", self.p1_placement, "P1 on the system prompt and task only sets no "
                                  "p1_ratio; give spread or recent, or remove p1_ratio")
        if self.p1_placement in ("spread", "recent") and self.p1_ratio is None:
            raise KeyedValueError("p1_placement", self.p1_placement, "needs p1_ratio (the share of units P1)")

    def _check_transcript_sample(self) -> None:
        """A transcript family draws only its limit: ``sample`` sets ``overflow`` or
        ``limit`` (not both), and the scenario sets neither ``limit`` nor ``model``."""
        fixed = sorted(self.model_fields_set & {"limit", "model"})
        if fixed:
            raise KeyedValueError(fixed[0], getattr(self, fixed[0]), "drawn by 'sample' in a transcript family; remove it")
        given = self.sample.model_fields_set
        other = sorted(given - set(TRANSCRIPT_SAMPLE_KEYS))
        if other:
            raise KeyedValueError(
                f"sample.{other[0]}", getattr(self.sample, other[0]).model_dump(),
                f"a transcript family draws only {' or '.join(TRANSCRIPT_SAMPLE_KEYS)}",
            )
        if set(TRANSCRIPT_SAMPLE_KEYS) <= given:
            raise KeyedValueError("sample.limit", self.sample.limit.model_dump(), "give either 'limit' or 'overflow', not both")

    # ---- derived -------------------------------------------------------
    @property
    def source(self) -> Path | None:
        """The file this scenario was loaded from (None when built in code)."""
        return self._source

    @property
    def is_transcript(self) -> bool:
        """A real conversation: a transcript scenario or family, or a corpus family."""
        return self.transcript is not None or self.corpus is not None

    @property
    def corpus_path(self) -> Path:
        """The corpus folder, resolved against the scenario file's folder."""
        if self.corpus is None:
            raise ScenarioError("not a corpus family", source=self._source, key="corpus")
        return self._beside_source(self.corpus)

    def _beside_source(self, value: str) -> Path:
        """A path the scenario names, resolved against the scenario file's folder."""
        path = Path(value)
        return path if path.is_absolute() or self._source is None else self._source.parent / path

    def session_file(self, seed: int) -> Path:
        """The transcript of context ``seed``: its own, or a corpus family's session drawn
        for the seed. A drawn session without an agent turn (:func:`~.corpus.has_agent_turn`)
        is drawn again among those with one, so every other seed keeps its session."""
        if self.corpus is None:
            return self.transcript_path
        files = corpus_files(self.corpus_path, self.split)
        if not files:
            raise ScenarioError(f"split {self.split!r} holds no session", source=self.corpus_path, key="split")
        drawn = files[int(np.random.default_rng([seed, 0xC0A]).integers(len(files)))]
        if has_agent_turn(drawn):
            return drawn
        working = [path for path in files if has_agent_turn(path)]
        if not working:
            raise ScenarioError(f"split {self.split!r} holds no session with a message after its task",
                                source=self.corpus_path, key="split")
        return working[int(np.random.default_rng([seed, 0xC0A, 1]).integers(len(working)))]

    @property
    def is_family(self) -> bool:
        return self.sample is not None

    def context_count(self, default: int) -> int:
        """Distinct contexts an environment draws from this scenario: ``contexts`` or ``default``."""
        return self.contexts if self.contexts is not None else default

    @property
    def varies_by_seed(self) -> bool:
        """Whether context seeds give different contexts: False only for a transcript
        scenario without ``sample`` (one real conversation at one limit)."""
        return not self.is_transcript or self.is_family

    def draw(self, seed: int) -> Scenario:
        """The concrete scenario of context ``seed``: a family's draw, else this scenario."""
        if self.sample is None:
            return self
        if self.is_transcript:
            return self._draw_transcript_limit(seed)
        keep = self.model_dump(include={"name", "description", "min_limit", "warning_threshold", "task", "session", "probes"},
                               exclude_unset=True)
        drawn = self.sample.draw(seed)
        if self.session is not None:
            drawn = {key: drawn[key] for key in AGENT_LOOP_SAMPLE_KEYS}
        values = {**keep, **drawn}  # the validator keeps sample.limit at or over min_limit
        drawn = Scenario.model_validate(values)
        drawn._source = self._source
        return drawn

    def _draw_transcript_limit(self, seed: int) -> Scenario:
        if self.corpus is not None:  # the session of this seed, as its own transcript family
            values = self.model_dump(exclude_unset=True, exclude={"corpus", "split"})
            family = Scenario.model_validate({**values, "transcript": str(self.session_file(seed).resolve())})
            family._source = self._source
            return family._draw_transcript_limit(seed)
        return self._draw_file_limit(seed)

    def _draw_file_limit(self, seed: int) -> Scenario:
        """A transcript family's scenario for ``seed``: the same transcript at a drawn
        limit (``sample.limit``, or the transcript's size over a drawn ``sample.overflow``),
        never under ``min_limit`` when the scenario sets one; without it the floor is
        design 001's, lowered to the drawn limit as for a transcript without a limit."""
        rng = draw_rng(seed)
        cut = self.cut.draw(rng, whole=False) if isinstance(self.cut, Range) else self.cut
        if "limit" in self.sample.model_fields_set:
            limit = self.sample.limit.draw(rng, whole=True)
        else:
            path = self.transcript_path
            version = path.stat().st_mtime_ns if path.is_file() else -1  # a missing file: load_transcript says so
            size = _transcript_tokens(str(path), version, cut)
            limit = max(1, round(size / self.sample.overflow.draw(rng, whole=False)))
        values = self.model_dump(include={"name", "description", "transcript", "min_limit", "warning_threshold", "instructions"},
                                 exclude_unset=True)
        if cut is not None:
            values["cut"] = cut
        floor = self.min_limit if "min_limit" in self.model_fields_set else min(DEFAULT_MIN_LIMIT, limit)
        drawn = Scenario.model_validate({**values, "limit": max(limit, floor), "min_limit": floor})
        drawn._source = self._source
        return drawn

    @property
    def instructions_path(self) -> Path | None:
        """The instructions file, resolved against the scenario file's folder (None without one)."""
        return None if self.instructions is None else self._beside_source(self.instructions)

    @property
    def instruction_sentences(self) -> tuple[str, ...]:
        """The sentences of the instructions file (empty without one); raises
        ScenarioError naming the file, key and value when it is missing or malformed."""
        path = self.instructions_path
        if path is None:
            return ()
        if not path.is_file():
            raise ScenarioError(f"no such file: {str(path)!r}", source=self._source, key="instructions")
        return load_instructions(str(path), path.stat().st_mtime_ns)

    @property
    def transcript_path(self) -> Path:
        """The transcript file, resolved against the scenario file's folder."""
        if self.transcript is None:
            raise ScenarioError("not a transcript scenario", source=self._source, key="transcript")
        return self._beside_source(self.transcript)

    @property
    def resolved_limit(self) -> int | None:
        """The context limit in tokens: ``limit``, or the model's window from the limits
        table. None for a transcript scenario without either (its size is the limit) and
        for a family (drawn per seed)."""
        if self.limit is not None:
            return self.limit
        if self.model is None:
            return None
        return model_limit(self.model)

    @property
    def resolved_target(self) -> int:
        """Tokens the generator produces: ``target_tokens`` or ``overflow`` x the limit."""
        if self.is_transcript:
            raise ScenarioError("a transcript scenario has no generated target", source=self._source, key="transcript")
        if self.sample is not None:
            raise ScenarioError("a scenario family draws its target per seed (see draw)", source=self._source, key="sample")
        if self.target_tokens is not None:
            return self.target_tokens
        target = round(self.overflow * self.resolved_limit)
        if target > MAX_TOKENS:  # a model's limit (the file checks an explicit one)
            raise ScenarioError(f"overflow {self.overflow:g} x the limit of model {self.model!r} ({self.resolved_limit:,}) "
                                f"exceeds {MAX_TOKENS:,} tokens", source=self._source, key="overflow")
        return target

    @property
    def resolved_writes(self) -> int:
        """Files written per cycle by planted write_file calls (``writes``; by default
        1 when the mix has a tool_result share, else 0)."""
        if self.writes is not None:
            return self.writes
        return 1 if self.mix and self.mix.get("tool_result") else 0

    @property
    def rule_count(self) -> int:
        """How many of the planted ``facts`` are user rules (a third, rounded)."""
        return round(self.facts / 3)


@lru_cache(maxsize=64)
def load_instructions(path: str, mtime_ns: int) -> tuple[str, ...]:
    """The sentences of an instructions file (``instructions:`` a non-empty list of
    one-line strings), per file version (``mtime_ns``); raises ScenarioError naming the
    file, key and value."""
    data = load_yaml(path, ScenarioError)
    if not isinstance(data, dict) or set(data) != {"instructions"}:
        got = sorted(data) if isinstance(data, dict) else describe_value(data)
        raise ScenarioError(f"expected a mapping with the one key 'instructions' (got {got})", source=path)
    items = data["instructions"]
    if not isinstance(items, list) or not items:
        raise ScenarioError(f"expected a non-empty list of sentences (got {describe_value(items)})", source=path,
                            key="instructions")
    for i, item in enumerate(items):
        if not isinstance(item, str) or not item.strip() or "\n" in item or item != item.strip():
            raise ScenarioError(f"expected one line of text without surrounding spaces (got {describe_value(item)})",
                                source=path, key=join_key("instructions", i))
    return tuple(items)


@lru_cache(maxsize=256)
def _transcript_tokens(path: str, mtime_ns: int, cut: float | None = None) -> int:
    """A transcript's size in tokens, or its cut context's (per file version: ``mtime_ns``
    is part of the key)."""
    return load_transcript(path, cut=cut).total_tokens


def load_scenarios(path: str | Path) -> list[Scenario]:
    """Scenarios of one YAML file or chat JSONL transcript, or of a folder: every
    ``*.yaml`` file and every ``*.jsonl`` transcript that none of them reads (sorted
    by file name).

    Raises ScenarioError (file, key path, value; one line) for an unreadable,
    non-UTF-8 or malformed file, an invalid scenario, or a name used twice.
    """
    path = Path(path)
    files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
    read = [(file, key, scenario) for file in files for key, scenario in _read_file(file)]
    if path.is_dir():
        # a transcript a scenario file already reads is not a scenario of its own
        used = {s.transcript_path.resolve() for _, _, s in read if s.transcript is not None}
        logs = [f for f in sorted(path.glob("*.jsonl")) if f.resolve() not in used]
        read = sorted(read + [(f, "", s) for f in logs for s in transcript_file_scenarios(f)], key=lambda r: r[0].name)
        if not read:
            raise ScenarioError("no *.yaml scenario or *.jsonl transcript files in this folder", source=path)
    scenarios: list[Scenario] = []
    seen: dict[str, Path] = {}
    for file, key, scenario in read:
        if scenario.name in seen:
            raise ScenarioError(
                f"duplicate scenario name {scenario.name!r} (first defined in {seen[scenario.name]})",
                source=file,
                key=join_key(key, "name") if key else "name",
            )
        seen[scenario.name] = file
        scenarios.append(scenario)
    return scenarios


def _read_file(file: Path) -> list[tuple[str, Scenario]]:
    """(key prefix, scenario) pairs of one file."""
    if file.suffix == ".jsonl":
        return [("", scenario) for scenario in transcript_file_scenarios(file)]
    data = load_yaml(file, ScenarioError)
    if isinstance(data, dict) and "scenarios" in data:
        extra = sorted(set(data) - {"scenarios"})
        if extra:
            raise ScenarioError(f"unknown key beside 'scenarios' (got {describe_value(data[extra[0]])})", source=file, key=extra[0])
        items = data["scenarios"]
        if not isinstance(items, list) or not items:
            raise ScenarioError(f"expected a non-empty list of scenarios (got {describe_value(items)})", source=file, key="scenarios")
        entries = [(join_key("scenarios", i), item) for i, item in enumerate(items)]
    elif isinstance(data, dict):
        entries = [("", data)]
    else:
        raise ScenarioError(f"expected a scenario mapping or a 'scenarios' list (got {describe_value(data)})", source=file)
    out = []
    for key, item in entries:
        scenario = validate(Scenario, item, file, ScenarioError, key_prefix=key)
        scenario._source = file.resolve()
        scenario.instruction_sentences  # a missing or malformed instructions file fails here, not mid-run
        if scenario.model is not None and scenario.resolved_limit < scenario.min_limit:
            raise ScenarioError(
                f"model {scenario.model!r} has a limit of {scenario.resolved_limit} tokens, below min_limit {scenario.min_limit}",
                source=file,
                key=join_key(key, "model") if key else "model",
            )
        out.append((key, scenario))
    return out


def transcript_file_scenario(file: str | Path, *, cut: bool = False) -> Scenario:
    """The transcript family of a chat JSONL file (see the module docstring): named
    after the file (characters a scenario name cannot hold become ``-``); with
    ``cut``, its cut family (``<name>-cut``: a cut drawn per seed within
    :data:`~ctxsim.lab.families.TRANSCRIPT_FILE_CUT`, the rest of the conversation the
    future its probes come from)."""
    file = Path(file)
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", file.stem).strip("-.") or "transcript"
    overflow = TRANSCRIPT_FILE_SAMPLE["overflow"]
    severity = f"at a limit drawn per seed, {overflow['min']:g}-{overflow['max']:g}x overflow"
    values = {
        "name": name,
        "description": f"The transcript {file.name} {severity}.",
        "transcript": str(file.resolve()),
        "sample": TRANSCRIPT_FILE_SAMPLE,
        "contexts": TRANSCRIPT_FILE_CONTEXTS,
    }
    if cut:
        values["name"] = f"{name}-cut"
        values["cut"] = TRANSCRIPT_FILE_CUT
        values["description"] = (f"The transcript {file.name} cut after {TRANSCRIPT_FILE_CUT['min']:.0%}-"
                                 f"{TRANSCRIPT_FILE_CUT['max']:.0%} of its messages (probes: what the rest uses again), "
                                 f"{severity}.")
    scenario = Scenario.model_validate(values)
    scenario._source = file.resolve()
    return scenario


def transcript_file_scenarios(file: str | Path) -> list[Scenario]:
    """The scenarios a chat JSONL file gives where scenarios are expected: its
    transcript family and its cut family."""
    return [transcript_file_scenario(file), transcript_file_scenario(file, cut=True)]


def find_scenario(name_or_file: str | Path, suite: str | Path | None = None) -> Scenario:
    """A scenario from a YAML file path (which must hold exactly one scenario) or a
    chat JSONL file (its transcript family; its cut family is named ``<name>-cut``
    in a suite), or by name from ``suite`` (a file or folder; default :data:`DEFAULT_SUITE`)."""
    candidate = Path(name_or_file)
    if candidate.suffix == ".jsonl":
        return transcript_file_scenario(candidate)
    if candidate.suffix in (".yaml", ".yml") or candidate.is_file():
        scenarios = load_scenarios(candidate)
        if len(scenarios) != 1:
            names = ", ".join(s.name for s in scenarios)
            raise ScenarioError(f"holds {len(scenarios)} scenarios ({names}); name one of them instead", source=candidate)
        return scenarios[0]
    suite_path = Path(suite) if suite is not None else DEFAULT_SUITE
    scenarios = load_scenarios(suite_path)
    for scenario in scenarios:
        if scenario.name == str(name_or_file):
            return scenario
    known = ", ".join(sorted(s.name for s in scenarios))
    raise ScenarioError(f"unknown scenario {str(name_or_file)!r}; known: {known}", source=suite_path)

