"""context_config loading (seed 001), model limits and usage tiers (seed 004)."""

from __future__ import annotations

import copy
import logging
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from ctxsim.config import (
    DEFAULT_CONFIG_PATH,
    DEFAULT_MODELS_PATH,
    ContextConfig,
    RetryPolicy,
    load_config,
    load_models,
    model_limit,
    parse_token_count,
    usage_tier,
)
from ctxsim.errors import ConfigError
from ctxsim.validation import KeyedValueError, join_key, load_yaml, validate

SEED_YAML = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text(encoding="utf-8"))


def write(tmp_path: Path, text: str | bytes, name: str = "cfg.yaml") -> Path:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def with_override(dotted: str, value) -> dict:
    """The shipped config with one value replaced (list items as integer parts)."""
    data = copy.deepcopy(SEED_YAML)
    *parents, last = [int(p) if p.isdigit() else p for p in dotted.split(".")]
    node = data
    for part in parents:
        node = node[part]
    node[last] = value
    return data


# --------------------------------------------------------------------------- defaults


def test_defaults_are_seed_001_example():
    cfg = ContextConfig()
    assert (cfg.min_limit, cfg.default_limit, cfg.warning_threshold) == (3500, 5000, 0.8)
    assert [(l.type, l.limit, l.follow_default) for l in cfg.per_llm] == [
        ("local_14b", 3500, True),
        ("cloud_grok", 8000, False),
        ("gpt4", 6000, True),
    ]
    assert cfg.breaking_strategy.chain_order == (
        "summarize_old",
        "prioritize_recent",
        "content_type_chunking",
        "discard_low_rel",
        "hybrid",
    )
    assert cfg.strategy_params("summarize_old") == {"old_threshold": 0.6, "summary_length": 300}
    assert cfg.strategy_params("prioritize_recent") == {"rel_threshold": 0.5, "recent_bias": 0.2, "priority_boost": 1.5}
    assert cfg.strategy_params("content_type_chunking") == {
        "compress_ratios": {"code": 0.7, "text": 0.5, "plan_ref": 1.0, "log": 0.4}
    }
    assert cfg.strategy_params("discard_low_rel") == {"discard_percent": 0.3, "placeholder_detail": "brief"}
    assert cfg.strategy_params("hybrid") == {"max_iterations": 3}
    assert cfg.recovery_mode == "fresh_start"
    assert cfg.retry_policy() == RetryPolicy(max_attempts=3, backoff_base_seconds=5, max_delay_seconds=60)
    assert cfg.retry_policy("askQuestion") == RetryPolicy(max_attempts=4, backoff_base_seconds=10, max_delay_seconds=60)
    assert cfg.llm_summarizer.enabled is False


def test_shipped_yaml_equals_defaults():
    assert load_config(DEFAULT_CONFIG_PATH) == ContextConfig()
    assert "# Global floor" in DEFAULT_CONFIG_PATH.read_text(encoding="utf-8")


def test_dump_round_trips():
    cfg = load_config(DEFAULT_CONFIG_PATH)
    assert ContextConfig.model_validate(cfg.model_dump(mode="json")) == cfg


def test_config_is_frozen_and_params_are_copies():
    cfg = ContextConfig()
    with pytest.raises(ValidationError):
        cfg.min_limit = 1  # type: ignore[misc]
    cfg.strategy_params("content_type_chunking")["compress_ratios"]["code"] = 0.0
    cfg.breaking_strategy.params["hybrid"]["max_iterations"] = 99
    assert cfg == ContextConfig()


def test_limit_for(tmp_path):
    cfg = ContextConfig()
    assert cfg.limit_for("cloud_grok") == 8000
    assert cfg.limit_for("local_14b") == 3500
    assert cfg.limit_for("unknown-llm") == 5000
    assert cfg.limit_for() == 5000
    path = write(tmp_path, "context_config:\n  min_limit: 4000\n  default_limit: 9000\n  per_llm: []\n")
    assert load_config(path).limit_for("gpt4") == 9000


