"""Recognising user rules and must-keep sentences from the text alone.

A deployed policy has no ground truth of planted rules, so every strategy that
compresses, summarizes or drops text finds the rules the way a reader would:

* :func:`mentions_rule` — the broad test that files a sentence of a user or system
  message under a summary's "Rules & Constraints" (design 004): it names a rule,
  a policy or a constraint, or uses never/always/must/should/prefer/do not;
* :func:`is_user_rule` — the narrow test of an *instruction*: an imperative at the
  start of the sentence or of a clause ("Never push to main.", "Please remember:
  always use UTC.", "and don't touch the schema", "When you edit a file, try to keep
  the diff small"), a request ("please use a script"), a modal addressed to the agent
  ("you must …", "we should never …", "you can only …"), the agent's task stated
  ("Your task is to …") or a fixed phrase ("under no circumstances", "is not allowed"). Questions are not rules. "The cache never
  expires" and "I always forget the flag" are statements, not rules.

A demonstration (a worked example a SWE-agent user message quotes between
``--- DEMONSTRATION ---`` and ``--- END OF DEMONSTRATION ---``, :mod:`ctxsim.cuts`)
instructs no one: its sentences ("First we should find the file", the instructions of
the example's own task) are neither rules nor filed under "Rules & Constraints"
(:func:`quoted`).

Sentences passing :func:`is_user_rule` are never cut by a summary (design 004: the
summary "preserves user rules"). :func:`must_keep_sentences` lists the sentences of
a unit no in-place compression may drop: its user rules, for a P1 unit (seed
001: "must keep") every sentence carrying a value (a number, path, name, ...), and
for a failed tool call its error: the first and the last line that reads as one
(:data:`ctxsim.cuts.ERROR_LINE`; for a Python traceback, its header and the
exception it ends in).
"""

from __future__ import annotations

import re
from functools import lru_cache

from ..cuts import ERROR_LINE, demonstration_spans
from ..model import ContextUnit
from ..sentences import segments

#: roles whose sentences can state a user rule
RULE_ROLES = frozenset({"user", "system"})

_RULE_WORDS = re.compile(
    r"\b(?:never|always|must|should|prefer|constraints?|rules?|polic(?:y|ies)|requirements?)\b|\bdo not\b|\bdon['’]t\b",
    re.IGNORECASE,
)
#: every match of ``_RULE_WORDS`` holds one of these (in some case)
_RULE_STEMS = ("never", "always", "must", "should", "prefer", "constraint", "rule", "polic", "requirement", "do not",
               "don't", "don’t")
#: where an instruction can start: the sentence, a clause after punctuation, or a softener
_CLAUSE = (
    r"(?:^|[:;,(—–-]\s*(?:and\s+|but\s+|so\s+)?"
    r"|\b(?:please|also|remember(?:\s+to|\s+that)?|note(?:\s+that)?|important)\W*\s*)"
)
_IMPERATIVE = r"(?:never|always|do\s+not|don['’]t|must(?:\s+not)?|avoid|make\s+sure|be\s+sure|ensure|refrain|try\s+to)\b"
_INSTRUCTION = re.compile(
    rf"{_CLAUSE}\W*{_IMPERATIVE}"
    r"|\b(?:you|we|agents?|the\s+agent|everyone|nobody)\s+(?:must|shall|should|need\s+to|have\s+to|may\s+not|are\s+not\s+allowed\s+to|cannot|can['’]t)\b"
    r"|\byou\s+can\s+only\b|\bplease\s+(?!note\b)[a-z]+|^\W*your\s+(?:task|job|goal)\s+is\b"
    r"|\bunder\s+no\s+circumstances\b|\bat\s+all\s+times\b|\b(?:is|are)\s+(?:not\s+allowed|forbidden|prohibited|mandatory)\b"
    r"|\b(?:constraints?|rules?|polic(?:y|ies)|requirements?)\b[^.?!]*:",
    re.IGNORECASE,
)
#: every match of ``_INSTRUCTION`` holds one of these (in some case; whitespace-proof: one word of each phrase)
_INSTRUCTION_WORDS = ("never", "always", "not", "don", "must", "avoid", "sure", "refrain", "try", "shall", "should",
                      "need", "have", "allowed", "can", "please", "your", "circumstances", "times", "forbidden",
                      "prohibited", "mandatory", "constraint", "rule", "polic", "requirement")
#: a sentence carrying a value: number, amount, URL, email, code span, quote, path, file name, or a name mid-sentence
VALUE = re.compile(
    r"\d|[$€£¥]|https?://|\w@\w|`[^`]+`|\"[^\"]{2,}\""
    r"|(?:^|[\s(])[~.]{0,2}/\w"
    r"|\b\w+\.(?:py|js|ts|tsx|json|ya?ml|md|txt|go|rs|java|c|h|cpp|sql|sh|toml|cfg|ini|log|csv|html|css)\b"
    r"|(?<=[a-z,;:)] )[A-Z][A-Za-z]+"
)
#: ``VALUE`` rewritten so that every alternative starts with a character or a class:
#: ``re`` then scans for the union of those (a digit, ``$``, ``A-Z``, a quote, ``h``, ``@``,
#: ``.``, ``/``) and tries the alternatives only there, where ``VALUE`` tries each at every
#: position. What came before the first character is asserted behind it (``\w@\w`` as
#: ``@(?<=\w@)\w``; ``\b\w+\.ext\b`` as ``\.(?<=\w\.)ext\b``: a word character before the
#: dot ends a run of them, whose start is a word boundary; the path's start, of 0 to 2
#: ``~``/``.`` after the text's start or a space or ``(``, as one fixed-width look-behind
#: per case). It matches a text exactly when ``VALUE`` does (its matches may start later).
_VALUE_SCAN = re.compile(
    r"[\d$€£¥]|`[^`]+`|\"[^\"]{2,}\"|https?://|@(?<=\w@)\w"
    r"|/(?=\w)(?:(?<=^/)|(?<=[\s(]/)|(?<=^[~.]/)|(?<=[\s(][~.]/)|(?<=^[~.][~.]/)|(?<=[\s(][~.][~.]/))"
    r"|\.(?<=\w\.)(?:py|js|ts|tsx|json|ya?ml|md|txt|go|rs|java|c|h|cpp|sql|sh|toml|cfg|ini|log|csv|html|css)\b"
    r"|[A-Z](?<=[a-z,;:)] [A-Z])[A-Za-z]+"
)


