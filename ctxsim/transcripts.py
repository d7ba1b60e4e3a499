"""Real chat transcripts (OpenAI-style JSON Lines) as contexts.

One message per line (a ``.jsonl.gz`` file is read decompressed): ``{"role": "system"|"user"|"assistant"|"tool", "content": str,
"name": str?}``; other keys are ignored. An assistant's tool calls are appended to its
content as ``[tool_call] NAME ARGS_JSON`` lines (see data/transcripts/SOURCES.md).
OpenAI's Chat Completions form is read too: ``content`` as a list of text parts
(``{"type": "text", "text": ...}``), and a user message's image parts
(``{"type": "image_url", "image_url": {"url", "detail"?}}``: an ``[image]`` line in its
text, counted at the API's price of the image, :mod:`ctxsim.images`; other part types
are refused), an assistant's
``tool_calls`` (``[{"id", "type": "function", "function": {"name", "arguments"}}]``,
``content`` then may be null), which become those ``[tool_call]`` lines (what the
context holds and counts), a tool message's ``tool_call_id``, which picks its call, and
the ``developer`` role (the system role of OpenAI's reasoning models), read as ``system``.
A tool result with no text (a command that printed nothing) is read as
:data:`EMPTY_OUTPUT`, as the Messages and Responses forms read one.

Unit types are inferred:

- a ``tool`` message is a ``tool_result`` whose :class:`~ctxsim.model.ToolEnvelope`
  takes the tool name and arguments from the matching call of the preceding
  assistant message (by ``tool_call_id``, else the next ``[tool_call]`` line in
  order; else from the message's ``name``);
- a ``user`` message that answers an assistant message ending in a fenced command
  (SWE-agent's action/observation format without function calling) is also a
  ``tool_result`` of that command; its role stays ``user``;
- a tool result fails (``outcome="failure"``) when its output looks like an error or
  a traceback; its first error line is the envelope's ``error_message``;
- any other message is ``code`` when mostly fenced code, ``log`` when mostly
  timestamped or level-prefixed lines, else ``message``.

The system prompt and the task message are P1: the task message is the first user
message that is not a demonstration (SWE-agent puts a worked example, marked
``--- DEMONSTRATION ---``, before the real task; demonstrations are P3). Everything
else is P2. ``state.task`` is the title of the task message: the line after its
``ISSUE:`` line (SWE-agent) or after "Consider the following PR description:"
(mini-swe-agent), else its first line that is not a bare tag.

With ``cut`` (a share in (0, 1)), only the first messages form the context
(:func:`ctxsim.cuts.cut_index`: ended after a tool result); the rest are its future, and the strings of the
context the future uses again become the context's probes (``state.fact_table``,
:mod:`ctxsim.cuts`), with the user's instructions it states when a hand-made list of
them is given (``instructions``), and the task line itself. Without ``cut`` a transcript has no probes.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Sequence

from .config import model_limit
from .cuts import DEMONSTRATION_MARK, TOOL_CALL_LINE, cut_index, future_probes, search_error, stated_probes, task_probe
from .errors import TranscriptError, describe_value
from .images import IMAGE_LINE, image_url_tokens
from .model import DEFAULT_MIN_LIMIT, DEFAULT_WARNING_THRESHOLD, ROLES, ContextState, ContextUnit, ToolEnvelope, content_hash
from .validation import check_input, loads_json

#: durability class per tool or command name (design 002); other tools are "anchoring",
#: design 002's default
DURABILITY_BY_TOOL: dict[str, str] = {
    **dict.fromkeys(
        ("read_file", "open", "goto", "scroll_up", "scroll_down", "cat", "head", "tail", "ls", "find", "find_file",
         "search_file", "search_dir", "grep"),
        "replayable",
    ),
    **dict.fromkeys(("write_file", "create", "edit", "submit", "rm", "mv", "cp"), "anchoring"),
    **dict.fromkeys(("run_tests", "search", "bash", "python", "python3", "pytest", "strings"), "ephemeral"),
    **dict.fromkeys(("http_get", "curl", "wget"), "non_replayable"),
}
#: argument names that hold the resource a call touched (else the "[File: ...]" header of its output)
TARGET_KEYS = ("path", "filename", "file_name", "file", "url")

_FENCED_BLOCK = re.compile(r"```([^\n`]*)\n(.*?)```", re.DOTALL)
#: language tags of a fenced block that is an action to run (no tag: SWE-agent's commands)
COMMAND_TAGS = ("", "bash", "sh", "shell", "console")
_LOG_LINE = re.compile(
    r"^\s*\[?(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}|\d{2}:\d{2}:\d{2})|^\s*\[?(TRACE|DEBUG|INFO|WARN|WARNING|ERROR|CRITICAL|FATAL)\b"
)
#: the lines after which a task message gives its title: SWE-agent's issue, mini-swe-agent's PR description
TASK_TITLE_AFTER = ("ISSUE:", "Consider the following PR description:")
_TAG_LINE = re.compile(r"^<[^<>]+>$")
#: the key of a chat message (folded, or made by a form's ``to_chat``) that holds the tokens
#: of its images (:mod:`ctxsim.images`), which its text shows as ``[image]`` lines
ATTACHMENTS = "_attachment_tokens"
#: what a tool result with no text is read as and counted as, in the chat form and in the
#: Messages and Responses forms (a message kept unchanged comes back as it was)
EMPTY_OUTPUT = "(no output)"
_FILE_HEADER = re.compile(r"^\[File: (\S+) \((\d+) lines total\)\]", re.MULTILINE)


def load_transcript(
    path: str | Path,
    *,
    limit: int | None = None,
    model: str | None = None,
    min_limit: int | None = None,
    name: str | None = None,
    warning_threshold: float = DEFAULT_WARNING_THRESHOLD,
    cut: float | None = None,
    instructions: Sequence[str] = (),
) -> ContextState:
    """The context of a chat JSONL transcript.

    ``limit`` (tokens) or ``model`` (a model id of the limits table) sets the limit;
    without either, the limit is the transcript's own size, so it fits. ``min_limit``
    defaults to design 001's 3,500-token floor, lowered to the limit when the limit is
    smaller and was not given. ``name`` names the state's scenario (default: the
    file stem). ``cut``: the share of messages that form the context (the rest is
    its future, whose reused strings are the probes); the limit without ``limit``
    or ``model`` is then the cut context's size. ``instructions``: the user's
    instructions listed by hand; those a user message of a cut states are its
    decision probes (:func:`ctxsim.cuts.stated_probes`). Raises TranscriptError naming the
    file and line on bad input.
    """
    path = Path(path)
    return _context(list(_file_units(path)), path, limit=limit, model=model, min_limit=min_limit, name=name or path.stem,
                    warning_threshold=warning_threshold, cut=cut, instructions=instructions)


def context_from_messages(
    messages: Any,
    *,
    limit: int | None = None,
    model: str | None = None,
    min_limit: int | None = None,
    name: str = "messages",
    warning_threshold: float = DEFAULT_WARNING_THRESHOLD,
) -> ContextState:
    """The context of a list of chat messages (dicts as an agent sends them to a chat
    API, in either form a transcript file holds), as :func:`load_transcript` reads a
    file: message ``i`` (from 1) becomes unit ``line-i``. Errors name ``name`` and the
    message number."""
    if not isinstance(messages, (list, tuple)):
        raise TranscriptError(f"expected a list of messages, got {describe_value(messages)}", source=name)
    if not messages:
        raise TranscriptError("empty transcript (no messages)", source=name)
    return _context(_units(_numbered(messages, name)), name, limit=limit, model=model, min_limit=min_limit, name=name,
                    warning_threshold=warning_threshold)


def _context(units: list[ContextUnit], source: Path | str, *, limit: int | None, model: str | None,
             min_limit: int | None, name: str, warning_threshold: float, cut: float | None = None,
             instructions: Sequence[str] = ()) -> ContextState:
    """The context of a transcript's units (see :func:`load_transcript`)."""
    future: list[ContextUnit] = []
    if cut is not None:
        try:
            k = cut_index([u.tool is not None for u in units], cut)
        except ValueError as exc:
            raise TranscriptError(str(exc), source=source, key="cut") from None
        units, future = units[:k], units[k:]
    if limit is not None and model is not None:
        raise TranscriptError(f"give either limit or model, not both (limit={limit}, model={model!r})", source=source, key="model")
    if model is not None:
        limit = model_limit(model)
    task = next((u for u in units if u.priority == 1 and u.role == "user"), None)
    task_text = _task_text(task.content) if task else ""
    if future:
        facts = future_probes(units, future, task_text)
        reused = {f.value for f in facts}  # a value is one probe
        facts += tuple(f for f in task_probe(task, task_text) + stated_probes(units, instructions) if f.value not in reused)
    else:
        facts = ()
    state = ContextState(  # sized first: without a limit, its size is the limit
        units=tuple(units),
        limit=10**12,
        min_limit=1,
        warning_threshold=warning_threshold,
        task=task_text,
        fact_table=facts,
        scenario=name,
    )
    if limit is None:
        limit = state.total_tokens
        min_limit = min(DEFAULT_MIN_LIMIT, limit) if min_limit is None else min_limit
    min_limit = DEFAULT_MIN_LIMIT if min_limit is None else min_limit
    for key, value in (("limit", limit), ("min_limit", min_limit)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise TranscriptError(f"must be a positive number of tokens, got {describe_value(value)}", source=source, key=key)
    if limit < min_limit:
        raise TranscriptError(f"limit {limit} is below min_limit {min_limit}", source=source, key="limit")
    return replace(state, limit=limit, min_limit=min_limit)


def _file_units(path: Path) -> tuple[ContextUnit, ...]:
    """The units of a transcript file, read once per process and file version (a corpus
    of sessions is read again and again by families that draw from it)."""
    check_input(path, "transcript", TranscriptError)
    try:
        info = path.stat()
    except OSError:
        return tuple(_units(_read_messages(path)))  # the reader says what is wrong
    return _cached_units(str(path.resolve()), info.st_mtime_ns, info.st_size)


@lru_cache(maxsize=512)
def _cached_units(path: str, mtime_ns: int, size: int) -> tuple[ContextUnit, ...]:
    return tuple(_units(_read_messages(Path(path))))


def _read_messages(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, message) pairs, validated; blank lines are skipped."""
    return [(number, _checked(message, f"line {number}", path)) for number, message in read_json_lines(path)]


def read_session_text(path: Path) -> str:
    """The text of a session file (``.gz``: read decompressed); TranscriptError naming the
    file (and the line of a byte that is not UTF-8) for a file too large, unreadable or
    not UTF-8."""
    check_input(path, "transcript", TranscriptError)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TranscriptError(f"cannot read file ({exc.strerror or exc})", source=path) from None
    if path.suffix == ".gz":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise TranscriptError(f"not a readable gzip file ({exc})", source=path) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise TranscriptError(f"line {line}: not UTF-8 (byte {raw[exc.start:exc.start + 1]!r} at offset {exc.start})", source=path) from None


#: a JSON escape of a UTF-16 surrogate: the only way a JSON text can spell one
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def lone_surrogate(value: Any, path: str = "") -> tuple[str, int, str] | None:
    """(where, index, character) of the first lone surrogate (``"\\ud800"``: valid JSON,
    half of a UTF-16 pair, not a character, which no UTF-8 file can hold) in a parsed JSON
    ``value``'s strings and keys, ``where`` its path (``content``,
    ``tool_calls[0].function.arguments``); None when there is none."""
    if isinstance(value, str):
        if value.isascii():
            return None
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return path, exc.start, value[exc.start]
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            found = lone_surrogate(key, where) or lone_surrogate(item, where)
            if found:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = lone_surrogate(item, f"{path}[{i}]")
            if found:
                return found
    return None


def refuse_lone_surrogates(value: Any, at: str, source: Path | str, text: str | None = None) -> None:
    """TranscriptError naming ``at`` (a line, or nothing) and the key when ``value``
    holds a lone surrogate: text that could be read but not written back. ``text``: the
    JSON ``value`` was parsed from, when there is one (spelling no surrogate's escape,
    it holds none: nothing is walked)."""
    if text is not None and _SURROGATE_ESCAPE.search(text) is None:
        return
    found = lone_surrogate(value)
    if found:
        where, index, char = found
        raise TranscriptError(f"{at + ': ' if at else ''}'{where}' holds {char!r} at character {index}, half of a "
                              "UTF-16 pair, not a character", source=source)


def read_json_lines(path: Path) -> list[tuple[int, Any]]:
    """(line number, value) of each line of a JSON Lines file (:func:`read_session_text`)
    as it is written, blank lines skipped; TranscriptError naming the file and line for
    a file too large, unreadable, not UTF-8, bad JSON, holding a lone surrogate anywhere
    (:func:`lone_surrogate`) or empty."""
    text = read_session_text(path)
    suspect = _SURROGATE_ESCAPE.search(text) is not None  # one scan of the file; lines walked only then
    messages = []
    for number, line in enumerate(text.split("\n"), start=1):  # JSON Lines end lines with \n only
        if not line.strip():
            continue
        try:
            message = loads_json(line)
        except json.JSONDecodeError as exc:
            raise TranscriptError(f"line {number}: bad JSON ({exc.msg} at column {exc.colno})", source=path) from None
        except (ValueError, RecursionError) as exc:  # a key twice, an integer too long to convert, nesting too deep
            why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
            raise TranscriptError(f"line {number}: bad JSON ({why})", source=path) from None
        if suspect:
            refuse_lone_surrogates(message, f"line {number}", path, line)
        messages.append((number, message))
    if not messages:
        raise TranscriptError("empty transcript (no messages)", source=path)
    return messages


def messages_to_units(messages: list[dict[str, Any]]) -> list[ContextUnit]:
    """The units of chat messages held in memory (either form above), built as
    :func:`load_transcript` builds a file's: unit ids ``line-1``, ``line-2``, ..."""
    return _units(_numbered(messages, "<messages>"))


