"""Optional LLM summarizer: any OpenAI-compatible ``POST {base_url}/chat/completions``.

Off by default (``llm_summarizer.enabled: false`` in the config); stdlib only
(urllib). The prompt asks for design 004's structured sections under the titles of
:data:`~ctxsim.summarize.structured.SECTIONS`. The reply is read leniently
(markdown headings and bold titles accepted) into a :class:`StructuredSummary`
whose rules are the user rules detected in the input, kept verbatim whatever the
model wrote (design 004's "DO NOT lose user constraints"), and whose tool outcomes
and artifacts come from the units' envelopes, not from the model. The result is
fitted to ``target_tokens`` exactly as the extractive summarizer's is.

Failed calls (connection errors, timeouts, HTTP 408/409/425/429/5xx) are retried
under a :class:`ctxsim.config.RetryPolicy`: up to ``max_attempts`` attempts in all,
waiting ``backoff_base_seconds · 2^(n−1)`` seconds after the n-th failure (or the
server's ``Retry-After``), at most ``max_delay_seconds``; then, or at once for
other HTTP errors and malformed replies, a :class:`~ctxsim.errors.StrategyError`
is raised. ``sleep`` is injectable
so tests do not wait. Results are cached like the extractive summarizer's, under
the base URL, model and prompt version.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence

from ..config import RetryPolicy
from ..errors import ConfigError, StrategyError, describe_value
from ..model import ContextUnit
from ..tokens import count_tokens
from ..validation import validate
from .extractive import check_target, unit_candidates
from .structured import (
    SECTIONS,
    SUMMARY_RENDER_VERSION,
    Candidate,
    StructuredSummary,
    SummaryResult,
    SummarySpan,
    cache_key,
    cached,
    fit_summary,
    prefix_within,
)

RETRY_STATUSES = frozenset({408, 409, 425, 429})
_MODEL_SECTIONS = ("rules", "facts", "decisions", "open_items", "notes")
#: section titles a model may write (ours, and design 004's prompt sections) -> section
_TITLES = {title.lower(): name for name, title in SECTIONS if name in _MODEL_SECTIONS} | {
    "rules": "rules",
    "constraints": "rules",
    "files & code": "facts",
    "decisions made": "decisions",
    "next steps": "open_items",
    "current state": "notes",
    "primary intent": "notes",
}

SYSTEM_PROMPT = """You summarize the earlier part of a conversation of an AI coding agent so that
the agent can continue seamlessly. Write only these sections, each title on its own line
followed by "- " bullet items, omitting empty sections:
Rules & Constraints:   user preferences, restrictions and requirements, copied VERBATIM
Facts:                 stable information: exact numbers, amounts, dates, file paths, names, ids
Decisions:             technical decisions made, with their rationale
Open items:            pending tasks, TODOs, next steps, what is broken
Context:               anything else needed to continue
Copy file paths, function names, numbers and error messages exactly. Never lose a user
rule or constraint. Stay under {budget} tokens."""
#: part of the cache key (design 002): changes whenever the prompt does
PROMPT_VERSION = "llm-" + hashlib.sha256(SYSTEM_PROMPT.encode()).hexdigest()[:12]


class LLMSummarizer:
    """Summaries written by an OpenAI-compatible chat model (see module doc)."""

    kind = "llm"

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str | None = None,
        timeout_seconds: float = 30.0,
        retry: RetryPolicy | dict | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        temperature: float = 0.0,
    ):
        if not base_url or not model:
            raise ConfigError("LLMSummarizer needs base_url and model", key="base_url" if not base_url else "model")
        if timeout_seconds <= 0:
            raise ConfigError(
                f"timeout_seconds must be > 0, got {describe_value(timeout_seconds)}", key="timeout_seconds"
            )
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key_env = api_key_env
        self.timeout_seconds = timeout_seconds
        self.retry = (
            validate(RetryPolicy, retry, "llm_summarizer", ConfigError, "retry")
            if isinstance(retry, dict)
            else (retry or RetryPolicy())
        )
        self.temperature = temperature
        self._sleep = sleep
        self._params = (PROMPT_VERSION, SUMMARY_RENDER_VERSION, self.url, model, temperature)

    # ---- public API -------------------------------------------------------------
    def summarize_units(
        self, units: Sequence[ContextUnit], target_tokens: int, *, task: str = "", depth: int = 0
    ) -> SummaryResult:
        """A structured summary written by the model, fitted to ``target_tokens``."""
        check_target(target_tokens)
        units = tuple(units)
        if not units:
            raise StrategyError("summarize_units needs at least one unit", key="units")
        key = cache_key("units", *self._params, target_tokens, task, depth, *(u.fingerprint for u in units))
        return cached(key, lambda: self._summarize_units(units, target_tokens, task, depth))

    def summarize_texts(self, requests: Sequence[tuple[str, int, str, Sequence[str]]]) -> list[SummaryResult]:
        """:meth:`summarize_text` of each ``(text, target_tokens, task, keep)``, in order."""
        return [self.summarize_text(text, target, task=task, keep=keep) for text, target, task, keep in requests]

    def keep_tokens(self, text: str, keep: Sequence[str]) -> int:
        """The budget ``summarize_text(text, ..., keep=keep)`` needs at least (tokens)."""
        kept = "\n".join(dict.fromkeys(keep))
        return count_tokens(kept + "\n") if kept else 0

    def summarize_text(
        self, text: str, target_tokens: int, *, task: str = "", keep: Sequence[str] = ()
    ) -> SummaryResult:
        """The model's compression of ``text``, cut at a word boundary to the budget.

        ``keep`` (sentences that must come out verbatim) are taken from the input, not
        from the model: they come first, one per line, and the model's text fills the
        rest of the budget (the budget grows to hold them, never beyond the input).
        """
        check_target(target_tokens)
        input_tokens = count_tokens(text)
        kept = "\n".join(dict.fromkeys(keep))
        budget = max(target_tokens, self.keep_tokens(text, keep))
        if input_tokens <= budget:
            return SummaryResult(text, None, input_tokens, input_tokens)

        def compute() -> SummaryResult:
            focus = f" Keep what matters for the task: {task}" if task.strip() else ""
            room = budget - self.keep_tokens(text, keep)
            reply = (
                self.complete(
                    [
                        {
                            "role": "system",
                            "content": f"Compress the user's text to at most {room} tokens. Copy numbers, "
                            f"paths, names, error messages and rules exactly.{focus}",
                        },
                        {"role": "user", "content": text},
                    ],
                    room,
                )
                if room > 0
                else ""
            )
            out = "\n".join(p for p in (kept, prefix_within(reply.strip(), room)) if p)
            return SummaryResult(out, None, count_tokens(out), input_tokens)

        return cached(cache_key("text", *self._params, target_tokens, task, text, *keep), compute)

    def complete(self, messages: list[dict[str, str]], max_tokens: int) -> str:
        """The assistant text of one chat completion, with retries (see module doc)."""
        payload = {"model": self.model, "messages": messages, "max_tokens": max_tokens, "temperature": self.temperature}
        data = self._post(json.dumps(payload).encode("utf-8"))
        try:
            content = data["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise StrategyError(
                f"{self.url}: reply has no choices[0].message.content: {describe_value(data)}"
            ) from None
        if not isinstance(content, str):
            raise StrategyError(f"{self.url}: reply content is not text: {describe_value(content)}")
        return content

    # ---- internals --------------------------------------------------------------
    def _summarize_units(
        self, units: tuple[ContextUnit, ...], target_tokens: int, task: str, depth: int
    ) -> SummaryResult:
        input_tokens = sum(u.token_count for u in units)
        budget = min(target_tokens, input_tokens)
        candidates, tiers, _ = unit_candidates(units)
        structural = ("rules", "tool_outcomes", "artifacts")  # taken from the input, not from the model
        kept = [(t, c) for t, c in zip(tiers, candidates, strict=True) if c.section in structural]
        rules = [c.payload for _, c in kept if c.section == "rules"]
        conversation = "\n\n".join(f"{u.role.upper()} [{u.id}, turn {u.turn}]: {u.content}" for u in units)
        if rules:
            conversation += "\n\nDETECTED USER RULES (MUST PRESERVE):\n" + "\n".join(f"- {r}" for r in rules)
        if task.strip():
            conversation += f"\n\nCURRENT TASK: {task.strip()}"
        reply = self.complete(
            [
                {"role": "system", "content": SYSTEM_PROMPT.format(budget=budget)},
                {"role": "user", "content": conversation},
            ],
            budget,
        )
        ranked = [Candidate("current_task", task.strip())] if task.strip() else []
        ranked += [c for _, c in sorted(kept, key=lambda tc: tc[0])]
        known = set(rules)
        sections = parse_reply(reply)
        for order, name in enumerate(_MODEL_SECTIONS):
            for k, item in enumerate(sections.get(name, [])):
                if item not in known:
                    known.add(item)
                    ranked.append(Candidate(name, item, (len(units) + order, k)))
        base = StructuredSummary(
            span=SummarySpan(units[0].id, units[-1].id, min(u.turn for u in units), max(u.turn for u in units)),
            depth=depth,
        )
        summary = fit_summary(base, ranked, budget)
        if summary is None:
            text = prefix_within(reply.strip(), budget)
            return SummaryResult(text, None, count_tokens(text), input_tokens)
        text = summary.render()
        return SummaryResult(text, summary, count_tokens(text), input_tokens)

    def _post(self, body: bytes) -> dict:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key_env:
            key = os.environ.get(self.api_key_env)
            if not key:
                raise ConfigError(
                    f"environment variable {self.api_key_env} (the API key) is not set", key="api_key_env"
                )
            headers["Authorization"] = f"Bearer {key}"
        attempts = self.retry.max_attempts
        for attempt in range(1, attempts + 1):
            retry_after = None
            try:
                request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
                with urllib.request.urlopen(request, timeout=self.timeout_seconds) as response:
                    raw = response.read()
                try:
                    return json.loads(raw)
                except ValueError:
                    raise StrategyError(f"{self.url}: reply is not JSON: {describe_value(raw)}") from None
            except urllib.error.HTTPError as exc:
                problem = f"HTTP {exc.code}: {describe_value(exc.read().decode('utf-8', 'replace'))}"
                if exc.code not in RETRY_STATUSES and exc.code < 500:
                    raise StrategyError(f"{self.url}: {problem}") from None
                retry_after = _seconds(exc.headers.get("Retry-After"))
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                problem = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
            if attempt == attempts:
                raise StrategyError(f"{self.url}: LLM call failed after {attempts} attempts; last error {problem}")
            delay = self.retry.delay(attempt) if retry_after is None else min(retry_after, self.retry.max_delay_seconds)
            self._sleep(max(0.0, delay))
        raise AssertionError("unreachable")  # pragma: no cover


def parse_reply(reply: str) -> dict[str, list[str]]:
    """Section name -> items of a model's reply (lenient about markdown).

    A title line may carry ``#``, ``*`` or a trailing ``:``; items are ``-``, ``*``,
    ``•`` or numbered lines; other lines continue the item above. Text before any
    known title goes to ``notes``.
    """
    sections: dict[str, list[str]] = {}
    current = sections.setdefault("notes", [])
    for line in reply.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        title = re.sub(r"^[#*\s]+|[*:\s]+$", "", stripped).strip("*").lower()
        if title in _TITLES and len(stripped) <= len(title) + 8:
            current = sections.setdefault(_TITLES[title], [])
            continue
        bullet = re.match(r"^(?:[-*•]|\d{1,3}[.)])\s+(.*)$", stripped)
        if bullet:
            current.append(bullet.group(1).strip())
        elif current:
            current[-1] += " " + stripped
        else:
            current.append(stripped)
    return {name: items for name, items in sections.items() if items}


def _seconds(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
