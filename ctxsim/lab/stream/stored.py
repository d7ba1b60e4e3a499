"""Files a stream computation keeps in the pool folder, named by what they depend on.

The stream teacher's rows (:mod:`.teacher`) and the stream ``best-fixed`` fit
(:mod:`.best_fixed`) are slow to make and pure: :func:`cache_file` names each by a
digest of the package's code (:func:`code_digest`: its syntax trees, so comments and
docstrings do not count), the validated config and what else the computation reads.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..pool import PACKAGE_DIR, code_of, pool_dir, scenario_digest, source_digest

if TYPE_CHECKING:
    from ..environments.conversation_stream import StreamConfig


def cache_file(kind: str, checked: StreamConfig, extra: dict[str, Any], suffix: str) -> Path:
    """A file of the pool folder named by ``kind`` and a digest of the code, the validated
    config's values (not where its scenario files are, nor its cache size: the scenarios
    count by content, :func:`ctxsim.lab.pool.scenario_digest`) and ``extra``."""
    values = checked.model_dump(mode="json", exclude={"scenarios", "cache_size"})
    blob = json.dumps({**extra, "code": code_digest(), "config": values,
                       "suite": [scenario_digest(s) for s in checked.suite]}, sort_keys=True, default=str)
    return pool_dir() / f"{kind}-{hashlib.sha256(blob.encode()).hexdigest()[:32]}{suffix}"


def code_digest() -> str:
    """Digest of the code of every source file of the package (the policies the
    teacher plays included) and of what :func:`ctxsim.lab.pool.source_digest` covers."""
    h = hashlib.sha256(source_digest().encode())
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        h.update(path.relative_to(PACKAGE_DIR).as_posix().encode())
        h.update(code_of(path))
    return h.hexdigest()