def test_per_agent_limits(tmp_path):
    """Design 001: "Per-Agent Limits: Customizable (e.g., Verification: 4,000; Coding: 5,000)".
    A listed agent has its own limit, never above its model's; any other agent the model's
    or the default; the P1 bonus on top."""
    path = write(tmp_path, "context_config:\n  per_agent: {Verification: 4000, Coding: 7000}\n")
    cfg = load_config(path)
    assert cfg.per_agent == {"Verification": 4000, "Coding": 7000}
    assert cfg.limit_for(agent="Verification") == 4000 and cfg.limit_for(agent="Coding") == 7000
    assert cfg.limit_for("cloud_grok", agent="Verification") == 4000  # under the model's 8,000
    assert cfg.limit_for("gpt4", agent="Coding") == 6000  # the model holds 6,000
    assert cfg.limit_for("unknown-llm", agent="Coding") == 7000
    assert cfg.limit_for("gpt4", agent="Planner") == cfg.limit_for("gpt4") == 6000  # not listed
    assert cfg.limit_for(agent="Verification", agent_priority=1) == 4800
    assert ContextConfig().per_agent == {} and ContextConfig().limit_for(agent="Verification") == 5000
    assert ContextConfig.model_validate(cfg.model_dump(mode="json")) == cfg


def test_partial_file_keeps_other_defaults(tmp_path):
    path = write(
        tmp_path,
        "context_config:\n  breaking_strategy:\n    chain_order: [hybrid, summarize_old]\n"
        "    hybrid: {max_iterations: 5}\n  recovery_mode: truncate\n",
    )
    cfg = load_config(path)
    assert cfg.breaking_strategy.chain_order == ("hybrid", "summarize_old")
    assert cfg.strategy_params("hybrid") == {"max_iterations": 5}
    assert cfg.strategy_params("summarize_old") == {}
    assert cfg.recovery_mode == "truncate"
    assert cfg.per_llm == ContextConfig().per_llm


def test_per_tool_policy_inherits_default(tmp_path):
    path = write(
        tmp_path,
        "context_config:\n  retry_policies:\n    default: {max_attempts: 2, backoff_base_seconds: 1, max_delay_seconds: 7}\n"
        "    per_tool:\n      search: {max_attempts: 6}\n",
    )
    cfg = load_config(path)
    assert cfg.retry_policy("search") == RetryPolicy(max_attempts=6, backoff_base_seconds=1, max_delay_seconds=7)
    assert cfg.retry_policy("other") == cfg.retry_policy(None) == RetryPolicy(
        max_attempts=2, backoff_base_seconds=1, max_delay_seconds=7
    )


def test_retry_backoff_doubles_then_caps():
    policy = RetryPolicy()  # base 5 s, cap 60 s
    assert [policy.delay(a) for a in range(1, 7)] == [5.0, 10.0, 20.0, 40.0, 60.0, 60.0]
    assert policy.delay(10_000) == 60.0
    assert RetryPolicy(backoff_base_seconds=10).delay(3) == 40.0
    with pytest.raises(ValueError):
        policy.delay(0)


def test_enabled_summarizer_loads(tmp_path):
    path = write(
        tmp_path,
        "context_config:\n  llm_summarizer:\n    enabled: true\n    base_url: http://localhost:11434/v1\n"
        "    model: qwen3:14b\n    api_key_env: CTXSIM_KEY\n    timeout_seconds: 12\n",
    )
    summ = load_config(path).llm_summarizer
    assert (summ.enabled, summ.model, summ.api_key_env, summ.timeout_seconds) == (True, "qwen3:14b", "CTXSIM_KEY", 12)


# --------------------------------------------------------------------------- bad input

