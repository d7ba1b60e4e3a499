"""User rules recognised from the text alone (``ctxsim.summarize.rules``) and kept
verbatim by in-place compression (``summarize_text(..., keep=...)``)."""

from __future__ import annotations

import pytest

from ctxsim.cuts import DEMONSTRATION_END, DEMONSTRATION_MARK
from ctxsim.lab.session_text import RULE_SENTENCES, RULES
from ctxsim.model import ContextState, ContextUnit, ToolEnvelope
from ctxsim.strategies import StrategyContext, get_strategy
from ctxsim.summarize import get_summarizer
from ctxsim.summarize.extractive import must_carry, unit_items
from ctxsim.summarize.rules import holds_user_rule, is_user_rule, must_keep_sentences, user_rule_sentences
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
    "When you edit an existing file, try to minimize the changes you make to the file.",
    "When you encounter a brute force attack, please use a script to do the brute force.",
    "Remember, YOU CAN ONLY ENTER ONE COMMAND AT A TIME.",
    "Your task is specifically to make changes to non-test files in the current directory.",
    "Please review the changes and make sure they are correct.",
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
    "Please note the time of the outage.",
    "I will try to reproduce it first.",
    "We can only guess what the cache held.",
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


#: a SWE-agent demonstration: a worked example of another task, quoted before the real one
DEMONSTRATION = "\n".join([
    "Here is a demonstration of how to correctly accomplish this task.",
    DEMONSTRATION_MARK,
    "INSTRUCTIONS: Always start by trying to replicate the bug.",
    "First we should find the `fields.py` file in the repository.",
    "Now that we have fixed the issue, we should submit our changes.",
    DEMONSTRATION_END,
    "Never push directly to main.",
])


def test_a_quoted_demonstration_states_no_rule():
    """The sentences between the demonstration's marks instruct no one (the example's
    own instructions, its narration "we should …"); a rule after the end mark does."""
    unit = ContextUnit("demo", "message", DEMONSTRATION, role="user", priority=3)
    assert is_user_rule("First we should find the `fields.py` file in the repository.")
    assert user_rule_sentences(unit) == ["Never push directly to main."]
    unclosed = ContextUnit("cut", "message", DEMONSTRATION.split(DEMONSTRATION_END)[0], role="user")
    assert user_rule_sentences(unclosed) == [] and not holds_user_rule(unclosed)
    assert user_rule_sentences(ContextUnit("two", "message", f"{DEMONSTRATION}\n{DEMONSTRATION}", role="user")) == [
        "Never push directly to main.", "Never push directly to main."]


def test_a_summary_files_no_sentence_of_a_demonstration_under_rules():
    unit = ContextUnit("demo", "message", DEMONSTRATION, role="user", priority=3)
    rules = [payload for section, payload, _ in unit_items(unit) if section == "rules"]
    assert rules == ["Never push directly to main."]
    assert must_carry([unit]) == {"rules": ("Never push directly to main.",)}


def test_a_removal_may_drop_a_demonstration_whose_narration_reads_as_rules():
    """``remove_oldest`` keeps a unit that states a user rule; a demonstration whose
    sentences only quote another session's instructions is not one."""
    demo = "\n".join([DEMONSTRATION_MARK, *(f"Step {k}: we should open file_{k}.py and look at it." for k in range(40)),
                      DEMONSTRATION_END])
    units = (ContextUnit("demo", "message", demo, role="user", priority=3),
             ContextUnit("task", "message", "Fix the failing test in util.py.", role="user", priority=1),
             ContextUnit("a1", "message", "I will read util.py first.", role="assistant"))
    state = ContextState(units=units, limit=150, min_limit=10, task="fix the failing test")
    after = get_strategy("remove_oldest").apply(state, StrategyContext())
    assert after.removed == ("demo",) and [u.id for u in after.state.units] == ["task", "a1"]


