"""The protocol between the grader and a graded kernel, declared once: plain data, never code.

A message is one safetensors file: the tensors, and under its metadata key "json" a tree of plain
values (None, bools, numbers, strings, lists) in which a tensor is {"tensor": key, ...} and any
other object a tagged dict. Nothing is unpickled and nothing is evaluated. Both sides use this
module: the requests and replies are the records below, a value is written by `encode` and read by
`decode`, and the limits are the constants here. The grader trusts none of what a kernel sends:
`parse_reply` checks a whole reply's fields once, and a `Decoder` materialises its tensors within a
byte budget, each value at most once, in time linear in the reply.
"""

from __future__ import annotations

import json
import keyword
import math
import re
import struct
import time
from collections import namedtuple
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch

from helpers.calls import OK, Ending, Outcome, Settings

MAX_MESSAGE = 512 * 2**20  # bytes: a reply larger than this is refused unread (MiniLM's tables are 47 MB)
MAX_HEADER = 16 * 2**20  # bytes of safetensors header (names, shapes, the JSON tree)
MAX_TEXT = 4000  # characters of any string a kernel sends (messages, names)
MAX_ITEMS = 10_000  # entries of any list or dict a kernel sends
MAX_NODES = 200_000  # values of all kinds in one reply
MAX_DEPTH = 8  # nesting of a value or a module tree
MAX_DIMS = 16  # of a tensor's shape
MAX_SEEN = 500  # torch function names one reply reports
MAX_NUMEL = 2**40  # elements of a tensor's shape, and of any one size or stride
# Bytes of tensors the grader materialises while decoding (beyond the message itself, whose size is
# capped): a clone named by `same_as`, a tensor laid out with the sender's strides, one moved to a device.
REPLY_BUDGET = 2 * MAX_MESSAGE  # per reply
CHECK_BUDGET = 4 * MAX_MESSAGE  # per exercise's check, all its replies together
# The methods of a student's module the grader may call: stand_in.Mirror forwards these, serve calls no other.
METHODS = (
    "__call__", "train", "eval", "to", "cpu", "cuda", "float", "double", "half", "bfloat16",
    "load_state_dict", "state_dict", "requires_grad_",
)  # fmt: skip
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
    """A message that is not what the protocol allows: too big, malformed, the wrong types, over budget."""


class KernelGone(BaseException):
    """The kernel died, or hung past an interrupt, while the grader waited for its reply."""


def identifier(name: Any, default: str = "submission") -> str:
    """A name from the kernel, as a Python identifier (it names local classes and parameters)."""
    name = re.sub(r"\W", "_", str(name))[:80]
    return name if name.isidentifier() and not keyword.iskeyword(name) else default


class Opaque:
    """Any other object of the notebook, in the grader: only its type's name travels."""


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


# ---- the fields of a message, checked before use ---------------------------------------------------


def text(value: Any, limit: int = MAX_TEXT) -> str:
    if not isinstance(value, str):
        raise ProtocolError(f"expected a string, got {type(value).__name__}")
    return value[:limit]


def items(value: Any, kind: type = list) -> Any:
    if not isinstance(value, kind) or len(value) > MAX_ITEMS:  # type: ignore[arg-type]  # a list or a dict
        raise ProtocolError(f"expected a {kind.__name__} of at most {MAX_ITEMS} entries")
    return value


