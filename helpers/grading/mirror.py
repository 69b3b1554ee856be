"""The kernel's values, mirrored in the grader's process: every tensor the kernel sends becomes one
local tensor (the same object each time it comes back, its values updated in place), every module
a local nn.Module of the same tree (stand_in.Mirror for the student's own). A base of remote.Session."""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import torch
from torch import nn

from helpers.grading import wire
from helpers.grading.in_kernel import put, state_key
from helpers.grading.stand_in import Opaque, identifier, mirror_class


class Mirroring:
    """What remote.Session keeps of the kernel's objects: `local` (token -> local tensor or
    module), `token_of`, `synced` (the state key when the kernel last had the values),
    `modules` (the tokens of the mirrored modules) and `devices` (those the grader accepts)."""

    local: dict[str, Any]
    token_of: dict[int, str]
    synced: dict[str, tuple]
    modules: list[str]
    devices: set[str]

    def value(self, tree: Any, values: dict, depth: int = 0) -> Any:
        """A value the kernel sent, made of plain local objects."""
        if depth > 8:
            raise wire.ProtocolError("a value nested too deeply")
        if tree is None or isinstance(tree, (bool, int)):
            return tree
        if isinstance(tree, str):
            return tree[: wire.MAX_TEXT]
        if isinstance(tree, list):
            return [self.value(v, values, depth + 1) for v in wire.items(tree)]
        if not isinstance(tree, dict):
            raise wire.ProtocolError("a malformed value")
        if "float" in tree:
            return float(wire.text(tree["float"], 40))
        if "tensor" in tree:
            return self.tensor(tree, values)
        if "module" in tree:
            found = self.local.get(wire.text(tree["module"], 40))
            if not isinstance(found, nn.Module):
                raise wire.ProtocolError("a module the kernel never described")
            return found
        if "tuple" in tree or "list" in tree:
            items = [self.value(v, values, depth + 1) for v in wire.items(tree.get("tuple", tree.get("list")))]
            return tuple(items) if "tuple" in tree else items
        if "named" in tree:
            fields = [identifier(f, f"field{i}") for i, f in enumerate(wire.items(tree["fields"]))]
            kind = namedtuple(identifier(tree["named"], "result"), fields, rename=True)
            items = [self.value(v, values, depth + 1) for v in wire.items(tree["values"])]
            return kind(*items) if len(items) == len(fields) else tuple(items)
        if "dict" in tree:
            return {
                self.hashable(self.value(k, values, depth + 1)): self.value(v, values, depth + 1)
                for k, v in wire.items(tree["dict"])
            }
        if "dtype" in tree:
            return wire.dtype(tree["dtype"])
        if "device" in tree:
            return wire.device(tree["device"], self.devices)
        if "size" in tree:
            return torch.Size(wire.shape(tree["size"]))
        if "object" in tree:
            return type(identifier(tree["object"], "object"), (Opaque,), {})()
        raise wire.ProtocolError("an unknown kind of value")

    @staticmethod
    def hashable(key: Any) -> Any:
        return key if isinstance(key, (str, int, float, bool, type(None), tuple)) else repr(key)

    def tensor(self, entry: dict, values: dict) -> torch.Tensor:
        """The local tensor for a kernel's tensor: the same object every time it comes back,
        its values updated in place when they changed there."""
        token = wire.text(entry.get("token"), 40)
        got = wire.tensor_from(entry, values, self.devices)
        if got is None and "same_as" in entry:  # values the grader holds already (serve.Server.remember)
            twin = self.local.get(wire.text(entry["same_as"], 40))
            expected = (wire.dtype(entry.get("dtype")), wire.shape(entry.get("shape")))
            if not isinstance(twin, torch.Tensor) or (twin.dtype, list(twin.shape)) != expected or twin.is_meta:
                raise wire.ProtocolError("a tensor said to equal one the grader does not hold")
            got = twin.detach().clone().to(wire.device(entry.get("device"), self.devices))
        local = self.local.get(token)
        if not isinstance(local, torch.Tensor):
            if got is None:
                raise wire.ProtocolError("a tensor sent without its values")
            requires_grad = wire.flag(entry.get("rg")) and (got.is_floating_point() or got.is_complex())
            local = (
                nn.Parameter(got, requires_grad=requires_grad)
                if wire.flag(entry.get("param", False))
                else got.requires_grad_(requires_grad)
            )
            self.local[token], self.token_of[id(local)] = local, token
        elif got is not None:
            put(local, got)
        self.synced[token] = state_key(local)
        return local

    def refresh(self, state: Any, values: dict) -> None:
        """Bring every mirrored module and every changed tensor up to the kernel's state."""
        if not isinstance(state, dict):
            raise wire.ProtocolError("a malformed state")
        for entry in wire.items(state.get("tensors", {}), dict).values():
            if wire.text(entry.get("token"), 40) in self.local:
                self.tensor(entry, values)
        for token, desc in wire.items(state.get("modules", {}), dict).items():
            self.module(desc, values, self.local.get(token))

    def module(self, desc: dict, values: dict, local: nn.Module | None = None, depth: int = 0) -> nn.Module:
        if depth > 8 or not isinstance(desc, dict):
            raise wire.ProtocolError("a malformed module")
        token = wire.text(desc.get("token"), 40)
        local = local if local is not None else self.local.get(token)
        if not isinstance(local, nn.Module):
            local = mirror_class(desc.get("class")).__new__(mirror_class(desc.get("class")))
            nn.Module.__init__(local)
            local.__dict__.update(_course_session=self, _course_token=token)
            self.local[token], self.token_of[id(local)] = local, token
            if token not in self.modules:
                self.modules.append(token)
        local.training = wire.flag(desc.get("training"))
        for name, value in wire.items(desc.get("attrs", {}), dict).items():
            if identifier(name, "") == name and not name.startswith("_"):
                object.__setattr__(local, name, self.value(value, values))
        plain = wire.items(desc.get("plain", {}), dict)
        for name in [
            n
            for n, v in vars(local).items()
            if isinstance(v, torch.Tensor) and n not in plain and not n.startswith("_")
        ]:
            object.__delattr__(local, name)
        for name, entry in plain.items():
            if identifier(name, "") == name and not name.startswith("_"):
                object.__setattr__(local, name, self.tensor(entry, values))
        local._parameters = {
            wire.text(n, 200): None if e is None else self.tensor(e, values)
            for n, e in wire.items(desc.get("params", {}), dict).items()
        }
        local._buffers = {
            wire.text(n, 200): None if e is None else self.tensor(e, values)
            for n, e in wire.items(desc.get("buffers", {}), dict).items()
        }
        persistent = set(wire.items(desc.get("persistent", [])))
        local._non_persistent_buffers_set = {n for n in local._buffers if n not in persistent}
        children = wire.items(desc.get("children", {}), dict)
        local._modules = {
            wire.text(n, 200): None if c is None else self.module(c, values, None, depth + 1)
            for n, c in children.items()
        }
        return local
