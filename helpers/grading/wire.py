"""What travels between the grader and a graded kernel: plain data, never code.

A message is one safetensors file: the tensors, and under its metadata key
"json" a tree of plain values (None, bools, numbers, strings, lists) in which
a tensor is {"tensor": key, ...} and any other object a tagged dict. Nothing
is unpickled and nothing is evaluated: the reader checks the size before it
parses, and every field's type before it uses it. Both sides use this module;
the grader trusts none of what a kernel sends, beyond it being data.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import torch

MAX_MESSAGE = 512 * 2**20  # bytes: a reply larger than this is refused unread (MiniLM's tables are 47 MB)
MAX_HEADER = 16 * 2**20  # bytes of safetensors header (names, shapes, the JSON tree)
MAX_TEXT = 4000  # characters of any string a kernel sends (messages, names)
MAX_ITEMS = 10_000  # entries of any list or dict a kernel sends
DTYPES = {
    str(dtype).removeprefix("torch."): dtype
    for dtype in (
        torch.float64,
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
        torch.bool,
    )
}
COMPLEX = {torch.complex64: torch.float32, torch.complex128: torch.float64}


class ProtocolError(Exception):
    """A message that is not what the protocol allows: too big, malformed, the wrong types."""


class KernelGone(BaseException):
    """The kernel died, or hung past an interrupt, while the grader waited for its reply."""


def pack(tree: Any, tensors: dict[str, torch.Tensor]) -> bytes:
    from safetensors.torch import save

    return save(tensors, metadata={"json": json.dumps(tree)})


def unpack(data: bytes) -> tuple[Any, dict[str, torch.Tensor]]:
    """(tree, tensors) of a message; ProtocolError for anything else."""
    from safetensors.torch import load

    if not isinstance(data, bytes) or len(data) > MAX_MESSAGE or len(data) < 8:
        raise ProtocolError(f"a message of {len(data) if isinstance(data, bytes) else '?'} bytes")
    (size,) = struct.unpack("<Q", data[:8])
    if size > min(MAX_HEADER, len(data) - 8):
        raise ProtocolError("a message header larger than allowed")
    try:
        header = json.loads(data[8 : 8 + size])
        tree = json.loads(header["__metadata__"]["json"])
        tensors = load(data)
    except Exception as error:
        raise ProtocolError(f"a malformed message ({type(error).__name__})") from None
    return tree, tensors


# ---- checking what was sent ------------------------------------------------


def text(value: Any, limit: int = MAX_TEXT) -> str:
    if not isinstance(value, str):
        raise ProtocolError(f"expected a string, got {type(value).__name__}")
    return value[:limit]


def items(value: Any, kind: type = list) -> Any:
    if not isinstance(value, kind) or len(value) > MAX_ITEMS:
        raise ProtocolError(f"expected a {kind.__name__} of at most {MAX_ITEMS} entries")
    return value


def number(value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProtocolError(f"expected a number, got {type(value).__name__}")
    return value


def flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ProtocolError(f"expected true or false, got {type(value).__name__}")
    return value


def shape(value: Any) -> list[int]:
    dims = items(value)
    if len(dims) > 16 or any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in dims):
        raise ProtocolError("a malformed shape")
    return dims


def dtype(value: Any) -> torch.dtype:
    if value not in DTYPES:
        raise ProtocolError(f"a tensor of dtype {str(value)[:40]!r}")
    return DTYPES[value]


def device(value: Any, allowed: set[str]) -> torch.device:
    """A device the grader itself uses (the CPU, meta, its GPU): nothing else is accepted."""
    name = text(value, 40)
    try:
        place = torch.device(name)
    except RuntimeError:
        raise ProtocolError(f"a tensor on device {name!r}") from None
    if place.type not in allowed:
        raise ProtocolError(f"a tensor on device {name!r}")
    return place


# ---- tensors ---------------------------------------------------------------


def tensor_entry(
    tensor: torch.Tensor, key: str, tensors: dict[str, torch.Tensor], token: str | None = None, data: bool = True
) -> dict[str, Any]:
    """Describe `tensor` and, unless it is on the meta device or `data` is False, add its values
    to `tensors` under `key`. Complex values travel as pairs of reals, sparse ones dense."""
    values = tensor.detach()
    entry = {
        "tensor": key,
        "dtype": str(values.dtype).removeprefix("torch."),
        "shape": list(values.shape),
        "device": str(values.device),
        "rg": bool(tensor.requires_grad),
    }
    entry.update(param=isinstance(tensor, torch.nn.Parameter), token=token)
    if values.dtype in COMPLEX:
        entry.update(dtype=str(COMPLEX[values.dtype]).removeprefix("torch."), complex=True)
        values = torch.view_as_real(values.resolve_conj()) if not values.is_meta else values
    if values.layout == torch.strided and not values.is_contiguous() and values.dim() > 1 and _distinct(values):
        entry["stride"] = list(values.stride())  # a transpose or a slice: the receiver lays it out the same way
    if data and not values.is_meta:
        if values.layout != torch.strided:
            values = values.to_dense()
        tensors[key] = values.to("cpu").contiguous().clone()
    return entry


def digest(tensor: torch.Tensor, smallest: int = 2**20) -> bytes | None:
    """A fingerprint of a large tensor's values (dtype, shape, bytes); None below `smallest` bytes."""
    import hashlib

    if tensor.is_meta or tensor.layout != torch.strided or tensor.numel() * tensor.element_size() < smallest:
        return None
    values = tensor.detach().to("cpu").contiguous()
    data = values.view(torch.uint8) if values.dim() else values.reshape(1).view(torch.uint8)
    # sha256 reads the tensor's own buffer, no copy: about 3x faster than blake2b of a copy (CPU hashing support)
    fingerprint = hashlib.sha256(f"{values.dtype}{tuple(values.shape)}".encode())
    fingerprint.update(data.numpy())
    return fingerprint.digest()[:16]


