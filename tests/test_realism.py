"""The shipped corpus, its split, cuts, and the realism statistics of the agent-session family."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest

from ctxsim.lab.cli import main
from ctxsim.errors import ScenarioError, TranscriptError
from ctxsim.lab.realism import (
    DEFAULT_CORPUS, compare, corpus_files, cut_messages, read_splits, session_repository, stats_frame,
)
from ctxsim.lab.contexts import build_context
from ctxsim.lab.scenarios import find_scenario
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
    messages = [json.loads(line) for line in gzip.decompress(corpus_files()[5].read_bytes()).splitlines()]
    for share in (0.3, 0.55, 0.8):
        cut = cut_messages(messages, share)
        assert cut[-1]["role"] == "tool" and len(cut) <= round(share * len(messages)) + 1
        assert cut == messages[: len(cut)]


def test_the_family_stays_inside_the_corpus_range(repo_root):
    family = find_scenario(repo_root / "data/families/agent_sessions.yaml")
    generated = stats_frame([build_context(family, seed) for seed in range(12)])
    corpus = stats_frame([load_transcript(p) for p in corpus_files()])
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
    assert main(["realism", "--contexts", "0", "--out", str(out)]) == 2


def test_cuts_overflow_and_rank_agreement_compares_the_same_policies(tmp_path, repo_root):
    from ctxsim.lab.realism import CUT_OVERFLOW, rank_agreement, spearman, cut_scenarios

    cuts = cut_scenarios(corpus_files(split="held_out")[:2], tmp_path)
    assert len(cuts) == 2
    for cut in cuts:
        state = build_context(cut, 0)
        assert CUT_OVERFLOW[0] - 0.01 <= state.total_tokens / state.limit <= CUT_OVERFLOW[1] + 0.01
    family = find_scenario(repo_root / "data/families/agent_sessions.yaml")
    ranks = rank_agreement([family], cuts[:1], 1, ["remove_oldest", "fresh_start"])
    assert list(ranks.index) == ["only:remove_oldest", "only:fresh_start"]
    assert ranks.notna().all().all() and ((ranks >= -2) & (ranks <= 2)).all().all()
    assert spearman([1, 2, 3], [10, 30, 20]) == pytest.approx(0.5)