def _numbered(messages: list[dict[str, Any]], source: Path | str) -> list[tuple[int, dict[str, Any]]]:
    """(number from 1, validated message) pairs of a message list; errors name ``source``."""
    return [(number, _checked(m, f"message {number}", source)) for number, m in enumerate(messages, start=1)]


def _checked(message: Any, at: str, source: Path | str) -> dict[str, Any]:
    """A message validated and folded into the JSONL form; errors name ``source``
    and where it is (``at``: "line 3" of a file, "message 3" of a list)."""
    if not isinstance(message, dict):
        raise TranscriptError(f"{at}: expected a JSON object, got {describe_value(message)}", source=source)
    message = _chat_completions(message, at, source)
    if message.get("role") == "developer":
        message = {**message, "role": "system"}
    role, content, name = message.get("role"), message.get("content"), message.get("name")
    if role is None or content is None:
        missing = "role" if role is None else "content"
        how = "is null" if missing in message else "is missing"
        raise TranscriptError(f"{at}: '{missing}' {how}", source=source)
    if not isinstance(role, str) or role not in ROLES:
        raise TranscriptError(f"{at}: 'role' must be one of {[*ROLES, 'developer']}, got {describe_value(role)}",
                              source=source)
    if not isinstance(content, str):
        raise TranscriptError(f"{at}: 'content' must be a string, got {describe_value(content)}", source=source)
    if not content.strip() and role == "tool":  # a command that printed nothing: the APIs take it
        content = EMPTY_OUTPUT
        message = {**message, "content": content}
    elif not content.strip():
        raise TranscriptError(f"{at}: 'content' is empty", source=source)
    refuse_lone_surrogates({"content": content, "name": name}, at, source)  # messages given in memory too
    if name is not None and not isinstance(name, str):
        raise TranscriptError(f"{at}: 'name' must be a string, got {describe_value(name)}", source=source)
    call_id = message.get("tool_call_id")
    if call_id is not None and not isinstance(call_id, str):
        raise TranscriptError(f"{at}: 'tool_call_id' must be a string, got {describe_value(call_id)}", source=source)
    return message


