"""The grader's half: stand-ins for a notebook's objects, whose every call goes to its kernel.

`Session.stand_in(name)` gives what `check()` is handed in place of the
student's object: a function, a class, or a module whose forward, .to(),
.train(), state_dict() and load_state_dict() run in the kernel (`serve`),
while its parameters, buffers and submodules are mirrored here as plain
tensors and modules after every call. A backward through a result asks the
kernel for the gradients. So the checks, the mistake catalogue and the
comparisons run unchanged in the grader's own process, on data alone.

What happened in the kernel comes back as the exceptions a call in a notebook
would raise (CheckTimeout, ForbiddenCall, NotImplementedError, ...), so that
`Probe.call` words the failure exactly as it does for `check()` in a notebook.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from helpers import probe, safety
from helpers.grading import wire
from helpers.grading.in_kernel import state_key
from helpers.grading.mirror import Mirroring
from helpers.grading.stand_in import (
    Mirror,
    Opaque,
    RemoteClassMeta,
    RemoteFunction,
    RemoteObject,
    identifier,
)

MISSING = object()  # the notebook does not define the name


class StudentError(Exception):
    """What the student's code raised in the kernel, as its last traceback line."""

    def __init__(self, line: str, oom: bool = False):
        super().__init__(line)
        self.last_line, self.out_of_memory = line, oom


class StudentNotImplemented(NotImplementedError):
    def __init__(self, line: str, stub: str | None):
        super().__init__(line)
        self.last_line, self.stub = line, stub


class StudentExit(SystemExit):
    def __init__(self, line: str):
        super().__init__(line)
        self.last_line = line


@dataclass
class Settings:
    """What Probe.call sets for the calls into student code made inside it (see helpers.probe.Probe.call)."""

    timeout: float = 10.0
    memory_mb: int = 4096
    device: str = "cpu"
    forbidden: list[tuple[str, str]] = field(default_factory=list)
    factories_on_meta: bool = False
    copies_off_meta: bool = False


@dataclass(frozen=True)
class Seen:
    """A torch function the student's code called in the kernel (Probe.calls_seen holds functions)."""

    __name__: str


