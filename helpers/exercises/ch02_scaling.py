"""Chapter 02, scaling and weight tying: `ScaledEmbedding` and `TiedLMHead`.

ScaledEmbedding's mistakes take (table, ids, fitted scale) and are shared
with chapter 03 (common.SCALE_MISTAKES); TiedLMHead's take (W, h, fitted
bias) and return the logits the mistaken head gives."""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from helpers import reference
from helpers.contracts import Arg, Contract, Result
from helpers.exercises import oracle
from helpers.exercises.common import (
    NO_GRADIENT_HINT,
    SCALE_MISTAKES,
    backward_reaches,
    dense_grad,
    expect_fixed_scale,
    expect_gradient,
    fitted_scale,
    module_device_pass,
    name_of,
    name_the_scale,
    plain_tensors,
    token_table,
)
from helpers.probe import Probe, close
from helpers.registry import Exercise
from helpers.safety import Failure

# torch's wording when a matrix product gets a (V, d) table where it wanted (d, V).
MATMUL_SHAPE_ERRORS = (
    "cannot be multiplied",
    "size mismatch",
    "must match the size",
    "do not broadcast",
    "Expected size",
    "shape mismatch",
)


# --- known mistakes of the tied head ---------------------------------------------


def head_with_bias(weight: torch.Tensor, h: torch.Tensor, bias: torch.Tensor | None) -> list[torch.Tensor]:
    """Your head adds a bias: its logits are h @ W.T plus a vector of V
    numbers, one per token.

    Hint: An nn.Linear adds a bias unless told otherwise. A tied head, like
    GPT-2's lm_head, has none: each logit is the dot product of h with one
    token's embedding, nothing more.

    Fix: Compute the logits without a bias, `F.linear(h, self.weight)`, or
    build `nn.Linear(d_model, vocab_size, bias=False)` and replace its weight
    by the embedding's."""
    return [] if bias is None else [h @ weight.T + bias]  # `bias` is fitted to the student's output (its mean offset)


def head_probabilities(weight: torch.Tensor, h: torch.Tensor, bias: torch.Tensor | None) -> list[torch.Tensor]:
    """Your head applies a softmax (or log_softmax): it returns probabilities,
    not logits.

    Hint: A language-model head returns raw scores; whoever needs probabilities
    normalises them. Cross-entropy applies log_softmax itself, so a softmax
    in the head would be applied twice, and sampling code applies softmax
    where it needs it.

    Fix: Return the scores as they are, `h @ self.weight.T` (or
    `F.linear(h, self.weight)`), with no softmax or log_softmax after it."""
    logits = h @ weight.T
    return [logits.softmax(-1), logits.log_softmax(-1)]


