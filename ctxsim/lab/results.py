"""The results table: its columns, its CSV form, and reading it back.

One row per (policy, run, scenario, seed) with the columns of :data:`COLUMNS`
(:func:`ctxsim.lab.evaluate.evaluate` computes them). A sweep writes the table as
``results.csv`` (:func:`results_csv`: rows sorted by :data:`SORT_KEYS`, floats rounded
to :data:`FLOAT_DECIMALS` decimals) beside its resolved ``sweep.yaml``
(:func:`policy_paths`); reports and regression checks read it back with
:func:`read_results`, which checks every cell.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import yaml

from ..errors import ConfigError, describe_value
from ..probes import SCORE_COLUMNS
from ..validation import check_input

#: the columns of a results table, in order
COLUMNS = (
    "policy", "run", "scenario", "seed", "reward", "success", "used_recovery", "forced_recovery", "tokens_before",
    "tokens_after", "reduction_pct", "coherence", "p1_preserved", "facts_retained", "rules_retained", "probe_score",
    *SCORE_COLUMNS.values(), "reward_profile", "latency_ms", "chain", "steps", "oracle_reward", "random_reward", "normalized_score",
)
#: the key of a results row ("run": a member of a folder of trained policies, else "")
SORT_KEYS = ["policy", "scenario", "seed", "run"]
#: tolerance name -> results column whose (policy, scenario) mean it bounds
METRICS = {"reward": "reward", "success_rate": "success", "facts_retained": "facts_retained", "probe_score": "probe_score"}
#: metrics compared only when both the results and the baseline have their column
#: (results written before probes existed have no probe_score)
OPTIONAL_METRICS = frozenset({"probe_score"})
#: the results columns every results CSV must have to be compared
REQUIRED_COLUMNS = tuple(col for metric, col in METRICS.items() if metric not in OPTIONAL_METRICS)
FLOAT_DECIMALS = 6
#: results columns read as True/False and as numbers (when present)
BOOL_COLUMNS = ("success", "used_recovery", "forced_recovery")
NUMERIC_COLUMNS = tuple(c for c in COLUMNS if c not in (*BOOL_COLUMNS, *SORT_KEYS, "chain", "reward_profile"))


def read_results(path: str | Path, columns: Sequence[str] = REQUIRED_COLUMNS) -> pd.DataFrame:
    """A results CSV (a sweep's ``results.csv`` or a baseline), checked: at least one
    row; the key columns and ``columns`` present; policy and scenario not empty, seeds
    integers >= 0, numbers finite, booleans True/False; no (policy, run, scenario, seed)
    twice. ConfigError naming the file, the column, the row (1 = the first after the
    header) and the value otherwise."""
    path = Path(path)
    if path.is_dir():
        path = path / "results.csv"
    check_input(path, "results CSV", ConfigError)
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except FileNotFoundError:
        raise ConfigError("file not found", source=path) from None
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise ConfigError(f"not a results CSV ({' '.join(str(exc).split())})", source=path) from None
    missing = [c for c in dict.fromkeys([*SORT_KEYS, *columns]) if c not in df.columns and c != "run"]
    if missing:
        raise ConfigError(f"missing columns {missing} (has {list(df.columns)})", source=path)
    if df.empty:
        raise ConfigError("no rows: a results CSV has one row per policy, scenario and seed", source=path)

    def bad(column: str, ok: pd.Series, expected: str):
        row = int(np.flatnonzero(~ok.to_numpy())[0])
        return ConfigError(f"row {row + 1}: expected {expected} (got {describe_value(df[column].iloc[row])})",
                           source=path, key=column)

    for column in ("policy", "scenario"):
        if not (ok := df[column].str.strip() != "").all():
            raise bad(column, ok, "a name")
    for column in (c for c in df.columns if c in NUMERIC_COLUMNS or c == "seed"):
        values = pd.to_numeric(df[column].str.strip(), errors="coerce")
        ok = np.isfinite(values) & ((values >= 0) & (values % 1 == 0) if column == "seed" else True)
        if not ok.all():
            raise bad(column, ok, "an integer >= 0" if column == "seed" else "a finite number")
        df[column] = values.astype(int) if column == "seed" else values
    for column in (c for c in df.columns if c in BOOL_COLUMNS):
        values = df[column].str.strip().str.lower().map({"true": True, "false": False, "1": True, "0": False})
        if not (ok := values.notna()).all():
            raise bad(column, ok, "True or False")
        df[column] = values.astype(bool)
    df = with_runs(df)  # results written before the run column compare as run ""
    repeated = df.duplicated(SORT_KEYS)
    if repeated.any():
        row = int(np.flatnonzero(repeated.to_numpy())[0])
        first = int(np.flatnonzero((df[SORT_KEYS] == df[SORT_KEYS].iloc[row]).all(axis=1).to_numpy())[0])
        policy, run, scenario, seed = (df[c].iloc[row] for c in ("policy", "run", "scenario", "seed"))
        raise ConfigError(f"row {row + 1} repeats row {first + 1}: policy {policy!r}, run {run!r}, scenario "
                          f"{scenario!r}, seed {seed}", source=path)
    return df


def with_runs(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with a ``run`` column of strings ("" for none: results written before
    the column existed, or read back from CSV as missing values)."""
    runs = df["run"].map(lambda v: "" if pd.isna(v) else str(v)) if "run" in df.columns else ""
    return df.assign(run=runs)


def results_csv(results: pd.DataFrame) -> str:
    """The results table as CSV text: floats rounded to :data:`FLOAT_DECIMALS` decimals."""
    return results.round(FLOAT_DECIMALS).to_csv(index=False, lineterminator="\n")


def policy_paths(results_dir: str | Path) -> dict[str, str]:
    """Label -> folder of the trained policies of a sweep's output folder (from its
    ``sweep.yaml``; empty when there is none or it does not say)."""
    path = Path(results_dir) / "sweep.yaml"
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return {}
    paths = data.get("policy_paths") if isinstance(data, dict) else None
    return {str(k): str(v) for k, v in paths.items()} if isinstance(paths, dict) else {}
