"""The grader's half: stand-ins for a notebook's objects, whose every call goes to its kernel.

`Session.stand_in(name)` gives what `check()` is handed in place of the
student's object: a function, a class, or a module whose forward, .to(),
.train(), state_dict() and load_state_dict() run in the kernel (`serve`),
while its parameters, buffers and submodules are mirrored here as plain
tensors and modules after every call. A backward through a result asks the
kernel for the gradients. So the checks, the mistake catalogue and the
comparisons run unchanged in the grader's own process, on data alone.

A Session is the grader's `helpers.calls.Runner`: a probe's call runs its stand-ins, a kernel's call
that did not end well comes back as `calls.Ended`, carrying the kernel's `Outcome` to `Session.call`,
and `Probe.call` words the failure exactly as it does for `check()` in a notebook.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from helpers import calls, probe
from helpers.calls import Called, Ended, Settings
from helpers.checking import CheckResult
from helpers.grading import wire
from helpers.grading.mirror import Mirroring
from helpers.grading.stand_in import Mirror, RemoteClassMeta, RemoteFunction, RemoteObject
from helpers.grading.wire import identifier, state_key
from helpers.safety import TorchState

MISSING = object()  # the notebook does not define the name


class Session(Mirroring):
    """One kernel, one submission: `send(request, timeout) -> reply` is the transport. The Runner of the
    checks while it is `active`."""

    records_progress = False  # the grader's checks are no student's progress

    def __init__(
        self,
        send: Callable[[bytes, float], bytes],
        devices: set[str] | None = None,
        deadline: float = float("inf"),
    ):
        self.send, self.deadline = send, deadline
        self.devices = devices or {"cpu", "meta", probe.check_device().type}
        self.settings = Settings()
        self.seen: set[str] = set()
        self.changed: list[str] = []
        self.draws = torch.Generator()
        self.reset()

    def reset(self) -> None:
        """Between two exercises: the kernel forgets the last check's objects, and so do we."""
        self.local: dict[str, Any] = {}  # token -> local tensor or module
        self.token_of: dict[int, str] = {}  # id(local object) -> token
        self.synced: dict[str, tuple[Any, ...]] = {}  # token -> state key when the kernel last had its values
        self.modules: list[str] = []  # tokens of the modules the kernel reports after every call
        self.owned: dict[str, torch.Tensor] = {}  # token -> the grader's copy of the values it sent
        self.kept: set[str] = set()  # Parameters whose values only the grader writes (mirror.Mirroring)
        self.findings: list[str] = []  # what the kernel said of the grader's tensors that contradicts them
        self.claims: dict[str, torch.Tensor] = {}  # token -> what the kernel says a Parameter holds, against our copy
        self.autograd = 0  # outputs the kernel tied to autograd, and gradients it gave: its word
        self.meta_expected = False  # the call being answered may put tensors on the meta device
        self.attributes_read: dict[str, None] = {}  # Python attributes of the kernel's modules a check read: its word
        self.budget = wire.Budget(wire.CHECK_BUDGET, self.deadline)

    @contextlib.contextmanager
    def active(self, salt: int) -> Iterator[Session]:
        """check() in this block calls into the kernel, with probes (and the values the grader gives
        the kernel's parameters) drawn from `salt`'s seeds."""
        self.draws.manual_seed(salt ^ 0x5EED)
        runner, seeds = calls.RUNNER.set(self), probe.SEED_SALT.set(salt)
        try:
            yield self
        finally:
            calls.RUNNER.reset(runner)
            probe.SEED_SALT.reset(seeds)

    def call(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], settings: Settings) -> Called:
        """A probe's call: `fn` runs here, its stand-ins in the kernel under `settings`; a kernel's call that
        ended there ends this one (Ended), and whatever the grader's own part raised is classified as in a
        notebook. Torch settings changed here or there, and the torch functions run there, come with it."""
        state = TorchState.capture()
        saved, self.settings = self.settings, settings
        called = Called(calls.OK)
        try:
            called.value = fn(*args, **kwargs)
        except Ended as ended:
            called.outcome = ended.outcome
        except BaseException as error:
            outcome = calls.ending_of(error)
            if outcome is None:
                raise
            called.outcome = outcome
        finally:
            self.settings = saved
            called.changed = TorchState.capture().changes_since(state) + self.take_changed()
            state.restore()
        called.seen = self.take_seen()
        return called

    def overrule(self, result: CheckResult) -> CheckResult:
        """A check that passed on values while the kernel said the grader's own tensors changed (its
        parameters during a forward, the inputs it was sent) fails: what a kernel claims of its state
        is compared with the grader's copy, never taken for it."""
        if not result.passed or not self.findings:
            return result
        names = ", ".join(f"`{name}`" for name in dict.fromkeys(self.findings))
        message = (
            f"`{result.submission_name or result.exercise}` changed {names} while the grader called it, or its kernel "
            "said so: a module's parameters and a function's inputs must hold what the grader put in them."
        )
        fix = "Leave the parameters and the inputs as they are during the call: compute the result from them."
        return dataclasses.replace(result, passed=False, diagnosis="mutated_input", message=message, score=0, fix=fix)

    def mirrored_a_module(self) -> bool:
        """Whether this check mirrored a module of the student's: which tensors it holds is its kernel's word."""
        return any(isinstance(local, Mirror) for local in self.local.values())

    def take_changed(self) -> list[str]:
        changed, self.changed = self.changed, []
        return changed

    def take_seen(self) -> set[str]:
        seen, self.seen = self.seen, set()
        return seen

    # ---- transport -------------------------------------------------------
    def ask(
        self, request: wire.Request, tensors: dict[str, torch.Tensor] | None = None
    ) -> tuple[wire.Reply, wire.Decoder]:
        """One request; the reply parsed whole, the state it reports mirrored, and the Decoder that
        reads the rest of it within this reply's and this check's budgets."""
        # A release, the first in a kernel, warms up its safety net (serve.warm_up: sympy, seconds under load): the
        # grader's own set-up, bounded by the check's deadline alone, never by the student's call limit.
        timeout = self.deadline - time.monotonic() if isinstance(request, wire.Release) else self.settings.timeout + 5.0
        data = self.send(wire.pack(wire.request_tree(request), tensors or {}), timeout)
        tree, values = wire.unpack(data)
        # What a reply carries may be kept until the check ends (a module's tensors, mirrored): charged to the check.
        self.budget.spend(sum(t.numel() * t.element_size() for t in values.values()), "the tensors of its replies")
        reply = wire.parse_reply(tree)
        budgets = [wire.Budget(wire.REPLY_BUDGET, self.deadline), self.budget]
        decoder = wire.Decoder(values, self.devices, budgets, self.owned)
        if reply.state is not None:
            self.refresh(reply.state, decoder)
        return reply, decoder

    def release(self) -> None:
        self.ask(wire.Release())
        self.reset()

    # ---- what the notebook holds ------------------------------------------
    def stand_in(self, name: str) -> Any:
        found, decoder = self.ask(wire.Describe(name))
        label = identifier(found.name or name, identifier(name))
        if found.found == "missing":
            return MISSING
        if found.found == "none":
            return None
        if found.found == "module":
            return self.value(found.value, decoder)
        params = [identifier(p, f"arg{i}") for i, p in enumerate(found.params)]
        if found.found == "function":
            return RemoteFunction(self, name, label, params)
        if found.found == "class":
            base = Mirror if found.module_class else RemoteObject
            return RemoteClassMeta(
                label, (base,), {"_course_target": {"name": name}, "_course_session": self, "__init_params__": params}
            )
        return wire.opaque(found.type_name)

    # ---- calls -------------------------------------------------------------
    def call_in_kernel(self, target: dict[str, str], method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A stand-in's call: `method` of `target` in the kernel, under the settings of the probe's call."""
        tensors: dict[str, torch.Tensor] = {}
        leaves: list[tuple[str, torch.Tensor]] = []
        request = wire.Call(
            target,
            method,
            [self.encode(a, tensors, leaves) for a in args],
            {str(k): self.encode(v, tensors, leaves) for k, v in kwargs.items()},
            self.request_settings(),
        )
        request.sync = self.sync(tensors)
        if method == "load_state_dict" and args and isinstance(args[0], dict) and "token" in target:
            self.loading(self.local[target["token"]], args[0])
        self.meta_expected = self.settings.factories_on_meta or (method == "to" and _names_meta(args, kwargs))
        try:
            reply, decoder = self.ask(request, tensors)
            self.outcome(reply)
            value = self.value(reply.value, decoder)
        finally:
            self.meta_expected = False
        if reply.graph is None or not torch.is_grad_enabled():
            return value
        self.autograd += 1
        return self.connect(value, reply.graph, leaves)

    def loading(self, module: nn.Module, state: dict[str, Any]) -> None:
        """load_state_dict: the grader's copy of each parameter it loads is what it sends."""
        for name, parameter in module.named_parameters():
            token = self.token_of.get(id(parameter))
            if token is not None and isinstance(state.get(name), torch.Tensor):
                self.owned[token] = state[name].detach().to(parameter.dtype).to(parameter.device).clone()

    def request_settings(self) -> Settings:
        return dataclasses.replace(self.settings, grad=torch.is_grad_enabled())

    def outcome(self, reply: wire.Reply) -> None:
        """What the student's code did there: its torch functions and settings kept for the probe's call,
        an ending other than OK carried to it (calls.end)."""
        self.seen |= set(reply.seen)
        self.changed += reply.changed
        if reply.outcome.ending is not calls.Ending.OK:
            calls.end(reply.outcome)

    def backward(
        self, graph: int, grads: tuple[torch.Tensor | None, ...], leaves: list[str]
    ) -> list[torch.Tensor | None]:
        tensors: dict[str, torch.Tensor] = {}
        entries = [
            None if g is None else wire.tensor_entry(g, f"d{i}", tensors, token=f"d{graph}.{i}")
            for i, g in enumerate(grads)
        ]
        request = wire.Backward(graph, entries, leaves, self.request_settings(), self.sync(tensors))
        reply, decoder = self.ask(request, tensors)
        self.outcome(reply)
        self.autograd += 1
        got = reply.grads or ()
        if len(got) != len(leaves):
            raise wire.ProtocolError("gradients for the wrong number of tensors")
        return [None if g is None else decoder.tensor(wire.record(g)) for g in got]

    # ---- values both ways --------------------------------------------------
    def token(self, obj: Any) -> str:
        token = self.token_of.get(id(obj))
        if token is None or self.local.get(token) is not obj:
            token = f"g{len(self.local)}"
            self.token_of[id(obj)], self.local[token] = token, obj
        return token

    def encode(self, value: Any, tensors: dict[str, torch.Tensor], leaves: list[tuple[str, torch.Tensor]]) -> Any:
        """A value the grader sends: plain data, tensors by token, torch.nn modules by their parts."""

        def refuse(other: Any) -> Any:
            raise TypeError(f"cannot send a {type(other).__name__} to a graded kernel")

        return wire.encode(
            value,
            tensor=lambda t: self.send_tensor(t, tensors, leaves),
            module=lambda m, depth: self.encode_module(m, tensors, leaves),
            other=refuse,
        )

    def send_tensor(
        self, value: torch.Tensor, tensors: dict[str, torch.Tensor], leaves: list[tuple[str, torch.Tensor]]
    ) -> dict[str, Any]:
        """A tensor of the grader's: its values only when the kernel does not have them yet."""
        token = self.token(value)
        if value.requires_grad:
            leaves.append((token, value))
        fresh = self.synced.get(token) != state_key(value)
        self.synced[token] = state_key(value)
        if fresh and token not in tensors:
            self.owned[token] = value.detach().clone()
        return wire.tensor_entry(value, token, tensors, token=token, data=fresh)

    def encode_module(
        self, module: nn.Module, tensors: dict[str, torch.Tensor], leaves: list[tuple[str, torch.Tensor]]
    ) -> dict[str, Any]:
        """A module the grader sends: one the kernel made by its token, one of torch.nn's own as its record."""
        sent = self.module_sent(module, tensors, leaves)
        return {"module": sent} if isinstance(sent, str) else {"nn": sent.tree()}

    def module_sent(
        self, module: nn.Module, tensors: dict[str, torch.Tensor], leaves: list[tuple[str, torch.Tensor]]
    ) -> wire.ModuleRecord | str:
        if isinstance(module, Mirror):
            return str(module._course_token)
        if type(module).__module__.split(".")[:2] != ["torch", "nn"]:
            raise TypeError(f"only torch.nn's own modules can be sent to a graded kernel, not {type(module).__name__}")
        token = self.token(module)
        if token not in self.modules:
            self.modules.append(token)
        attrs = {
            k: self.encode(v, tensors, leaves)
            for k, v in vars(module).items()
            if not k.startswith("_")
            and k != "training"
            and (v is None or isinstance(v, (bool, int, float, str, tuple)))
        }

        def tensor(value: torch.Tensor | None) -> dict[str, Any] | None:
            return None if value is None else self.send_tensor(value, tensors, leaves)

        params = {n: tensor(p) for n, p in module._parameters.items()}
        buffers = {n: tensor(b) for n, b in module._buffers.items()}
        children: dict[str, wire.ModuleRecord | str | None] = {
            n: self.module_sent(c, tensors, leaves) for n, c in module._modules.items() if c is not None
        }
        return wire.ModuleRecord(token, type(module).__name__, module.training, attrs, params, buffers, children)

    def sync(self, tensors: dict[str, torch.Tensor]) -> list[dict[str, Any]]:
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
                self.owned[token] = obj.detach().clone()
        return entries

    def connect(self, value: Any, graph: int, leaves: list[tuple[str, torch.Tensor]]) -> Any:
        """Outputs that need a gradient, joined to the local tensors they came from: a backward
        through them asks the kernel for the gradients (Bridge)."""
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


def _names_meta(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """`module.to(...)` asked for the meta device (by name, device or a tensor on it)."""
    for value in (*args, *kwargs.values()):
        place = value.device if isinstance(value, torch.Tensor) else value
        if isinstance(place, (str, torch.device)) and str(place).startswith("meta"):
            return True
    return False


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
