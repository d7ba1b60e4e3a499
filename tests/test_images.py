"""Images in chat messages (ctxsim.images): a user message's ``image_url`` parts are read as
``[image]`` lines of its text and counted at OpenAI's documented price; a break keeps them
only on a message it kept unchanged, and the messages it returns hold no more tokens
than the break counted."""

from __future__ import annotations

import base64

import pytest
from api_forms import (BREAKS, SESSION_TURNS, Recording, StrategyPolicy, anthropic_request, blocks_of, check_api_rules,
                       corpus_session, data_url, image_part, random_chat, shipped)
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxsim import anthropic_messages, openai_responses
from ctxsim.errors import ContextError, TranscriptError
from ctxsim.images import IMAGE_LINE, UNKNOWN_SIZE, anthropic_image_tokens, image_size, tile_tokens
from ctxsim.messages import compact_messages
from ctxsim.model import ContextUnit
from ctxsim.serialize import unit_from_dict, unit_to_dict
from ctxsim.strategies import list_strategies
from ctxsim.tokens import count_tokens
from ctxsim.transcripts import context_from_messages


def tokens(messages: list[dict]) -> int:
    return context_from_messages(messages).total_tokens if messages else 0


def test_the_price_is_openais_documented_rule():
    """The vision guide's examples: 1,024 × 1,024 at high is 4 tiles (765), 2,048 × 4,096
    is scaled to 1,024 × 2,048, then 768 × 1,536: 6 tiles (1,105); low is 85 whatever the size."""
    assert tile_tokens(1024, 1024, "high") == 765
    assert tile_tokens(2048, 4096, "high") == 1105
    assert tile_tokens(4096, 8192, "low") == 85
    assert tile_tokens(768, 768) == 85 + 170 * 4 and tile_tokens(512, 1536) == 85 + 170 * 2 * 5
    assert tile_tokens(100, 100) == tile_tokens(768, 768)  # the shorter side is 768 either way


@pytest.mark.parametrize(("fmt", "save"), [("PNG", {}), ("GIF", {}), ("JPEG", {}), ("WEBP", {}),
                                           ("WEBP", {"lossless": True}), ("WEBP", {"alpha": True, "exif": b"Exif\x00\x00"})])
@pytest.mark.parametrize("size", [(1, 1), (300, 200), (1366, 768), (5000, 120)])
def test_the_size_is_read_from_a_data_urls_header(fmt, save, size):
    assert image_size(data_url(size, fmt, **save)) == size


def test_an_image_whose_size_is_not_in_its_url_is_priced_at_the_unknown_size():
    for url in ("https://example.com/screenshot.png", "data:image/png,rawbytes", "data:image/png;base64,!!!!",
                "data:image/png;base64," + base64.b64encode(b"not an image at all").decode()):
        assert image_size(url) is None
    message = {"role": "user", "content": [image_part("https://example.com/a.png")]}
    unit = context_from_messages([message]).units[0]
    assert unit.attachment_tokens == tile_tokens(*UNKNOWN_SIZE) == 765


def test_a_user_messages_images_are_lines_of_its_text_and_count_on_top_of_it():
    big, small = data_url((2048, 4096)), data_url((640, 480), "JPEG")
    sent = [{"role": "system", "content": "You are a browsing agent."},
            {"role": "user", "content": [{"type": "text", "text": "What is on this page?"}, image_part(big),
                                         {"type": "text", "text": "And this one?"}, image_part(small, "low")]}]
    state = context_from_messages(sent)
    unit = state.units[1]
    assert unit.content == f"What is on this page?\n{IMAGE_LINE}\nAnd this one?\n{IMAGE_LINE}"
    assert unit.attachment_tokens == 1105 + 85
    assert unit.token_count == count_tokens(unit.content) + 1105 + 85
    assert state.total_tokens - tokens([sent[0], {"role": "user", "content": unit.content}]) == 1105 + 85
    assert unit.priority == 1  # the task message, as a text one would be