def head_copied(weight: torch.Tensor, h: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """Your head does not use the embedding's Parameter itself but a copy of
    it (made by .clone(), .detach().clone(), copy_ into a new nn.Linear,
    torch.tensor(...)...). A copy is two matrices that start equal and then
    drift apart: training updates one, not the other.

    Hint: Tying means ONE Parameter object reachable under two names. A plain
    assignment shares the object; every operation that computes, copies or
    wraps a tensor makes a new one. Python's identity test (is) between your
    head's weight and the embedding's tells you which you have.

    Fix: Tie by assignment in __init__, `self.weight = embedding.weight` (or
    `self.proj.weight = embedding.weight` on an nn.Linear built with
    bias=False), and compute with it in forward: `F.linear(h, self.weight)`."""
    return h @ weight.detach().clone().T  # right values today; the identity and behaviour probes tell it apart


def fitted_offset(out: Any, logits: torch.Tensor) -> torch.Tensor | None:
    """The (V,) vector b for which logits + b is closest to `out`: its mean offset."""
    if not isinstance(out, torch.Tensor) or out.shape != logits.shape or out.is_meta or not out.is_floating_point():
        return None
    offset = (out.detach().to(logits.device, logits.dtype) - logits).reshape(-1, logits.shape[-1]).mean(0)  # (V,)
    return offset if bool(torch.isfinite(offset).all()) else None


# --- probes ----------------------------------------------------------------------


def expect_scaled(probe: Probe, out: Any, table: torch.Tensor, ids: torch.Tensor, what: str) -> None:
    """out must be table[ids] * sqrt(d), in float32; name the scale when it is another constant."""
    table = table.detach().float()  # the student's own init; the result is float32 whatever they did
    scale = fitted_scale(out, table[ids])
    try:
        probe.expect(
            out, reference.scaled_embedding(table, ids), what=what, mistakes=probe.known_mistakes(table, ids, scale)
        )
    except Failure as failure:
        name_the_scale(probe, failure, scale, table.shape[1])
        raise


@dataclass(frozen=True)
class Scaled:
    """The ScaledEmbedding a check builds once, and what its aspects share."""

    cls: type[nn.Module]
    module: nn.Module
    table: torch.Tensor  # the student's (V, d) token table
    ids: torch.Tensor  # (B=3, T=5)
    vocab_size: int
    d_model: int


def build_scaled_embedding(cls: type[nn.Module], probe: Probe) -> Scaled:
    # d_model = 10 and 7: sqrt(d) is no integer and differs from d, sqrt(V), sqrt(d/2) and log(d).
    vocab_size, d_model = 37, 10
    module = probe.build(cls, vocab_size, d_model)
    table = token_table(probe, module, vocab_size, d_model)
    ids = probe.ids(vocab_size, 3, 5)  # (B=3, T=5): B != T; ids 0 and V - 1 among them
    return Scaled(cls, module, table, ids, vocab_size, d_model)


def scaled_values(probe: Probe, scaled: Scaled) -> None:
    """table[ids] * sqrt(d) for ids of shape (3, 5), then for another size, odd d_model and any leading shape."""
    expect_scaled(
        probe, probe.call(scaled.module, scaled.ids), scaled.table, scaled.ids, "the output for ids of shape (3, 5)"
    )
    other = probe.build(scaled.cls, 23, 7)
    ids3 = probe.ids(23, 2, 3, 4)
    expect_scaled(
        probe,
        probe.call(other, ids3),
        token_table(probe, other, 23, 7),
        ids3,
        "the output of ScaledEmbedding(23, 7) for ids of shape (2, 3, 4)",
    )


def is_trainable(table: torch.Tensor) -> bool:
    """A Parameter that requires grad: what an optimizer updates."""
    return isinstance(table, nn.Parameter) and table.requires_grad


def table_trainable(probe: Probe, scaled: Scaled) -> None:
    """The table is trained: an optimizer must see it."""
    if not is_trainable(scaled.table):
        probe.fail(
            "no_gradient",
            f"`{probe.name}`'s ({scaled.vocab_size}, {scaled.d_model}) table is not a trainable Parameter (a buffer, or requires_grad=False?): no optimizer would ever update it.",
            hint="The token table is learned like any weight, and an optimizer only updates Parameters that require grad.",
            fix="Keep the table in an `nn.Embedding(vocab_size, d_model)`, whose weight is a trainable nn.Parameter: no register_buffer, no requires_grad_(False).",
        )


def scaled_gradient(probe: Probe, scaled: Scaled) -> None:
    """A gradient must reach every row of the table, scaled by sqrt(d) like the values."""
    table = scaled.table
    if not is_trainable(table):
        return  # table_trainable says so
    table.grad = None
    every = probe.ids(scaled.vocab_size, 3, 13, every=True)  # each of the 37 rows at least once: a frozen row shows
    try:
        out = probe.call(scaled.module, every)
    except Failure:
        if probe.passed("values"):
            raise
        return  # the values say why
    if not isinstance(out, torch.Tensor):
        return
    if not out.requires_grad:
        probe.fail(
            "no_gradient",
            f"`{probe.name}`'s output does not require grad: it is cut off from the table's gradient (a .detach(), .data or torch.no_grad()?), so the embedding could never learn.",
            hint=NO_GRADIENT_HINT,
            fix="Return the scaled lookup as it is, `self.embedding(ids) * math.sqrt(self.d_model)`, without .detach(), .data or torch.no_grad() on the way.",
        )
    if probe.passed("values"):  # a wrong scale gives a wrong gradient: the values said it already
        expect_gradient_per_use(probe, scaled, every, out)


def expect_gradient_per_use(probe: Probe, scaled: Scaled, every: torch.Tensor, out: torch.Tensor) -> None:
    """Each use of a row brings it the upstream gradient times sqrt(d)."""
    table, vocab_size, d_model = scaled.table, scaled.vocab_size, scaled.d_model
    upstream = probe.randn(*out.shape)
    fix = "Look the ids up in the module's own table, `self.embedding(ids)`, not in a copy of its weight made in __init__ or forward."
    backward_reaches(probe, out, upstream, table, f"its ({vocab_size}, {d_model}) table", fix)
    flat = upstream.reshape(-1, d_model) * math.sqrt(d_model)  # d(out)/d(row) = sqrt(d) for each use of the row
    expected_grad = torch.zeros(vocab_size, d_model, device=probe.device).index_add_(0, every.flatten(), flat)
    uses = torch.bincount(every.flatten(), minlength=vocab_size)[:, None]
    if (uses > 1).any() and close(dense_grad(table), expected_grad / uses):
        probe.fail(  # review S9
            "grad_scaled_by_frequency",
            "Your table's gradient is the right one divided by how often each token occurs in the batch: row i gets the "
            "sum over its uses divided by their number (rows used twice get half). That is what nn.Embedding's "
            "scale_grad_by_freq=True does.",
            hint="The lookup's gradient is a plain sum: each use of a row sends its own gradient back. Divided by the count, "
            "a token used ten times in a batch moves no further than one used once; the original Transformer, BERT and GPT-2 "
            "keep the sum, and nn.Embedding's option is off by default.",
            fix="Build the table without the option, `nn.Embedding(vocab_size, d_model)` (scale_grad_by_freq defaults to False), "
            "or pass no scale_grad_by_freq to F.embedding.",
        )
    expect_gradient(
        probe,
        table,
        expected_grad,
        torch.ones(vocab_size, dtype=torch.bool),
        name=name_of(scaled.module, table),
        inputs=f"ids of shape (3, 13) that use every one of the {vocab_size} rows",
        fix="Build the table as `nn.Embedding(vocab_size, d_model)`, without padding_idx: this module trains every token's row. "
        "Look the ids up in it directly, with no .detach(), .data or gradient hook on some of its rows.",
    )


def check_scaled_embedding(cls: type[nn.Module], probe: Probe) -> None:
    scaled = build_scaled_embedding(cls, probe)
    probe.independent(
        values=lambda: scaled_values(probe, scaled),
        trainable=lambda: table_trainable(probe, scaled),
        scale=lambda: expect_fixed_scale(probe, scaled.module, scaled.d_model),
        gradient=lambda: scaled_gradient(probe, scaled),
        device=lambda: module_device_pass(
            probe, cls, (23, 7), lambda device: (probe.randint(23, 2, 3, device=device),)
        ),
    )


def make_embedding(probe: Probe, vocab_size: int, d_model: int, device: torch.device | None = None) -> nn.Embedding:
    """The embedding the check owns and hands to the student's head."""
    device = device or probe.device
    embedding = nn.Embedding(vocab_size, d_model, device=device)
    if device.type != "meta":
        with torch.no_grad():
            embedding.weight.copy_(probe.randn(vocab_size, d_model))  # our values, not the global RNG's
    return embedding


def call_head(probe: Probe, head: nn.Module, h: torch.Tensor, weight: torch.Tensor) -> Any:
    try:
        return probe.call(head, h)
    except Failure as failure:
        if failure.code == "raised" and any(text in failure.message for text in MATMUL_SHAPE_ERRORS):
            vocab_size, d_model = weight.shape
            probe.fail(
                "wrong_shape",
                f"{failure.message.rstrip('.')}. The embedding weight W is stored ({vocab_size}, {d_model}): one row per token.",
                hint="Follow the shapes: h is (..., d) and W is (V, d). A matrix product needs the inner sizes to agree, and the logits must come out (..., V).",
                fix="Multiply by the transpose, `h @ self.weight.T`, or use `F.linear(h, self.weight)`, which transposes for you: (..., d) @ (d, V) -> (..., V).",
            )
        if failure.code == "raised" and "must be a matrix" in failure.message and h.dim() > 2:
            probe.fail(  # review T13: torch.mm and torch.addmm take 2-D matrices only
                "raised",
                failure.message,
                hint=f"torch.mm, Tensor.mm and torch.addmm multiply two 2-D matrices and nothing else; h here is {h.dim()}-D, "
                f"{tuple(h.shape)}: a batch of sequences, (..., d) with any number of leading axes.",
                fix="Use an operation that broadcasts over the leading axes: `h @ self.weight.T`, `torch.matmul(h, self.weight.T)` "
                "or `F.linear(h, self.weight)`.",
            )
        raise


LOGITS_ADVICE = {  # TiedLMHead's advice: code -> (hint, fix) for a wrong result no known mistake explains
    "wrong_shape": (
        "The logits have the shape of h with its last dimension d replaced by V: (..., d) -> (..., V). The vocabulary axis comes last.",
        "Return `h @ self.weight.T` (or `F.linear(h, self.weight)`) as it comes out, without transposing or permuting the result.",
    ),
    "wrong_values": (
        "Each logit is the dot product of h with one token's embedding row, nothing more: no scale, no offset, no normalisation.",
        "Return exactly `h @ self.weight.T` (or `F.linear(h, self.weight)`), with nothing multiplied, added or applied afterwards.",
    ),
}


def normalised(probe: Probe, out: Any, logits: torch.Tensor) -> None:
    """Probabilities (rows of non-negative numbers summing to 1) or log-probabilities
    (their logs), whatever was normalised: returns_probabilities. What was normalised
    is read back from the logs, up to a constant per row: logits plus a vector of V
    numbers means a bias too (probe.also)."""
    if not isinstance(out, torch.Tensor) or out.shape != logits.shape or out.is_meta or not out.is_floating_point():
        return
    got = out.detach().to("cpu", torch.float64)
    ones = torch.ones(got.shape[:-1], dtype=torch.float64)
    if bool((got >= 0).all()) and torch.allclose(got.sum(-1), ones, atol=1e-4):
        kind, logs = "probabilities (each row is non-negative and sums to 1)", got.clamp_min(1e-300).log()
    elif bool((got <= 0).all()) and torch.allclose(got.exp().sum(-1), ones, atol=1e-4):
        kind, logs = "log-probabilities (the exponentials of each row sum to 1)", got
    else:
        return
    offset = logs - logits.detach().to("cpu", torch.float64)
    offset = offset - offset.mean(-1, keepdim=True)  # a constant per row is what softmax forgets
    rows = offset.reshape(-1, offset.shape[-1])
    bias = rows.mean(0)
    if bool(bias.abs().max() > 1e-3) and torch.allclose(rows, bias.expand_as(rows), atol=1e-3):
        probe.also.append(
            f"has_bias: {probe.explain('has_bias')} (Read back from your normalised output: the scores it normalised are h @ W.T plus a vector of V numbers.)"
        )
    probe.fail("returns_probabilities", f"{probe.explain('returns_probabilities')} (Your head returns {kind}.)")


def expect_logits(probe: Probe, out: Any, weight: torch.Tensor, h: torch.Tensor, what: str) -> None:
    expected = reference.tied_logits(weight.detach(), h)
    try:
        probe.expect(
            out, expected, what=what, mistakes=probe.known_mistakes(weight.detach(), h, fitted_offset(out, expected))
        )
    except Failure as failure:
        if failure.code == "wrong_values":
            normalised(probe, out, expected)
        raise


@dataclass(frozen=True)
class TiedHead:
    """The head a check builds once on the check's embedding, and what its aspects share."""

    cls: type[nn.Module]
    head: nn.Module
    weight: nn.Parameter  # the embedding's, which the head must hold
    values: torch.Tensor  # the weight's values the head was built with
    h: torch.Tensor  # (B=3, T=5, d)
    out: Any  # the head's output for h
    parameters: list[tuple[str, nn.Parameter]]  # the head's named parameters


def build_tied_head(cls: type[nn.Module], probe: Probe) -> TiedHead:
    vocab_size, d_model = 29, 12  # V != d: a transposed product cannot hide
    embedding = make_embedding(probe, vocab_size, d_model)
    weight = embedding.weight
    values = weight.detach().clone()
    head = probe.build(cls, embedding)
    expect_embedding_untouched(probe, embedding, weight, values)
    h = probe.randn(3, 5, d_model)  # (B=3, T=5, d)
    out = call_head(probe, head, h, weight)  # with the embedding's values as they came
    parameters = probe.call(lambda: list(head.named_parameters()), what=f"`{probe.name}.named_parameters()`")
    return TiedHead(cls, head, weight, values, h, out, parameters)


def expect_embedding_untouched(
    probe: Probe, embedding: nn.Embedding, weight: nn.Parameter, values: torch.Tensor
) -> None:
    """Building the head leaves the embedding as it was: the same Parameter, with the same values."""
    if embedding.weight is not weight:
        probe.fail(
            "mutated_input",
            f"`{probe.name}(embedding)` replaced the embedding's weight by another Parameter (tied the other way round, `embedding.weight = self.proj.weight`?): "
            "the embedding's trained values are lost.",
            hint="The embedding owns the table and comes trained (or at least initialised); the head is the newcomer: it takes the embedding's Parameter and gives nothing back.",
            fix="Leave `embedding` untouched and take its Parameter: `self.weight = embedding.weight` (or `self.proj.weight = embedding.weight`).",
        )
    if not torch.equal(weight.detach(), values):
        probe.fail(
            "mutated_input",
            f"`{probe.name}(embedding)` changed the values of `embedding.weight` (re-initialised them?): the head must reuse the table as it is.",
            hint="The head shares the embedding's table, values included: initialising that table is the embedding's job, and it is done already.",
            fix="Remove the in-place initialisation of the embedding's weight (nn.init.*_, .normal_(), .copy_(), .data = ...) from your __init__: only assign it.",
        )


def sharing_storage(probe: Probe, tied: TiedHead) -> list[tuple[str, str]]:
    """(name, how it is kept) of the head's tensors, other than the embedding's Parameter itself, that follow
    the embedding's weight when it changes in place: the same storage under another tensor (a new
    nn.Parameter around `.data`, a `.T` view, a buffer). Read by behaviour, so a graded kernel's mirror,
    brought up to date by the call, shows it too."""
    head, weight = tied.head, tied.weight
    held = [(n, t, "Parameter") for n, t in tied.parameters if t is not weight]
    held += [(n, t, "buffer") for n, t in head.named_buffers()]
    held += [
        (f"{prefix}.{n}".lstrip("."), getattr(sub, n), "plain attribute")
        for prefix, sub in head.named_modules()
        for n in plain_tensors(sub)
    ]
    held = [(n, t, how) for n, t, how in held if t.numel() == weight.numel() and not t.is_meta]
    if not held:
        return []
    with torch.no_grad():
        weight.copy_(probe.randn(*weight.shape))
    try:
        with contextlib.suppress(Failure):  # (a view made under no_grad refuses to run now: its values still tell)
            call_head(probe, head, tied.h, weight)  # brings a graded kernel's tensors, mirrored here, up to date
        new = weight.detach()
        return [
            (n, how)
            for n, t, how in held
            if any(t.shape == w.shape and torch.equal(t.detach(), w) for w in (new, new.T))
        ]
    finally:
        with torch.no_grad():
            weight.copy_(tied.values)


def shares_without_tying(probe: Probe, tied: TiedHead) -> None:
    """The head computes with the embedding's numbers, through another tensor over the same storage: copy_not_tied,
    told what really goes wrong (the values never drift apart)."""
    shared = sharing_storage(probe, tied)
    if not shared:
        return
    name, how = shared[0]
    if how == "Parameter":
        faults = (
            f"Training splits the gradient: the lookup's part reaches `embedding.weight`, the logits' part reaches `{name}`, and neither holds their sum; "
            "an optimizer handed both keeps two states for one matrix (with Adam, each part is normalised on its own, which is not the tied update); "
            "parameters() and state_dict() list the matrix twice; and `.to()`, `.half()` or `.cuda()` converts the two Parameters separately, after which they share nothing."
        )
    else:
        # review T14: a detached buffer also loses the logits' gradient, half of what tying is for
        detached = how == "buffer" and not dict(tied.head.named_buffers())[name].requires_grad
        lost = (
            " Worse, it does not require grad: no gradient reaches the matrix through your logits, so training "
            "updates it from the lookup alone, and half of what tying is for is lost."
            if detached
            else ""
        )
        faults = (
            "But it is no Parameter: `.to()`, `.half()` or `.cuda()` converts the embedding's Parameter and your buffer separately, after which they share nothing; and state_dict() saves the matrix twice."
            + lost
            if how == "buffer"
            else f"But it is no Parameter: `.to()`, `.half()` or `.cuda()` converts the embedding's Parameter and never a plain attribute, so your head goes on with a stale `{name}` (the old dtype, device and numbers)."
        )
    probe.fail(
        "copy_not_tied",
        f"Your head computes with `{name}`, a {how} over the embedding's own storage, not with `embedding.weight` itself. "
        f"Its values stay equal to the embedding's, since the numbers are shared. {faults}",
    )


def tied_to_embedding(probe: Probe, tied: TiedHead) -> None:
    """One matrix under two names: the embedding's Parameter is the head's, by identity and by behaviour, and no other."""
    if not any(p is tied.weight for _, p in tied.parameters):
        shares_without_tying(probe, tied)
        held = ", ".join(f"{name} {tuple(p.shape)}" for name, p in tied.parameters) or "none"
        probe.fail(
            "copy_not_tied",
            f"{probe.explain('copy_not_tied')} (Your head's parameters: {held}; none of them is `embedding.weight` itself.)",
        )
    follows_training(probe, tied)
    for name, p in tied.parameters:
        if p is not tied.weight and p.numel() >= tied.weight.numel():
            probe.fail(
                "copy_not_tied",
                f"{probe.explain('copy_not_tied')} (Besides the embedding's weight your head holds `{name}` {tuple(p.shape)}: tying means ONE matrix.)",
            )


def follows_training(probe: Probe, tied: TiedHead) -> None:
    """Train the embedding (change it in place): the head's output must change with it."""
    with torch.no_grad():
        tied.weight.copy_(probe.randn(*tied.weight.shape))
    try:
        after = call_head(probe, tied.head, tied.h, tied.weight)
    finally:
        with torch.no_grad():
            tied.weight.copy_(tied.values)  # the other aspects see the values the head was built with
    out = tied.out
    if (
        isinstance(out, torch.Tensor)
        and isinstance(after, torch.Tensor)
        and out.shape == after.shape
        and close(after, out)
    ):
        probe.fail(
            "copy_not_tied",
            f"{probe.explain('copy_not_tied')} (After we changed embedding.weight in place, your head's output stayed the same: its forward computes with another matrix.)",
        )


def head_logits(probe: Probe, tied: TiedHead) -> None:
    """h @ W.T for h of shape (3, 5, d), then for a (7, d) one: no bias, no softmax, no scale."""
    expect_logits(probe, tied.out, tied.weight, tied.h, "the logits for h of shape (3, 5, 12)")
    h2 = probe.randn(7, tied.weight.shape[1])
    expect_logits(
        probe, call_head(probe, tied.head, h2, tied.weight), tied.weight, h2, "the logits for h of shape (7, 12)"
    )


def head_without_bias(probe: Probe, tied: TiedHead) -> None:
    """No bias Parameter, even a zero one: it would be trained."""
    vocab_size = tied.weight.shape[0]
    for name, p in tied.parameters:
        if p is not tied.weight and p.numel() == vocab_size and p.shape[-1] == vocab_size:
            probe.fail(
                "has_bias",
                f"{probe.explain('has_bias')} (Your head holds `{name}` of shape {tuple(p.shape)}: even at zero it would be trained.)",
            )


def head_gradient(probe: Probe, tied: TiedHead) -> None:
    """One backward through the head reaches the embedding's Parameter, with h's gradient for every row."""
    if not (probe.passed("tie") and probe.passed("logits")):
        return  # a copy, or wrong logits, say so themselves
    weight, h = tied.weight, tied.h
    vocab_size, d_model = weight.shape
    weight.grad = None
    out = call_head(probe, tied.head, h, weight)
    if not out.requires_grad:
        probe.fail(
            "no_gradient",
            f"`{probe.name}`'s logits do not require grad: they are cut off from the embedding's weight (torch.no_grad(), .detach() or .data?), so training through the head would never update the shared matrix.",
            hint=NO_GRADIENT_HINT,
            fix="Compute the logits from the tied Parameter itself, `F.linear(h, self.weight)`, outside any torch.no_grad() block and without .detach() or .data.",
        )
    upstream = probe.randn(3, 5, vocab_size)
    fix = "Compute the logits from the embedding's Parameter itself, `F.linear(h, self.weight)` with `self.weight = embedding.weight`."
    backward_reaches(probe, out, upstream, weight, "`embedding.weight`", fix)
    expected_grad = upstream.reshape(-1, vocab_size).T @ h.reshape(-1, d_model)  # (V, B*T) @ (B*T, d) -> (V, d)
    expect_gradient(
        probe,
        weight,
        expected_grad,
        torch.ones(vocab_size, dtype=torch.bool),  # every token's logit uses its row
        name="embedding.weight",
        inputs="h of shape (3, 5, 12), through all 29 logits",
        fix="Multiply h by the whole tied Parameter, `F.linear(h, self.weight)`: no row detached, no gradient hook on it.",
    )


def head_device(probe: Probe, tied: TiedHead) -> None:
    """An embedding on the device: everything the head makes must follow it."""
    vocab_size, d_model = tied.weight.shape
    module_device_pass(
        probe,
        tied.cls,
        lambda device: (make_embedding(probe, vocab_size, d_model, device),),
        lambda device: (probe.randn(3, 5, d_model, device=device),),
    )


def check_tied_lm_head(cls: type[nn.Module], probe: Probe) -> None:
    tied = build_tied_head(cls, probe)
    probe.independent(
        tie=lambda: tied_to_embedding(probe, tied),
        logits=lambda: head_logits(probe, tied),
        bias=lambda: head_without_bias(probe, tied),
        gradient=lambda: head_gradient(probe, tied),
        device=lambda: head_device(probe, tied),
    )


# The axes' calls (helpers/contracts.py): a batch of one, a single token, transposed inputs; each right
# output computed from the module's own table (found by shape), or from the embedding the head is built on.
SIZES = {"V": 13, "d": 10, "...": "B T", "B": 3, "T": 5}
SCALED_CONTRACT = Contract(
    init={"vocab_size": Arg("size", "V"), "d_model": Arg("size", "d")},
    args={"ids": Arg("ids", "...", bound="V")},
    result=Result("... d"),
    sizes=SIZES,
    ones="B T",
    expected=lambda probe, module, vocab_size, d_model, ids: (
        token_table(probe, module, vocab_size, d_model)[ids] * math.sqrt(d_model)
    ),
)
TIED_CONTRACT = Contract(
    init={"embedding": Arg("embedding", "V d")},
    args={"h": Arg("activations", "... d", grad=True)},
    result=Result("... V"),
    sizes=SIZES,
    ones="B T",
    expected=lambda probe, module, embedding, h: h @ embedding.weight.T,
)

EXERCISES = [
    Exercise(
        id="ScaledEmbedding",
        chapter=2,
        points=2,
        kind="module",
        reference=reference.ScaledEmbedding,
        check=check_scaled_embedding,
        mistakes=SCALE_MISTAKES,
        difficulty=1,
        importance=2,
        minutes=10,
        edges=("ids",),
        contract=SCALED_CONTRACT,
    ),
    Exercise(
        id="TiedLMHead",
        advice=LOGITS_ADVICE,
        chapter=2,
        points=3,
        kind="module",
        reference=reference.TiedLMHead,
        check=check_tied_lm_head,
        oracle=oracle.head_in_gpt2,
        mistakes={
            "copy_not_tied": head_copied,
            "has_bias": head_with_bias,
            "returns_probabilities": head_probabilities,
        },
        difficulty=2,
        importance=2,
        minutes=15,
        contract=TIED_CONTRACT,
    ),
]
