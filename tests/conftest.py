"""Fixtures shared by every test module (keep this file small)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import pytest
from hypothesis import settings

# Property tests draw their examples from a fixed seed, so a run reproduces the last one
# (CI never fails on a draw a rerun would not make); a test's own @settings keep this.
# CTXSIM_HYPOTHESIS=explore draws new examples on every run (a search for new failures;
# a failure prints the example and the @reproduce_failure line that replays it).
settings.register_profile("reproducible", derandomize=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("CTXSIM_HYPOTHESIS", "reproducible"))

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session", autouse=True)
def _sb3_log_folder(tmp_path_factory) -> None:
    """SB3 makes a folder under the system temp folder for every model that learns without
    a log folder of its own; the tests' models make theirs in pytest's temporary folder."""
    os.environ["SB3_LOGDIR"] = str(tmp_path_factory.mktemp("sb3-logs"))


@pytest.fixture(scope="session", autouse=True)
def _subprocesses_import_this_checkout() -> None:
    """Processes the tests start import ctxsim from this checkout (its folder first on
    PYTHONPATH), not from wherever the environment's editable install points: a second
    checkout sharing one virtual environment tests its own code in every process."""
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (str(REPO_ROOT), os.environ.get("PYTHONPATH"))))


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The checkout's root folder."""
    return REPO_ROOT


@pytest.fixture
def write_file(tmp_path: Path) -> Callable[[str, str | bytes], Path]:
    """``write_file(name, text_or_bytes)``: write a file under tmp_path (text as UTF-8) and return its path."""

    def write(name: str, content: str | bytes) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
        return path

    return write


@pytest.fixture(scope="session")
def scenario_suite():
    """The shipped scenarios (data/scenarios), loaded once per session."""
    from ctxsim.lab.scenarios import DEFAULT_SUITE, load_scenarios

    return load_scenarios(DEFAULT_SUITE)


@pytest.fixture(scope="session", autouse=True)
def private_pool_dir(tmp_path_factory):
    """Context pools built by tests go to a temporary folder, never the user's cache."""
    import os

    folder = tmp_path_factory.mktemp("pools")
    previous = os.environ.get("CTXSIM_POOL_DIR")
    os.environ["CTXSIM_POOL_DIR"] = str(folder)
    yield folder
    if previous is None:
        os.environ.pop("CTXSIM_POOL_DIR", None)
    else:
        os.environ["CTXSIM_POOL_DIR"] = previous


#: short conversations that overflow several times; two actions and two steps: 3 depths × 9 chains
SMALL_STREAM = {"turns": 40, "probes": {"turns": [15, 25, 35], "min_age_turns": 5},
                "actions": ["prioritize_recent", "summarize_old", "fresh_start"], "max_steps": 2,
                "scenario_names": ["chat-10k", "tool-dupes"]}


@pytest.fixture(scope="session")
def small_stream_config() -> dict:
    """A ConversationStream-v0 config override of short, cheap conversations (:data:`SMALL_STREAM`)."""
    return {**SMALL_STREAM}


@pytest.fixture(scope="session")
def small_stream(small_stream_config):
    """That config, validated (a StreamConfig)."""
    from ctxsim.lab.environments.conversation_stream import ConversationStreamEnv

    return ConversationStreamEnv.checked_config(small_stream_config)
