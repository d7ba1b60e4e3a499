"""The shipped corpus, its split, cuts, and the realism statistics of the agent-session family."""

from __future__ import annotations

import gzip
import json
import shutil

import numpy as np
import pytest

from ctxsim.lab.cli import main
from ctxsim.errors import ScenarioError, TranscriptError
from ctxsim.lab.corpus import DEFAULT_CORPUS, corpus_files, read_splits, session_repository
from ctxsim.lab.contexts import build_context
from ctxsim.lab.realism import DEFAULT_FAMILY, compare, stats_frame
from ctxsim.lab.scenarios import find_scenario, load_scenarios
from ctxsim.transcripts import load_transcript


def test_every_session_is_in_exactly_one_split_and_no_repository_on_two_sides():
    splits = read_splits(DEFAULT_CORPUS / "splits.yaml")
    files = corpus_files()
    assert len(files) == 135
    parts = {name: corpus_files(split=name) for name in splits}
    assert {k: len(v) for k, v in parts.items()} == {"train": 93, "validation": 26, "held_out": 16}
    assert sorted(p for v in parts.values() for p in v) == files
    repos = {name: {session_repository(p) for p in v} for name, v in parts.items()}
    assert not (repos["train"] & repos["validation"] or repos["train"] & repos["held_out"] or repos["validation"] & repos["held_out"])


def test_a_repository_twice_is_refused(write_file):
    path = write_file("splits.yaml", "train: [a/b]\nvalidation: [a/b]\nheld_out: []\n")
    with pytest.raises(ScenarioError, match=r"splits.yaml.*validation.*'a/b'"):
        read_splits(path)


def test_a_gzip_session_reads_as_its_plain_text(tmp_path, write_file):
    packed = corpus_files()[0]
    plain = write_file("s.jsonl", gzip.decompress(packed.read_bytes()))
    a, b = load_transcript(packed), load_transcript(plain)
    assert a.render_messages() == b.render_messages() and a.total_tokens == b.total_tokens
    broken = write_file("broken.jsonl.gz", b"\x1f\x8b not gzip")
    with pytest.raises(TranscriptError, match="broken.jsonl.gz"):
        load_transcript(broken)


def test_a_cut_ends_after_a_tool_result():
    path = corpus_files()[5]
    messages = [json.loads(line) for line in gzip.decompress(path.read_bytes()).splitlines()]
    whole = load_transcript(path)
    for share in (0.3, 0.55, 0.8):
        cut = load_transcript(path, cut=share)
        assert cut.units[-1].role == "tool" and len(cut.units) <= round(share * len(messages))
        assert cut.unit_ids == whole.unit_ids[: len(cut.units)]
        assert round(share * len(messages)) - len(cut.units) < 3  # a command and its result: moved back one turn at most


def test_corpus_families_draw_sessions_of_their_split_only(repo_root):
    families = {f.name: f for f in load_scenarios(repo_root / "data/families/swe_corpus.yaml")}
    assert sorted(families) == ["swe-heldout", "swe-train", "swe-validation"]
    for name, split in (("swe-train", "train"), ("swe-validation", "validation"), ("swe-heldout", "held_out")):
        family = families[name]
        allowed = set(corpus_files(split=split))
        drawn = [family.draw(seed) for seed in range(12)]
        assert all(d.transcript_path in allowed for d in drawn)
        assert len({d.transcript_path for d in drawn}) > 3  # seeds draw different sessions
        state = build_context(family, 3)
        assert state.fact_table and state.units[-1].role == "tool"  # probes from the future; ended after a result
        assert 1.1 - 0.01 <= state.total_tokens / state.limit <= 2.5 + 0.01
    from ctxsim.transcripts import _cached_units

    before = _cached_units.cache_info()
    build_context(families["swe-heldout"], 3)
    after = _cached_units.cache_info()
    assert after.hits > before.hits and after.misses == before.misses  # a session is parsed once per process


def test_the_early_cut_families_draw_small_contexts_of_their_split(repo_root):
    """data/families/swe_corpus_early.yaml: the corpus sessions cut after 10-30 % of their
    messages (in no split of an experiment; reports/heldout_eval.md scores them)."""
    early = {f.name: f for f in load_scenarios(repo_root / "data/families/swe_corpus_early.yaml")}
    later = {f.name: f for f in load_scenarios(repo_root / "data/families/swe_corpus.yaml")}
    assert sorted(early) == ["swe-train-early", "swe-validation-early"]
    for name, split in (("swe-train-early", "train"), ("swe-validation-early", "validation")):
        family = early[name]
        assert set(corpus_files(split=split)) >= {family.draw(seed).transcript_path for seed in range(200, 206)}
        small = [build_context(family, seed) for seed in range(200, 206)]
        long = [build_context(later[name.removesuffix("-early")], seed) for seed in range(200, 206)]
        assert all(s.units[-1].role == "tool" and 1.1 - 0.01 <= s.total_tokens / s.limit <= 2.5 + 0.01 for s in small)
        # the same session, cut earlier: fewer units
        assert all(len(a.units) <= len(b.units) for a, b in zip(small, long))
        assert sum(len(s.units) for s in small) < sum(len(s.units) for s in long)