def number(value: Any) -> int | float:
    """A finite number (JSON's Infinity and NaN are numbers to Python's json, not to the grader)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ProtocolError(f"expected a finite number, got {str(value)[:40]}")
    return value


def index(value: Any) -> int:
    """A count or an id the kernel gives (a graph's): an integer from 0 to 2**31."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**31:
        raise ProtocolError(f"expected an id, got {str(value)[:40]}")
    return value


def flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ProtocolError(f"expected true or false, got {type(value).__name__}")
    return value


def shape(value: Any) -> list[int]:
    """A shape (or strides) torch can hold: at most MAX_DIMS sizes, each of them and their product at most
    MAX_NUMEL (a meta tensor of 2**62 x 2**62 would overflow inside torch, past what it checks)."""
    dims = items(value)
    if len(dims) > MAX_DIMS or any(
        isinstance(d, bool) or not isinstance(d, int) or not 0 <= d <= MAX_NUMEL for d in dims
    ):
        raise ProtocolError("a malformed shape")
    if _numel(dims) > MAX_NUMEL and 0 not in dims:
        raise ProtocolError("a shape of more elements than any tensor the grader holds")
    return dims


def dtype(value: Any) -> torch.dtype:
    if not isinstance(value, str) or value not in DTYPES:
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


def record(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ProtocolError("expected a record")
    return value


# ---- records: requests ------------------------------------------------------------------------------


@dataclass
class Describe:
    """What the notebook holds under `name`."""

    name: str
    op: str = "describe"


@dataclass
class Release:
    """Forget the last check's objects."""

    op: str = "release"


@dataclass
class Call:
    """Call `target` ({"name": ...} of the notebook, or {"token": ...} of an object made before), or one of
    its METHODS, with encoded arguments; `sync` holds the values the grader wrote into tensors it holds."""

    target: dict[str, str]
    method: str
    args: list[Any]
    kwargs: dict[str, Any]
    settings: Settings
    sync: list[dict[str, Any]] = field(default_factory=list)
    op: str = "call"


@dataclass
class Backward:
    """Gradients of the `leaves` (tokens) through the outputs of call `graph`, given the outputs' `grads`."""

    graph: int
    grads: list[dict[str, Any] | None]
    leaves: list[str]
    settings: Settings
    sync: list[dict[str, Any]] = field(default_factory=list)
    op: str = "backward"


Request = Describe | Release | Call | Backward


def request_tree(request: Request) -> dict[str, Any]:
    return asdict(request)


def parse_request(tree: Any) -> Request:
    """In the kernel: the grader's request (the grader is trusted; this only types it)."""
    tree = record(tree)
    kinds: dict[str, type] = {"describe": Describe, "release": Release, "call": Call, "backward": Backward}
    kind = kinds.get(tree.get("op", ""))
    if kind is None:
        raise ProtocolError(f"no operation {str(tree.get('op'))[:40]!r}")
    fields = {k: v for k, v in tree.items() if k != "op"}
    if "settings" in fields:
        fields["settings"] = Settings(**fields["settings"])
    return kind(**fields)


# ---- records: replies -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModuleRecord:
    """One module, whichever way it travels: a module of the notebook the kernel reports (State.modules),
    or one of torch.nn's the grader sends as an argument (a value tree's {"nn": tree}). Tensors are
    tensor entries and attributes value trees, both read by a Decoder; the names are checked here."""

    token: str
    class_name: str  # an identifier
    training: bool
    attrs: dict[str, Any]  # its plain Python attributes, as value trees
    params: dict[str, dict[str, Any] | None]
    buffers: dict[str, dict[str, Any] | None]
    children: dict[str, ModuleRecord | str | None]  # str: the token of a module the receiver holds (the grader's)
    plain: dict[str, Any] = field(default_factory=dict)  # tensors it holds as plain attributes (the kernel's)
    persistent: tuple[Any, ...] = ()  # the buffers its state_dict holds

    def tree(self) -> dict[str, Any]:
        def child(value: ModuleRecord | str | None) -> Any:
            return value.tree() if isinstance(value, ModuleRecord) else None if value is None else {"module": value}

        return {
            "token": self.token,
            "class": self.class_name,
            "training": self.training,
            "attrs": self.attrs,
            "plain": self.plain,
            "params": self.params,
            "buffers": self.buffers,
            "persistent": list(self.persistent),
            "children": {name: child(c) for name, c in self.children.items()},
        }


def module_record(tree: Any, depth: int = 0, held: bool = False) -> ModuleRecord:
    """A module's tree as its record, every field checked (ProtocolError otherwise); with `held`, a child may
    be {"module": token}, one the receiver holds (what the grader sends)."""
    tree = record(tree)
    if depth > MAX_DEPTH:
        raise ProtocolError("a module tree nested too deeply")

    def tensors(entries: Any) -> dict[str, dict[str, Any] | None]:
        return {text(n, 200): None if e is None else record(e) for n, e in items(entries, dict).items()}

    def child(value: Any) -> ModuleRecord | str | None:
        if value is None:
            return None
        if held and "module" in record(value):
            return text(value["module"], 40)
        return module_record(value, depth + 1, held)

    return ModuleRecord(
        token=text(tree.get("token"), 40),
        class_name=identifier(tree.get("class"), "Module"),
        training=flag(tree.get("training")),
        attrs=items(tree.get("attrs", {}), dict),
        params=tensors(tree.get("params", {})),
        buffers=tensors(tree.get("buffers", {})),
        children={text(n, 200): child(c) for n, c in items(tree.get("children", {}), dict).items()},
        plain=items(tree.get("plain", {}), dict),
        persistent=tuple(items(tree.get("persistent", []))),
    )


@dataclass(frozen=True)
class State:
    """The modules the grader holds (token -> record) and the tensors whose values changed."""

    modules: dict[str, ModuleRecord] = field(default_factory=dict)
    tensors: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Reply:
    """A kernel's reply, its fields checked; value trees are read by a Decoder."""

    outcome: Outcome = OK
    seen: tuple[str, ...] = ()  # torch functions the student's code called
    changed: tuple[str, ...] = ()  # torch settings it changed
    value: Any = None  # a value tree: a call's result, or a module `describe` found
    graph: int | None = None  # the outputs kept for a backward
    grads: tuple[Any, ...] | None = None  # a backward's tensor entries, one per leaf (or None)
    state: State | None = None
    # describe's answer
    found: str = ""  # missing | none | module | class | function | object
    type_name: str = ""
    name: str = ""
    params: tuple[str, ...] = ()
    module_class: bool = False


FOUND = ("missing", "none", "module", "class", "function", "object")


def parse_reply(tree: Any) -> Reply:
    """A kernel's whole reply, every field checked once (ProtocolError otherwise)."""
    tree = record(tree)
    outcome = record(tree.get("outcome", {"kind": "ok"}))
    try:
        ending = Ending(outcome.get("kind"))
    except ValueError:
        raise ProtocolError("a reply without a known outcome") from None
    stub = outcome.get("stub")
    state = tree.get("state")
    if state is not None:
        state = record(state)
        modules, tensors = items(state.get("modules", {}), dict), items(state.get("tensors", {}), dict)
    graph = tree.get("graph")
    grads = tree.get("grads")
    found = tree.get("kind", "")
    if found and found not in FOUND:
        raise ProtocolError("a description of an unknown kind")
    reply = Reply(
        outcome=Outcome(
            ending,
            text(outcome.get("line", ""), 2000),
            text(outcome.get("name", ""), 200),
            None if stub is None else text(stub, 200),
            flag(outcome.get("oom", False)),
        ),
        seen=tuple(text(name, 200) for name in items(tree.get("seen", []))[:MAX_SEEN]),
        changed=tuple(text(line, 300) for line in items(tree.get("changed", []))),
        value=tree.get("value"),
        graph=None if graph is None else index(graph),
        grads=None if grads is None else tuple(items(grads)),
        found=found,
        type_name=text(tree.get("type", ""), 200),
        name=text(tree.get("name", ""), 200),
        params=tuple(text(p, 200) for p in items(tree.get("params", []))),
        module_class=flag(tree.get("module_class", False)),
    )
    if state is None:
        return reply
    # the module trees last: what the grader checked before them, it still checks first
    return replace(reply, state=State({token: module_record(m) for token, m in modules.items()}, tensors))


def reply_tree(reply: Reply) -> dict[str, Any]:
    """In the kernel: the tree of a reply (the inverse of parse_reply)."""
    tree: dict[str, Any] = {"outcome": reply.outcome.tree(), "seen": list(reply.seen), "changed": list(reply.changed)}
    if reply.value is not None:
        tree["value"] = reply.value
    if reply.graph is not None:
        tree["graph"] = reply.graph
    if reply.grads is not None:
        tree["grads"] = list(reply.grads)
    if reply.state is not None:
        modules = {token: module.tree() for token, module in reply.state.modules.items()}
        tree["state"] = {"modules": modules, "tensors": reply.state.tensors}
    if reply.found:
        tree.update(
            kind=reply.found,
            type=reply.type_name,
            name=reply.name,
            params=list(reply.params),
            module_class=reply.module_class,
        )
    return tree


# ---- values: one encoder, one decoder -------------------------------------------------------------


def encode(
    value: Any,
    tensor: Callable[[torch.Tensor], Any],
    module: Callable[[torch.nn.Module, int], Any],
    other: Callable[[Any], Any],
    depth: int = 0,
) -> Any:
    """A value as a tree. `tensor`, `module` and `other` write what each side sends of those."""
    if depth > MAX_DEPTH:
        return other(value)
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, str):
        return value[:MAX_TEXT]
    if isinstance(value, float):
        return {"float": repr(float(value))}  # numpy's float64 is a float, with a repr of its own
    if isinstance(value, torch.Tensor):
        return tensor(value)
    if isinstance(value, torch.nn.Module):
        return module(value, depth)
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if isinstance(value, torch.Size):
        return {"size": list(value)}

    def inner(v: Any) -> Any:
        return encode(v, tensor, module, other, depth + 1)

    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return {"named": type(value).__name__, "fields": list(value._fields), "values": [inner(v) for v in value]}
    if isinstance(value, (tuple, list)):
        kind = "tuple" if isinstance(value, tuple) else "list"
        return {kind: [inner(v) for v in value[:MAX_ITEMS]]}
    if isinstance(value, dict):
        return {"dict": [[inner(k), inner(v)] for k, v in list(value.items())[:MAX_ITEMS]]}
    return other(value)


@dataclass
class Budget:
    """Bytes the grader may still materialise, and the time by which it must be done."""

    bytes: int
    deadline: float = float("inf")

    def spend(self, count: int, what: str) -> None:
        if count > self.bytes:
            raise ProtocolError(f"{what} would take more memory than the grader allows a reply")
        self.bytes -= count
        if time.monotonic() > self.deadline:
            raise ProtocolError("decoding the reply ran past the check's time limit")


class Decoder:
    """Reads the values of one message: each tensor key at most once, `same_as` only naming a tensor
    of `held` (those the grader itself sent), at most MAX_NODES values, every byte materialised
    beyond the message counted against `budgets` (the reply's, the check's), before it is allocated."""

    def __init__(
        self, tensors: dict[str, torch.Tensor], devices: set[str], budgets: list[Budget], held: dict[str, torch.Tensor]
    ):
        self.tensors, self.devices, self.budgets, self.held = tensors, devices, budgets, held
        self.used: set[tuple[str, str]] = set()  # ("values", a key of `tensors`) or ("same_as", a token of `held`)
        self.nodes = 0
        self.new_kinds = [MAX_KINDS]  # classes this reply may still have made for type names the grader has not met

    def spend(self, count: int, what: str) -> None:
        for budget in self.budgets:
            budget.spend(count, what)

    def node(self) -> None:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise ProtocolError(f"a reply of more than {MAX_NODES} values")
        if self.nodes % 1024 == 0:
            self.spend(0, "the reply")  # the deadline

    def tensor(self, entry: dict[str, Any]) -> torch.Tensor | None:
        """The tensor an entry describes, on its device; None when its values were not sent."""
        self.node()
        kind, dims, place = (
            dtype(entry.get("dtype")),
            shape(entry.get("shape")),
            device(entry.get("device"), self.devices),
        )
        is_complex = flag(entry.get("complex", False))
        if is_complex and kind not in COMPLEX.values():  # only float32 and float64 pairs are complex numbers
            raise ProtocolError(f"a tensor of {kind} said to be complex")
        if place.type == "meta":
            if is_complex:
                return torch.view_as_complex(torch.empty([*dims, 2], dtype=kind, device="meta"))
            return torch.empty(dims, dtype=kind, device="meta")
        key = text(entry.get("tensor"), 40)
        size = _numel(dims) * torch.empty((), dtype=kind).element_size() * (2 if is_complex else 1)
        if key:
            values = self.once(key, self.tensors, "values")
            if values.dtype != kind or list(values.shape) != ([*dims, 2] if is_complex else dims):
                raise ProtocolError("a tensor whose values do not match its description")
        elif "same_as" in entry:  # values the grader holds already (serve.Server.remember): a copy of its own
            twin = self.once(text(entry["same_as"], 40), self.held, "same_as")
            if (twin.dtype, list(twin.shape), is_complex, twin.is_meta) != (kind, dims, False, False):
                raise ProtocolError("a tensor said to equal one the grader does not hold")
            self.spend(size, "a copy of a tensor the grader sent")
            values = twin.detach().to("cpu").clone()
        else:
            return None
        if is_complex:
            values = torch.view_as_complex(values)
        if "stride" in entry and not is_complex:
            strides = shape(entry["stride"])
            self.spend(_span(values.shape, strides) * values.element_size(), "a tensor laid out with its strides")
            values = laid_out(values, strides)
        if place.type != "cpu":
            self.spend(size, "a tensor moved to a device")
        return values.to(place)

    def once(self, key: str, where: dict[str, torch.Tensor], how: str) -> torch.Tensor:
        """Each value of a message is used at most once: a second entry naming it is refused."""
        if (how, key) in self.used or key not in where:
            raise ProtocolError("a reply that names one tensor twice, or one the grader never sent")
        self.used.add((how, key))
        return where[key]

    def value(
        self,
        tree: Any,
        tensor: Callable[[dict[str, Any]], Any],
        module: Callable[[dict[str, Any], int], Any],
        depth: int = 0,
    ) -> Any:
        """A value tree as objects: `tensor` and `module` make each side's tensors and modules."""
        self.node()
        if depth > MAX_DEPTH:
            raise ProtocolError("a value nested too deeply")
        if tree is None or isinstance(tree, (bool, int)):
            return tree
        if isinstance(tree, str):
            return tree[:MAX_TEXT]
        if isinstance(tree, list):  # kept for the kernel's older answers: a list is a list
            return [self.value(v, tensor, module, depth + 1) for v in items(tree)]
        tree = record(tree)

        def inner(v: Any) -> Any:
            return self.value(v, tensor, module, depth + 1)

        if "float" in tree:
            try:
                return float(text(tree["float"], 40))
            except ValueError:
                raise ProtocolError("a malformed number") from None
        if "tensor" in tree:
            return tensor(tree)
        if "module" in tree or "nn" in tree:
            return module(tree, depth)
        if "tuple" in tree:
            return tuple(inner(v) for v in items(tree["tuple"]))
        if "list" in tree:
            return [inner(v) for v in items(tree["list"])]
        if "named" in tree:
            names = [identifier(f, f"field{i}") for i, f in enumerate(items(tree["fields"]))]
            values = [inner(v) for v in items(tree["values"])]
            if len(values) != len(names) or len(names) > MAX_FIELDS:
                return tuple(values)
            name = identifier(tree["named"], "result")
            made = _kind(("named", name, *names), lambda: namedtuple(name, names, rename=True), tuple, self.new_kinds)
            return tuple(values) if made is tuple else made(*values)
        if "dict" in tree:
            pairs = [items(pair) for pair in items(tree["dict"])]
            if any(len(pair) != 2 for pair in pairs):
                raise ProtocolError("a malformed dict")
            return {_hashable(inner(k)): inner(v) for k, v in pairs}
        if "dtype" in tree:
            return dtype(tree["dtype"])
        if "device" in tree:
            return device(tree["device"], self.devices)
        if "size" in tree:
            return torch.Size(shape(tree["size"]))
        if "object" in tree:
            return opaque(tree["object"], self.new_kinds)
        raise ProtocolError("an unknown kind of value")


MAX_KINDS = 1000  # new classes one reply may have made for the kernel's type names: past these, plain ones
MAX_FIELDS = 256  # of a namedtuple the kernel sends: a larger one is a plain tuple
_KINDS: dict[tuple[str, ...], type] = {}  # the classes made, at most 4 * MAX_KINDS, the oldest forgotten first


def _kind(key: tuple[str, ...], make: Callable[[], type], plain: type, new_kinds: list[int] | None = None) -> type:
    """One class per key, made once, while the reply's allowance `new_kinds` lasts; past it, `plain`. Making a
    class takes tens of microseconds: a reply naming 100,000 types would otherwise cost the grader seconds (and a
    class each) per 6 MB it sends. The allowance is each reply's, so no reply changes what another one reads
    (a type name a classmate's reply used up is still its own class in the next one)."""
    made = _KINDS.get(key)
    if made is None:
        if new_kinds is not None:
            if new_kinds[0] <= 0:
                return plain
            new_kinds[0] -= 1
        made = _KINDS[key] = make()
        if len(_KINDS) > 4 * MAX_KINDS:
            del _KINDS[next(iter(_KINDS))]
    return made


def opaque(name: Any, new_kinds: list[int] | None = None) -> Opaque:
    """An object of the notebook's type `name`, in the grader: a class of that name (or, past the reply's
    allowance of new classes, Opaque)."""
    name = identifier(name, "object")
    return _kind(("object", name), lambda: type(name, (Opaque,), {}), Opaque, new_kinds)()


def _hashable(key: Any) -> Any:
    return key if isinstance(key, (str, int, float, bool, type(None), tuple)) else repr(key)


def _numel(dims: list[int] | torch.Size) -> int:
    count = 1
    for d in dims:
        count *= d
    return count


def _span(dims: list[int] | torch.Size, strides: list[int]) -> int:
    if len(strides) != len(dims):
        raise ProtocolError("strides that do not match the shape")
    return 1 + sum((n - 1) * s for n, s in zip(dims, strides) if n > 0)


# ---- tensors ------------------------------------------------------------------------------------


def tensor_entry(
    tensor: torch.Tensor, key: str, tensors: dict[str, torch.Tensor], token: str | None = None, data: bool = True
) -> dict[str, Any]:
    """Describe `tensor` and, unless it is on the meta device or `data` is False, add its values
    to `tensors` under `key`. Complex values travel as pairs of reals, sparse ones dense."""
    values = tensor.detach()
    sent = data and not values.is_meta
    entry = {
        "tensor": key if sent else "",  # "": the receiver has the values already, or the entry says where
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
        # a transpose or a slice: the receiver lays it out the same way, unless the layout spans far more than the
        # values (a slice of a preallocated KV cache), which the receiver refuses to allocate: that one travels contiguous
        if _span(values.shape, values.stride()) <= SPARSEST * max(values.numel(), 1):
            entry["stride"] = list(values.stride())
    if sent:
        if values.layout != torch.strided:
            values = values.to_dense()
        tensors[key] = values.to("cpu").contiguous().clone()
    return entry


def state_key(tensor: torch.Tensor) -> tuple[Any, ...]:
    """Changes when the values may have: an in-place op, new storage, another shape, dtype or device (both
    sides use it to tell when a tensor's values must travel again)."""
    pointer = 0 if tensor.is_meta or tensor.layout != torch.strided else tensor.data_ptr()
    # An inference tensor (made under torch.inference_mode) keeps no version counter: reading it raises.
    version = -1 if tensor.is_inference() else tensor._version
    return (version, pointer, tuple(tensor.shape), tensor.dtype, str(tensor.device), tensor.requires_grad)


def put(target: torch.Tensor, values: torch.Tensor) -> None:
    """Write `values` into `target` in place (its storage, where they fit), as both sides do with values that came."""
    with torch.no_grad():
        if (
            target.shape == values.shape
            and target.dtype == values.dtype
            and target.device == values.device
            and not target.is_meta
        ):
            target.copy_(values)
        else:
            target.data = values


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


SPARSEST = 4  # the most memory, in units of its values, a laid-out tensor may take on the receiving side


def _distinct(tensor: torch.Tensor) -> bool:
    """No two elements share memory (an expand() does: its copy is made contiguous instead)."""
    sized = [(n, s) for n, s in zip(tensor.shape, tensor.stride()) if n > 1]
    return all(s > 0 for _, s in sized) and 1 + sum((n - 1) * s for n, s in sized) >= tensor.numel()


def laid_out(values: torch.Tensor, strides: list[int]) -> torch.Tensor:
    """`values` with the given strides (as the sender had them: views fail or copy alike)."""
    span = _span(values.shape, strides)
    if (
        span > SPARSEST * max(values.numel(), 1)
        or span < values.numel()
        or any(s <= 0 for n, s in zip(values.shape, strides) if n > 1)
    ):
        raise ProtocolError("strides that would overlap, or take far more memory than the values")
    return torch.empty_strided(values.shape, strides, dtype=values.dtype).copy_(values)
