"""Local process pools: run a function over work items on the machine's cores.

Used by sweeps (one (scenario, seed) unit per item) and context pools (one context
per item). Workers are ``forkserver`` processes that fork with ``preload`` already
imported (``spawn`` where forkserver is missing), each limited to one BLAS/OpenMP
thread (threadpoolctl, since the preload has already loaded numpy's BLAS) and one
torch thread: the pool is the parallelism. A worker starts with the caller's
environment variables as they are when the pool starts (the forkserver keeps those
of its own start), and in the caller's working folder. Results come back in item order whatever order
the items ran in, so outputs do not depend on the number of workers. A worker ends
when the process that started the pool does, so a killed sweep leaves no worker.
"""

from __future__ import annotations

import multiprocessing
import os
import select
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any, Callable, Sequence, TypeVar

from ..atomic import process_alive

T = TypeVar("T")
R = TypeVar("R")


def default_workers() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


#: the worker's thread limits, kept alive for the worker's lifetime
_limits: list[Any] = []


def _watch_owner(owner: int) -> None:
    """End this worker when ``owner`` (the process that started the pool) ends, even
    by SIGKILL: a daemon thread waits on the owner's pidfd (Linux), else polls it once
    a second. Without it the workers and the forkserver keep each other alive."""
    def wait() -> None:
        try:
            fd = os.pidfd_open(owner)
        except (AttributeError, OSError):  # not Linux, or the owner is gone already
            while process_alive(owner):
                time.sleep(1.0)
        else:
            select.select([fd], [], [])  # readable once the owner has exited
        os._exit(1)

    threading.Thread(target=wait, name="ctxsim-owner-watch", daemon=True).start()


def _init_worker(owner: int, environment: dict[str, str]) -> None:
    _watch_owner(owner)
    # the caller's environment as it is now (e.g. $CTXSIM_POOL_DIR, where pool-folder results are read
    # and kept): the forkserver was started with the environment of the first pool and forks from it
    os.environ.clear()
    os.environ.update(environment)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = "1"  # for libraries loaded later
    from threadpoolctl import threadpool_limits

    _limits.append(threadpool_limits(limits=1))  # for those already loaded
    if "torch" in sys.modules:  # else torch reads OMP_NUM_THREADS when it is imported
        sys.modules["torch"].set_num_threads(1)


def process_map(
    fn: Callable[[T], R],
    items: Sequence[T],
    workers: int,
    *,
    order: Sequence[int] | None = None,
    preload: Sequence[str] = ("ctxsim",),
    advance: Callable[[], None] = lambda: None,
) -> list[R]:
    """``[fn(item) for item in items]``, computed by ``workers`` processes (in this
    process when ``workers <= 1``). ``order``: the indices in the order to submit
    them (e.g. the biggest first); ``advance`` is called once per finished item.
    In a daemonic process (a vector env's worker) the items run in-process.
    ``fn`` and the items must pickle; callers from a script need the usual
    ``if __name__ == "__main__":`` guard."""
    if workers <= 1 or len(items) <= 1 or multiprocessing.current_process().daemon:  # daemons may not fork
        out = []
        for item in items:
            out.append(fn(item))
            advance()
        return out
    if "forkserver" in multiprocessing.get_all_start_methods():
        context: Any = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(list(preload))
    else:
        context = multiprocessing.get_context("spawn")
    results: list[Any] = [None] * len(items)
    with ProcessPoolExecutor(max_workers=min(workers, len(items)), mp_context=context, initializer=_init_worker,
                             initargs=(os.getpid(), dict(os.environ))) as pool:
        futures = {pool.submit(fn, items[i]): i for i in (order if order is not None else range(len(items)))}
        pending = set(futures)
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    results[futures[future]] = future.result()
                    advance()
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    return results