def _chat_completions(message: dict[str, Any], at: str, source: Path | str) -> dict[str, Any]:
    """``message`` with OpenAI's Chat Completions forms folded into the JSONL form:
    text parts joined into ``content`` (a user message's images as ``[image]`` lines, their
    tokens under :data:`ATTACHMENTS`); ``tool_calls`` appended as ``[tool_call]``
    lines and kept, with their ids, under ``_calls``."""
    content, calls = message.get("content"), message.get("tool_calls")
    if content is None and calls is None:
        return message
    out = dict(message)
    if isinstance(content, list) and message.get("role") == "user" and any(_is_image(p) for p in content):
        content, out[ATTACHMENTS] = _user_parts(content, at, source)
        out["content"] = content
    elif isinstance(content, list):
        out["content"] = content = text_of_parts(content, at, source)
    if calls is None:
        return out
    if message.get("role") != "assistant":
        raise TranscriptError(f"{at}: 'tool_calls' on a {message.get('role')!r} message (assistant only)", source=source)
    if not isinstance(calls, list):
        raise TranscriptError(f"{at}: 'tool_calls' must be a list, got {describe_value(calls)}", source=source)
    if content is not None and not isinstance(content, str):  # a list of parts is text by now
        raise TranscriptError(f"{at}: 'content' must be a string, got {describe_value(content)}", source=source)
    parsed = []
    for i, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        arguments = function.get("arguments", "") if isinstance(function, dict) else None
        call_id = call.get("id") if isinstance(call, dict) else None
        if not isinstance(name, str) or not name or not isinstance(arguments, str) or not isinstance(call_id, (str, type(None))):
            raise TranscriptError(f"{at}: tool_calls[{i}] needs function.name and function.arguments as strings "
                                  f"(got {describe_value(call)})", source=source)
        parsed.append((call_id, name, arguments))
    lines = [f"[tool_call] {name} {arguments}".rstrip() for _, name, arguments in parsed]
    if lines or content is not None:  # null content and no calls stays null: refused below
        out["content"] = "\n".join(([content] if content else []) + lines)
    out["_calls"] = parsed
    return out


