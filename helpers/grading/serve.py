"""The graded kernel's half: a function server that answers the grader with data.

After the notebook has run, the grader asks this server (one request at a
time, over files and the kernel's own messages) to call a named object of the
notebook with inputs it sends, and gets back plain values and tensors
(`wire`), the state of the modules involved, and gradients on request.
Nothing here decides anything: the comparison, the diagnosis and the score
are computed in the grader's process, which trusts none of this. What can only
be seen in here (a forbidden torch function, torch settings changed, inputs
changed in place) is reported best effort, with the course's own safety net
(helpers.calls.InProcess) around each call into student code.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import inspect
from typing import Any

import torch
from torch import nn

from helpers.calls import Ending, InProcess, Outcome, Settings
from helpers.grading import wire
from helpers.grading.wire import Backward, Call, Describe, Release, Reply, State, put, state_key

DEVICES = {"cpu", "cuda", "mps", "meta"}  # what the grader may send tensors on
STUDENT = InProcess(everything=True)  # every call into the notebook's code: nothing it raises escapes the server


class TooLarge(Exception):
    """A reply whose tensors would pass what the grader reads (wire.MAX_MESSAGE)."""

    def __init__(self, size: int):
        super().__init__(size)
        self.size = size


class Server:
    def __init__(self, namespace: dict[str, Any]):
        self.namespace = namespace
        self.release()

    def release(self) -> None:
        """Forget everything the last exercise's check made (one check at a time)."""
        self.objects: dict[str, Any] = {}  # token -> tensor or module the grader knows about
        self.tokens: dict[int, str] = {}  # id(object) -> its token
        self.sent: dict[str, tuple[Any, ...]] = {}  # token -> the state key of the values the grader has
        self.roots: list[str] = []  # modules whose state goes with every reply
        self.graphs: dict[int, list[torch.Tensor]] = {}  # the outputs of a call that need a gradient
        self.holders: dict[bytes, str] = {}  # digest of a large tensor the grader sent -> its token
        self.referenced: set[str] = set()  # holders named in the reply being written: each at most once
        self.outgoing = 0  # bytes of tensor values in the reply being written

    # ---- one request -----------------------------------------------------
    def answer(self, path: str) -> str:
        """The reply to the request in file `path`, base64 (IPython shows it as a string)."""
        with open(path, "rb") as request:
            return base64.b64encode(self.reply(request.read())).decode("ascii")

    def reply(self, request: bytes) -> bytes:
        tree, tensors = wire.unpack(request)
        out: dict[str, torch.Tensor] = {}
        self.referenced, self.outgoing = set(), 0
        try:
            decoder = wire.Decoder(tensors, DEVICES, [wire.Budget(2**62)], {})  # the grader's: trusted
            reply = self.handle(wire.parse_request(tree), decoder, out)
        except wire.ProtocolError as error:
            reply, out = Reply(Outcome(Ending.RAISED, f"ProtocolError: {error}")), {}
        except TooLarge as error:  # the grader would drop it unread: say so now, before it is copied and packed
            line = f"ValueError: the result takes {error.size / 2**20:,.0f} MB; the grader reads at most {wire.MAX_MESSAGE // 2**20} MB"
            reply, out = Reply(Outcome(Ending.RAISED, line)), {}
        return wire.pack(wire.reply_tree(reply), out)

    def handle(self, request: wire.Request, decoder: wire.Decoder, out: dict[str, torch.Tensor]) -> Reply:
        if isinstance(request, Release):
            self.release()
            warm_up()
            return Reply()
        if isinstance(request, Describe):
            return self.describe_name(request.name, out)
        for entry in request.sync:  # values the grader wrote into tensors it holds copies of (a check's own table)
            if entry["token"] in self.objects:
                self.received_tensor(entry, decoder)
        if isinstance(request, Call):
            return self.call(request, decoder, out)
        return self.backward(request, decoder, out)

    def describe_name(self, name: str, out: dict[str, torch.Tensor]) -> Reply:
        if name not in self.namespace:
            return Reply(found="missing")
        value = self.namespace[name]
        what = type(value).__name__
        said = functools.partial(Reply, type_name=what, name=str(getattr(value, "__name__", what))[:200])
        if value is None:
            return said(found="none")
        if isinstance(value, nn.Module):
            return said(found="module", value=self.encode(value, out), state=self.state(out))
        if inspect.isclass(value):
            return said(found="class", module_class=issubclass(value, nn.Module), params=self.parameters(value))
        if callable(value):
            return said(found="function", params=self.parameters(value))
        return said(found="object")

    def call(self, request: Call, decoder: wire.Decoder, out: dict[str, torch.Tensor]) -> Reply:
        target = (
            self.objects[request.target["token"]]
            if "token" in request.target
            else self.namespace[request.target["name"]]
        )
        if request.method not in wire.METHODS:
            raise wire.ProtocolError(f"no method {request.method!r}")
        fn = target if request.method == "__call__" else getattr(target, request.method)
        args = [self.decode(a, decoder) for a in request.args]
        kwargs = {k: self.decode(v, decoder) for k, v in request.kwargs.items()}
        called = STUDENT.call(fn, tuple(args), kwargs, request.settings)
        if called.outcome.ending is Ending.OK and isinstance(called.value, nn.Module):
            self.root(called.value)
        # The state before the value: the grader reads it first, so a tensor that is both held by a module
        # and returned (a KV cache's k_all) travels with its values in the state, and by name in the value.
        state = self.state(out)
        value = graph = None
        if called.outcome.ending is Ending.OK:
            value, graph = self.encode(called.value, out), self.keep_graph(called.value)
        return Reply(called.outcome, tuple(sorted(called.seen)), tuple(called.changed), value, graph, state=state)

    def backward(self, request: Backward, decoder: wire.Decoder, out: dict[str, torch.Tensor]) -> Reply:
        outputs = self.graphs[request.graph]
        grads = [None if g is None else self.decode(g, decoder) for g in request.grads]
        pairs = [(o, g) for o, g in zip(outputs, grads) if g is not None]
        leaves = [self.objects[t] for t in request.leaves]
        wanted = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor) and leaf.requires_grad]

        def backward() -> Any:
            return torch.autograd.grad(
                [o for o, _ in pairs], wanted, [g for _, g in pairs], allow_unused=True, retain_graph=True
            )

        called = STUDENT.call(backward, (), {}, request.settings)
        entries = None
        if called.outcome.ending is Ending.OK:
            by_leaf = dict(zip(map(id, wanted), called.value))
            entries = tuple(
                None if by_leaf.get(id(leaf)) is None else wire.tensor_entry(by_leaf[id(leaf)], f"g{i}", out)
                for i, leaf in enumerate(leaves)
            )
        seen, changed = tuple(sorted(called.seen)), tuple(called.changed)
        return Reply(called.outcome, seen, changed, grads=entries, state=self.state(out))

    # ---- values ----------------------------------------------------------
    @staticmethod
    def parameters(value: Any) -> tuple[str, ...]:
        try:
            target = value.__init__ if inspect.isclass(value) else value
            params = inspect.signature(target).parameters.values()
            names = tuple(p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
            return names[1:] if inspect.isclass(value) else names
        except (TypeError, ValueError):
            return ()

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

    def encode(self, value: Any, out: dict[str, torch.Tensor]) -> Any:
        return wire.encode(
            value,
            tensor=lambda t: self.tensor(t, out),
            module=lambda m, depth: {"module": self.token(m)},
            other=lambda v: {"object": type(v).__name__},
        )

    def tensor(self, value: torch.Tensor, out: dict[str, torch.Tensor]) -> dict[str, Any]:
        token = self.token(value)
        key = state_key(value)
        fresh = self.sent.get(token) != key
        self.sent[token] = key
        twin = self.holder(token, value) if fresh else None
        # counted before it is copied: the 800 MB of an expand() are never made
        if fresh and twin is None and not value.is_meta:
            self.outgoing += value.numel() * value.element_size()
            if self.outgoing > wire.MAX_MESSAGE:
                raise TooLarge(self.outgoing)
        entry = wire.tensor_entry(value, token, out, token=token, data=fresh and twin is None)
        return {**entry, "same_as": twin} if twin else entry

    def remember(self, token: str, value: torch.Tensor) -> None:
        """A large tensor the grader sent: its digest, so that a tensor of the same values (a
        state_dict() of the weights it sent, the parameters they were loaded into) goes back as
        its name, and the grader copies its own instead of reading 47 MB again."""
        digest = wire.digest(value)
        if digest is not None:
            self.holders[digest] = token

    def holder(self, token: str, value: torch.Tensor) -> str | None:
        """The token of a tensor the grader sent with `value`'s values, named at most once per reply."""
        digest = wire.digest(value)
        twin = None if digest is None else self.holders.get(digest)
        if twin is None or twin == token or twin in self.referenced:
            return None
        self.referenced.add(twin)
        return twin

    def decode(self, tree: Any, decoder: wire.Decoder) -> Any:
        return decoder.value(
            tree,
            tensor=lambda entry: self.received_tensor(entry, decoder),
            module=lambda desc, depth: self.received_module(desc, decoder, depth),
        )

    def received_tensor(self, entry: dict[str, Any], decoder: wire.Decoder) -> torch.Tensor:
        token = entry["token"]
        known = self.objects.get(token)
        values = decoder.tensor(entry)
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

    def received_module(self, desc: dict[str, Any], decoder: wire.Decoder, depth: int) -> nn.Module:
        """A module the grader names: one of the student's it holds, or one of torch.nn's own it sends (its record)."""
        if "module" in desc:
            return self.objects[desc["module"]]
        return self.made_module(wire.module_record(desc["nn"], depth, held=True), decoder)

    def made_module(self, desc: wire.ModuleRecord, decoder: wire.Decoder) -> nn.Module:
        """One of torch.nn's own modules, made by the grader (TiedLMHead is handed an nn.Embedding)."""
        if desc.token in self.objects:
            module = self.objects[desc.token]
        else:
            cls = getattr(nn, desc.class_name, None)
            if not (inspect.isclass(cls) and issubclass(cls, nn.Module)):
                raise wire.ProtocolError("not a torch.nn module")
            module = cls.__new__(cls)
            nn.Module.__init__(module)
            self.objects[desc.token], self.tokens[id(module)] = module, desc.token
            self.roots.append(desc.token)
        for name, value in desc.attrs.items():
            object.__setattr__(module, name, self.decode(value, decoder))
        module.training = desc.training
        for name, entry in desc.params.items():
            module._parameters[name] = None if entry is None else self.received_tensor(entry, decoder)
        for name, entry in desc.buffers.items():
            module._buffers[name] = None if entry is None else self.received_tensor(entry, decoder)
        for name, child in desc.children.items():
            if isinstance(child, wire.ModuleRecord):
                module._modules[name] = self.made_module(child, decoder)
            else:  # one of the student's it holds
                module._modules[name] = None if child is None else self.objects[child]
        return module

    # ---- the state of the modules the grader holds -----------------------
    def state(self, out: dict[str, torch.Tensor]) -> State:
        """Every module the grader holds, and every tensor it sent or got whose values changed."""
        modules = {token: self.describe(self.objects[token], out, 0) for token in self.roots}
        changed = {
            t: self.tensor(v, out)
            for t, v in list(self.objects.items())
            if isinstance(v, torch.Tensor) and self.sent.get(t) != state_key(v)
        }
        return State(modules, changed)

    def describe(self, module: nn.Module, out: dict[str, torch.Tensor], depth: int) -> wire.ModuleRecord:
        if depth > wire.MAX_DEPTH:
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
                attrs[name] = self.encode(value, out)
        buffers = module._buffers
        token = self.token(module)
        params = {n: None if p is None else self.tensor(p, out) for n, p in module._parameters.items()}
        buffer_entries = {n: None if b is None else self.tensor(b, out) for n, b in buffers.items()}
        children: dict[str, wire.ModuleRecord | str | None] = {
            n: None if c is None else self.describe(c, out, depth + 1) for n, c in module._modules.items()
        }
        persistent = tuple(n for n in buffers if n not in module._non_persistent_buffers_set)
        name = type(module).__name__[:200]
        return wire.ModuleRecord(
            token, name, bool(module.training), attrs, params, buffer_entries, children, plain, persistent
        )

    def keep_graph(self, result: Any) -> int | None:
        """Outputs that need a gradient: kept, so that a later backward request reaches them."""
        flat = result if isinstance(result, (tuple, list)) else [result]
        outputs = [t for t in flat if isinstance(t, torch.Tensor) and t.requires_grad]
        if not outputs:
            return None
        self.graphs[len(self.graphs)] = outputs
        return len(self.graphs) - 1


@functools.cache
def warm_up() -> None:
    """A backward through the safety net, once, when grading starts: its first use imports torch's
    symbolic shapes and sympy (seconds on a busy machine), which must not count against, nor be
    interrupted by, the time limit of the first student's call that needs a gradient."""
    weight = torch.ones(2, requires_grad=True)
    out = weight * 2
    STUDENT.call(lambda: torch.autograd.grad([out], [weight], [torch.ones(2)]), (), {}, Settings(timeout=600))


SERVER: Server | None = None  # this kernel's, made by setup


def setup(limits: dict[str, int], shell: Any) -> bool:
    """Before the first cell: hard limits (soft = hard, so that the notebook cannot raise them
    again), this kernel first in line for the OOM killer, torch and the safety net imported, and
    the server kept on the shell, where the grader's requests find it whatever the notebook does
    to the import system (a notebook that breaks it anyway loses its own answers, nothing more)."""
    import resource

    # The grader's worker caps its own memory with a soft limit (helpers.grading.worker), which its
    # kernel inherits: the kernel's memory is --memory-mb's, or uncapped.
    resource.setrlimit(resource.RLIMIT_DATA, (resource.getrlimit(resource.RLIMIT_DATA)[1],) * 2)
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