BAD_CONFIGS = [
    # (name, file text, expected key path or None, text that must appear)
    ("malformed", "context_config:\n  min_limit: [1,\n", None, "line 3"),
    ("tab", "context_config:\n\tmin_limit: 1\n", None, "line 2"),
    ("bad date", "context_config:\n  recovery_mode: 2001-13-45\n", None, "invalid YAML"),
    ("empty file", "", None, "got None"),
    ("scalar", "42\n", None, "got 42"),
    ("missing", "contextconfig: {}\n", "context_config", "missing"),
    ("null section", "context_config:\n", "context_config", "got None"),
    ("unknown top key", "context_config: {}\nextra: 1\n", "extra", "got 1"),
    ("unknown key", "context_config:\n  min_limt: 3500\n", "context_config.min_limt", "got 3500"),
    ("unknown nested", "context_config:\n  per_llm:\n    - {type: a, limit: 4000, colour: red}\n",
     "context_config.per_llm[0].colour", "'red'"),
    ("string limit", "context_config:\n  default_limit: '5000'\n", "context_config.default_limit", "'5000'"),
    ("bool limit", "context_config:\n  min_limit: true\n", "context_config.min_limit", "True"),
    ("float limit", "context_config:\n  default_limit: 5000.5\n", "context_config.default_limit", "5000.5"),
    ("list type", "context_config:\n  per_llm: {type: a}\n", "context_config.per_llm", "expected a list"),
    ("chain type", "context_config:\n  breaking_strategy:\n    chain_order: [1]\n",
     "context_config.breaking_strategy.chain_order[0]", "got 1"),
    ("empty chain", "context_config:\n  breaking_strategy:\n    chain_order: []\n",
     "context_config.breaking_strategy.chain_order", "got []"),
    ("params not mapping", "context_config:\n  breaking_strategy:\n    hybrid: 3\n",
     "context_config.breaking_strategy.hybrid", "got 3"),
    ("limit under floor", "context_config:\n  per_llm:\n    - {type: a, limit: 2000}\n",
     "context_config.per_llm[0].limit", "2000"),
    ("default under floor", "context_config:\n  default_limit: 3000\n", "context_config.default_limit", "3000"),
    ("raised floor", "context_config:\n  min_limit: 7000\n  default_limit: 8000\n",
     "context_config.per_llm[0].limit", "3500"),
    ("duplicate type", "context_config:\n  per_llm:\n    - {type: a, limit: 4000}\n    - {type: a, limit: 5000}\n",
     "context_config.per_llm[1].type", "'a'"),
    ("agent under floor", "context_config:\n  per_agent: {Verification: 3000}\n",
     "context_config.per_agent.Verification", "3000"),
    ("agent limit type", "context_config:\n  per_agent: {Coding: '5000'}\n", "context_config.per_agent.Coding", "'5000'"),
    ("agents not mapping", "context_config:\n  per_agent: [Coding]\n", "context_config.per_agent", "['Coding']"),
    ("threshold high", "context_config:\n  warning_threshold: 1.5\n", "context_config.warning_threshold", "1.5"),
    ("threshold zero", "context_config:\n  warning_threshold: 0\n", "context_config.warning_threshold", "got 0"),
    ("negative attempts", "context_config:\n  retry_policies:\n    default: {max_attempts: -1}\n",
     "context_config.retry_policies.default.max_attempts", "-1"),
    ("negative tool attempts", "context_config:\n  retry_policies:\n    per_tool:\n      x: {max_attempts: -2}\n",
     "context_config.retry_policies.per_tool.x.max_attempts", "-2"),
    ("recovery mode", "context_config:\n  recovery_mode: panic\n", "context_config.recovery_mode", "'panic'"),
    ("summarizer incomplete", "context_config:\n  llm_summarizer: {enabled: true, model: m}\n",
     "context_config.llm_summarizer.base_url", "required"),
    ("api key env", "context_config:\n  llm_summarizer: {api_key_env: 'sk-123 secret'}\n",
     "context_config.llm_summarizer.api_key_env", "'sk-123 secret'"),
]


@pytest.mark.parametrize("name,text,key,needle", BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS])
def test_bad_config_raises_one_line_config_error(tmp_path, name, text, key, needle):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(str(path) + ": ")
    assert needle in message
    assert info.value.key == key
    if key:
        assert f"key '{key}'" in message


def test_several_errors_are_counted_in_one_line(tmp_path):
    path = write(tmp_path, "context_config:\n  min_limit: x\n  default_limit: y\n  foo: 1\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert info.value.key == "context_config.min_limit" and "'x'" in message
    assert "+2 more" in message and "context_config.default_limit" in message and "context_config.foo" in message
    assert "\n" not in message


def test_non_utf8_and_missing_file(tmp_path):
    path = write(tmp_path, b"context_config:\n  min_limit: \xff\xfe\n")
    with pytest.raises(ConfigError, match="not UTF-8") as info:
        load_config(path)
    assert str(path) in str(info.value)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "absent.yaml")


def test_validation_helpers_are_general(tmp_path):
    class Window(BaseModel):
        model_config = ConfigDict(extra="forbid")
        lo: int
        hi: int

        @model_validator(mode="after")
        def _ordered(self):
            if self.hi < self.lo:
                raise KeyedValueError("hi", self.hi, f"must be >= lo {self.lo}")
            return self

    data = load_yaml(write(tmp_path, "lo: 5\nhi: 2\n", "w.yaml"), ConfigError)
    with pytest.raises(ConfigError) as info:
        validate(Window, data, "w.yaml", ConfigError, key_prefix="envs[3].window")
    assert str(info.value) == "w.yaml: key 'envs[3].window.hi': must be >= lo 5 (got 2)"
    assert validate(Window, {"lo": 1, "hi": 2}, "w.yaml", ConfigError) == Window(lo=1, hi=2)
    assert join_key("a", "b", 0, "c") == "a.b[0].c"
    assert join_key("a", "x\ny", "") == "a['x\\ny']['']"


