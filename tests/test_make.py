"""The Makefile's test target: pytest's exit code reaches CI (``.ci/run``), except
exit 5 (no test collected), which is reported and counts as a pass."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def make_test(tmp_path: Path, pytest_exit: int) -> subprocess.CompletedProcess:
    """``make test`` with a stand-in pytest that exits ``pytest_exit`` (no install:
    the stamp is a file newer than pyproject.toml and constraints.txt)."""
    fake = tmp_path / "pytest"
    fake.write_text(f"#!/bin/sh\necho \"fake pytest $*\"\nexit {pytest_exit}\n")
    fake.chmod(0o755)
    stamp = tmp_path / "installed"
    stamp.touch()
    newest = max((REPO / name).stat().st_mtime for name in ("pyproject.toml", "constraints.txt"))
    os.utime(stamp, (newest + 60, newest + 60))
    return subprocess.run(
        ["make", "-s", "-C", str(REPO), "test", f"BIN={tmp_path}", f"STAMP={stamp}"],
        capture_output=True, text=True, timeout=60,
    )


def test_make_test_passes_when_pytest_passes(tmp_path):
    run = make_test(tmp_path, 0)
    assert run.returncode == 0, run.stderr
    assert "fake pytest -q -n 2" in run.stdout


@pytest.mark.parametrize("code", [1, 2, 3, 4])
def test_make_test_fails_when_pytest_fails(tmp_path, code):
    run = make_test(tmp_path, code)
    assert run.returncode != 0
    assert "collected no tests" not in run.stdout


def test_make_test_reports_an_empty_collection_without_failing(tmp_path):
    run = make_test(tmp_path, 5)
    assert run.returncode == 0, run.stderr
    assert "pytest collected no tests (exit 5)" in run.stdout