#: the part or block types of an image in the three forms (chat, Responses, Messages)
IMAGE_KINDS = ("image_url", "input_image", "image")


def text_of_parts(parts: list[Any], at: str, source: Path | str, noun: str = "content part",
                  kinds: tuple[str, ...] = ("text",), images: str = "in a user message") -> str:
    """The texts of a list of text parts (``{"type": "text", "text": ...}``, or another of
    ``kinds``) joined by newlines; any other part is refused, naming ``at`` and the part
    (its ``noun`` and number, from 0), and for an image where the form reads one (``images``)."""
    texts = []
    for i, part in enumerate(parts):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in kinds or not isinstance(part.get("text"), str):
            named = "" if kinds == ("text",) else f" ({', '.join(kinds)})"
            where = f" (an image is read {images})" if kind in IMAGE_KINDS else ""
            raise TranscriptError(f"{at}: {noun} {i} is {part_type(part)}; only text {noun.split()[-1]}s{named} are "
                                  f"read{where}", source=source)
        texts.append(part["text"])
    return "\n".join(texts)


def part_type(part: Any) -> str:
    """How an error names a content part or block it refuses: its type, else the value."""
    kind = part.get("type") if isinstance(part, dict) else None
    return f"type {kind!r}" if kind is not None else describe_value(part)


