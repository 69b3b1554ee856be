"""The kernel's values, mirrored in the grader's process: every tensor the kernel sends becomes one
local tensor (the same object each time it comes back, its values updated in place), every module
a local nn.Module of the same tree (stand_in.Mirror for the student's own). A base of remote.Session.

What the kernel says of its own state is a claim. The grader owns the values of every Parameter it
mirrors: the first time a trainable weight (a Parameter of two dimensions or more) comes back, the grader
draws values of its own for it (from the submission's secret seed), keeps a copy, and sends them with
its next request; a Parameter that holds a student's formula (a scale, a cos/sin cache: a mistake the
checks name) keeps the values it came with. From then on every Parameter holds what the grader wrote
or first saw (a check's own table, a state_dict it loads), and a reply that says otherwise is a finding
(`Mirroring.findings`) that fails the check.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from helpers.grading import wire
from helpers.grading.stand_in import Mirror, mirror_class
from helpers.grading.wire import identifier, put, state_key

DRAW_SCALE = 1.0  # the standard deviation of the values the grader gives a learned weight


class Mirroring:
    """What remote.Session keeps of the kernel's objects: `local` (token -> local tensor or
    module), `token_of`, `synced` (the state key when the kernel last had the values),
    `modules` (the tokens of the mirrored modules), `devices` (those the grader accepts), `owned`
    (token -> the grader's copy of the values it sent or wrote), `kept` (the Parameters whose local
    values only the grader writes), `draws` (the generator of the values it gives the kernel's
    parameters), `findings` (claims that contradict its copies) and `claims` (what the kernel says its
    Parameters hold, where that is not the grader's copy: `claim`). A claim about an input the grader
    sent is written into the local copy too, so that the check names the change (mutated_input)."""

    local: dict[str, Any]
    token_of: dict[int, str]
    synced: dict[str, tuple[Any, ...]]
    modules: list[str]
    devices: set[str]
    owned: dict[str, torch.Tensor]
    kept: set[str]
    draws: torch.Generator
    findings: list[str]
    claims: dict[str, torch.Tensor]
    meta_expected: bool  # the call being answered may put tensors on the meta device (the grader asked it to)

    def value(self, tree: Any, decoder: wire.Decoder) -> Any:
        """A value the kernel sent, made of plain local objects."""
        return decoder.value(
            tree,
            tensor=lambda entry: self.tensor(entry, decoder),
            module=lambda desc, depth: self.module_named(wire.text(desc.get("module"), 40)),
        )

    def module_named(self, token: str) -> nn.Module:
        """A module the kernel described before (a value names it by its token)."""
        found = self.local.get(token)
        if not isinstance(found, nn.Module):
            raise wire.ProtocolError("a module the kernel never described")
        return found

    def tensor(self, entry: dict[str, Any], decoder: wire.Decoder, name: str = "") -> torch.Tensor:
        """The local tensor for a kernel's tensor: the same object every time it comes back, its
        values updated in place when they changed there. A Parameter seen for the first time gets
        values the grader draws; one the grader owns is compared with its copy (`claimed`)."""
        token = wire.text(entry.get("token"), 40)
        got = decoder.tensor(entry)
        local = self.local.get(token)
        if not isinstance(local, torch.Tensor):
            if got is None:
                raise wire.ProtocolError("a tensor sent without its values")
            requires_grad = wire.flag(entry.get("rg")) and (got.is_floating_point() or got.is_complex())
            is_parameter = wire.flag(entry.get("param", False))
            local = (
                nn.Parameter(got, requires_grad=requires_grad) if is_parameter else got.requires_grad_(requires_grad)
            )
            self.local[token], self.token_of[id(local)] = local, token
            self.synced[token] = state_key(local)
            if is_parameter:  # the grader's, whatever dtype or device the kernel says it has
                if local.is_meta and not self.meta_expected:
                    self.findings.append(f"{name or 'a parameter'} (said to be on the meta device)")
                self.owned[token] = local.detach().clone()  # from now on, a change in the kernel is a finding
                self.kept.add(token)  # and never the values the checks compute with
                # a learned weight: values of the grader's own
                if local.requires_grad and local.dim() >= 2 and not local.is_meta:
                    self.draw(token, local)
            return local
        if got is not None:
            if token in self.owned:
                self.claimed(token, got, name)
            if token not in self.kept:  # the kernel's own tensors, and what it did to the grader's inputs
                put(local, got)
            # Only a sighting with values says what the kernel holds: a second one without (the same Parameter
            # under another name, `self.table = self.embedding.weight`) must not mark the grader's draw as sent.
            self.synced[token] = state_key(local)
        return local

    def draw(self, token: str, parameter: torch.Tensor) -> None:
        """The grader's own values for a weight the kernel made: standard normal (nn.Embedding's own
        init), at a scale the grader fixes and never the kernel's (a table said to be zeros and one
        subnormal would make the draws zeros, which any function of the table reproduces), so that every
        check computes with values no submission chose. They go to the kernel with the next request
        (Session.sync)."""
        # float32 weights drawn in float32 (a table of MiniLM's size: 0.07 s, against 0.3 s drawn in float64 and cast)
        kind = torch.float32 if parameter.dtype in (torch.float32, torch.complex64) else torch.float64
        drawn = torch.randn(parameter.shape, generator=self.draws, dtype=kind).mul_(DRAW_SCALE)
        if parameter.is_complex():
            drawn = torch.complex(drawn, torch.randn(parameter.shape, generator=self.draws, dtype=kind))
        put(parameter, drawn.to(parameter.dtype).to(parameter.device))
        self.owned[token] = parameter.detach().clone()

    def claimed(self, token: str, got: torch.Tensor, name: str) -> None:
        """The kernel says a tensor the grader owns now holds `got`. The same values (converted, when
        the module was moved to another dtype or device) are the grader's copy again; others are a
        finding, and become the kernel's word."""
        mine = self.owned[token]
        kind_kept = (mine.is_complex(), mine.is_floating_point()) == (got.is_complex(), got.is_floating_point())
        if not kind_kept or mine.is_meta != got.is_meta and (mine.is_meta or not self.meta_expected):
            # real said complex, a float said integer, values said gone to meta unasked, or back from it: a claim,
            # never a move of the grader's copy
            same = False
        elif mine.is_meta or got.is_meta:
            same = mine.shape == got.shape
        else:
            same = mine.shape == got.shape and torch.equal(mine.to(got.dtype).to(got.device), got)
        if not same:
            self.findings.append(name or "a tensor the grader sent")
            if token in self.kept:  # the probe compares it with its snapshot: a forward that changed its own weights
                self.claims[token] = got.detach().clone()
        elif token in self.kept:  # moved to another dtype or device: the grader's copy goes along
            self.owned[token] = got.detach().clone()
            put(self.local[token], got)
        if token not in self.kept:
            self.owned[token] = got.detach().clone()

    def claim(self, local: torch.Tensor) -> torch.Tensor | None:
        """What the kernel last said a Parameter the grader owns holds, where that differs from the grader's
        copy (once: the claim is taken), else None. The probe reads it after a call, as check() reads a
        module's own tensors: a forward that renormalises its table in place is named as such."""
        token = self.token_of.get(id(local))
        return None if token is None else self.claims.pop(token, None)

    def refresh(self, state: wire.State, decoder: wire.Decoder) -> None:
        """Bring every mirrored module and every changed tensor up to the kernel's state."""
        for entry in state.tensors.values():
            if wire.text(wire.record(entry).get("token"), 40) in self.local:
                self.tensor(entry, decoder)
        for token, desc in state.modules.items():
            self.module(desc, decoder, self.local.get(token))

    def attributes(self, local: nn.Module, desc: wire.ModuleRecord, decoder: wire.Decoder) -> None:
        """A student's module's Python attributes and plain tensors, as its kernel reports them: its word
        (a check that reads one is noted, stand_in.Mirror)."""
        said: set[str] = set()
        for name, value in desc.attrs.items():
            if identifier(name, "") == name and not name.startswith("_"):
                object.__setattr__(local, name, self.value(value, decoder))
                said.add(name)
        plain = desc.plain
        for name in [
            n
            for n, v in vars(local).items()
            if isinstance(v, torch.Tensor) and n not in plain and not n.startswith("_")
        ]:
            object.__delattr__(local, name)
        for name, entry in plain.items():
            if identifier(name, "") == name and not name.startswith("_"):
                object.__setattr__(local, name, self.tensor(wire.record(entry), decoder))
                said.add(name)
        local.__dict__["_course_said"] = said

    def module(self, desc: wire.ModuleRecord, decoder: wire.Decoder, local: nn.Module | None = None) -> nn.Module:
        token = desc.token
        local = local if local is not None else self.local.get(token)
        if not isinstance(local, nn.Module):
            cls = mirror_class(desc.class_name)
            local = nn.Module.__new__(cls)
            nn.Module.__init__(local)
            local.__dict__.update(_course_session=self, _course_token=token)
            self.local[token], self.token_of[id(local)] = local, token
            if token not in self.modules:
                self.modules.append(token)
        elif isinstance(local, Mirror) and local.__dict__.get("_course_record") == desc and not carries_values(desc):
            # Every reply reports every module the grader holds: one the kernel reports as it did last time, with
            # no values to read, would be set again to what it is (the checks never reshape a student's module).
            return local
        local.__dict__.pop("_course_record", None)  # until this record is applied whole
        local.training = desc.training
        if isinstance(local, Mirror):  # a module the grader made keeps the attributes the grader gave it
            self.attributes(local, desc, decoder)
        label = type(local).__name__
        local._parameters = {
            n: None if e is None else self.tensor(e, decoder, f"{label}.{n}") for n, e in desc.params.items()
        }
        local._buffers = {n: None if e is None else self.tensor(e, decoder) for n, e in desc.buffers.items()}
        persistent = set(desc.persistent)
        local._non_persistent_buffers_set = {n for n in local._buffers if n not in persistent}
        local._modules = {
            n: None
            if c is None
            else self.module(c, decoder)
            if isinstance(c, wire.ModuleRecord)
            else self.module_named(c)
            for n, c in desc.children.items()
        }
        local.__dict__["_course_record"] = desc
        return local


def carries_values(desc: wire.ModuleRecord) -> bool:
    """Whether applying a module's record reads values: a tensor sent, a copy of one the grader holds, one on the
    meta device (made anew each time), a module sent whole, anywhere in its tree; anything malformed counts."""

    def reads(tree: Any) -> bool:
        if isinstance(tree, wire.ModuleRecord):
            entries = [*tree.params.values(), *tree.buffers.values(), *tree.plain.values()]
            return reads(tree.attrs) or reads(entries) or reads(list(tree.children.values()))
        if isinstance(tree, dict):
            if "nn" in tree or "same_as" in tree or tree.get("tensor") or "meta" in str(tree.get("device", "")):
                return True
            return any(reads(v) for v in tree.values())
        if isinstance(tree, (list, tuple)):
            return any(reads(v) for v in tree)
        return not (tree is None or isinstance(tree, (bool, int, float, str)))

    return reads(desc)