# --------------------------------------------------------------------------- fuzzing

JUNK = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8) | st.integers(), children, max_size=4),
    max_leaves=12,
)
SEED_KEYS = [
    "context_config",
    "context_config.min_limit",
    "context_config.default_limit",
    "context_config.warning_threshold",
    "context_config.per_llm",
    "context_config.per_llm.0",
    "context_config.per_llm.1.limit",
    "context_config.per_llm.2.follow_default",
    "context_config.breaking_strategy",
    "context_config.breaking_strategy.chain_order",
    "context_config.breaking_strategy.hybrid",
    "context_config.breaking_strategy.new_strategy",
    "context_config.recovery_mode",
    "context_config.retry_policies",
    "context_config.retry_policies.default",
    "context_config.retry_policies.default.max_attempts",
    "context_config.retry_policies.per_tool",
    "context_config.retry_policies.per_tool.askQuestion",
    "context_config.llm_summarizer",
]
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def fuzz_path():
    with tempfile.TemporaryDirectory() as tmp:
        yield Path(tmp) / "fuzz.yaml"


def load_or_config_error(path: Path) -> None:
    try:
        assert isinstance(load_config(path), ContextConfig)
    except ConfigError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc)


@FUZZ
@given(junk=JUNK)
def test_fuzz_random_documents(fuzz_path, junk):
    fuzz_path.write_text(yaml.safe_dump({"context_config": junk}), encoding="utf-8")
    load_or_config_error(fuzz_path)
    fuzz_path.write_text(yaml.safe_dump(junk), encoding="utf-8")
    load_or_config_error(fuzz_path)


@FUZZ
@given(key=st.sampled_from(SEED_KEYS), junk=JUNK)
def test_fuzz_one_seed_value_replaced(fuzz_path, key, junk):
    fuzz_path.write_text(yaml.safe_dump(with_override(key, junk)), encoding="utf-8")
    load_or_config_error(fuzz_path)


