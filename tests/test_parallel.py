"""Local process pools: item order, in-process fallback, errors, one thread per worker."""

from __future__ import annotations

import os

import pytest

from ctxsim.lab.parallel import process_map


def _square(x: int) -> int:
    return x * x


def _pid_and_square(x: int) -> tuple[int, int]:
    return os.getpid(), x * x


def _fail_on_three(x: int) -> int:
    if x == 3:
        raise ValueError(f"item {x}")
    return x


def _environment(name: str) -> tuple[str | None, str]:
    return os.environ.get(name), os.getcwd()


def _thread_limits(_: int) -> dict[str, int]:
    import torch
    from threadpoolctl import threadpool_info

    limits = {pool["internal_api"]: pool["num_threads"] for pool in threadpool_info()}
    limits["torch"] = torch.get_num_threads()
    return limits


def test_results_come_back_in_item_order_whatever_the_submission_order() -> None:
    items = list(range(9))
    assert process_map(_square, items, 2, order=list(reversed(items))) == [x * x for x in items]


def test_one_worker_runs_in_this_process() -> None:
    seen = []
    out = process_map(_pid_and_square, [1, 2, 3], 1, advance=lambda: seen.append(1))
    assert out == [(os.getpid(), 1), (os.getpid(), 4), (os.getpid(), 9)]
    assert len(seen) == 3


def test_workers_are_other_processes_and_advance_counts_every_item() -> None:
    seen = []
    out = process_map(_pid_and_square, list(range(6)), 2, advance=lambda: seen.append(1))
    assert [square for _, square in out] == [x * x for x in range(6)]
    assert os.getpid() not in {pid for pid, _ in out}
    assert len(seen) == 6


def test_an_item_error_reaches_the_caller() -> None:
    with pytest.raises(ValueError, match="item 3"):
        process_map(_fail_on_three, list(range(6)), 2)


def test_each_worker_uses_one_blas_openmp_and_torch_thread() -> None:
    for limits in process_map(_thread_limits, [0, 1], 2):
        assert limits["torch"] == 1
        assert all(count == 1 for count in limits.values()), limits
        assert len(limits) > 1  # numpy's BLAS was found, not only torch


def test_workers_see_the_callers_environment_and_folder_as_they_are_now(monkeypatch, tmp_path) -> None:
    """The forkserver keeps the environment of its first start; a pool started after the
    caller changed a variable (here the pool folder's) and its folder sees the new ones."""
    monkeypatch.setenv("CTXSIM_POOL_DIR", str(tmp_path / "first"))
    assert {value for value, _ in process_map(_environment, ["CTXSIM_POOL_DIR"] * 2, 2)} == {str(tmp_path / "first")}
    monkeypatch.setenv("CTXSIM_POOL_DIR", str(tmp_path / "second"))
    monkeypatch.chdir(tmp_path)
    assert set(process_map(_environment, ["CTXSIM_POOL_DIR"] * 2, 2)) == {(str(tmp_path / "second"), str(tmp_path))}
    monkeypatch.delenv("CTXSIM_POOL_DIR")
    assert {value for value, _ in process_map(_environment, ["CTXSIM_POOL_DIR"] * 2, 2)} == {None}