def has_value(sentence: str) -> bool:
    """Whether ``VALUE`` matches somewhere in ``sentence`` (found with ``_VALUE_SCAN``, several times sooner)."""
    return _VALUE_SCAN.search(sentence) is not None


def mentions_rule(sentence: str) -> bool:
    """Broad test: the sentence speaks of a rule or constraint (section filing)."""
    return may_hold(_RULE_STEMS, sentence) and _RULE_WORDS.search(sentence) is not None


def may_hold(words: tuple[str, ...], sentence: str) -> bool:
    """False only when a case-insensitive pattern every match of which holds one of
    ``words`` (lower case) cannot match ``sentence``: an ASCII sentence holding none of
    them in any case. A cheap test before the pattern's own search. A sentence that is
    not ASCII can match through Unicode case folding (``ſ`` for ``s``): True."""
    if not sentence.isascii():
        return True
    return any(map(sentence.lower().__contains__, words))


def is_user_rule(sentence: str) -> bool:
    """Narrow test: the sentence instructs the agent (see the module docstring)."""
    text = sentence.strip()
    if not text or text.endswith("?"):
        return False
    return may_hold(_INSTRUCTION_WORDS, text) and _INSTRUCTION.search(text) is not None


def quoted(content: str) -> tuple[tuple[int, int], ...]:
    """The spans of ``content`` that quote someone else's session (its demonstrations):
    no sentence starting in them states a rule."""
    return demonstration_spans(content)


def in_spans(position: int, spans: tuple[tuple[int, int], ...]) -> bool:
    """Whether ``position`` lies in one of ``spans``."""
    return any(start <= position < end for start, end in spans)


def may_state_rule(unit: ContextUnit) -> bool:
    """Whether ``unit`` can state a user rule, from its role and type alone (no text
    read): user and system prose."""
    return unit.role in RULE_ROLES and unit.type not in ("code", "log")


def user_rule_sentences(unit: ContextUnit) -> list[str]:
    """The sentences of ``unit`` that state a user rule (user and system prose only)."""
    if not may_state_rule(unit):
        return []
    return list(_rule_sentences(unit.content))


def holds_user_rule(unit: ContextUnit) -> bool:
    """Whether ``unit`` states a user rule (removing it would lose the rule)."""
    return bool(user_rule_sentences(unit))


def may_keep_sentences(unit: ContextUnit) -> bool:
    """Whether :func:`must_keep_sentences` of ``unit`` can be non-empty, from its
    role, type, priority and tool outcome alone (no text read): a prose unit (not
    code or a log) that is P1 or has a user or system role, or a failed tool call."""
    return may_state_rule(unit) or (unit.priority == 1 and unit.type not in ("code", "log")) or _failed(unit)


def must_keep_sentences(unit: ContextUnit) -> tuple[str, ...]:
    """Sentences an in-place compression of ``unit`` keeps verbatim, in order:
    its user rules, for a P1 unit also every prose sentence carrying a value, and
    for a failed tool call the first and last lines that read as an error (none,
    without splitting the text, when :func:`may_keep_sentences` is False)."""
    if not may_keep_sentences(unit):
        return ()
    return _must_keep(unit.content, unit.role in RULE_ROLES, unit.priority == 1, _failed(unit))


def _failed(unit: ContextUnit) -> bool:
    return unit.tool is not None and unit.tool.outcome == "failure"


#: how many distinct texts the sentence memos below hold
MEMO_SIZE = 16_384


@lru_cache(maxsize=MEMO_SIZE)
def _rule_sentences(content: str) -> tuple[str, ...]:
    """The prose sentences of ``content`` that state a user rule, outside what it quotes
    (once per distinct text)."""
    spans = quoted(content)
    return tuple(content[start:end] for start, end, code in segments(content)
                 if not code and not in_spans(start, spans) and is_user_rule(content[start:end]))


@lru_cache(maxsize=MEMO_SIZE)
def _must_keep(content: str, rule_role: bool, p1: bool, failed: bool) -> tuple[str, ...]:
    """:func:`must_keep_sentences` of a unit's ``content``."""
    rules = set(_rule_sentences(content)) if rule_role else set()
    sentences: list[str] = []
    chosen: list[int] = []
    errors: list[int] = []
    for k, (start, end, code) in enumerate(segments(content)):
        sentence = content[start:end]
        sentences.append(sentence)
        if sentence in rules or (p1 and not code and has_value(sentence)):
            chosen.append(k)
        if failed and ERROR_LINE.search(sentence):
            errors.append(k)
    if errors:  # the first and the last error line, in text order among the rest
        chosen = sorted({*chosen, errors[0], errors[-1]})
    return tuple(dict.fromkeys(sentences[k] for k in chosen))
