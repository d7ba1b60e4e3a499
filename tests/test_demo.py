"""The demo's sweep: contexts no policy in it was trained, selected or fitted on."""

from __future__ import annotations

from ctxsim.lab.demo import DEMO_EXPERIMENT, DEMO_SEEDS, _keep_as_first_run, demo_policies, demo_selection
from ctxsim.lab.policies.best_fixed import FIT_SEEDS
from ctxsim.lab.scenarios import DEFAULT_SUITE, load_scenarios
from ctxsim.lab.train import env_configs, load_experiment, run_name


def test_the_demo_scores_only_contexts_no_policy_learned_or_chose_on():
    experiment = load_experiment(DEMO_EXPERIMENT)
    names, seeds = demo_selection(experiment)
    trained = env_configs(experiment)[1]
    suite = {s.name: s for s in load_scenarios(DEFAULT_SUITE)}
    one_context = {n for n, s in suite.items() if not s.varies_by_seed}
    # the training split's transcripts are one context whatever the seed: the policy learned on them
    assert {n for n in one_context if n in trained["scenario_names"]} == one_context - set(names)
    assert one_context - set(names) and one_context & set(names)  # held-out / validation transcripts stay
    assert set(names) | (one_context - set(names)) == set(suite)
    # every other context is drawn at seeds above those training and best-fixed's fit use
    counts = [suite[n].context_count(trained["contexts_per_scenario"]) for n in trained["scenario_names"] if n in suite]
    assert counts and min(seeds) >= max(counts + [FIT_SEEDS])
    assert seeds == list(DEMO_SEEDS) and demo_selection(experiment, quick=True)[1] == [DEMO_SEEDS[0]]


def test_the_demo_ranks_the_best_fixed_chain_beside_the_learned_policy():
    policies = demo_policies("learned")
    assert policies[0] == "learned" and f"best-fixed:{DEMO_EXPERIMENT.stem}" in policies
    assert {"oracle", "greedy", "seed-chain", "random"} <= set(policies)


def test_a_new_demo_run_replaces_the_earlier_ones_under_the_first_runs_name(tmp_path):
    """The report names the run folder: a regenerated demo names the same one."""
    experiment = load_experiment(DEMO_EXPERIMENT)
    env_id = env_configs(experiment)[0]

    def made(label: str):  # a run folder as train() names it beside the ones there
        run = tmp_path / run_name(env_id, experiment, experiment.seed, tmp_path)
        run.mkdir()
        (run / "made").write_text(label)
        return run

    first = made("first")
    assert _keep_as_first_run(first, experiment) == first  # the first demo keeps its name
    other_seed = tmp_path / first.name.replace("__0", "__1")
    other_seed.mkdir()
    made("second")
    third = made("third")
    assert third.name == f"{first.name}__3"
    kept = _keep_as_first_run(third, experiment)
    assert kept == first and (first / "made").read_text() == "third"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([first.name, other_seed.name])  # other runs stay
