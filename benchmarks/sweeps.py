"""The sweep benchmark: episodes/s with 1 and 2 workers (fresh processes), and Ray."""

from __future__ import annotations

import json
import subprocess
import sys

from ctxsim.paths import EXPERIMENTS_DIR

from .measure import (
    Bench,
    Row,
)

REGRESSION_SWEEP = EXPERIMENTS_DIR / "regression.yaml"
SWEEP_YAML = """name: bench
description: the sweep benchmark's work (benchmarks.sweeps)
policies: {policies}
scenarios: {{names: {scenarios}}}
seeds: {seeds}
"""
_SWEEP_CODE = (
    "import json, sys\n"
    "from ctxsim.lab.sweep import load_sweep, run_sweep\n"
    "r = run_sweep(load_sweep(sys.argv[1]), out=sys.argv[2], workers=int(sys.argv[3]), backend=sys.argv[4])\n"
    "print(json.dumps({'episodes': r.episodes, 'seconds': r.seconds}))\n"
)


def bench_sweep(bench: Bench) -> list[Row]:
    try:
        import ctxsim.lab.sweep  # noqa: F401
    except ImportError as exc:
        return [Row("sweep", "episodes/s, 1 and 2 workers", f"not measured: {exc}", pending=True)]
    if bench.quick:
        file = bench.scratch / "sweep.yaml"
        file.write_text(SWEEP_YAML.format(policies=["seed-chain", "oracle"], scenarios=["mild-overflow"], seeds=1),
                        encoding="utf-8")
    else:
        file = REGRESSION_SWEEP
    try:
        import ray  # noqa: F401

        runs = ((1, "local"), (2, "local"), (2, "ray"))
    except ImportError:
        runs = ((1, "local"), (2, "local"))
    found = {}
    for workers, backend in runs:
        out = bench.scratch / f"sweep-{backend}-{workers}"
        proc = subprocess.run([sys.executable, "-c", _SWEEP_CODE, str(file), str(out), str(workers), backend],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            error = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            return [Row("sweep", f"{backend}, {workers} worker(s)", f"failed: {error}", ok=False)]
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        found[workers if backend == "local" else backend] = (result["episodes"] / result["seconds"], (out / "results.csv").read_bytes())
        episodes = result["episodes"]
    same = found[1][1] == found[2][1]
    bench.notes.append(
        f"sweep: {file.name} ({episodes} episodes), each worker count in a fresh process, timed from the first work "
        f"unit to the last; results.csv of 1 and 2 workers {'identical' if same else 'DIFFER'} byte for byte."
    )
    one, two = found[1][0], found[2][0]
    return [
        Row("sweep", "episodes/s, 1 worker", f"{one:.2f} episodes/s"),
        Row("sweep", "episodes/s, 2 workers", f"{two:.2f} episodes/s", f"{one:.2f} episodes/s (1 worker)", two / one,
            "identical results.csv", same),
    ] + ([
        Row("sweep", "episodes/s, Ray backend (local, 2 CPUs; time includes ray.init)", f"{found['ray'][0]:.2f} episodes/s",
            f"{one:.2f} episodes/s (1 worker)", found["ray"][0] / one, "identical results.csv", found["ray"][1] == found[1][1]),
    ] if "ray" in found else [Row("sweep", "episodes/s, Ray backend", "not measured: extra 'ray' not installed", pending=True)])
