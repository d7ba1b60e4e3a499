"""The README's "Extending ctxsim" section stays true: its Python blocks run, in
order, in ONE shared namespace (later blocks use what earlier ones defined, as in
one script), in a subprocess, so that what they register never reaches this
process's registries; its pyproject snippet names the entry-point group ctxsim reads."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ctxsim.plugins import GROUP

tomllib = pytest.importorskip("tomllib")

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "Extending ctxsim"

#: runs the blocks (argv[1]: a JSON list) and reports what they added to each registry
RUNNER = textwrap.dedent(
    """
    import json, sys
    import ctxsim.lab  # registers the lab's policies: only what the blocks add is counted
    from ctxsim.policies import list_policies
    from ctxsim.relevance import list_embedders
    from ctxsim.strategies import list_strategies

    def registries():
        return {"strategies": list_strategies(), "policies": list_policies(), "embedders": list_embedders()}

    before = registries()
    namespace = {"__name__": "__main__"}
    for i, block in enumerate(json.loads(open(sys.argv[1]).read())):
        exec(compile(block, f"README '{sys.argv[2]}' block {i + 1}", "exec"), namespace)
    after = registries()
    print(json.dumps({kind: [x for x in after[kind] if x not in before[kind]] for kind in after}))
    """
)


def section_blocks(language: str) -> list[str]:
    """The code blocks of ``language`` in the README section :data:`SECTION`."""
    text = README.read_text(encoding="utf-8")
    match = re.search(rf"^## {re.escape(SECTION)}\n(.*?)(?=^## )", text, re.S | re.M)
    assert match, f"README has no section '## {SECTION}'"
    return re.findall(rf"^```{language}\n(.*?)^```", match.group(1), re.S | re.M)


def test_the_python_blocks_run_in_order_and_add_a_strategy_a_policy_and_an_embedder(tmp_path):
    blocks = section_blocks("python")
    assert len(blocks) >= 4
    (tmp_path / "blocks.json").write_text(json.dumps(blocks))
    done = subprocess.run([sys.executable, "-c", RUNNER, "blocks.json", SECTION], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    added = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(added["strategies"]) == 1
    strategy = added["strategies"][0]
    # the new strategy's only:<id> policy comes with it, besides the section's own policy
    assert f"only:{strategy}" in added["policies"] and len(added["policies"]) == 2
    assert len(added["embedders"]) == 1


def test_the_plugin_snippet_declares_the_entry_point_group_ctxsim_loads():
    snippets = [tomllib.loads(block) for block in section_blocks("toml")]
    assert len(snippets) == 1
    entry_points = snippets[0]["project"]["entry-points"]
    assert list(entry_points) == [GROUP]
    assert all(re.fullmatch(r"[\w.]+", module) for module in entry_points[GROUP].values())