def test_must_keep_sentences_are_rules_and_for_p1_the_values():
    text = "We talked about the garden. Never push to main. The budget is $1,250. The weather was nice."
    p2 = ContextUnit("u", "message", text, role="user", priority=2)
    p1 = ContextUnit("u", "message", text, role="user", priority=1)
    assert must_keep_sentences(p2) == ("Never push to main.",)
    assert must_keep_sentences(p1) == ("Never push to main.", "The budget is $1,250.")


TRACEBACK = "\n".join(["<returncode>1</returncode>", "<output>", "Traceback (most recent call last):",
                       *(f'  File "/testbed/pkg/mod{k}.py", line {10 + k}, in call_{k}\n    result = call_{k + 1}(value, options)'
                         for k in range(12)),
                       "ZeroDivisionError: division by zero", "</output>"])


def test_a_failed_tool_call_keeps_its_first_and_last_error_lines():
    """A traceback's header and the exception it ends in survive any in-place compression of
    a failed call, whatever its priority; a successful call's output has none to keep."""
    def result(outcome: str, priority: int) -> ContextUnit:
        return ContextUnit("t", "tool_result", TRACEBACK, role="tool", priority=priority,
                           tool=ToolEnvelope("bash", "c1", '{"command": "python reproduce.py"}', outcome=outcome))

    for priority in (1, 2):
        failed = result("failure", priority)
        assert must_keep_sentences(failed) == ("Traceback (most recent call last):", "ZeroDivisionError: division by zero")
        assert "ZeroDivisionError: division by zero" in get_summarizer("extractive").summarize_text(
            TRACEBACK, 60, keep=must_keep_sentences(failed)).text
        assert must_keep_sentences(result("success", priority)) == ()


def test_content_type_chunking_leaves_a_failed_calls_exception_in_place():
    from ctxsim.model import ContextState
    from ctxsim.strategies import get_strategy

    task = ContextUnit("m0", "message", "Fix the crash in mod3.", role="user", priority=1)
    failed = ContextUnit("t1", "tool_result", TRACEBACK, role="tool", priority=1, turn=1,
                         tool=ToolEnvelope("bash", "c1", '{"command": "python reproduce.py"}', outcome="failure"))
    state = ContextState(units=(task, failed), limit=200, min_limit=10, task=task.content)
    compressed = get_strategy("content_type_chunking").apply(state)
    assert compressed.compressed == ("t1",) and compressed.state.unit("t1").token_count < failed.token_count
    assert "ZeroDivisionError: division by zero" in compressed.state.unit("t1").content


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


@pytest.mark.parametrize("sentence", ["Avoid interactive tools like vi, nano, or any that require user input",
                                      "Make sure the tests pass before you submit.",
                                      "You CANNOT continue working on this task after submitting."])
def test_an_instruction_without_a_rule_word_is_filed_under_rules(sentence):
    unit = ContextUnit("u1", "message", sentence, role="user")
    assert [(section, tier) for section, _, tier in unit_items(unit)] == [("rules", 0.0)]


@pytest.mark.parametrize("sentence", ["## Command Execution Rules", "**CRITICAL REQUIREMENTS:**",
                                      "Each response should include:", "The rules are:"])
def test_a_heading_or_a_lead_in_is_no_rule(sentence):
    """A heading names what follows and a lead-in ending in a colon introduces it: neither
    states a rule, and filed under rules they took the handover's room from the rules."""
    unit = ContextUnit("u1", "message", sentence, role="user")
    assert all(section != "rules" for section, _, _ in unit_items(unit))


@pytest.mark.parametrize("sentence", ["## Never push to main", "Do not change any of the following files:",
                                      "You MUST use this EXACT command to submit:"])
def test_a_heading_or_a_lead_in_that_instructs_is_a_rule(sentence):
    unit = ContextUnit("u1", "message", sentence, role="user")
    assert [(section, tier) for section, _, tier in unit_items(unit)] == [("rules", 0.0)]
