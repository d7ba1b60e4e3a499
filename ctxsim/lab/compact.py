"""``ctxsim compact``: an agent's session file compacted by an exported policy, written in
the form it came in.

Three forms, one per API an agent speaks:

* ``chat``: chat messages as JSON Lines (a ``.jsonl`` or ``.jsonl.gz`` file, one message
  a line: the transcripts' form, :mod:`ctxsim.transcripts`), written back as JSON Lines
  (gzip-compressed when the output's name ends in ``.gz``)
  (:func:`ctxsim.messages.compact_messages`);
* ``anthropic``: a JSON object holding a Messages API request (``messages``, and
  ``system`` when it has one; every other key, such as ``model`` or ``tools``, is kept
  as it is) (:mod:`ctxsim.anthropic_messages`);
* ``responses``: a JSON object holding a Responses API request (``input``, and
  ``instructions`` when it has one; every other key kept) (:mod:`ctxsim.openai_responses`).

What the break moved behind ``read_artifact`` pointers is written to a JSON object of
artifact id to content (``--artifacts``, by default beside the output, named after it),
so nothing the session held is lost.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..anthropic_messages import compact_anthropic_messages
from ..anthropic_messages import to_chat as anthropic_chat
from ..atomic import atomic_write_bytes, atomic_write_text
from ..errors import TranscriptError, describe_value
from ..messages import Breaker, compact_messages
from ..openai_responses import compact_response_items
from ..openai_responses import to_chat as responses_chat
from ..policies import load
from ..transcripts import context_from_messages, read_json_lines, read_session_text, refuse_lone_surrogates
from ..validation import loads_json

#: the forms ``ctxsim compact`` reads: the key of the request's messages, of its system prompt
FORMS = {"chat": (None, None), "anthropic": ("messages", "system"), "responses": ("input", "instructions")}


@dataclass(frozen=True)
class Compacted:
    """What one compaction did: messages (items) and tokens before and after, the artifacts written."""

    messages_before: int
    messages_after: int
    tokens_before: int
    tokens_after: int
    artifacts: int
    artifacts_file: Path | None


def _request(path: Path, form: str) -> dict[str, Any]:
    """The JSON object of an ``anthropic`` or ``responses`` request file, its messages checked to be a list."""
    text = read_session_text(path)
    try:
        request = loads_json(text)
    except (ValueError, RecursionError) as exc:
        raise TranscriptError(f"bad JSON ({exc})", source=path) from None
    key = FORMS[form][0]
    if not isinstance(request, dict) or not isinstance(request.get(key), list):
        raise TranscriptError(f"expected a JSON object with {key!r} a list (the {form} form), got "
                              f"{describe_value(request)}", source=path, key=key)
    refuse_lone_surrogates(request, "", path, text)
    return request


def _tokens(form: str, messages: list[dict[str, Any]], system: Any) -> int:
    chat = (messages if form == "chat" else anthropic_chat(messages, system).messages if form == "anthropic"
            else responses_chat(messages, system).messages)
    return context_from_messages(chat).total_tokens if chat else 0


def compact_file(export: str | Path | Breaker, path: str | Path, limit: int, out: str | Path, *, form: str = "chat",
                 log: str | Path | None = None, artifacts: str | Path | None = None, keep_newest: bool = True) -> Compacted:
    """``path`` (a session in ``form``, module docstring) compacted by the exported policy at
    ``export`` (or a policy with ``break_context``) to fit ``limit`` tokens, written to
    ``out`` in the same form; the decisions go to ``log`` (JSONL) when given, what the
    break moved out to ``artifacts`` (default: ``<out>.artifacts.json``, written only when
    there is any). A break that leaves the session over ``limit`` (the policy could not
    fit it), or a request without any of its messages, raises TranscriptError (key
    ``limit``, or the messages' key) and writes nothing but the decisions."""
    path, out = Path(path), Path(out)
    policy = load(export) if isinstance(export, (str, Path)) else export
    store: dict[str, str] = {}
    messages_key, system_key = FORMS[form]
    if form == "chat":
        messages = [message for _, message in read_json_lines(path)]
        first = messages[0]
        if isinstance(first, dict) and "role" not in first and ("messages" in first or "input" in first):
            raise TranscriptError("line 1 is a request object, not a chat message: give --form anthropic (messages, "
                                  "system) or --form responses (input, instructions)", source=path)
        system = None
        result = compact_messages(policy, messages, limit, log=log, name=str(path), artifacts=store,
                                  keep_newest=keep_newest)
        compacted, system_after = result, None
        text = "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in result)
    else:
        request = _request(path, form)
        messages, system = request[messages_key], request.get(system_key)
        compact = compact_anthropic_messages if form == "anthropic" else compact_response_items
        result = compact(policy, messages, limit, log=log, name=str(path), artifacts=store, keep_newest=keep_newest,
                         **{system_key: system})
        compacted, system_after = result[messages_key], result.get(system_key)
        written = {k: v for k, v in request.items() if k not in (messages_key, system_key)} | result
        text = json.dumps(written, ensure_ascii=False, indent=1) + "\n"
    before, after = _tokens(form, messages, system), _tokens(form, compacted, system_after)
    if after > limit:
        raise TranscriptError(f"the policy's break left {after:,} tokens, over the limit of {limit:,} (it could not fit "
                              "the session): nothing written", source=path, key="limit")
    where = None
    if store:
        where = Path(artifacts) if artifacts is not None else out.with_name(out.name + ".artifacts.json")
        atomic_write_text(where, json.dumps(store, ensure_ascii=False, indent=1) + "\n")
    if out.suffix == ".gz":  # as the transcripts are read: gzip-compressed when the name says so
        atomic_write_bytes(out, gzip.compress(text.encode("utf-8"), mtime=0))
    else:
        atomic_write_text(out, text)
    return Compacted(len(messages), len(compacted), before, after, len(store), where)
