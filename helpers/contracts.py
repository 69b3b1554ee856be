"""Contracts: what an exercise takes and gives, declared once; the axes every check walks along.

An exercise's hand-written probes reject the wrong code someone thought of. Its contract says what
the code must accept, and the axes below derive, from that alone, the calls no probe list thought of:
a batch of one, a transposed view, a float64 table, a call without the optional arguments... An axis
runs on every exercise whose contract admits it, and on no other: a contract never asks for a call
outside its own domain.

How to declare one (beside the exercise's `Exercise(...)`, as its `contract=`)::

    LOOKUP = Contract(
        args={  # a function's arguments, or a module's forward's, in the order of the signature
            "weight": Arg("table", "V d", dtypes=FLOATS, grad=True),
            "ids": Arg("ids", "...", bound="V"),
        },
        result=Result("... d", dtype="weight"),  # ... = the ids' shape; dtype and device follow `weight`
        sizes={"V": 11, "d": 7, "...": "B T", "B": 3, "T": 5},  # the sizes the axes call with
        ones="B T",  # the symbols that may be 1: a batch of one, a single token
    )

* `Arg(kind, shape, ...)`: `kind` is one of KINDS; `shape` names a tensor's dimensions by symbols
  ("B T d"; "..." is any leading shape, expanded to sizes["..."]), or, for a `size`, the symbol it
  gives; `dtypes` the admitted dtypes, the usual one first; `bound` the symbol ids stay below;
  `grad=True` when a gradient must flow back to it; `domain` the admitted values of a number, in
  words the docstring shows (">= 1"); `default` (optional arguments); `values`: values a call uses,
  the first by every axis, the others by the `varied` axis (that the argument is not ignored).
  `draw`: a Draw, where random values of the kind would fall outside the domain (cos and sin from
  rope_cache, masks whose rows each hold a real token); `last_contiguous`: the domain holds only views
  whose last axis has stride 1 (Meta's view_as_complex refuses any other), so the views axis makes those.
  Kind "relative": signed positions, key minus query, in (-bound, bound), both ends drawn.
* `Result(shape, dtype)`: `dtype` is a dtype, the name of the argument whose dtype it follows, or float (a
  Python number); `read` how a result is read before it is compared where the contract admits more than
  one form (ALiBi's float64 and -1e9 mask, a pad's free position), said in `reads`. A tuple of Results,
  each with its `name`: the function returns that many results, compared one by one.
* `init`: a module's constructor arguments (the same Arg), and `expected(probe, module, **values)`, the
  right output from the module's own tables (found by shape, as its own probes find them), given every
  constructor argument and input by name.
* `sizes`: one size per symbol; `ones`: the symbols that admit 1.
* `not_walked`: axis -> why it does not apply, though the contract seems to admit it (said once,
  here, and read by tests/test_contracts.py: never a list of exercises in an axis).

The catalogue (helpers.exercises) runs `walk(submission, probe)` after the exercise's own check has
passed, so its specific diagnoses (and the diagnoses earlier rounds of wrong code were given) win; on
the CPU pass only. Each axis records itself in `probe.axes_walked` once it has compared, and
tests/test_contracts.py fails for an exercise whose contract admits an axis it did not walk, for an axis
code without two wrong submissions, and for a docstring that does not state `summary(contract)` word for
word (paste its lines into the exercise's docstring in solutions/NN_*.md, then `python -m helpers.release NN`).
A module contract's axes ask `expected(...)` for the right output; a function's ask the reference.

The axes (AXES), each with the diagnosis its failures get when that is what happened, else the
comparison's own (a known mistake, wrong_shape, wrong_values...):

* ones      every symbol of `ones` set to 1 in turn (B = 1, T = 1): `squeezed_size_one` when the
            result lost that size-1 axis;
* views     every tensor input as a non-contiguous view of the same values (a transposed tensor as
            a model hands it over): `contiguity_assumed` when `.view` refused it;
* gradient  the arguments with grad=True (in float64 where they admit it): `gradient_cut` when the
            output or an input is cut off from autograd; the gradient against the reference's, or
            expected()'s (`precision_lost` when a float64 one differs by float32 rounding only);
* dtypes    every admitted dtype of the floating inputs, against the reference in float64 at that
            dtype's own rounding: `fixed_dtype` when the code fails on a dtype it admits,
            `precision_lost` when a float64 result carries float32 rounding, wrong_dtype when the
            result's dtype does not follow the contract's;
* defaults  every optional argument left out, one at a time (a module: built without it, compared in
            eval mode and by its dropout rate in train mode): `default_changed`;
* rows      ids that never reach the last row of the table they index (bound by a `size` argument):
            `size_from_ids` when the result's size was read off the ids;
* varied    each argument's other `values`: wrong_values saying the argument is ignored when the
            result is the one for the first value (a catalogue mistake, wrong_base..., is named first).

Every call goes through `Probe.call`, so every axis also asks that the inputs are left untouched
(mutated_input) and that torch's global state is left alone.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from helpers.probe import TOLERANCES, Probe, close
from helpers.safety import Failure

REQUIRED = inspect.Parameter.empty

KINDS = {  # kind -> how the axes make one (and what the docstring calls it)
    "ids": "token ids, below `bound`, holding 0 and bound - 1",
    "positions": "position ids, below `bound`",
    "relative": "relative positions (key minus query), signed, within (-bound, bound), holding both ends",
    "segments": "segment ids, below `bound`",
    "mask": "a 0/1 attention mask",
    "table": "a table of rows (floats)",
    "activations": "hidden states or queries/keys (floats)",
    "gradient": "an upstream gradient (floats)",
    "size": "a size (an int) that gives a symbol of the shapes",
    "index": "a row index, below `bound`, or None",
    "number": "a number (int or float) within its `domain`",
    "rate": "a probability in [0, 1): a dropout rate",
    "flag": "a bool",
    "embedding": "an nn.Embedding of shape `shape` (V d) the module is built on, holding the probe's values",
}
FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
INTEGERS = (torch.int64,)
TENSOR_KINDS = {"ids", "positions", "relative", "segments", "mask", "table", "activations", "gradient"}
INDEX_KINDS = {"ids": "ids", "positions": "positions", "segments": "segments"}  # -> Probe.ids' kind
INTEGER_KINDS = {*INDEX_KINDS, "relative"}


@dataclass(frozen=True)
class Draw:
    """Inputs drawn inside an exercise's domain where random values of their kind would fall outside it
    (cos and sin from rope_cache, not random tables; masks whose rows each hold a real token)."""

    words: str  # what the docstring says of them: "from rope_cache" ("" where the domain says it all)
    make: Callable[[Probe, dict[str, Any], torch.dtype], torch.Tensor]  # (probe, sizes, dtype) -> the input


@dataclass(frozen=True)
class Arg:
    kind: str
    shape: str = ""  # a tensor's dimensions as symbols, "B T d" ("..." any leading shape); a size: its symbol
    dtypes: tuple[torch.dtype, ...] = ()  # admitted, the usual first (FLOATS for a float tensor that takes any)
    bound: str = ""  # ids, positions, an index: the symbol they stay below
    grad: bool = False  # a gradient must flow back to it
    domain: str = ""  # a number's admitted values, in the docstring's words (">= 1", "> 0")
    default: Any = REQUIRED
    values: tuple[Any, ...] = ()  # numbers: the first is used by every call, the others by `varied`
    draw: Draw | None = None  # a tensor drawn within the domain, not at random
    last_contiguous: bool = (
        False  # the domain holds views whose last axis is contiguous only (view_as_complex needs it)
    )

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown kind {self.kind!r}: one of {sorted(KINDS)}")
        outside = [v for v in (*self.values, self.default) if v not in (None, REQUIRED) and not within(self.domain, v)]
        if outside:  # an axis never calls outside the domain: the declaration itself is refused
            raise ValueError(f"values {outside} outside the domain {self.domain!r}")
        if self.kind in TENSOR_KINDS and not self.dtypes:
            object.__setattr__(self, "dtypes", INTEGERS if self.kind in INTEGER_KINDS else (torch.float32,))

    @property
    def optional(self) -> bool:
        return self.default is not REQUIRED

    @property
    def is_tensor(self) -> bool:
        return self.kind in TENSOR_KINDS


COMPARISONS = {">=": float.__ge__, "<=": float.__le__, ">": float.__gt__, "<": float.__lt__}


def within(domain: str, value: Any) -> bool:
    """Whether a number lies in a domain written as comparisons joined by "and": ">= 1", "> 0 and < 1"."""
    for part in filter(None, (p.strip() for p in domain.split(" and "))):
        operator, bound = part.split()
        if not COMPARISONS[operator](float(value), float(bound)):
            return False
    return True


@dataclass(frozen=True)
class Result:
    """One result: a tensor of `shape` in `dtype` (a dtype, or the argument whose dtype it follows), or a
    Python number (dtype=float); `name` when there are several; `read`, how it is read before it is compared
    where the contract admits more than one form (ALiBi's float64, a mask at -1e9), said in `reads`."""

    shape: str
    dtype: str | torch.dtype | type = torch.float32
    name: str = ""
    read: Callable[[Any, dict[str, Any]], Any] | None = None  # (result, the call's inputs by name) -> as compared
    reads: str = ""

    def words(self) -> str:
        if self.dtype is float:
            return f"{self.name} a float".strip()
        follows = f"{self.dtype}'s dtype" if isinstance(self.dtype, str) else str(self.dtype).removeprefix("torch.")
        said = f"{self.name} ({', '.join(self.shape.split())}) in {follows}".strip()
        return f"{said} ({self.reads})" if self.reads else said


@dataclass(frozen=True, kw_only=True)
class Contract:
    args: dict[str, Arg]
    result: Result | tuple[Result, ...]  # a tuple: the function returns that many results, in that order
    init: dict[str, Arg] = field(default_factory=dict)  # a module's constructor
    sizes: dict[str, Any] = field(default_factory=dict)
    ones: str = ""
    expected: Callable[..., torch.Tensor] | None = None  # modules: expected(probe, module, **values)
    not_walked: dict[str, str] = field(default_factory=dict)  # axis -> why not, though it seems to apply

    def __post_init__(self) -> None:
        unknown = set(self.not_walked) - set(AXES)
        if unknown:
            raise ValueError(f"not_walked names unknown axes {sorted(unknown)}")

    @property
    def results(self) -> tuple[Result, ...]:
        return self.result if isinstance(self.result, tuple) else (self.result,)

    def floats(self) -> dict[str, Arg]:
        return {name: a for name, a in self.args.items() if a.is_tensor and a.dtypes[0].is_floating_point}


# ---------------------------------------------------------------------------
# The contract in the student's words: the docstring states it (tests/test_contracts.py holds them together)
# ---------------------------------------------------------------------------


def words(name: str, arg: Arg) -> str:
    """One argument as the docstring says it: `ids (B, T) int64 in [0, V)`, `base > 1 = 10000.0`."""
    parts = [name]
    if arg.kind == "size":
        parts.append("int" if arg.shape == name else arg.shape)  # `d int` where the size is its own symbol
    elif arg.kind == "embedding":
        parts.append(f"an nn.Embedding({', '.join(arg.shape.split())})")
    elif arg.is_tensor:
        parts.append(f"({', '.join(arg.shape.split())})")
        parts.append("/".join(str(d).removeprefix("torch.") for d in arg.dtypes))
    if arg.draw and arg.draw.words:
        parts.append(arg.draw.words)
    if arg.last_contiguous:
        parts.append("(any view whose last axis is contiguous)")
    if arg.kind == "relative":
        parts.append(f"in (-{arg.bound}, {arg.bound})")
    elif arg.bound:
        parts.append(f"in [0, {arg.bound})" + (" or None" if arg.optional and arg.default is None else ""))
    if arg.kind in ("number", "rate", "flag"):
        parts.append(type(arg.values[0] if arg.values else arg.default).__name__)
    if arg.domain:
        low, _, high = arg.domain.partition(" and ")
        interval = low.startswith(">= ") and high.startswith("< ")  # ">= 0 and < 1" reads [0, 1)
        parts.append(f"in [{low[3:]}, {high[2:]})" if interval else arg.domain)
    if arg.grad:
        parts.append("with its gradient")
    if arg.optional:
        parts.append(f"= {arg.default!r}")
    return " ".join(parts)


def summary(contract: Contract) -> str:
    """The contract in one paragraph, as each exercise's docstring states it word for word."""
    said = []
    if contract.init:
        said.append(f"Built with {'; '.join(words(n, a) for n, a in contract.init.items())}.")
    inputs = "; ".join(words(n, a) for n, a in contract.args.items())
    said.append(f"{'Its forward takes' if contract.init else 'Takes'} {inputs}.")
    if isinstance(contract.result, tuple):
        said.append(f"Returns ({', '.join(r.words() for r in contract.result)}).")
    else:
        said.append(f"Returns {contract.result.words()}.")
    ones = contract.ones.split()
    if ones and set(ones) <= set(str(contract.sizes.get("...", "")).split()):
        said.append("Any size in ... may be 1 (a batch of one, a single token).")
    elif ones:
        said.append(f"{' and '.join(ones)} may be 1.")
    return "Contract: " + " ".join(said)


# ---------------------------------------------------------------------------
# Calls the axes make
# ---------------------------------------------------------------------------


def dims(shape: str, sizes: dict[str, Any]) -> list[int]:
    """A symbolic shape made concrete: "... d" with sizes {"...": "B T", "B": 3, "T": 5, "d": 7} is [3, 5, 7]."""
    out = []
    for symbol in shape.split():
        out += dims(sizes["..."], sizes) if symbol == "..." else [int(sizes[symbol])]
    return out


OMITTED = object()  # an optional argument the call leaves out


@dataclass
class Call:
    """One call the axes make: the module's constructor arguments (empty for a function) and the
    inputs, each by name (OMITTED: left out)."""

    init: dict[str, Any]
    inputs: dict[str, Any]


def split(values: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """Arguments in signature order, positionally; after one left out, by keyword."""
    args, kwargs, by_keyword = [], {}, False
    for name, value in values.items():
        if value is OMITTED:
            by_keyword = True
        elif by_keyword:
            kwargs[name] = value
        else:
            args.append(value)
    return args, kwargs


def make_call(
    contract: Contract,
    probe: Probe,
    sizes: dict[str, Any] | None = None,
    *,
    dtype: torch.dtype | None = None,
    avoid_last: bool = False,
) -> Call:
    """Inputs for every argument from the contract: floats drawn at random (in `dtype` where the argument
    admits it), ids holding both edges of their bound (with `avoid_last`, never its last value), sizes
    and numbers as declared (a number's first value, else its default)."""
    sizes = {**contract.sizes, **(sizes or {})}

    def value(arg: Arg) -> Any:
        if arg.kind == "size":
            return int(sizes[arg.shape])
        if arg.kind in ("number", "rate", "index", "flag"):
            return arg.values[0] if arg.values else arg.default
        chosen = dtype if dtype in arg.dtypes else (arg.dtypes or (torch.float32,))[0]
        if arg.draw:
            return arg.draw.make(probe, sizes, chosen)
        shape = dims(arg.shape, sizes)
        if arg.kind == "relative":  # both ends, -(bound - 1) and bound - 1, at random places
            reach = int(sizes[arg.bound]) - 1
            return probe.ids(2 * reach + 1, *shape) - reach
        if arg.kind in INDEX_KINDS:
            high = int(sizes[arg.bound])
            if avoid_last:
                return probe.randint(max(high - 1, 1), *shape)
            return (
                probe.ids(high, *shape, kind=INDEX_KINDS[arg.kind])
                if shape and high > 1
                else probe.randint(high, *shape)
            )
        if arg.kind == "mask":
            return (probe.randint(2, *shape) > 0).long()
        if arg.kind == "embedding":
            embedding = torch.nn.Embedding(*shape)
            with torch.no_grad():
                embedding.weight.copy_(probe.randn(*shape, device="cpu"))  # the probe's values, not the global RNG's
            return embedding.to(probe.device)
        return probe.randn(*shape, dtype=chosen)

    return Call(
        {name: value(arg) for name, arg in contract.init.items()},
        {name: value(arg) for name, arg in contract.args.items()},
    )


def run(probe: Probe, fn: Any, call: Call) -> Any:
    """The student's output for `call`: a function called, or a module built (in eval mode) and called."""
    args, kwargs = split(call.inputs)
    if not call.init and probe.exercise.kind == "function":
        return probe.call(fn, *args, **kwargs)
    module = build(probe, fn, call)
    return probe.call(module, *args, **kwargs)


def build(probe: Probe, cls: Any, call: Call) -> torch.nn.Module:
    """The student's module for `call`, in eval mode: the axes compare values, dropout off."""
    init_args, init_kwargs = split(call.init)
    module = probe.build(cls, *init_args, **init_kwargs)
    probe.call(module.eval, what=f"`{probe.name}.eval()`")
    return module


def expected_for(probe: Probe, contract: Contract, call: Call, module: torch.nn.Module | None = None) -> Any:
    """The right output: the reference on the same inputs (a module: `contract.expected` on its own tables)."""
    if module is not None and contract.expected is not None:
        values = {k: v for k, v in {**call.init, **call.inputs}.items() if v is not OMITTED}
        return contract.expected(probe, module, **values)
    args, kwargs = split(call.inputs)
    return probe.exercise.reference(*args, **kwargs)


def compare(
    probe: Probe,
    contract: Contract,
    fn: Any,
    call: Call,
    what: str,
    module: torch.nn.Module | None = None,
    **tolerance: Any,
) -> Any:
    """The student's output for `call` against the right one (a function's catalogue of mistakes named
    on these inputs; a module built for the call unless given); returns the output."""
    args, kwargs = split(call.inputs)
    if probe.exercise.kind == "module":
        module = module or build(probe, fn, call)
        out = probe.call(module, *args, **kwargs)
        want = expected_for(probe, contract, call, module)
        expect_results(probe, contract, out, want, what, None, call.inputs, **tolerance)
        return out
    out = probe.call(fn, *args, **kwargs)
    mistakes = lambda index: probe.known_mistakes(*args, index=index, **kwargs)
    want = probe.exercise.reference(*args, **kwargs)
    expect_results(probe, contract, out, want, what, mistakes, call.inputs, **tolerance)
    return out


def expect_results(
    probe: Probe,
    contract: Contract,
    out: Any,
    want: Any,
    what: str,
    mistakes: Callable[[int | None], Callable[[], dict[str, Any]]] | None,
    inputs: dict[str, Any],
    **tolerance: Any,
) -> None:
    """Each result against the right one, read as its Result says; a tuple's results one by one, by name."""
    if not isinstance(contract.result, tuple):
        read = contract.result.read or (lambda out, inputs: out)
        probe.expect(read(out, inputs), want, what=what, mistakes=mistakes and mistakes(None), **tolerance)
        return
    results = contract.result
    if not isinstance(out, (tuple, list)) or len(out) != len(results):
        got = f"a {type(out).__name__}" + (f" of {len(out)} items" if isinstance(out, (tuple, list)) else "")
        probe.fail(
            "wrong_type",
            f"{what[0].upper()}{what[1:]} is {got}; the exercise returns {len(results)} results, "
            f"({', '.join(r.name for r in results)}).",
        )
    for index, (result, got, right) in enumerate(zip(results, out, want)):
        part = f"the {result.name} of {what}"
        if result.dtype is not float:
            read = result.read or (lambda out, inputs: out)
            probe.expect(read(got, inputs), right, what=part, mistakes=mistakes and mistakes(index), **tolerance)
        elif isinstance(got, bool) or not isinstance(got, (int, float)):
            probe.fail("wrong_type", f"{part[0].upper()}{part[1:]} is a {type(got).__name__}, not a Python float.")
        elif not math.isclose(got, right, rel_tol=1e-6):
            probe.fail("wrong_values", f"{part[0].upper()}{part[1:]} is {got:.6g}; expected {right:.6g}.")


def parts(out: Any) -> list[Any]:
    """A result's parts: the items of a tuple of results, or the one result."""
    return list(out) if isinstance(out, (tuple, list)) else [out]


def tensors(out: Any) -> list[torch.Tensor]:
    """The floating tensors among a result's parts (what a gradient flows through)."""
    return [t for t in parts(out) if isinstance(t, torch.Tensor) and t.is_floating_point()]


def alike(out: Any, want: Any, rtol: float | None = None, atol: float | None = None) -> bool:
    """Every part of `out` close to `want`'s (a number to 1e-6 of it)."""
    if len(parts(out)) != len(parts(want)):
        return False
    return all(
        close(o, w, rtol, atol)
        if isinstance(w, torch.Tensor)
        else isinstance(o, (int, float)) and math.isclose(o, w, rel_tol=1e-6)
        for o, w in zip(parts(out), parts(want))
    )


def described(call: Call) -> str:
    """The inputs of a call as a student reads them: `ids` (1, 5) int64, `vocab_size` = 11."""
    parts = []
    for name, value in {**call.init, **call.inputs}.items():
        if isinstance(value, torch.Tensor):
            parts.append(f"`{name}` {tuple(value.shape)} {str(value.dtype).removeprefix('torch.')}")
        elif value is not OMITTED:
            parts.append(f"`{name}` = {value!r}")
    return ", ".join(parts)


# ---------------------------------------------------------------------------
# The axes
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Axis:
    applies: Callable[[Contract], bool]
    walk: Callable[[Probe, Any, Contract], None]


def _ones(probe: Probe, fn: Any, contract: Contract) -> None:
    for symbol in contract.ones.split():
        call = make_call(contract, probe, {symbol: 1})
        what = f"the output for {symbol} = 1 ({described(call)})"
        try:
            compare(probe, contract, fn, call, what)
        except Failure as failure:
            if failure.code == "wrong_shape":
                out, want = run_quietly(probe, fn, call), expected_shapes(probe, contract, fn, call)
                for got, shape in zip(parts(out), want):
                    if (
                        isinstance(got, torch.Tensor)
                        and len(got.shape) < len(shape)
                        and [s for s in shape if s != 1] == [s for s in got.shape if s != 1]
                    ):
                        probe.fail(
                            "squeezed_size_one",
                            f"For {symbol} = 1 ({described(call)}), `{probe.name}` returned shape {tuple(got.shape)}; expected {tuple(shape)}: "
                            "a size-1 axis was dropped on the way.",
                        )
            raise


def run_quietly(probe: Probe, fn: Any, call: Call) -> Any:
    try:
        return run(probe, fn, call)
    except Failure:
        return None


def expected_shapes(probe: Probe, contract: Contract, fn: Any, call: Call) -> list[torch.Size]:
    """The shapes of the right result's tensors (one per result), none where it cannot be made."""
    try:
        module = build(probe, fn, call) if probe.exercise.kind == "module" else None
        return [
            t.shape if isinstance(t, torch.Tensor) else None for t in parts(expected_for(probe, contract, call, module))
        ]
    except Failure:
        return []


def noncontiguous(tensor: torch.Tensor, last_contiguous: bool = False) -> torch.Tensor:
    """The same values, laid out as no contiguous tensor is: the last two axes transposed in memory
    (a transposed q, as attention code hands it over), or every other element of a longer one (1-D).
    With `last_contiguous`, a view whose last axis keeps stride 1: the two axes before it transposed
    (q as (B, T, H, Dh).transpose(1, 2)), or the first columns of a wider matrix (2-D)."""
    if last_contiguous:
        if tensor.dim() >= 3:
            return tensor.transpose(-2, -3).contiguous().transpose(-2, -3)
        return torch.cat([tensor, tensor], dim=-1)[..., : tensor.shape[-1]] if tensor.dim() == 2 else tensor
    if tensor.dim() >= 2:
        return tensor.transpose(-1, -2).contiguous().transpose(-1, -2)
    return torch.stack([tensor, tensor], dim=-1)[..., 0] if tensor.dim() == 1 else tensor


def _views(probe: Probe, fn: Any, contract: Contract) -> None:
    call = make_call(contract, probe)
    call.inputs = {
        k: noncontiguous(v, contract.args[k].last_contiguous) if isinstance(v, torch.Tensor) else v
        for k, v in call.inputs.items()
    }
    what = f"the output for non-contiguous inputs ({described(call)})"
    try:
        compare(probe, contract, fn, call, what)
    except Failure as failure:
        if failure.code == "raised" and "view size is not compatible" in failure.message:
            probe.fail(
                "contiguity_assumed",
                f"On inputs that are views, not contiguous tensors ({described(call)}, as a transpose or a slice hands them over), "
                f"{failure.message.split(' raised ', 1)[0]} raised {failure.message.split(' raised ', 1)[-1]}",
            )
        raise


def _gradient(probe: Probe, fn: Any, contract: Contract) -> None:
    """Backward through the output, in float64 where every such input admits it: the gradient of each
    input that needs one against the float64 reference's."""
    wanted = [name for name, arg in contract.args.items() if arg.grad]
    dtype = torch.float64 if all(torch.float64 in contract.args[n].dtypes for n in wanted) else None
    call = make_call(contract, probe, dtype=dtype)
    for name in wanted:
        call.inputs[name].requires_grad_()
    module = build(probe, fn, call) if probe.exercise.kind == "module" else None
    out = compare(probe, contract, fn, call, f"the output ({described(call)})", module)
    names = " and ".join(f"`{n}`" for n in wanted)
    if not all(t.requires_grad for t in tensors(out)):
        probe.fail(
            "gradient_cut",
            f"`{probe.name}`'s output does not require grad although {names} {'does' if len(wanted) == 1 else 'do'}: "
            "it is cut off from autograd, so nothing before it could be trained through it.",
        )
    upstream = [torch.randn(t.shape, generator=probe.generator, dtype=t.dtype).to(t.device) for t in tensors(out)]

    def loss(results: Any) -> torch.Tensor:
        return sum(((t * u).sum() for t, u in zip(tensors(results), upstream)), torch.zeros(()))

    probe.call(lambda: loss(out).backward(), what=f"backward through `{probe.name}`")
    mirror = Call(
        call.init,
        {
            k: v.detach().clone().requires_grad_(v.requires_grad) if isinstance(v, torch.Tensor) else v
            for k, v in call.inputs.items()
        },
    )
    loss(expected_for(probe, contract, mirror, module)).backward()
    for name in wanted:
        got, want = call.inputs[name].grad, mirror.inputs[name].grad
        what = f"the gradient of `{name}` ({described(call)})"
        if got is None:
            probe.fail(
                "gradient_cut",
                f"After a backward pass through `{probe.name}`'s output, `{name}` has no gradient: the output was computed from something else (a copy?).",
            )
        rtol = EXACT.get(want.dtype, TOLERANCES[want.dtype][0])
        if close(got, want, rtol=rtol, atol=rtol * float(want.abs().max())):
            continue
        if want.dtype == torch.float64 and float32_inside(got, want):
            probe.fail(
                "precision_lost",
                f"{what[0].upper()}{what[1:]} is right to float32's rounding only, not float64's: a step of the backward pass ran in float32.",
            )
        probe.expect(got, want, what=what, rtol=rtol, atol=rtol * float(want.abs().max()))


EXACT = {torch.float64: 8 * torch.finfo(torch.float64).eps}  # relative error a right float64 computation makes
FLOAT32 = 1e-5  # relative: float32 rounding, which a float64 result that took a step in float32 shows


def float32_inside(out: Any, want: Any) -> bool:
    """A float64 `out` (or a part of it) that is `want` to float32's rounding, not to float64's."""
    for got, right in zip(parts(out), parts(want)):
        if not isinstance(right, torch.Tensor) or right.dtype != torch.float64:
            continue
        scale = float(right.abs().max()) if right.numel() else 0.0
        exact = close(got, right, rtol=EXACT[torch.float64], atol=EXACT[torch.float64] * scale)
        if not exact and close(got, right, rtol=FLOAT32, atol=FLOAT32 * scale):
            return True
    return False


def largest(out: Any) -> float:
    """The largest magnitude among a result's tensors (the scale of an absolute tolerance)."""
    return max((float(t.abs().max()) for t in parts(out) if isinstance(t, torch.Tensor) and t.numel()), default=0.0)


def _dtypes(probe: Probe, fn: Any, contract: Contract) -> None:
    """Every other dtype the floating inputs admit: the result in the dtype the contract says, to that dtype's own rounding."""
    admitted = [d for a in contract.floats().values() for d in a.dtypes[1:]]
    for dtype in dict.fromkeys(admitted):  # in the contract's order, each once
        call = make_call(contract, probe, dtype=dtype)
        what = f"the output for {str(dtype).removeprefix('torch.')} inputs ({described(call)})"
        try:
            out = compare(probe, contract, fn, call, what)
        except Failure as failure:
            if failure.code == "raised" and run_quietly(probe, fn, make_call(contract, probe)) is not None:
                who, error = failure.message.split(" raised ", 1)
                probe.fail(
                    "fixed_dtype",
                    f"On {str(dtype).removeprefix('torch.')} inputs ({described(call)}), which the exercise admits, {who} raised {error.rstrip('.')}. "
                    "On float32 inputs it runs: a float32 is fixed somewhere in the code.",
                )
            if not (failure.code == "wrong_values" and dtype in EXACT):
                raise
            out = run_quietly(probe, fn, call)
        if dtype in EXACT:
            want = expected_for(
                probe, contract, call, build(probe, fn, call) if probe.exercise.kind == "module" else None
            )
            if float32_inside(out, want):
                off = max(
                    float((o.detach().double() - w.double()).abs().max()) for o, w in zip(tensors(out), tensors(want))
                )
                probe.fail(
                    "precision_lost",
                    f"{what[0].upper()}{what[1:]} has dtype float64 but float32's precision: it is off the float64 reference by up to "
                    f"{off:.1e}, where a float64 result is exact to about 1e-16 of its size.",
                )
            expect_results(
                probe,
                contract,
                out,
                want,
                what,
                None,
                call.inputs,
                rtol=EXACT[dtype],
                atol=EXACT[dtype] * largest(want),
            )


def _defaults(probe: Probe, fn: Any, contract: Contract) -> None:
    """Each optional argument left out, one at a time: a function's or a forward's result is the one for
    its default; a module built without it is the module built with it (see _built_alike)."""
    for name, arg in contract.args.items():
        if not arg.optional:
            continue
        call = make_call(contract, probe)
        call.inputs[name] = OMITTED
        try:
            compare(probe, contract, fn, call, f"the output without `{name}` ({described(call)})")
        except Failure as failure:
            if failure.code not in ("wrong_values", "wrong_shape"):
                raise
            probe.fail(
                "default_changed",
                f"Called without `{name}`, `{probe.name}` gives another result than with {name}={arg.default!r}, "
                f"the default the exercise gives: {failure.message}",
                **default_advice(name, arg),
            )
    optional = {name: arg for name, arg in contract.init.items() if arg.optional}
    if optional and built_unlike(probe, fn, contract, optional) is not None:  # one build each way, then one by one
        for name, arg in optional.items():
            said = built_unlike(probe, fn, contract, {name: arg})
            if said is not None:
                probe.fail(
                    "default_changed",
                    f"Built without `{name}`, `{probe.name}` differs from one built with {name}={arg.default!r}, "
                    f"the default the exercise gives: {said}",
                    **default_advice(name, arg),
                )


def default_advice(name: str, arg: Arg) -> dict[str, str]:
    return {
        "hint": f"An optional argument's default is part of the contract: code that leaves {name} out counts on {arg.default!r} "
        "(a default copied from another codebase, or a part inside built without passing it on, changes it).",
        "fix": f"Write the default into the signature, {name}={arg.default!r}, and pass the argument on to every part that uses it.",
    }


def built_unlike(probe: Probe, cls: Any, contract: Contract, left_out: dict[str, Arg]) -> str | None:
    """How a module built without the `left_out` arguments differs from one built with their defaults: other
    tensors (by shape), once the same values are loaded another output in eval mode, or another dropout rate
    in train mode; None when it does not."""
    sizes = {arg.shape: arg.default for arg in left_out.values() if arg.kind == "size"}  # inputs the defaults admit
    base = make_call(contract, probe, sizes)
    explicit = {**base.init, **{name: arg.default for name, arg in left_out.items()}}
    built = [
        build(probe, cls, Call(init, base.inputs))
        for init in (explicit, {**base.init, **dict.fromkeys(left_out, OMITTED)})
    ]
    state = [probe.call(m.state_dict, what=f"`{probe.name}.state_dict()`") for m in built]
    shapes = [{k: tuple(v.shape) for k, v in s.items()} for s in state]
    if shapes[0] != shapes[1]:
        key = sorted(k for k in shapes[0].keys() | shapes[1].keys() if shapes[0].get(k) != shapes[1].get(k))[0]
        return f"its `{key}` has shape {shapes[1].get(key)} instead of {shapes[0].get(key)}."
    probe.call(built[1].load_state_dict, state[0], what=f"`{probe.name}.load_state_dict(...)`")
    args, kwargs = split(base.inputs)
    outs = [probe.call(m, *args, **kwargs) for m in built]
    if not alike(
        outs[1], outs[0], rtol=1e-7, atol=1e-7
    ):  # the same code on the same values: equal but for another default
        return "in eval mode, with the same weights, its output differs."
    rates = []
    for module, out in zip(built, outs):
        probe.call(module.train, what=f"`{probe.name}.train()`")
        rates.append(dropout_rate(probe.call(module, *args, **kwargs), out))
    if (rates[0] is None) != (rates[1] is None) or (
        rates[0] is not None and rates[1] is not None and abs(rates[0] - rates[1]) > 0.05
    ):

        def show(rate: float | None) -> str:
            return "no dropout" if rate is None else f"dropout at p = {rate:.2f}"

        return f"in train mode it shows {show(rates[1])}, where the default gives {show(rates[0])}."
    return None


def dropout_rate(out: Any, expected: torch.Tensor) -> float | None:
    """If `out` is `expected` with some entries zeroed and the others scaled by
    one common factor 1/(1-p), as dropout applied last does, the p that factor
    implies; else None."""
    if not isinstance(out, torch.Tensor) or out.shape != expected.shape or out.is_meta or out.dtype != expected.dtype:
        return None
    out, expected = out.detach(), expected.detach()
    kept = out != 0
    sizeable = kept & (expected.abs() > 1e-2 * expected.abs().max())  # relative: a sum of small weights is dropped too
    if kept.all() or not sizeable.any():
        return None
    scale = float((out[sizeable] / expected[sizeable]).median())
    if scale <= 1 or not close(out[kept], expected[kept] * scale):
        return None
    return 1 - 1 / scale


def _rows(probe: Probe, fn: Any, contract: Contract) -> None:
    call = make_call(contract, probe, avoid_last=True)
    what = f"the output for ids that never reach the last row ({described(call)})"
    try:
        compare(probe, contract, fn, call, what)
    except Failure:
        out = run_quietly(probe, fn, call)
        top = 1 + max(int(v.max()) for n, v in call.inputs.items() if contract.args[n].kind in INDEX_KINDS)
        size = next(n for n, a in contract.args.items() if a.kind == "size" and a.shape in rows_bounds(contract))
        if isinstance(out, torch.Tensor) and out.dim() and out.shape[0] == top < call.inputs[size]:
            probe.fail(
                "size_from_ids",
                f"For {described(call)}, `{probe.name}` returned {top} rows, the largest id + 1, where `{size}` = {call.inputs[size]} asks "
                "for more: its size was read off the ids. In a real batch the last ids of a vocabulary are rare.",
                hint=f"The number of rows is the table's (`{size}`), not the batch's: ids.max() + 1, torch.bincount without minlength "
                "or F.one_hot without num_classes all guess it from the ids at hand.",
                fix=f"Size the result from the argument: `torch.zeros({size}, d, ...)`, `torch.bincount(ids, minlength={size})`.",
            )
        raise


def rows_bounds(contract: Contract) -> set[str]:
    """The symbols that bound ids and are given by a `size` argument: the tables the ids index are that big."""
    given = {a.shape for a in contract.args.values() if a.kind == "size"}
    return {a.bound for a in contract.args.values() if a.kind in INDEX_KINDS and a.bound in given}


def _varied(probe: Probe, fn: Any, contract: Contract) -> None:
    for name, arg in contract.args.items():
        for value in arg.values[1:] if arg.values else ():
            call = make_call(contract, probe)
            call.inputs[name] = value
            try:
                compare(probe, contract, fn, call, f"the output for `{name}` = {value!r} ({described(call)})")
            except Failure as failure:
                out = run_quietly(probe, fn, call)
                base = make_call(contract, probe)
                base.inputs.update({k: v for k, v in call.inputs.items() if k != name})
                if failure.code == "wrong_values" and alike(out, expected_for(probe, contract, base)):
                    probe.fail(  # wrong_values: a specific catalogue mistake (wrong_base...) was matched before this
                        "wrong_values",
                        f"With `{name}` = {value!r}, `{probe.name}` returns the right result for `{name}` = {base.inputs[name]!r}: the `{name}` it is given is ignored.",
                        hint=f"Every argument the function takes must reach the computation: a constant written where `{name}` belongs, or a helper "
                        "called without it, gives the same result whatever is passed.",
                        fix=f"Use `{name}` itself where the formula needs it, and pass it on to every helper that needs it.",
                    )
                raise


def _walked(name: str, walk: Callable[[Probe, Any, Contract], None]) -> Callable[[Probe, Any, Contract], None]:
    def walking(probe: Probe, fn: Any, contract: Contract) -> None:
        walk(probe, fn, contract)
        probe.axes_walked.add(name)

    return walking


AXES: dict[str, Axis] = {
    "ones": Axis(lambda c: bool(c.ones), _walked("ones", _ones)),
    "views": Axis(lambda c: any(a.is_tensor and a.shape for a in c.args.values()), _walked("views", _views)),
    "dtypes": Axis(
        lambda c: c.expected is None and any(len(a.dtypes) > 1 for a in c.floats().values()), _walked("dtypes", _dtypes)
    ),
    "gradient": Axis(lambda c: any(a.grad for a in c.args.values()), _walked("gradient", _gradient)),
    "defaults": Axis(lambda c: any(a.optional for a in {**c.args, **c.init}.values()), _walked("defaults", _defaults)),
    "rows": Axis(lambda c: bool(rows_bounds(c)), _walked("rows", _rows)),
    "varied": Axis(lambda c: any(len(a.values) > 1 for a in c.args.values()), _walked("varied", _varied)),
}


def applicable(contract: Contract) -> list[str]:
    """The axes this contract admits, less those it says why not."""
    return [name for name, axis in AXES.items() if axis.applies(contract) and name not in contract.not_walked]


def walk(submission: Any, probe: Probe) -> None:
    """Every axis the exercise's contract admits, after its own check passed; the first failure is the
    diagnosis, the others are listed under "Also wrong" (Probe.independent)."""
    contract = probe.exercise.contract
    if (
        contract is None or probe.accelerator_pass
    ):  # a GPU's pass compares the own probes' values; the axes ran on the CPU
        return
    probe.independent(
        **{name: lambda name=name: AXES[name].walk(probe, submission, contract) for name in applicable(contract)}
    )


def walked(check: Callable[[Any, Probe], None]) -> Callable[[Any, Probe], None]:
    """An exercise's check followed by its contract's axes (the catalogue wraps every check with it)."""

    def checking(submission: Any, probe: Probe) -> None:
        check(submission, probe)
        walk(submission, probe)

    setattr(checking, "__wrapped__", check)  # noqa: B010 (mypy knows no __wrapped__ on a function)
    return checking