def test_a_corpus_family_draws_again_past_a_session_that_ends_at_its_task(repo_root):
    """Three validation sessions hold only the system prompt and the task: the seeds that
    drew them draw again among the others; every other seed keeps its session."""
    from ctxsim.lab.corpus import has_agent_turn

    family = {f.name: f for f in load_scenarios(repo_root / "data/families/swe_corpus.yaml")}["swe-validation"]
    files = corpus_files(family.corpus_path, "validation")
    empty = [path for path in files if not has_agent_turn(path)]
    assert len(empty) == 3 and all(len(load_transcript(path).units) == 2 for path in empty)
    redrawn = 0
    for seed in range(40):
        first = files[int(np.random.default_rng([seed, 0xC0A]).integers(len(files)))]
        drawn = family.session_file(seed)
        assert has_agent_turn(drawn) and (drawn == first) == (first not in empty)
        if first in empty:
            redrawn += 1
            state = build_context(family, seed)
            assert len(state.units) >= 3 and state.total_tokens > 1000, (seed, state.total_tokens)
    assert redrawn >= 2  # seeds 6 and 14 drew a session that ends at its task


def test_a_corpus_family_is_checked(write_file, repo_root):
    corpus = repo_root / "data/transcripts/mini-swe-agent"
    bad = write_file("c.yaml", f"name: c\ncorpus: {corpus}\nsplit: test\nsample: {{}}\n")
    with pytest.raises(ScenarioError, match=r"c.yaml.*split"):
        load_scenarios(bad)
    bad = write_file("d.yaml", f"name: d\ncorpus: {corpus}\n")
    with pytest.raises(ScenarioError, match=r"d.yaml.*corpus.*give 'sample' too"):
        load_scenarios(bad)
    bad = write_file("e.yaml", "name: e\nlimit: 5000\noverflow: 2\nsession: agent_loop\nsplit: train\n")
    with pytest.raises(ScenarioError, match=r"e.yaml.*split.*only a corpus family"):
        load_scenarios(bad)


def test_the_family_stays_inside_the_corpus_range(repo_root):
    family = find_scenario(repo_root / "data/families/agent_sessions.yaml")
    generated = stats_frame([build_context(family, seed) for seed in range(12)])
    from ctxsim.lab.corpus import has_agent_turn

    corpus = stats_frame([load_transcript(p) for p in corpus_files() if has_agent_turn(p)])  # as ctxsim realism
    table = compare(generated, corpus)
    assert table.inside.all(), table.loc[~table.inside].to_string()