def tensor_from(entry: dict[str, Any], tensors: dict[str, torch.Tensor], devices: set[str]) -> torch.Tensor | None:
    """The tensor an entry describes, on its device; None when its values were not sent."""
    kind, dims, place = dtype(entry.get("dtype")), shape(entry.get("shape")), device(entry.get("device"), devices)
    is_complex = flag(entry.get("complex", False))
    if place.type == "meta":
        made = torch.empty(dims, dtype=kind, device="meta")
        return torch.view_as_complex(torch.empty([*dims, 2], dtype=kind, device="meta")) if is_complex else made
    key = text(entry.get("tensor"), 40)
    if key not in tensors:
        return None
    values = tensors[key]
    if values.dtype != kind or list(values.shape) != ([*dims, 2] if is_complex else dims):
        raise ProtocolError("a tensor whose values do not match its description")
    if is_complex:
        values = torch.view_as_complex(values)
    if "stride" in entry and not is_complex:
        values = laid_out(values, shape(entry["stride"]))
    return values.to(place)


def _distinct(tensor: torch.Tensor) -> bool:
    """No two elements share memory (an expand() does: its copy is made contiguous instead)."""
    sized = [(n, s) for n, s in zip(tensor.shape, tensor.stride()) if n > 1]
    return all(s > 0 for _, s in sized) and 1 + sum((n - 1) * s for n, s in sized) >= tensor.numel()


def laid_out(values: torch.Tensor, strides: list[int]) -> torch.Tensor:
    """`values` with the given strides (as the sender had them: views fail or copy alike)."""
    if len(strides) != values.dim():
        raise ProtocolError("strides that do not match the shape")
    span = 1 + sum((n - 1) * s for n, s in zip(values.shape, strides) if n > 0)
    if (
        span > 4 * max(values.numel(), 1)
        or span < values.numel()
        or any(s <= 0 for n, s in zip(values.shape, strides) if n > 1)
    ):
        raise ProtocolError("strides that would overlap, or take far more memory than the values")
    return torch.empty_strided(values.shape, strides, dtype=values.dtype).copy_(values)