class Session(Mirroring):
    """One kernel, one submission: `send(request, timeout) -> reply` is the transport."""

    def __init__(self, send: Callable[[bytes, float], bytes], devices: set[str] | None = None):
        self.send = send
        self.devices = devices or {"cpu", "meta", probe.check_device().type}
        self.settings = Settings()
        self.seen: set[Seen] = set()
        self.changed: list[str] = []
        self.reset()

    def reset(self) -> None:
        """Between two exercises: the kernel forgets the last check's objects, and so do we."""
        self.local: dict[str, Any] = {}  # token -> local tensor or module
        self.token_of: dict[int, str] = {}  # id(local object) -> token
        self.synced: dict[str, tuple] = {}  # token -> state key when the kernel last had its values
        self.modules: list[str] = []  # tokens of the modules the kernel reports after every call

    @contextlib.contextmanager
    def active(self, salt: int) -> Iterator[Session]:
        """check() in this block calls into the kernel, with probes drawn from `salt`'s seeds."""
        remote, seeds = probe.REMOTE.set(self), probe.SEED_SALT.set(salt)
        try:
            yield self
        finally:
            probe.REMOTE.reset(remote)
            probe.SEED_SALT.reset(seeds)

    @contextlib.contextmanager
    def settings_for(
        self,
        timeout: float,
        memory_mb: int,
        device: str,
        forbidden: list,
        factories_on_meta: bool,
        copies_off_meta: bool,
    ) -> Iterator[None]:
        saved, self.settings = (
            self.settings,
            Settings(timeout, memory_mb, device, forbidden, factories_on_meta, copies_off_meta),
        )
        try:
            yield
        finally:
            self.settings = saved

    def take_changed(self) -> list[str]:
        changed, self.changed = self.changed, []
        return changed

    def take_seen(self) -> set[Seen]:
        seen, self.seen = self.seen, set()
        return seen

    # ---- transport -------------------------------------------------------
    def ask(self, tree: dict, tensors: dict[str, torch.Tensor] | None = None) -> dict:
        reply, values = wire.unpack(self.send(wire.pack(tree, tensors or {}), self.settings.timeout + 5.0))
        if not isinstance(reply, dict):
            raise wire.ProtocolError("a reply that is not a record")
        if "state" in reply:
            self.refresh(reply["state"], values)
        reply["_tensors"] = values
        return reply

    def release(self) -> None:
        self.ask({"op": "release"})
        self.reset()

    # ---- what the notebook holds ------------------------------------------
    def stand_in(self, name: str) -> Any:
        found = self.ask({"op": "describe", "name": name})
        kind = found.get("kind")
        label = identifier(found.get("name", name), identifier(name))
        if kind == "missing":
            return MISSING
        if kind == "none":
            return None
        if kind == "module":
            return self.value(found["value"], found["_tensors"])
        params = [identifier(p, f"arg{i}") for i, p in enumerate(wire.items(found.get("params", [])))]
        if kind == "function":
            return RemoteFunction(self, name, label, params)
        if kind == "class":
            base = Mirror if wire.flag(found.get("module_class")) else RemoteObject
            return RemoteClassMeta(
                label, (base,), {"_course_target": {"name": name}, "_course_session": self, "__init_params__": params}
            )
        return type(identifier(found.get("type"), "object"), (Opaque,), {})()

    # ---- calls -------------------------------------------------------------
    def call(self, target: dict, method: str, args: tuple, kwargs: dict) -> Any:
        tensors: dict[str, torch.Tensor] = {}
        leaves: list[tuple[str, torch.Tensor]] = []
        tree = {
            "op": "call",
            "target": target,
            "method": method,
            "args": [self.encode(a, tensors, leaves) for a in args],
            "kwargs": {str(k): self.encode(v, tensors, leaves) for k, v in kwargs.items()},
            "settings": self.request_settings(),
        }
        tree["sync"] = self.sync(tensors)
        reply = self.ask(tree, tensors)
        self.outcome(reply)
        value = self.value(reply.get("value"), reply["_tensors"])
        graph = reply.get("graph")
        if graph is None or not torch.is_grad_enabled():
            return value
        return self.connect(value, graph, leaves)

    def request_settings(self) -> dict:
        s = self.settings
        return {
            "timeout": s.timeout,
            "memory_mb": s.memory_mb,
            "device": s.device,
            "forbidden": s.forbidden,
            "factories_on_meta": s.factories_on_meta,
            "copies_off_meta": s.copies_off_meta,
            "grad": torch.is_grad_enabled(),
        }

    def outcome(self, reply: dict) -> None:
        """Raise here what the student's code raised there."""
        self.seen |= {Seen(wire.text(name, 200)) for name in wire.items(reply.get("seen", []))}
        self.changed += [wire.text(line, 300) for line in wire.items(reply.get("changed", []))]
        outcome = reply.get("outcome")
        if not isinstance(outcome, dict):
            raise wire.ProtocolError("a reply without an outcome")
        kind, line = outcome.get("kind"), wire.text(outcome.get("line", ""), 2000)
        if kind == "ok":
            return
        if kind == "timeout":
            raise safety.CheckTimeout
        if kind == "forbidden":
            raise safety.ForbiddenCall(wire.text(outcome.get("name"), 200))
        if kind == "reference":
            raise safety.ReferenceReached(wire.text(outcome.get("name"), 200))
        if kind == "not_implemented":
            stub = outcome.get("stub")
            raise StudentNotImplemented(line, None if stub is None else wire.text(stub, 200))
        if kind == "exit":
            raise StudentExit(line)
        raise StudentError(line, wire.flag(outcome.get("oom", False)))

    def backward(self, graph: int, grads: tuple, leaves: list[str]) -> list[torch.Tensor | None]:
        tensors: dict[str, torch.Tensor] = {}
        entries = [
            None if g is None else wire.tensor_entry(g, f"d{i}", tensors, token=f"d{graph}.{i}")
            for i, g in enumerate(grads)
        ]
        sync = self.sync(tensors)
        reply = self.ask(
            {
                "op": "backward",
                "graph": graph,
                "grads": entries,
                "leaves": leaves,
                "settings": self.request_settings(),
                "sync": sync,
            },
            tensors,
        )
        self.outcome(reply)
        got = wire.items(reply.get("grads"))
        if len(got) != len(leaves):
            raise wire.ProtocolError("gradients for the wrong number of tensors")
        return [None if g is None else wire.tensor_from(g, reply["_tensors"], self.devices) for g in got]

    # ---- values both ways --------------------------------------------------
    def token(self, obj: Any) -> str:
        token = self.token_of.get(id(obj))
        if token is None or self.local.get(token) is not obj:
            token = f"g{len(self.local)}"
            self.token_of[id(obj)], self.local[token] = token, obj
        return token

    def encode(self, value: Any, tensors: dict, leaves: list, depth: int = 0) -> Any:
        """A value the grader sends: plain data, tensors by token, torch.nn modules by their parts."""
        if depth > 8:
            raise ValueError("a value nested too deeply to send")
        if value is None or isinstance(value, (bool, int, str)):
            return value
        if isinstance(value, float):
            return {"float": repr(value)}
        if isinstance(value, torch.Tensor):
            token = self.token(value)
            if value.requires_grad:
                leaves.append((token, value))
            fresh = self.synced.get(token) != state_key(value)
            self.synced[token] = state_key(value)
            return wire.tensor_entry(value, token, tensors, token=token, data=fresh)
        if isinstance(value, nn.Module):
            return self.encode_module(value, tensors, leaves, depth)
        if isinstance(value, torch.dtype):
            return {"dtype": str(value).removeprefix("torch.")}
        if isinstance(value, torch.device):
            return {"device": str(value)}
        if isinstance(value, (tuple, list)):
            return {
                type(value).__name__ if type(value) in (tuple, list) else "tuple": [
                    self.encode(v, tensors, leaves, depth + 1) for v in value
                ]
            }
        if isinstance(value, dict):
            return {
                "dict": [
                    [self.encode(k, tensors, leaves, depth + 1), self.encode(v, tensors, leaves, depth + 1)]
                    for k, v in value.items()
                ]
            }
        raise TypeError(f"cannot send a {type(value).__name__} to a graded kernel")

    def encode_module(self, module: nn.Module, tensors: dict, leaves: list, depth: int) -> dict:
        if isinstance(module, Mirror):
            return {"module": module._course_token}
        if type(module).__module__.split(".")[:2] != ["torch", "nn"]:
            raise TypeError(f"only torch.nn's own modules can be sent to a graded kernel, not {type(module).__name__}")
        token = self.token(module)
        if token not in self.modules:
            self.modules.append(token)
        attrs = {
            k: self.encode(v, tensors, leaves, depth + 1)
            for k, v in vars(module).items()
            if not k.startswith("_")
            and k != "training"
            and (v is None or isinstance(v, (bool, int, float, str, tuple)))
        }
        tensor = lambda t: None if t is None else self.encode(t, tensors, leaves, depth + 1)
        return {
            "nn": type(module).__name__,
            "token": token,
            "training": module.training,
            "attrs": attrs,
            "params": {n: tensor(p) for n, p in module._parameters.items()},
            "buffers": {n: tensor(b) for n, b in module._buffers.items()},
            "children": {
                n: self.encode_module(c, tensors, leaves, depth + 1)
                for n, c in module._modules.items()
                if c is not None
            },
        }

    def sync(self, tensors: dict) -> list[dict]:
        """Values the grader changed in place (a check writes its own table into a module's)
        go with the next request; whatever is sent counts as the kernel's from then on."""
        entries = []
        for token, obj in list(self.local.items()):
            if (
                isinstance(obj, torch.Tensor)
                and token not in tensors
                and self.synced.get(token) not in (None, state_key(obj))
            ):
                entries.append(wire.tensor_entry(obj, token, tensors, token=token))
                self.synced[token] = state_key(obj)
        return entries

    def connect(self, value: Any, graph: Any, leaves: list[tuple[str, torch.Tensor]]) -> Any:
        """Outputs that need a gradient, joined to the local tensors they came from: a backward
        through them asks the kernel for the gradients (Bridge)."""
        graph = int(wire.number(graph))
        flat = list(value) if isinstance(value, (tuple, list)) else [value]
        outputs = [t for t in flat if isinstance(t, torch.Tensor) and t.requires_grad]
        if not outputs:
            return value
        # The leaves: the tensors sent with the call, and every trainable tensor of the mirrored modules.
        for token in self.modules:
            for _name, tensor in [
                *self.local[token].named_parameters(recurse=False),
                *self.local[token].named_buffers(recurse=False),
            ]:
                if tensor.requires_grad:
                    leaves.append((self.token(tensor), tensor))
        unique = list({token: tensor for token, tensor in leaves}.items())
        anchor = torch.zeros((), requires_grad=True)  # so that outputs need a gradient even when no local tensor does
        joined = Bridge.apply(
            self,
            graph,
            [t for t, _ in unique],
            len(outputs),
            *[o.detach() for o in outputs],
            anchor,
            *[t for _, t in unique],
        )
        swap = dict(zip(map(id, outputs), joined))
        new = [swap.get(id(item), item) if isinstance(item, torch.Tensor) else item for item in flat]
        return (
            new[0]
            if not isinstance(value, (tuple, list))
            else type(value)(new)
            if type(value) in (tuple, list)
            else tuple(new)
        )


class Bridge(torch.autograd.Function):
    """Autograd's link between a result and the kernel that made it."""

    @staticmethod
    def forward(ctx: Any, session: Session, graph: int, tokens: list[str], count: int, *rest: torch.Tensor) -> Any:
        ctx.session, ctx.graph, ctx.tokens, ctx.count = session, graph, tokens, count
        outputs = tuple(o.clone() for o in rest[:count])
        return outputs

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> Any:
        got = ctx.session.backward(ctx.graph, grads, ctx.tokens)
        return (None, None, None, None, *([None] * ctx.count), None, *got)