def test_cli_writes_the_report_and_figure(tmp_path, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for path in corpus_files()[:3] + corpus_files(split="held_out")[:2]:
        shutil.copy(path, corpus)
    shutil.copy(DEFAULT_CORPUS / "splits.yaml", corpus)
    out = tmp_path / "realism.md"
    assert main(["realism", "--contexts", "2", "--corpus", str(corpus), "--split", "held_out", "--out", str(out)]) == 0
    text = out.read_text()
    assert "| units |" in text and "5 sessions" not in text and "(held_out)" in text and (tmp_path / "realism.png").stat().st_size > 1000
    assert f"Command: `ctxsim realism --contexts 2 --corpus {corpus} --split held_out`." in text  # the one that made it
    assert main(["realism", "--contexts", "1", "--corpus", str(corpus), "--out", str(out)]) == 0  # the report is replaced
    assert f"Command: `ctxsim realism --contexts 1 --corpus {corpus}`." in out.read_text()
    assert main(["realism", "--contexts", "0", "--out", str(out)]) == 2


def test_the_report_leaves_out_sessions_that_end_at_their_task_and_says_so(tmp_path):
    """A session of a system prompt and a task is no agent session: counted, it would
    lower every yes/no share of the corpus (no diff, no traceback in it)."""
    from ctxsim.lab.corpus import has_agent_turn
    from ctxsim.lab.realism import run

    validation = corpus_files(split="validation")
    empty = [p for p in validation if not has_agent_turn(p)][:1]
    working = [p for p in validation if has_agent_turn(p)][:3]
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for path in empty + working:
        shutil.copy(path, corpus)
    shutil.copy(DEFAULT_CORPUS / "splits.yaml", corpus)
    out = tmp_path / "realism.md"
    table = run(contexts=1, corpus=corpus, out=out)
    text = out.read_text()
    assert "Corpus: 3 sessions of" in text and "(1 more end at their task and are left out)" in text
    kept = stats_frame([load_transcript(p) for p in working])
    expected = compare(stats_frame([build_context(find_scenario(DEFAULT_FAMILY), 0)]), kept)
    assert table.corpus_p50.tolist() == expected.corpus_p50.tolist()
    assert table.set_index("key").loc["has_diff", "corpus_p50"] == 1.0  # the left-out session has none


def test_cuts_overflow_and_rank_agreement_compares_the_same_policies(tmp_path, repo_root):
    from ctxsim.lab.realism import CUT_OVERFLOW, cut_scenarios, rank_agreement, rank_table
    from ctxsim.lab.stats import spearman

    cuts = cut_scenarios(corpus_files(split="held_out")[:2])
    assert len(cuts) == 2
    for cut in cuts:
        state = build_context(cut, 0)
        assert CUT_OVERFLOW[0] - 0.01 <= state.total_tokens / state.limit <= CUT_OVERFLOW[1] + 0.01
        # its rules are the agent template's instructions its task message states, as the corpus families' cuts have them
        rules = [f for f in state.fact_table if f.kind == "rule"]
        assert rules and all(f.unit_id == state.units[1].id and f.value in state.units[1].content for f in rules)
    family = find_scenario(repo_root / "data/families/agent_sessions.yaml")
    strategies = ["remove_oldest", "fresh_start", "remove_low_priority"]
    ranks = rank_agreement([family], cuts, 2, strategies)
    means = ranks.means
    assert list(means.index) == [f"only:{s}" for s in strategies]
    rewards = means.filter(regex="_(seed001|grounded)$")
    shares = means.filter(regex="_(probe_score|p1_preserved|rules_retained)$")
    assert rewards.shape[1] == 4 and shares.shape[1] == 6 and means.notna().all().all()
    assert ((rewards >= -2) & (rewards <= 2)).all().all() and ((shares >= 0) & (shares <= 1)).all().all()
    # a fresh start keeps its seed alone: more tokens cut than dropping the oldest units
    assert means.loc["only:fresh_start", "generated_reduction_pct"] > means.loc["only:remove_oldest", "generated_reduction_pct"]
    # grounded adds the probe term to design 001's reward: it is lower wherever a probe went unanswered
    for side in ("generated", "corpus_cuts"):
        lost = means[f"{side}_probe_score"] < 1
        assert (means.loc[lost, f"{side}_grounded"] < means.loc[lost, f"{side}_seed001"]).all() and lost.any()
    # the rewards per context are the ones the means are taken of: two contexts a side
    for profile in ("seed001", "grounded"):
        for side in ("generated", "corpus_cuts"):
            per_context = ranks.rewards[profile][side]
            assert per_context.shape == (2, 3) and list(per_context.columns) == list(means.index)
            assert per_context.mean().to_numpy() == pytest.approx(means[f"{side}_{profile}"].to_numpy())
        rho, lo, hi = ranks.correlation(profile)
        assert rho == pytest.approx(spearman(means[f"generated_{profile}"], means[f"corpus_cuts_{profile}"]))
        assert -1 <= lo <= rho <= hi <= 1
        positive = ranks.positive(profile)
        assert positive == [p for p in means.index
                            if means.loc[p, f"generated_{profile}"] > 0 and means.loc[p, f"corpus_cuts_{profile}"] > 0]
        two = list(means.index[:2])
        assert ranks.correlation(profile, two)[0] == pytest.approx(
            spearman(means.loc[two, f"generated_{profile}"], means.loc[two, f"corpus_cuts_{profile}"]), nan_ok=True)
    assert "only:fresh_start" not in ranks.positive("grounded")  # a fresh start alone costs its recovery
    table = rank_table(means)
    assert table[0].startswith("| policy | generated: reward (`seed001`) | generated: reward (`grounded`) | generated: probes |")
    assert len(table) == 5 and all(line.count("|") == 14 for line in table)
    for column, cell in (("generated_seed001", 1), ("generated_grounded", 2), ("corpus_cuts_grounded", 8)):
        best = f"{means[column].max():+.3f}"
        assert [line.split(" | ")[cell].startswith("**") for line in table[2:]] == \
            [f"{value:+.3f}" == best for value in means[column]]
