"""The agent-loop session model: a stateful fake repository, ground truth, determinism, its schema hook."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ctxsim.lab.contexts import build_context
from ctxsim.errors import ScenarioError
from ctxsim.lab.realism_stats import context_stats, view_key
from ctxsim.lab.scenarios import Scenario, find_scenario, load_scenarios
from ctxsim.serialize import dumps_state

FAMILY = "data/families/agent_sessions.yaml"


@pytest.fixture(scope="module")
def states(repo_root):
    family = find_scenario(repo_root / FAMILY)
    return [build_context(family, seed) for seed in range(4)]


def test_a_session_is_system_task_then_command_and_output_turns(states):
    for state in states:
        roles = [u.role for u in state.units]
        assert roles[:2] == ["system", "user"]
        assert state.units[0].priority == state.units[1].priority == 1
        assert all(u.priority == 2 for u in state.units[2:])
        for before, role, after in zip(roles[1:], roles[2:], roles[3:] + ["end"]):
            if role == "tool":
                assert before == "assistant"
            if role == "assistant":  # a command and its output, or a reply without one and the format reminder
                assert after in ("tool", "user")
        assert all(u.tool is not None and u.tool.tool_name == "bash" for u in state.units if u.role == "tool")
        assert state.total_tokens > state.limit  # it overflows


def test_every_fact_value_is_in_its_unit_and_every_kind_is_planted(states):
    for state in states:
        kinds = {f.kind for f in state.fact_table}
        assert kinds == {"rule", "artifact", "continuation", "fact"}
        for fact in state.fact_table:
            assert fact.value in state.unit(fact.unit_id).content
            assert fact.id in state.unit(fact.unit_id).fact_ids
        task = state.units[1]
        assert all(f.unit_id == task.id and f.priority == 1 for f in state.fact_table if f.kind == "rule")


def _changed_views(state) -> int:
    """Views shown again with other text (see ctxsim.lab.realism_stats)."""
    seen: dict[str, str] = {}
    changed = 0
    for unit in state.units:
        key = view_key(unit)
        if key in seen and seen[key] != unit.content:
            changed += 1
        if key:
            seen[key] = unit.content
    return changed


def test_an_edit_changes_a_later_view_of_the_same_window(repo_root):
    family = find_scenario(repo_root / FAMILY)
    changed = [_changed_views(build_context(family, seed)) for seed in range(4, 16)]
    assert sum(changed) >= 2  # some sessions view the edited window again (half draw it; on these seeds, two)


def test_the_artifact_line_of_an_edited_file_is_new(states):
    for state in states:
        lines = [f for f in state.fact_table if f.kind == "artifact" and " " in f.value]
        assert lines
        for fact in lines:  # the latest version's line shows up only after the session started editing
            first = next(i for i, u in enumerate(state.units) if fact.value in u.content)
            assert first > 3


def test_outputs_look_like_a_shell(states):
    text = "\n".join(u.content for s in states for u in s.units if u.role == "tool")
    for marker in ("<returncode>0</returncode>", "Traceback (most recent call last):", "diff --git a/", "@@ -",
                   "Successfully installed", "\t"):
        assert marker in text
    stats = [context_stats(s) for s in states]
    assert all(s["has_numbered_view"] and s["has_diff"] and s["has_traceback"] for s in stats)


def test_same_seed_same_text_in_another_process(repo_root, states):
    code = ("from ctxsim.lab.scenarios import find_scenario; from ctxsim.lab.contexts import build_context; from ctxsim.serialize import dumps_state; "
            f"import sys; sys.stdout.write(dumps_state(build_context(find_scenario({str(repo_root / FAMILY)!r}), 1)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out == dumps_state(states[1])
    assert dumps_state(states[0]) != dumps_state(states[1])


def test_options_change_the_session_and_the_defaults_do_not(states):
    base = {"name": "agent-sessions", "session": "agent_loop", "limit": 12000, "overflow": 1.5}
    plain, defaults = (build_context(Scenario.model_validate(v), 3) for v in (base, {**base, "duplicates": 0, "errors": 0}))
    assert dumps_state(plain) == dumps_state(defaults)  # an option at its default is the fitted session
    recent = build_context(Scenario.model_validate({**base, "p1_ratio": 0.3, "p1_placement": "recent"}), 3)
    p1 = [i for i, u in enumerate(recent.units) if u.priority == 1]
    assert p1[:2] == [0, 1] and p1[2:] == list(range(len(recent.units) - len(p1) + 2, len(recent.units)))
    turns = build_context(Scenario.model_validate({**base, "user_turns": 3}), 3)
    later = [u for u in turns.units[2:] if u.role == "user"]
    assert len(later) == 3 and all(u.tool is None and u.priority == 2 for u in later)


def test_agent_loop_scenario_keys_are_checked(write_file):
    fixed = Scenario.model_validate({"name": "s", "session": "agent_loop", "limit": 8000, "overflow": 1.5})
    state = build_context(fixed, 0)
    assert state.limit == 8000 and state.total_tokens >= 12000
    bad = write_file("bad.yaml", "name: s\nsession: agent_loop\nlimit: 8000\noverflow: 1.5\nwrites: 2\n")
    with pytest.raises(ScenarioError, match=r"bad.yaml.*writes.*not used by session 'agent_loop'"):
        load_scenarios(bad)
    bad = write_file("mix.yaml", "name: s\nsession: agent_loop\nlimit: 8000\noverflow: 1.5\nmix: {code: 0.5, log: 0.4}\n")
    with pytest.raises(ScenarioError, match=r"mix.yaml.*mix.*sum to 0.9"):
        load_scenarios(bad)
    bad = write_file("place.yaml", "name: s\nsession: agent_loop\nlimit: 8000\noverflow: 1.5\np1_placement: recent\n")
    with pytest.raises(ScenarioError, match=r"place.yaml.*p1_placement.*needs p1_ratio.*'recent'"):
        load_scenarios(bad)
    bad = write_file("task.yaml", "name: s\nsession: agent_loop\nlimit: 8000\noverflow: 1.5\np1_ratio: 0.5\np1_placement: task\n")
    with pytest.raises(ScenarioError, match=r"task.yaml.*p1_placement"):
        load_scenarios(bad)
    chat = write_file("chat.yaml", "name: s\nlimit: 8000\noverflow: 1.5\np1_ratio: 0.2\nmix: {message: 1.0}\nuser_turns: 3\n")
    with pytest.raises(ScenarioError, match=r"chat.yaml.*user_turns.*only an agent_loop session.*3"):
        load_scenarios(chat)
    bad = write_file("fam.yaml", "name: s\nsession: agent_loop\nsample: {p1_ratio: {min: 0, max: 1}}\n")
    with pytest.raises(ScenarioError, match=r"fam.yaml.*sample.p1_ratio"):
        load_scenarios(bad)
    bad = write_file("other.yaml", "name: s\nsession: loop\nlimit: 8000\noverflow: 1.5\n")
    with pytest.raises(ScenarioError, match=r"other.yaml.*session"):
        load_scenarios(bad)


@pytest.mark.parametrize("texts", [
    ["One remark."], ["Reading `pkg/a.py`.", "It fails at line 12:", "3 items", "(done)"],
    ["Ends with a space ", "next"], ["Tab\t", "x"], ["", "after an empty one"], ["a\n", "b"],
])
def test_an_analysis_is_measured_as_one_text(texts):
    """The analysis step grows a text until it reaches its size, counting the joined
    text from the counts of its parts: the same count as the joined text's."""
    from ctxsim.lab.agent_options import _spaced_tokens
    from ctxsim.tokens import count_tokens

    assert _spaced_tokens(texts) == count_tokens(" ".join(texts))