@pytest.mark.parametrize(("message", "needle"), [
    ({"role": "assistant", "content": [image_part("https://example.com/a.png")]},
     "message 1: content part 0 is type 'image_url'; only text parts are read (an image is read in a user message)"),
    ({"role": "user", "content": [{"type": "text", "text": "see"}, {"type": "image_url", "image_url": "https://x/a.png"}]},
     "message 1: content part 1: 'image_url' must be an object with a 'url' string, got 'https://x/a.png'"),
    ({"role": "user", "content": [image_part("https://x/a.png", "medium")]},
     "message 1: content part 0: 'image_url.detail' must be one of ['auto', 'low', 'high'], got 'medium'"),
    ({"role": "user", "content": [image_part("https://x/a.png"), {"type": "input_audio", "input_audio": {}}]},
     "message 1: content part 1 is type 'input_audio'; a user message's text and image_url parts are read"),
])
def test_a_bad_image_part_is_refused_naming_the_message_and_part(message, needle):
    with pytest.raises(TranscriptError) as info:
        context_from_messages([message], name="chat.json")
    assert needle in str(info.value) and "chat.json" in str(info.value)


def screenshots(repo_root) -> list[dict]:
    """The shipped session with a screenshot in the task message and one in a user
    message added late (after a tool result, before the assistant's next turn)."""
    sent = corpus_session(repo_root)
    task = next(i for i, m in enumerate(sent) if m["role"] == "user")
    sent[task] = {**sent[task], "content": [{"type": "text", "text": sent[task]["content"]}, image_part(data_url((1920, 1080)))]}
    late = max(i for i in range(1, len(sent)) if sent[i - 1]["role"] == "tool" and sent[i]["role"] == "assistant")
    sent.insert(late, {"role": "user", "content": [{"type": "text", "text": "The page now looks like this:"},
                                                   image_part(data_url((1280, 800), "JPEG"), "high")]})
    return sent


