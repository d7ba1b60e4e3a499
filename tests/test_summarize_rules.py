"""User rules recognised from the text alone (``ctxsim.summarize.rules``) and kept
verbatim by in-place compression (``summarize_text(..., keep=...)``)."""

from __future__ import annotations

import pytest

from ctxsim.lab.session_text import RULE_SENTENCES, RULES
from ctxsim.model import ContextUnit
from ctxsim.summarize import get_summarizer
from ctxsim.summarize.rules import holds_user_rule, is_user_rule, must_keep_sentences
from ctxsim.tokens import count_tokens

#: how people state rules to an agent, beyond the generator's templates
REAL_RULES = (
    "Don't touch the migrations folder.",
    "Please make sure to run the tests before you push.",
    "You must not change the public API.",
    "Under no circumstances should you email customers.",
    "Do not edit generated files by hand.",
    "We should never force-push to release branches.",
    "Avoid adding new dependencies without asking.",
    "Important: never log customer email addresses.",
    "Use tabs, and don't reformat unrelated code.",
    "Rule: all timestamps are UTC.",
    "Secrets in the repository are not allowed.",
)
#: statements and questions that use the same words without instructing anyone
NOT_RULES = (
    "The cache never expires after a restart.",
    "I always forget the flag.",
    "Should we add a retry?",
    "Can you always run it?",
    "It must have been the timezone bug.",
    "The test always fails on CI.",
    "It compiles and never finishes.",
    "The budget is $1,250.",
    "I decided to use Postgres.",
)


@pytest.mark.parametrize("sentence", [t.format(v=v) for t in RULE_SENTENCES for v in RULES[:3]] + list(REAL_RULES))
def test_instructions_are_user_rules(sentence):
    assert is_user_rule(sentence)


@pytest.mark.parametrize("sentence", NOT_RULES)
def test_statements_and_questions_are_not(sentence):
    assert not is_user_rule(sentence)


def test_only_user_and_system_prose_states_rules():
    text = "Never push directly to main."
    assert holds_user_rule(ContextUnit("u", "message", text, role="user"))
    assert holds_user_rule(ContextUnit("s", "message", text, role="system"))
    assert not holds_user_rule(ContextUnit("a", "message", text, role="assistant"))
    assert not holds_user_rule(ContextUnit("c", "code", "# Never push directly to main.\nx = 1", role="user"))


def test_must_keep_sentences_are_rules_and_for_p1_the_values():
    text = "We talked about the garden. Never push to main. The budget is $1,250. The weather was nice."
    p2 = ContextUnit("u", "message", text, role="user", priority=2)
    p1 = ContextUnit("u", "message", text, role="user", priority=1)
    assert must_keep_sentences(p2) == ("Never push to main.",)
    assert must_keep_sentences(p1) == ("Never push to main.", "The budget is $1,250.")


def test_summarize_text_keeps_the_listed_sentences_and_grows_the_budget_only_for_them():
    chatter = " ".join(f"The garden and the concert came up in note {w}." for w in "abcdefghijklmnopqrst")
    rule = "Do not touch the billing schema without a migration."
    text = f"{chatter} {rule} {chatter.replace('note', 'memo')}"
    summarizer = get_summarizer("extractive")
    tiny = summarizer.summarize_text(text, 5, task="garden", keep=(rule,))
    assert rule in tiny.text and tiny.token_count <= count_tokens(rule) + 2
    wide = summarizer.summarize_text(text, 120, task="garden", keep=(rule,))
    assert rule in wide.text and 100 <= wide.token_count <= 120
    assert rule not in summarizer.summarize_text(text, 30, task="garden").text, "without keep the rule may go"
