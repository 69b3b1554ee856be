"""The graded kernel's half: a function server that answers the grader with data.

After the notebook has run, the grader asks this server (one request at a
time, over files and the kernel's own messages) to call a named object of the
notebook with inputs it sends, and gets back plain values and tensors
(`wire`), the state of the modules involved, and gradients on request.
Nothing here decides anything: the comparison, the diagnosis and the score
are computed in the grader's process, which trusts none of this. What can only
be seen in here (a forbidden torch function, torch settings changed, inputs
changed in place) is reported best effort, with the course's own safety net
(helpers.safety) around each call into student code.
"""

from __future__ import annotations

import base64
import contextlib
import inspect
from typing import Any

import torch
from torch import nn

from helpers.grading import wire
from helpers.grading.in_kernel import put, run_student_code, state_key

METHODS = {
    "__call__",
    "train",
    "eval",
    "to",
    "cpu",
    "cuda",
    "float",
    "double",
    "half",
    "bfloat16",
    "load_state_dict",
    "state_dict",
    "requires_grad_",
}
MAX_DEPTH = 8  # of a module tree or a returned value


class Server:
    def __init__(self, namespace: dict[str, Any]):
        self.namespace = namespace
        self.release()

    def release(self) -> None:
        """Forget everything the last exercise's check made (one check at a time)."""
        self.objects: dict[str, Any] = {}  # token -> tensor or module the grader knows about
        self.tokens: dict[int, str] = {}  # id(object) -> its token
        self.sent: dict[str, tuple] = {}  # token -> the state key of the values the grader has
        self.roots: list[str] = []  # modules whose state goes with every reply
        self.graphs: dict[int, list[torch.Tensor]] = {}  # the outputs of a call that need a gradient
        self.holders: dict[bytes, str] = {}  # digest of a large tensor's values -> a token the grader holds them under
        self.digest_of: dict[str, bytes] = {}

    # ---- one request -----------------------------------------------------
    def answer(self, path: str) -> str:
        """The reply to the request in file `path`, base64 (IPython shows it as a string)."""
        with open(path, "rb") as request:
            return base64.b64encode(self.reply(request.read())).decode("ascii")

    def reply(self, request: bytes) -> bytes:
        tree, tensors = wire.unpack(request)
        out: dict[str, torch.Tensor] = {}
        try:
            reply = getattr(self, "op_" + tree["op"])(tree, tensors, out)
        except wire.ProtocolError as error:
            reply, out = {"outcome": {"kind": "raised", "line": f"ProtocolError: {error}"}}, {}
        size = sum(t.numel() * t.element_size() for t in out.values())
        if size > wire.MAX_MESSAGE:  # the grader would drop it unread: say so now, without packing it
            line = f"ValueError: the result takes {size / 2**20:,.0f} MB; the grader reads at most {wire.MAX_MESSAGE // 2**20} MB"
            reply, out = {"outcome": {"kind": "raised", "line": line}}, {}
        return wire.pack(reply, out)

    def op_release(self, tree: dict, tensors: dict, out: dict) -> dict:
        self.release()
        return {}

    def op_describe(self, tree: dict, tensors: dict, out: dict) -> dict:
        name = tree["name"]
        if name not in self.namespace:
            return {"kind": "missing"}
        value = self.namespace[name]
        kind = type(value)
        found = {"type": kind.__name__, "name": str(getattr(value, "__name__", kind.__name__))[:200]}
        if value is None:
            return {**found, "kind": "none"}
        if isinstance(value, nn.Module):
            return {**found, "kind": "module", "value": self.encode(value, out, 0), "state": self.state(out)}
        if inspect.isclass(value):
            found.update(kind="class", module_class=issubclass(value, nn.Module), params=self.parameters(value))
            return found
        if callable(value):
            return {**found, "kind": "function", "params": self.parameters(value)}
        return {**found, "kind": "object"}

    def op_call(self, tree: dict, tensors: dict, out: dict) -> dict:
        self.apply_sync(tree, tensors)
        target = (
            self.objects[tree["target"]["token"]]
            if "token" in tree["target"]
            else self.namespace[tree["target"]["name"]]
        )
        method = tree.get("method") or "__call__"
        if method not in METHODS:
            raise wire.ProtocolError(f"no method {method!r}")
        fn = target if method == "__call__" else getattr(target, method)
        args = [self.decode(a, tensors) for a in tree["args"]]
        kwargs = {k: self.decode(v, tensors) for k, v in tree["kwargs"].items()}
        settings = tree["settings"]
        outcome, result, seen, changed = run_student_code(fn, args, kwargs, settings)
        reply = {"outcome": outcome, "seen": sorted(seen)[:500], "changed": changed}
        if outcome["kind"] == "ok":
            if isinstance(result, nn.Module):
                self.root(result)
            reply["value"] = self.encode(result, out, 0)
            reply["graph"] = self.keep_graph(result)
        reply["state"] = self.state(out)
        return reply

    def op_backward(self, tree: dict, tensors: dict, out: dict) -> dict:
        self.apply_sync(tree, tensors)
        outputs = self.graphs[tree["graph"]]
        grads = [None if g is None else self.decode(g, tensors) for g in tree["grads"]]
        pairs = [(o, g) for o, g in zip(outputs, grads) if g is not None]
        leaves = [self.objects[t] for t in tree["leaves"]]
        wanted = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor) and leaf.requires_grad]

        def backward() -> Any:
            return torch.autograd.grad(
                [o for o, _ in pairs], wanted, [g for _, g in pairs], allow_unused=True, retain_graph=True
            )

        outcome, result, seen, changed = run_student_code(backward, [], {}, tree["settings"])
        reply = {"outcome": outcome, "seen": sorted(seen)[:500], "changed": changed}
        if outcome["kind"] == "ok":
            by_leaf = dict(zip(map(id, wanted), result))
            reply["grads"] = [
                None if by_leaf.get(id(leaf)) is None else wire.tensor_entry(by_leaf[id(leaf)], f"g{i}", out)
                for i, leaf in enumerate(leaves)
            ]
        reply["state"] = self.state(out)
        return reply

    def apply_sync(self, tree: dict, tensors: dict) -> None:
        """Values the grader wrote into tensors it holds copies of (a check's own table)."""
        for entry in tree.get("sync", []):
            if entry["token"] in self.objects:
                self.received_tensor(entry, tensors)

    # ---- values ----------------------------------------------------------
    @staticmethod
    def parameters(value: Any) -> list[str]:
        try:
            target = value.__init__ if inspect.isclass(value) else value
            params = inspect.signature(target).parameters.values()
            names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
            return names[1:] if inspect.isclass(value) else names
        except (TypeError, ValueError):
            return []

    def token(self, value: Any, prefix: str = "k") -> str:
        token = self.tokens.get(id(value))
        if token is None or self.objects.get(token) is not value:
            token = f"{prefix}{len(self.objects)}"
            self.tokens[id(value)] = token
            self.objects[token] = value
        return token

    def root(self, module: nn.Module) -> None:
        token = self.token(module)
        if token not in self.roots:
            self.roots.append(token)

    def encode(self, value: Any, out: dict, depth: int) -> Any:
        if depth > MAX_DEPTH:
            return {"object": "deeply nested value"}
        if value is None or isinstance(value, (bool, int, str)):
            return value if not isinstance(value, str) else value[: wire.MAX_TEXT]
        if isinstance(value, float):
            return {"float": repr(float(value))}  # numpy's float64 is a float, with a repr of its own
        if isinstance(value, torch.Tensor):
            return self.tensor(value, out)
        if isinstance(value, nn.Module):
            return {"module": self.token(value)}
        if isinstance(value, torch.dtype):
            return {"dtype": str(value).removeprefix("torch.")}
        if isinstance(value, torch.device):
            return {"device": str(value)}
        if isinstance(value, torch.Size):
            return {"size": list(value)}
        if isinstance(value, tuple) and hasattr(value, "_fields"):
            return {
                "named": type(value).__name__,
                "fields": list(value._fields),
                "values": [self.encode(v, out, depth + 1) for v in value],
            }
        if isinstance(value, (tuple, list)):
            return {
                type(value).__name__ if type(value) in (tuple, list) else "list": [
                    self.encode(v, out, depth + 1) for v in value[: wire.MAX_ITEMS]
                ]
            }
        if isinstance(value, dict):
            return {
                "dict": [
                    [self.encode(k, out, depth + 1), self.encode(v, out, depth + 1)]
                    for k, v in list(value.items())[: wire.MAX_ITEMS]
                ]
            }
        return {"object": type(value).__name__}

    def tensor(self, value: torch.Tensor, out: dict) -> dict:
        token = self.token(value)
        key = state_key(value)
        fresh = self.sent.get(token) != key
        self.sent[token] = key
        twin = self.remember(token, value) if fresh else None
        entry = wire.tensor_entry(value, token, out, token=token, data=fresh and twin is None)
        return {**entry, "same_as": twin} if twin else entry

    def remember(self, token: str, value: torch.Tensor) -> str | None:
        """For a large tensor, whose values the grader holds already under another token (a
        state_dict() of the weights it sent, or the parameters they were loaded into), that
        token: it copies its own instead of reading 47 MB again. None otherwise."""
        digest = wire.digest(value)
        if digest is None:
            return None
        twin = self.holders.get(digest)
        old = self.digest_of.pop(token, None)
        if old is not None and self.holders.get(old) == token:
            del self.holders[old]
        self.digest_of[token] = digest
        self.holders.setdefault(digest, token)
        return twin if twin != token else None

    def decode(self, value: Any, tensors: dict, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise wire.ProtocolError("a value nested too deeply")
        if value is None or isinstance(value, (bool, int, str)):
            return value
        if isinstance(value, list):
            return [self.decode(v, tensors, depth + 1) for v in value]
        if not isinstance(value, dict):
            raise wire.ProtocolError("a malformed value")
        if "float" in value:
            return float(value["float"])
        if "tuple" in value:
            return tuple(self.decode(v, tensors, depth + 1) for v in value["tuple"])
        if "list" in value:
            return [self.decode(v, tensors, depth + 1) for v in value["list"]]
        if "dict" in value:
            return {self.decode(k, tensors, depth + 1): self.decode(v, tensors, depth + 1) for k, v in value["dict"]}
        if "dtype" in value and "tensor" not in value:
            return wire.dtype(value["dtype"])
        if "device" in value and "tensor" not in value:
            return torch.device(wire.text(value["device"], 40))
        if "tensor" in value:
            return self.received_tensor(value, tensors)
        if "nn" in value:
            return self.received_module(value, tensors, depth)
        if "module" in value:
            return self.objects[value["module"]]
        raise wire.ProtocolError("an unknown kind of value")

    def received_tensor(self, entry: dict, tensors: dict) -> torch.Tensor:
        token = entry["token"]
        known = self.objects.get(token)
        values = wire.tensor_from(entry, tensors, {"cpu", "cuda", "mps", "meta"})
        if known is None:
            made = values if values is not None else torch.empty(0)
            made = (
                nn.Parameter(made, requires_grad=entry["rg"])
                if entry.get("param")
                else made.requires_grad_(entry["rg"] and made.is_floating_point())
            )
            self.objects[token], self.tokens[id(made)] = made, token
            known = made
        elif values is not None:
            put(known, values)
            if known.is_leaf and known.is_floating_point():
                known.requires_grad_(entry["rg"])
        self.sent[token] = state_key(known)
        if values is not None:
            self.remember(token, known)
        return known

    def received_module(self, desc: dict, tensors: dict, depth: int) -> nn.Module:
        """One of torch.nn's own modules, made by the grader (TiedLMHead is handed an nn.Embedding)."""
        token = desc["token"]
        if token in self.objects:
            module = self.objects[token]
        else:
            cls = getattr(nn, wire.text(desc["nn"], 80), None)
            if not (inspect.isclass(cls) and issubclass(cls, nn.Module)):
                raise wire.ProtocolError("not a torch.nn module")
            module = cls.__new__(cls)
            nn.Module.__init__(module)
            self.objects[token], self.tokens[id(module)] = module, token
            self.roots.append(token)
        for name, value in desc["attrs"].items():
            object.__setattr__(module, name, self.decode(value, tensors, depth + 1))
        module.training = bool(desc["training"])
        for name, entry in desc["params"].items():
            module._parameters[name] = None if entry is None else self.received_tensor(entry, tensors)
        for name, entry in desc["buffers"].items():
            module._buffers[name] = None if entry is None else self.received_tensor(entry, tensors)
        for name, child in desc["children"].items():
            module._modules[name] = self.received_module(child, tensors, depth + 1)
        return module

    # ---- the state of the modules the grader holds -----------------------
    def state(self, out: dict) -> dict:
        """Every module the grader holds, and every tensor it sent or got whose values changed."""
        modules = {token: self.describe(self.objects[token], out, 0) for token in self.roots}
        changed = {
            t: self.tensor(v, out)
            for t, v in list(self.objects.items())
            if isinstance(v, torch.Tensor) and self.sent.get(t) != state_key(v)
        }
        return {"modules": modules, "tensors": changed}

    def describe(self, module: nn.Module, out: dict, depth: int) -> dict:
        if depth > MAX_DEPTH:
            raise wire.ProtocolError("a module tree nested too deeply")
        attrs, plain = {}, {}
        for name, value in list(vars(module).items())[: wire.MAX_ITEMS]:
            if name.startswith("_") or name == "training":
                continue
            if isinstance(value, torch.Tensor):
                plain[name] = self.tensor(value, out)
            elif (
                value is None
                or isinstance(value, (bool, int, float, str))
                or (isinstance(value, tuple) and all(isinstance(v, (bool, int, float)) for v in value))
            ):
                attrs[name] = self.encode(value, out, depth + 1)
        buffers = module._buffers
        return {
            "token": self.token(module),
            "class": type(module).__name__[:200],
            "training": bool(module.training),
            "attrs": attrs,
            "plain": plain,
            "params": {n: None if p is None else self.tensor(p, out) for n, p in module._parameters.items()},
            "buffers": {n: None if b is None else self.tensor(b, out) for n, b in buffers.items()},
            "persistent": [n for n in buffers if n not in module._non_persistent_buffers_set],
            "children": {
                n: None if c is None else self.describe(c, out, depth + 1) for n, c in module._modules.items()
            },
        }

    def keep_graph(self, result: Any) -> int | None:
        """Outputs that need a gradient: kept, so that a later backward request reaches them."""
        flat = result if isinstance(result, (tuple, list)) else [result]
        outputs = [t for t in flat if isinstance(t, torch.Tensor) and t.requires_grad]
        if not outputs:
            return None
        self.graphs[len(self.graphs)] = outputs
        return len(self.graphs) - 1


SERVER: Server | None = None  # this kernel's, made by setup


def setup(limits: dict[str, int], shell: Any) -> bool:
    """Before the first cell: hard limits (soft = hard, so that the notebook cannot raise them
    again), this kernel first in line for the OOM killer, torch and the safety net imported, and
    the server kept on the shell, where the grader's requests find it whatever the notebook does
    to the import system (a notebook that breaks it anyway loses its own answers, nothing more)."""
    import resource

    for name, value in limits.items():
        kind = getattr(resource, name)
        hard = resource.getrlimit(kind)[1]
        cap = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(kind, (cap, cap))
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as score:
        score.write("1000")
    global SERVER
    SERVER = Server(shell.user_ns)
    shell.course_answer = SERVER.answer
    return True
