"""The embedding model's encoder as an ONNX graph, written in memory for ONNX Runtime.

ONNX Runtime runs all-MiniLM-L6-v2 about six times faster than numpy on a small machine
(``bench/embed_speed.py``), but it reads only ONNX models and the model packages ship
safetensors weights.  This module writes the ONNX model (a protocol-buffers message) from
those weights itself: the handful of message types it needs are encoded by hand, so
neither the ``onnx`` package nor a converted model file is needed.

The graph: inputs ``x`` (token embeddings after the embedding layer norm, float32
``[n, t, 384]``) and ``mask`` (``[n, t]``, 1 for a token, 0 for padding); output ``y``, the
last layer's token vectors.  Pooling stays in numpy (:mod:`gitmem.search.embedding`).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

__all__ = ["encoder_model"]

_FLOAT, _INT64 = 1, 7                  # TensorProto.DataType
_ATTR_FLOAT, _ATTR_INT, _ATTR_INTS = 1, 2, 7   # AttributeProto.AttributeType


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1                 # negative int64: two's complement, ten bytes
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _int(field: int, n: int) -> bytes:
    return _varint(field << 3) + _varint(n)


def _bytes(field: int, data: bytes | str) -> bytes:
    raw = data.encode() if isinstance(data, str) else data
    return _varint(field << 3 | 2) + _varint(len(raw)) + raw


def _float(field: int, x: float) -> bytes:
    return _varint(field << 3 | 5) + struct.pack("<f", x)


def _attribute(name: str, value: Any) -> bytes:
    if isinstance(value, float):
        return _bytes(1, name) + _float(2, value) + _int(20, _ATTR_FLOAT)
    if isinstance(value, int):
        return _bytes(1, name) + _int(3, value) + _int(20, _ATTR_INT)
    return _bytes(1, name) + b"".join(_int(8, v) for v in value) + _int(20, _ATTR_INTS)


def _node(op: str, inputs: Sequence[str], outputs: Sequence[str], **attrs: Any) -> bytes:
    return (b"".join(_bytes(1, i) for i in inputs) + b"".join(_bytes(2, o) for o in outputs)
            + _bytes(4, op) + b"".join(_bytes(5, _attribute(k, v)) for k, v in attrs.items()))


def _tensor(name: str, array: Any) -> bytes:
    import numpy as np
    arr = np.ascontiguousarray(array)
    kind = _INT64 if arr.dtype == np.int64 else _FLOAT
    arr = arr.astype("<i8" if kind == _INT64 else "<f4", copy=False)
    return (b"".join(_int(1, d) for d in arr.shape) + _int(2, kind) + _bytes(8, name)
            + _bytes(9, arr.tobytes()))


def _value_info(name: str, dims: Sequence[int | str]) -> bytes:
    shape = b"".join(_bytes(1, _bytes(2, d) if isinstance(d, str) else _int(1, d)) for d in dims)
    tensor_type = _int(1, _FLOAT) + _bytes(2, shape)
    return _bytes(1, name) + _bytes(2, _bytes(1, tensor_type))


def encoder_model(layers: Sequence[tuple], dim: int, heads: int, eps: float) -> bytes:
    """The serialized ONNX model of a BERT encoder whose layers are given as
    ``(qkv_w, qkv_b, out_w, out_b, (ln1_g, ln1_b), in_w, in_b, out2_w, out2_b,
    (ln2_g, ln2_b))`` with weights already transposed (``x @ w``)."""
    import numpy as np
    nodes: list[bytes] = []
    inits: list[bytes] = []

    def const(name: str, value: Any) -> str:
        inits.append(_tensor(name, value))
        return name

    hd = dim // heads
    const("scale", np.array(1.0 / np.sqrt(hd), dtype=np.float32))
    const("heads", np.array([0, 0, heads, hd], dtype=np.int64))
    const("joined", np.array([0, 0, dim], dtype=np.int64))
    const("half", np.array(0.5, dtype=np.float32))
    const("one", np.array(1.0, dtype=np.float32))
    const("sqrt2", np.array(np.sqrt(2.0), dtype=np.float32))
    const("neg", np.array(-1e9, dtype=np.float32))
    const("axis1", np.array([1], dtype=np.int64))
    # Padding: -1e9 added to the attention scores of padded positions.
    nodes += [_node("Unsqueeze", ["mask", "axis1"], ["m1"]),
              _node("Unsqueeze", ["m1", "axis1"], ["m2"]),
              _node("Sub", ["one", "m2"], ["pad"]), _node("Mul", ["pad", "neg"], ["bias"])]
    x = "x"
    for i, (qkv, qkv_b, ow, ob, ln1, iw, ib, o2w, o2b, ln2) in enumerate(layers):
        p = f"l{i}."
        for j, n in enumerate("qkv"):
            w = const(p + n + ".w", qkv[:, j * dim:(j + 1) * dim])
            b = const(p + n + ".b", qkv_b[j * dim:(j + 1) * dim])
            nodes += [_node("MatMul", [x, w], [p + n + "0"]),
                      _node("Add", [p + n + "0", b], [p + n + "1"]),
                      _node("Reshape", [p + n + "1", "heads"], [p + n + "2"]),
                      _node("Transpose", [p + n + "2"], [p + n],
                            perm=[0, 2, 3, 1] if n == "k" else [0, 2, 1, 3])]
        nodes += [
            _node("MatMul", [p + "q", p + "k"], [p + "s0"]),
            _node("Mul", [p + "s0", "scale"], [p + "s1"]),
            _node("Add", [p + "s1", "bias"], [p + "s2"]),
            _node("Softmax", [p + "s2"], [p + "att"], axis=-1),
            _node("MatMul", [p + "att", p + "v"], [p + "c0"]),
            _node("Transpose", [p + "c0"], [p + "c1"], perm=[0, 2, 1, 3]),
            _node("Reshape", [p + "c1", "joined"], [p + "c2"]),
            _node("MatMul", [p + "c2", const(p + "ow", ow)], [p + "o0"]),
            _node("Add", [p + "o0", const(p + "ob", ob)], [p + "o1"]),
            _node("Add", [p + "o1", x], [p + "o2"]),
            _node("LayerNormalization", [p + "o2", const(p + "ln1g", ln1[0]),
                                         const(p + "ln1b", ln1[1])], [p + "h"], axis=-1, epsilon=eps),
            _node("MatMul", [p + "h", const(p + "iw", iw)], [p + "i0"]),
            _node("Add", [p + "i0", const(p + "ib", ib)], [p + "i1"]),
            # GELU: x * (1 + erf(x / sqrt 2)) / 2
            _node("Div", [p + "i1", "sqrt2"], [p + "g0"]),
            _node("Erf", [p + "g0"], [p + "g1"]),
            _node("Add", [p + "g1", "one"], [p + "g2"]),
            _node("Mul", [p + "i1", p + "g2"], [p + "g3"]),
            _node("Mul", [p + "g3", "half"], [p + "g4"]),
            _node("MatMul", [p + "g4", const(p + "o2w", o2w)], [p + "f0"]),
            _node("Add", [p + "f0", const(p + "o2b", o2b)], [p + "f1"]),
            _node("Add", [p + "f1", p + "h"], [p + "f2"]),
            _node("LayerNormalization", [p + "f2", const(p + "ln2g", ln2[0]),
                                         const(p + "ln2b", ln2[1])], [p + "out"], axis=-1, epsilon=eps)]
        x = p + "out"
    nodes.append(_node("Identity", [x], ["y"]))
    graph = (b"".join(_bytes(1, n) for n in nodes) + _bytes(2, "encoder")
             + b"".join(_bytes(5, t) for t in inits)
             + _bytes(11, _value_info("x", ["n", "t", dim])) + _bytes(11, _value_info("mask", ["n", "t"]))
             + _bytes(12, _value_info("y", ["n", "t", dim])))
    opset = _bytes(1, "") + _int(2, 17)
    return _int(1, 8) + _bytes(8, opset) + _bytes(7, graph)    # ir_version 8, opset 17