@pytest.mark.parametrize("strategy", [s for s in list_strategies() if s != "error"])
def test_images_come_back_only_on_messages_kept_unchanged_and_the_count_holds(repo_root, strategy):
    """Every strategy, to half of the session's tokens: the messages returned count no
    more than the broken context, images included, and a message that holds an image is
    one of those sent, unchanged."""
    sent = screenshots(repo_root)
    policy = Recording(strategy)
    out = compact_messages(policy, sent, tokens(sent) // 2, artifacts={})
    assert tokens(out) <= policy.final.total_tokens
    for message in out:
        if isinstance(message.get("content"), list):
            assert message in sent


def test_a_message_the_break_rewrites_loses_its_image_and_says_where_it_was(repo_root):
    """``truncate`` to a limit the task and its screenshot do not fit in: the task is cut,
    as text, and its image is gone from the messages and from their count."""
    sent = [{"role": "system", "content": "You are a browsing agent."},
            {"role": "user", "content": [image_part(data_url((2048, 2048))),
                                         {"type": "text", "text": "Find the price. " + "Details follow. " * 400}]}]
    limit = tokens(sent) - 1000
    out = compact_messages(StrategyPolicy("truncate"), sent, limit)
    assert out[0] == sent[0] and isinstance(out[1]["content"], str) and out[1]["content"].startswith(IMAGE_LINE)
    assert tokens(out) <= limit
    assert context_from_messages(out).units[1].attachment_tokens == 0


def test_a_units_attachments_go_with_new_content_and_count_in_its_fingerprint():
    unit = ContextUnit("u1", "message", "look [image]", attachment_tokens=765)
    assert unit.token_count == count_tokens("look [image]") + 765
    rewritten = unit.with_content("look")
    assert rewritten.attachment_tokens == 0 and rewritten.token_count == count_tokens("look")
    assert unit.with_content("look", attachment_tokens=85).token_count == count_tokens("look") + 85
    plain = ContextUnit("u1", "message", "look [image]")
    assert plain.fingerprint != unit.fingerprint
    assert unit_from_dict(unit_to_dict(unit)) == unit
    assert "attachment_tokens" not in unit_to_dict(plain)  # the form of a unit without attachments is unchanged
    for bad in (-1, 1.5, True, "85"):
        with pytest.raises(ContextError, match="attachment_tokens must be an integer >= 0"):
            ContextUnit("u1", "message", "look", attachment_tokens=bad)


def test_a_langchain_agents_images_go_the_same_way():
    """langchain-core's own conversion gives the chat form: a human message whose text the
    break cut loses its image, one kept comes back as it came (its image block as given)."""
    messages_module = pytest.importorskip("langchain_core.messages")
    from ctxsim.langchain_messages import compact_langchain_messages

    url = data_url((1024, 1024))
    sent = [messages_module.SystemMessage("You are a browsing agent."),
            messages_module.HumanMessage([{"type": "text", "text": "Find the price. " + "Details follow. " * 400},
                                          image_part(url)]),
            messages_module.AIMessage("The first page shows no price."),
            messages_module.HumanMessage([{"type": "text", "text": "And this one?"},
                                          {"type": "image", "source_type": "base64", "mime_type": "image/png",
                                           "data": url.split(",", 1)[1]}]),
            messages_module.AIMessage("It costs 12 euros.")]
    out = compact_langchain_messages(StrategyPolicy("truncate"), sent, 1500)
    assert [type(m).__name__ for m in out] == [type(m).__name__ for m in sent]
    assert isinstance(out[1].content, str) and out[1].content.startswith("Find the price.") and out[1].id == sent[1].id
    assert out[3] == sent[3] and out[3].content[1]["type"] == "image"


def test_a_responses_inputs_images_go_the_same_way():
    """The Responses API's ``input_image`` parts (a URL or a ``file_id``) are the chat
    form's images: counted alike, kept on an item the break keeps unchanged, gone from
    one it cuts."""
    url = data_url((1024, 1024))
    task = {"role": "user", "content": [{"type": "input_text", "text": "Find the price. " + "Details follow. " * 400},
                                        {"type": "input_image", "image_url": url, "detail": "high"}]}
    later = {"role": "user", "content": [{"type": "input_text", "text": "And this one?"},
                                         {"type": "input_image", "file_id": "file-123", "detail": "low"}]}
    items = [task, {"role": "assistant", "content": "The first page shows no price."}, later,
             {"role": "assistant", "content": "It costs 12 euros."}]
    chat = openai_responses.to_chat(items, "You are a browsing agent.").messages
    units = context_from_messages(chat).units
    assert [u.attachment_tokens for u in units] == [0, 765, 0, 85, 0]
    out = openai_responses.compact_response_items(StrategyPolicy("truncate"), items, 1500, instructions="You are a browsing agent.")
    assert out["instructions"] == "You are a browsing agent." and out["input"][2:] == items[2:]
    assert out["input"][0]["content"].startswith("Find the price.") and "image" not in str(out["input"][0]).replace(IMAGE_LINE, "")
    assert tokens(openai_responses.to_chat(out["input"], out["instructions"]).messages) <= 1500


def test_anthropics_price_is_its_documented_rule():
    """The vision guide's table: 200 × 200 about 54 tokens, 1,000 × 1,000 about 1,334,
    1,092 × 1,092 about 1,590; a larger image is scaled within 1,568 pixels and ~1,600
    tokens; one whose size is not known costs the most."""
    assert [anthropic_image_tokens(*size) for size in ((200, 200), (1000, 1000), (1092, 1092))] == [54, 1334, 1590]
    assert anthropic_image_tokens(4000, 3000) == anthropic_image_tokens() == 1600
    assert anthropic_image_tokens(3136, 200) == anthropic_image_tokens(1568, 100) == 210


def computer_use_request(repo_root) -> tuple[str, list[dict]]:
    """The shipped session as a Messages API request with a screenshot in the task's turn
    and one in an early tool result (a computer-use agent's ``screenshot`` action)."""
    system, turns = anthropic_request(shipped(repo_root))
    png = data_url((1280, 800)).split(",", 1)[1]
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}}
    turns[0] = {**turns[0], "content": [*turns[0]["content"], image]}
    k, i = next((k, i) for k, t in enumerate(turns) for i, b in enumerate(blocks_of(t)) if b["type"] == "tool_result")
    result = turns[k]["content"][i]
    turns[k]["content"][i] = {**result, "content": [{"type": "text", "text": result["content"]}, image]}
    return system, turns