@FUZZ
@given(raw=st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_fuzz_random_bytes(fuzz_path, raw):
    fuzz_path.write_bytes(raw)
    load_or_config_error(fuzz_path)


# --------------------------------------------------------------------------- model limits


@pytest.mark.parametrize(
    "value,tokens",
    [("200K", 200_000), ("200k", 200_000), ("1M", 1_000_000), ("1m", 1_000_000), ("1.5M", 1_500_000),
     ("128K", 128_000), (" 256K ", 256_000), ("8192", 8192), (8192, 8192), ("0.5K", 500)],
)
def test_parse_token_count(value, tokens):
    assert parse_token_count(value) == tokens


@pytest.mark.parametrize("value", ["", "K", "200KB", "1.2345K", "-5", "0", 0, -1, "1e6", 1.5, True, None, [200]])
def test_parse_token_count_rejects(value):
    with pytest.raises(ConfigError) as info:
        parse_token_count(value)
    assert repr(value) in str(info.value)


def test_model_table_holds_the_seed_models():
    table = load_models()
    expected = {
        "claude-sonnet-4-5": 200_000, "claude-haiku-4-5": 200_000, "claude-opus-4-5": 200_000,
        "gemini-3-pro": 1_000_000, "gemini-3-flash": 1_000_000, "gpt-5.3": 256_000, "gpt-5.1": 128_000,
        "kimi-k2.5": 256_000, "kimi-k2": 128_000, "claude-opus-4-6": 200_000,
        "local_14b": 3500, "cloud_grok": 8000, "gpt4": 6000,
        "gpt-4": 8192, "gpt-4-32k": 32768, "gpt-4-turbo": 128_000, "claude": 200_000,
    }
    assert set(table.names()) == set(expected)
    assert {name: model_limit(name) for name in table.names()} == expected
    assert table.default_limit == 128_000
    assert (table.tiers.warning, table.tiers.critical, table.tiers.exceeded) == (0.75, 0.90, 0.95)
    assert load_models() is table  # cached
    assert load_models(DEFAULT_MODELS_PATH) == table


def test_model_per_llm_types_agree_with_context_config():
    assert all(model_limit(llm.type) == llm.limit for llm in ContextConfig().per_llm)


def test_model_lookup_case_and_dated_ids():
    assert model_limit("Claude-Sonnet-4-5") == 200_000
    assert model_limit("claude-haiku-4-5-20251001") == 200_000
    assert model_limit("gpt-4-32k-0613") == 32768
    assert model_limit("gpt-4-turbo-preview") == 128_000
    assert model_limit("kimi-k2-0905") == 128_000


def test_unknown_model_falls_back_with_one_info_line(caplog):
    with caplog.at_level(logging.INFO, logger="ctxsim.config"):
        assert model_limit("gpt-4o") == parse_token_count("128K") == 128_000
    records = [r for r in caplog.records if r.name == "ctxsim.config"]
    assert len(records) == 1 and records[0].levelno == logging.INFO and "gpt-4o" in records[0].getMessage()


@pytest.mark.parametrize(
    "tokens,limit,tier",
    [(0, 1000, "safe"), (749, 1000, "safe"), (7499, 10_000, "safe"), (750, 1000, "warning"),
     (899, 1000, "warning"), (900, 1000, "critical"), (949, 1000, "critical"), (950, 1000, "exceeded"),
     (1200, 1000, "exceeded"), (149_800, 200_000, "safe"), (150_000, 200_000, "warning"),
     (180_000, 200_000, "critical"), (190_000, 200_000, "exceeded")],
)
def test_usage_tier_boundaries(tokens, limit, tier):
    assert usage_tier(tokens, limit) == tier


def test_usage_tier_rejects_bad_arguments():
    with pytest.raises(ValueError):
        usage_tier(10, 0)
    with pytest.raises(ValueError):
        usage_tier(-1, 100)


def test_custom_model_table(tmp_path):
    path = write(tmp_path, "models:\n  tiny: 4K\ndefault_limit: 32768\ntiers: {warning: 0.5, critical: 0.6, exceeded: 0.7}\n")
    table = load_models(path)
    assert table.limit("tiny") == 4000 and table.limit("other") == 32768
    assert table.tiers.tier(55, 100) == "warning"


@pytest.mark.parametrize(
    "text,key,needle",
    [
        ("models:\n  x: 2Q\n", "models.x", "'2Q'"),
        ("models:\n  x: 0\n", "models.x", "got 0"),
        ("models:\n  Big Model: 1K\n", "models.Big Model", "bad key name"),
        ("models: {}\ndefault_limit: lots\n", "default_limit", "'lots'"),
        ("models: {}\ntiers: {warning: 0.9, critical: 0.8}\n", "tiers.critical", "above warning 0.9"),
        ("models: {}\ntiers: {exceeded: 0.85}\n", "tiers.exceeded", "above critical 0.9"),
        ("models: {}\ntiers: {exceeded: 1.2}\n", "tiers.exceeded", "1.2"),
        ("models: {}\nprovider: x\n", "provider", "unknown key"),
        ("tiers: {}\n", "models", "missing"),
    ],
)
def test_bad_model_table(tmp_path, text, key, needle):
    path = write(tmp_path, text, "models.yaml")
    with pytest.raises(ConfigError) as info:
        load_models(path)
    message = str(info.value)
    assert info.value.key == key and needle in message and str(path) in message and "\n" not in message


def test_yaml_refuses_a_repeated_key_but_keeps_merge_keys(tmp_path):
    from ctxsim.errors import ConfigError
    from ctxsim.validation import load_yaml

    repeated = tmp_path / "repeated.yaml"
    repeated.write_text("limit: 8000\nwarning_threshold: 0.8\nlimit: 4000\n")
    with pytest.raises(ConfigError, match=r"repeated.yaml: invalid YAML at line 3, column 1: key 'limit' appears twice"):
        load_yaml(repeated, ConfigError)
    nested = tmp_path / "nested.yaml"
    nested.write_text("a:\n  b: 1\n  b: 2\n")
    with pytest.raises(ConfigError, match="key 'b' appears twice"):
        load_yaml(nested, ConfigError)
    merged = tmp_path / "merged.yaml"
    merged.write_text("base: &base {k: 1, j: 2}\nchild:\n  <<: *base\n  k: 3\n")
    assert load_yaml(merged, ConfigError) == {"base": {"k": 1, "j": 2}, "child": {"k": 3, "j": 2}}