def text_and_images(parts: list[Any], at: str, source: Path | str, *, image: str,
                    price: Callable[[dict[str, Any], str, Path | str], int], noun: str, reads: str) -> tuple[str, int]:
    """(text, image tokens) of ``text`` parts and parts of type ``image``, in order: each
    image an :data:`~ctxsim.images.IMAGE_LINE` line where it was, priced by
    ``price(part, where, source)``. Any other part is refused, naming ``at``, the part
    (its ``noun`` and number, from 0) and what ``reads``."""
    texts, tokens = [], 0
    for i, part in enumerate(parts):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == image:
            tokens += price(part, f"{at}: {noun} {i}", source)
            texts.append(IMAGE_LINE)
        elif kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        else:
            raise TranscriptError(f"{at}: {noun} {i} is {part_type(part)}; {reads} are read", source=source)
    return "\n".join(texts), tokens


def _is_image(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") == "image_url"


def _user_parts(parts: list[Any], at: str, source: Path | str) -> tuple[str, int]:
    """(text, image tokens) of a user message's text and ``image_url`` parts
    (:func:`text_and_images`, priced by :func:`~ctxsim.images.image_url_tokens`)."""
    return text_and_images(parts, at, source, image="image_url", price=image_url_tokens, noun="content part",
                           reads="a user message's text and image_url parts")


def _units(messages: list[tuple[int, dict[str, Any]]]) -> list[ContextUnit]:
    units: list[ContextUnit] = []
    calls: list[tuple[str | None, str, str]] = []  # pending (call id, tool name, arguments) of the last assistant message
    command: str | None = None  # fenced command of the last assistant message (no function calling)
    task_seen = False
    turn = 0
    for number, message in messages:
        role, content = message["role"], message["content"]
        tool = None
        priority = 2
        if role == "assistant":
            turn += 1
            calls = list(message.get("_calls") or [(None, m[1], m[2]) for m in TOOL_CALL_LINE.finditer(content)])
            command = None if calls else _final_command(content)
        elif role == "tool":
            wanted = message.get("tool_call_id")
            match = next((i for i, call in enumerate(calls) if wanted is not None and call[0] == wanted), 0)
            _, name, arguments = calls.pop(match) if calls else (None, message.get("name") or "tool", "")
            tool = tool_envelope(name, tool_arguments(arguments), content, f"call-line-{number}")
        elif role == "user" and command is not None:
            tool = tool_envelope(*_command_call(command), content, f"call-line-{number}")
            command = None
        elif role == "system":
            priority = 1
        elif role == "user" and DEMONSTRATION_MARK in content:
            priority = 3
        elif role == "user" and not task_seen:
            priority, task_seen = 1, True
        units.append(
            ContextUnit(
                id=f"line-{number}",
                type="tool_result" if tool else _infer_type(content),
                content=content,
                role=role,
                turn=turn,
                timestamp=float(number),
                priority=priority,
                tool=tool,
                attachment_tokens=message.get(ATTACHMENTS, 0),
            )
        )
    return units


def _final_command(content: str) -> str | None:
    """The command of a message that ends with a fenced block tagged as a command."""
    blocks = list(_FENCED_BLOCK.finditer(content))
    if not blocks or content[blocks[-1].end() :].strip() or blocks[-1][1].strip() not in COMMAND_TAGS:
        return None
    return blocks[-1][2].strip()


def tool_arguments(text: str) -> dict[str, Any]:
    """Arguments of a tool call written as JSON text (a ``[tool_call]`` line's, an OpenAI
    call's ``arguments``); unparseable JSON, or JSON that is no object, is kept under ``raw``."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return {"raw": text}
    return value if isinstance(value, dict) else {"raw": value}


def _command_call(command: str) -> tuple[str, dict[str, Any]]:
    """(tool name, arguments) of a shell-style command: its first word when it is a
    known tool, else ``bash``."""
    words = command.split()
    name = words[0] if words and words[0] in DURABILITY_BY_TOOL else "bash"
    arguments: dict[str, Any] = {"command": command}
    if name in ("open", "create", "cat") and len(words) > 1:
        arguments["path"] = words[1]
    return name, arguments


def tool_envelope(name: str, arguments: dict[str, Any], output: str, call_id: str) -> ToolEnvelope:
    """The :class:`~ctxsim.model.ToolEnvelope` of one tool result: the call (tool name,
    arguments, id) and what its output shows (an error line: failure and its message; a
    file header: the path and lines), with the tool's durability
    (:data:`DURABILITY_BY_TOOL`, else anchoring)."""
    durability = DURABILITY_BY_TOOL.get(name, "anchoring")
    error = search_error(output)  # ERROR_LINE.search(output), at less cost
    error_message = None
    if error:
        start = output.rfind("\n", 0, error.start()) + 1
        end = output.find("\n", error.end())
        error_message = output[start : end if end >= 0 else None].strip()[:200]
    fields = {"status": "error" if error else "ok"}
    header = _FILE_HEADER.search(output) if "[File: " in output else None  # a header holds "[File: "
    if header:
        fields.update(path=header[1], lines=header[2])
    target = next((str(arguments[k]) for k in TARGET_KEYS if k in arguments), header[1] if header else None)
    return ToolEnvelope(
        tool_name=name,
        call_id=call_id,
        arguments=ToolEnvelope.canonical_arguments(arguments),
        outcome="failure" if error else "success",
        key_fields=tuple(sorted(fields.items())),
        durability=durability,
        determinism_hash=content_hash(output) if durability == "replayable" and not error else None,
        target=target,
        error_message=error_message,
    )


def _infer_type(content: str) -> str:
    """code when most non-blank lines (fence markers aside) are inside ``` fences,
    log when most are timestamped or level-prefixed, else message."""
    lines = [line for line in content.splitlines() if line.strip()]
    fenced = fences = 0
    for line in lines:
        if line.lstrip().startswith("```"):
            fences += 1
        elif fences % 2:
            fenced += 1
    if fenced >= 3 and fenced >= 0.6 * (len(lines) - fences):
        return "code"
    if len(lines) >= 3 and sum(1 for line in lines if _LOG_LINE.match(line)) >= 0.5 * len(lines):
        return "log"
    return "message"


def _task_text(content: str) -> str:
    """The task's title: the line after the first line of :data:`TASK_TITLE_AFTER`
    (SWE-agent's ``ISSUE:``, mini-swe-agent's PR description), else the first non-blank
    line that is not a bare markup tag such as ``<pr_description>`` (<= 240 chars)."""
    lines = [line.strip() for line in content.splitlines() if line.strip()]
    for line, following in zip(lines, lines[1:]):
        if line in TASK_TITLE_AFTER:
            return following[:240]
    return next((line for line in lines if not _TAG_LINE.match(line)), "")[:240]