def _plain_grep(repo, needle):
    """The definition of FakeRepo.grep: every current line of every file, in order."""
    return [(p, i, t) for p in sorted(repo.files) for i, t in enumerate(repo.files[p], start=1) if needle in t]


@pytest.mark.parametrize("seed", range(4))
def test_repo_grep_and_test_paths_match_their_plain_definitions(seed):
    import random

    from faker import Faker

    from ctxsim.lab.fake_repo import FakeRepo

    fake = Faker("en_US")
    fake.seed_instance(seed)
    rng = random.Random(seed)
    repo = FakeRepo.build(rng, fake, modules=rng.randint(6, 16))
    needles = [repo.bug.function.name, repo.bug.subject, "import", "\n", "def ", "no such text", repo.package]
    needles += [rng.choice(repo.words)[: rng.randint(2, 6)] for _ in range(20)]
    for _ in range(2):  # before and after the repository changes
        for needle in needles:
            assert repo.grep(needle) == _plain_grep(repo, needle)
        assert repo.test_paths() == tuple(sorted(p for p in repo.tree if p.startswith("tests/")))
        repo.replace_line(repo.bug.path, repo.bug.text, repo.bug.fix)
        repo.add_config(f"tests/data/{repo.words[0]}.json", 80)
    assert f"tests/data/{repo.words[0]}.json" in repo.test_paths()


def test_the_reused_faker_draws_as_a_new_one_seeded_alike():
    from faker import Faker

    from datetime import date

    from ctxsim.lab.agent_session import _seeded_faker

    def draws(fake):
        return [fake.words(nb=20, unique=True), fake.sentence(nb_words=9), fake.paragraph(nb_sentences=3), fake.name(),
                fake.company(), fake.domain_name(), fake.ipv4_private(), fake.first_name(), fake.hexify("^^^^"),
                fake.date_between_dates(date(2025, 1, 1), date(2025, 12, 31)), fake.user_name(), fake.uuid4()]

    for seed in (0, 7, 2**63 + 5):
        fresh = Faker("en_US")
        fresh.seed_instance(seed)
        expected = draws(fresh)
        _seeded_faker(seed + 1).name()  # used for another seed first
        assert draws(_seeded_faker(seed)) == expected