def test_an_anthropic_requests_images_are_read_and_counted(repo_root):
    system, turns = computer_use_request(repo_root)
    chat = anthropic_messages.to_chat(turns, system).messages
    units = context_from_messages(chat).units
    with_images = [u for u in units if u.attachment_tokens]
    assert [u.role for u in with_images] == ["user", "tool"]
    assert all(u.attachment_tokens == anthropic_image_tokens(1280, 800) == 1366 for u in with_images)
    assert all(u.content.endswith(IMAGE_LINE) for u in with_images)


@pytest.mark.parametrize("strategy", [s for s in list_strategies() if s != "error"])
def test_an_anthropic_request_keeps_images_only_where_the_break_kept_them(repo_root, strategy):
    """Every strategy: the request the API takes, no more tokens than the chat form of the
    same break, and every image in it is in a block of the request as given."""
    system, turns = computer_use_request(repo_root)
    given = [b for t in turns for b in blocks_of(t)]
    chat = compact_messages(StrategyPolicy(strategy), anthropic_messages.to_chat(turns, system).messages, 3000, artifacts={})
    out = anthropic_messages.compact_anthropic_messages(StrategyPolicy(strategy), turns, 3000, system=system, artifacts={})
    check_api_rules(out["messages"])
    assert context_from_messages(anthropic_messages.to_chat(out["messages"], out.get("system")).messages).total_tokens \
        <= context_from_messages(chat).total_tokens
    for block in (b for t in out["messages"] for b in blocks_of(t)):
        if block["type"] == "image" or (block["type"] == "tool_result" and isinstance(block.get("content"), list)):
            assert block in given


#: screenshots for drawn sessions: (base64 PNG, its Anthropic price)
SCREENSHOTS = [(data_url(size).split(",", 1)[1], anthropic_image_tokens(*size)) for size in ((1280, 800), (390, 844), (64, 64))]


@given(SESSION_TURNS, st.sampled_from(BREAKS), st.floats(0.1, 0.9), st.lists(st.integers(0, 3), min_size=1, max_size=40))
@settings(max_examples=60, deadline=None)
def test_any_session_with_screenshots_broken_any_way_keeps_the_rules_and_the_count(turns, strategy, share, shots):
    """Drawn sessions as Messages API requests, a drawn screenshot (or none: 3) in each
    tool result and user text in turn, broken by a drawn strategy to a drawn share of
    their tokens: the request keeps the API's rules, no more tokens than the chat form's
    break, and every image in it is in a block of the request as given."""
    system, request = anthropic_request(random_chat(turns))
    k = 0
    for turn in request:
        for i, block in enumerate(turn["content"] if turn["role"] == "user" else ()):
            pick, k = shots[k % len(shots)], k + 1
            if pick == len(SCREENSHOTS):
                continue
            image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": SCREENSHOTS[pick][0]}}
            if block["type"] == "tool_result":
                turn["content"][i] = {**block, "content": [{"type": "text", "text": block["content"]}, image]}
            else:
                turn["content"].insert(i + 1, image)
                break  # one per turn's text
    form = anthropic_messages.to_chat(request, system)
    limit = max(50, int(context_from_messages(form.messages).total_tokens * share))
    if context_from_messages(form.messages[:1]).total_tokens > limit:  # the system prompt alone
        return
    chat = compact_messages(StrategyPolicy(strategy), form.messages, limit, artifacts={})
    out = anthropic_messages.compact_anthropic_messages(StrategyPolicy(strategy), request, limit, system=system, artifacts={})
    if not out["messages"]:
        return
    check_api_rules(out["messages"])
    assert context_from_messages(anthropic_messages.to_chat(out["messages"], system).messages).total_tokens \
        <= context_from_messages(chat).total_tokens
    given_blocks = [b for t in request for b in blocks_of(t)]
    for block in (b for t in out["messages"] for b in blocks_of(t)):
        if block["type"] == "image" or (block["type"] == "tool_result" and isinstance(block.get("content"), list)):
            assert block in given_blocks
