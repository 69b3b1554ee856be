"""Chapter 04, learned positions and BERT: `LearnedPositionalEmbedding` and `BertEmbeddings`.

LearnedPositionalEmbedding's mistakes are chapter 03's (common.POSITION_ADDING_MISTAKES) and its own,
(x (B, T, d), the module's table) -> its output; they and BertEmbeddings' are in learned_mistakes.py.
The check loads MiniLM's real weights and compares with transformers' own BertEmbeddings."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, TypedDict

import torch
from torch import nn

from helpers import reference
from helpers.contracts import Arg, Contract, Result, default_advice
from helpers.exercises import oracle
from helpers.exercises.common import (
    NO_GRADIENT_HINT,
    POSITION_ADDING_MISTAKES,
    dense_grad,
    drops_in_eval,
    expect_dropout,
    expect_gradient,
    expect_no_dropout_in_eval,
    expect_rows_from,
    find_table,
    module_device_pass,
    oriented,
    plain_tensors,
    position_tables,
    refuses_past_max_len,
)
from helpers.exercises.learned_mistakes import BERT_MISTAKES, Weights, bert_norm, bert_parts, learned_input_scaled
from helpers.exercises.meta_modes import NoRandomInit, StrictLikeCuda
from helpers.exercises.sinusoidal import columns_sliced
from helpers.probe import Probe, close
from helpers.registry import Exercise
from helpers.safety import Failure

# --- probes ------------------------------------------------------------------------------


TRAINABLE_HINT = "Learned positions are weights like the token table: the optimizer updates only the module's Parameters with requires_grad=True, and .to(device) moves only registered tensors."


def learned_table(probe: Probe, module: nn.Module, max_len: int, d: int) -> tuple[str, torch.Tensor]:
    """The student's table of positions, found by its role (common.position_tables: d columns, at least
    max_len rows, spare or offset rows, size-1 axes, kept transposed), registered; else wrong_shape."""
    found = [(name, t) for name, t, _, how in position_tables(module, max_len, d) if how != "plain"]
    return found[0] if found else find_table(probe, module, max_len, d, "the position table (max_len, d_model)")


MAX_LEN, D = 20, 12  # what LearnedPositionalEmbedding is built with: max_len, d_model


@dataclass(frozen=True)
class Learned:
    """What the aspects of LearnedPositionalEmbedding's check share: the module, its table, the inputs."""

    module: nn.Module
    name: str  # the table's name in the module
    param: torch.Tensor  # the table as the module keeps it
    table: torch.Tensor  # (R, d), R >= max_len: row t is position t
    x: torch.Tensor  # (3, 7, d): B=3 != T=7 != d=12
    cpu_x: torch.Tensor  # (2, max_len, d), on the CPU


def build_learned(cls: type[nn.Module], probe: Probe) -> Learned:
    """Hygiene first: a table kept in a plain attribute would also look like a device bug in the aspects."""
    module = probe.build(cls, MAX_LEN, D)
    plain = plain_tensors(module, lambda t: oriented(t, MAX_LEN, D) is not None)
    if plain:
        probe.fail(
            "positions_not_trainable",
            f"`{probe.name}` keeps its table in a plain attribute, `self.{plain[0]}`: the optimizer never sees it, so it is never trained, and .to(device) leaves it behind.",
            hint=TRAINABLE_HINT,
            fix=f"Make the table a Parameter: `self.{plain[0]} = nn.Embedding(max_len, d_model)` (look its rows up with the position ids), or wrap the tensor in `nn.Parameter(...)`.",
        )
    name, param = learned_table(probe, module, MAX_LEN, D)
    with torch.no_grad():  # known values whatever the init: a zero-initialised table would hide a missing `x +`
        param.copy_(probe.randn(*param.shape))
    x = probe.sequence(probe.randn(3, 7, D), MAX_LEN)
    cpu_x = probe.sequence(probe.randn(2, MAX_LEN, D, device="cpu"), MAX_LEN)
    return Learned(module, name, param, oriented(param.detach(), MAX_LEN, D), x, cpu_x)


def learned_trainable(probe: Probe, setup: Learned) -> None:
    """The table is a trainable Parameter: a buffer or a frozen one is never learned."""
    parameters = dict(setup.module.named_parameters())
    if setup.name not in parameters or not parameters[setup.name].requires_grad:
        kind = "a buffer" if setup.name not in parameters else "a Parameter with requires_grad=False"
        probe.fail(
            "positions_not_trainable",
            f"`{probe.name}`'s table `{setup.name}` is {kind}: the optimizer would never change it, so these learned positions would never be learned.",
            hint=TRAINABLE_HINT,
            fix="Make the table `nn.Embedding(max_len, d_model)` or `nn.Parameter(torch.randn(max_len, d_model))`, with no register_buffer and no requires_grad_(False).",
        )


def learned_values(probe: Probe, setup: Learned) -> None:
    """x + P[:T] in training mode (this module has no dropout), for T = 7, then 1."""
    probe.call(setup.module.train)
    for x_T in (setup.x, probe.sequence(probe.randn(3, 1, D), MAX_LEN)):
        T = x_T.shape[1]
        try:
            out = probe.call(setup.module, x_T)
        except Failure as failure:
            embedding = setup.name.removesuffix(".weight")
            look_up = (
                f", or look them up: `self.{embedding}(torch.arange(T, device=x.device))`"
                if embedding != setup.name
                else ""
            )
            fix = f"Take the first T rows, `self.{setup.name}[:T]`{look_up}."
            columns_sliced(probe, failure, setup.param, setup.name, tuple(x_T.shape), fix)
            raise
        expected = x_T + setup.table[:T]
        try:
            probe.expect(
                out,
                expected,
                what=f"x + P[:T] for x of shape (3, {T}, 12)",
                mistakes=probe.known_mistakes(x_T, setup.table),
            )
        except Failure as failure:
            if failure.code == "wrong_values":
                fail_if_right_in_eval(probe, setup, x_T, expected)
            added = out - x_T if isinstance(out, torch.Tensor) and out.shape == x_T.shape else None
            expect_rows_from(probe, failure, added, setup.table, 0, setup.name, f"x of shape (3, {T}, 12)", 1e-5)
            raise


def fail_if_right_in_eval(probe: Probe, setup: Learned, x: torch.Tensor, expected: torch.Tensor) -> None:
    """Wrong in training mode but right in eval mode: the module applies a dropout it should not have."""
    probe.call(setup.module.eval)
    if close(probe.call(setup.module, x), expected):
        probe.fail(
            "unexpected_dropout",
            f"`{probe.name}` is right in eval mode but not in training mode: it applies dropout, and this module has none.",
            hint="This module is only x + P[:T]. In BERT, dropout comes once, after the LayerNorm of the whole sum: that is the next exercise's job.",
            fix=f"Delete the dropout layer and its call in forward: return x plus the first T rows of `{setup.name}`, the same in training and eval mode.",
        )


def learned_length(probe: Probe, cls: type[nn.Module], setup: Learned) -> None:
    """T = max_len works and longer refuses, on a copy on the CPU (see refuses_past_max_len), in eval mode."""
    on_cpu = probe.call(cls, MAX_LEN, D, what=f"`{probe.name}({MAX_LEN}, {D})`")
    _, cpu_param = learned_table(probe, on_cpu, MAX_LEN, D)
    with torch.no_grad():
        cpu_param.copy_(setup.param.detach().cpu())
    probe.call(on_cpu.eval)

    def longer(T: int) -> torch.Tensor:
        return probe.sequence(probe.randn(2, T, D, device="cpu"), MAX_LEN)

    out = refuses_past_max_len(probe, lambda T: probe.call(on_cpu, setup.cpu_x if T == MAX_LEN else longer(T)), MAX_LEN)
    table_cpu = setup.table.cpu()
    probe.expect(
        out,
        setup.cpu_x + table_cpu[:MAX_LEN],
        what=f"the output for T = max_len = {MAX_LEN}",
        mistakes=probe.known_mistakes(setup.cpu_x, table_cpu),
    )


def summed_backward(probe: Probe, setup: Learned, out: torch.Tensor) -> None:
    """out.sum().backward() into an empty gradient: each row's gradient then counts how often it was added."""
    setup.param.grad = None
    probe.call(lambda: out.sum().backward(), what=f"backward through `{probe.name}`")


def learned_gradient(probe: Probe, setup: Learned) -> None:
    """The output reaches the table; once the values are right, each row gets the gradient its positions give it."""
    if not setup.param.requires_grad:
        return  # learned_trainable names it
    probe.call(setup.module.eval)
    out = probe.call(setup.module, probe.sequence(probe.randn(3, 7, D), MAX_LEN))
    if not (isinstance(out, torch.Tensor) and out.requires_grad):
        probe.fail(
            "positions_not_trainable",
            f"`{probe.name}`'s output does not require grad although the table `{setup.name}` does: it is cut off from the table's gradient, so the table could never learn.",
            hint=NO_GRADIENT_HINT,
            fix=f"Add the rows of `{setup.name}` to x with torch operations only: drop the .detach(), the torch.no_grad() block or the round trip through NumPy.",
        )
    summed_backward(probe, setup, out)
    if setup.param.grad is None:
        probe.fail(
            "positions_not_trainable",
            f"`{probe.name}`'s output does not reach the table `{setup.name}`: after backward it has no gradient.",
            hint=NO_GRADIENT_HINT,
            fix=f"Compute the output from `{setup.name}` itself, `x + ` its first T rows, not from a copy of it or from another tensor.",
        )
    if probe.passed("values"):  # rows read from elsewhere (an offset) get gradients elsewhere: the values say so
        gradient_per_row(probe, setup)


def gradient_per_row(probe: Probe, setup: Learned) -> None:
    """T = max_len: every position's row gets a gradient; T = 7: the rows past T get nothing."""
    rows = len(setup.table)
    summed_backward(probe, setup, probe.call(setup.module, probe.sequence(probe.randn(3, MAX_LEN, D), MAX_LEN)))
    expected = torch.zeros(rows, D, device=probe.device)
    expected[:MAX_LEN] = 3.0  # each position's row was added to 3 sequences
    expect_gradient(
        probe,
        setup.param,
        expected,
        torch.arange(rows) < MAX_LEN,
        name=setup.name,
        inputs=f"x of shape (3, {MAX_LEN}, {D}), T = max_len, which uses every position",
        rows=lambda t: oriented(t, MAX_LEN, D),
        fix=f"Build the table as `nn.Embedding(max_len, d_model)` (or an nn.Parameter), without padding_idx: every position's row is learned. "
        f"Add the rows of `{setup.name}` itself, with no .detach(), .data or gradient hook on some of them.",
    )
    summed_backward(probe, setup, probe.call(setup.module, setup.x))
    used = torch.zeros(rows, D, device=probe.device)
    used[:7] = 3.0  # each of the 7 used rows was added to 3 sequences
    probe.expect(
        oriented(dense_grad(setup.param), MAX_LEN, D),
        used,
        what=f"the gradient of `{setup.name}` after out.sum().backward()",
        hint="After out.sum().backward(), each row's gradient counts how often it was added: 3 for each of the 7 positions used (once per sequence of the batch), 0 for the rows past T.",
    )


def learned_device(probe: Probe, cls: type[nn.Module]) -> None:
    """Position ids made on x's device: a meta pass as strict as CUDA."""
    module_device_pass(
        probe,
        cls,
        (MAX_LEN, D),
        lambda device: (probe.randn(3, 7, D, device=device),),
        mode=StrictLikeCuda,
        code="positions_on_cpu",
        message=f"`{probe.name}` builds its position ids on the CPU whatever x's device (a bare `torch.arange(T)`, or ids kept in a plain attribute, which stays behind "
        "when the module moves): on a GPU, looking them up in the table fails with 'Expected all tensors to be on the same device'.",
        hint="A tensor made in forward lands on the CPU unless told otherwise, and module.to(device) moves only registered parameters and buffers: "
        "the ids must be made on, or move with, the input's device.",
        fix="Write `torch.arange(T, device=x.device)`, or keep the ids in a registered buffer: "
        "`self.register_buffer('position_ids', torch.arange(max_len), persistent=False)`, sliced to `[:T]` in forward.",
    )


def check_learned_positions(cls: type[nn.Module], probe: Probe) -> None:
    setup = build_learned(cls, probe)
    probe.independent(
        trainable=lambda: learned_trainable(probe, setup),
        values=lambda: learned_values(probe, setup),
        length=lambda: learned_length(probe, cls, setup),
        gradient=lambda: learned_gradient(probe, setup),
        device=lambda: learned_device(probe, cls),
    )


# A small config with non-default values everywhere: hard-coded sizes, eps,
# dropout or padding id show up. Tiny weights make the summed embeddings'
# variance ~3e-6, so an eps of 1e-5 (or 1e-12 where 1e-7 was asked) is plain.
class SmallConfig(TypedDict):
    max_position_embeddings: int
    type_vocab_size: int
    layer_norm_eps: float
    hidden_dropout_prob: float
    pad_token_id: int


BERT_SMALL: SmallConfig = {
    "max_position_embeddings": 16,
    "type_vocab_size": 3,
    "layer_norm_eps": 1e-7,
    "hidden_dropout_prob": 0.25,
    "pad_token_id": 1,
}
BERT_SMALL_SIZES = (40, 24)  # vocab_size, hidden_size
HF_NAMES = (
    "word_embeddings, position_embeddings, token_type_embeddings (nn.Embedding), LayerNorm (nn.LayerNorm) and dropout"
)


def bert_small_weights(probe: Probe) -> Weights:
    (V, d), P, S = BERT_SMALL_SIZES, BERT_SMALL["max_position_embeddings"], BERT_SMALL["type_vocab_size"]
    return {
        "word_embeddings.weight": probe.randn(V, d) * 1e-3,
        "position_embeddings.weight": probe.randn(P, d) * 1e-3,
        "token_type_embeddings.weight": probe.randn(S, d) * 1e-3,
        "LayerNorm.weight": 1 + 0.1 * probe.randn(d),
        "LayerNorm.bias": 0.1 * probe.randn(d),
    }


def load_pretrained(probe: Probe, module: nn.Module, weights: Weights) -> list[str]:
    """Load `weights` the way a user would. Fails with state_dict_mismatch, naming
    the keys, when a tensor has the wrong shape or one of the module's
    parameters would keep its random values; returns the pretrained keys that
    found no home (their verdict waits for the values: a module with no
    LayerNorm at all is better told `missing_layernorm`). Buffers the
    checkpoint does not hold (HF's position_ids) are fine."""
    own = probe.call(module.state_dict, what=f"`{probe.name}.state_dict()`")
    wrong = [
        f"`{k}` is {tuple(own[k].shape)} in yours but {tuple(v.shape)} in the checkpoint"
        for k, v in weights.items()
        if k in own and tuple(own[k].shape) != tuple(v.shape)
    ]
    if wrong:
        probe.fail(
            "state_dict_mismatch",
            f"The pretrained weights do not load into `{probe.name}`: {'; '.join(wrong)}.",
            hint="Each table's shape comes from the constructor's arguments, which the checkpoint's config fills in: a size written into the code fits one config, not every checkpoint.",
            fix="Build each table from the arguments: `nn.Embedding(vocab_size, hidden_size)`, `nn.Embedding(max_position_embeddings, hidden_size)`, "
            "`nn.Embedding(type_vocab_size, hidden_size)` and `nn.LayerNorm(hidden_size, eps=layer_norm_eps)`.",
        )
    homeless = [k for k in weights if k not in own]
    unfilled = [k for k, _ in module.named_parameters() if k not in weights]
    if unfilled:
        fail_state_dict(probe, homeless, unfilled)
    kept = [k for k in own if k not in weights]  # persistent buffers: the chapter's strict load_state_dict misses them
    if kept:
        probe.fail(
            "state_dict_mismatch",
            f"`{probe.name}` saves {', '.join(f'`{k}`' for k in kept)} in its state_dict, which the checkpoint does not hold: "
            f"a strict `load_state_dict` (the chapter's, and PyTorch's default) raises \"Missing key(s) in state_dict: {', '.join(repr(k) for k in kept)}\".",
            hint="A buffer is saved with the weights unless it is registered as non-persistent. Position ids 0 .. max_len-1 can be rebuilt at any time, "
            "so transformers (since 4.31) keeps them out of the checkpoint.",
            fix="Register it with `self.register_buffer('position_ids', torch.arange(max_position_embeddings), persistent=False)`, "
            "or make the ids in forward on input_ids' device.",
        )
    # load_state_dict copies into the module's own tensors; a lambda spares
    # probe.call a snapshot of 47 MB of weights that nothing may change.
    probe.call(lambda: module.load_state_dict(weights, strict=False), what=f"`{probe.name}.load_state_dict(...)`")
    return homeless


def fail_state_dict(probe: Probe, homeless: list[str], unfilled: list[str]) -> None:
    parts = []
    if homeless:
        parts.append(f"the pretrained {', '.join(f'`{k}`' for k in homeless)} found no place in your module")
    if unfilled:
        parts.append(
            f"your {', '.join(f'`{k}`' for k in unfilled)} would keep {'its' if len(unfilled) == 1 else 'their'} random values"
        )
    probe.fail(
        "state_dict_mismatch",
        f"load_state_dict fails: {' and '.join(parts)}.",
        hint="load_state_dict matches tensors by name, and the pretrained names are HF's (word_embeddings.weight, LayerNorm.bias, ...): "
        "the submodules' names and their parameters are part of this exercise.",
        fix=f"Call the submodules exactly {HF_NAMES}, as HF does, and keep nn.LayerNorm's weight and bias (its default, elementwise_affine=True).",
    )


BERT_VALUES = (  # wrong_values: (hint, fix). The sizes are MiniLM's or the small config's: no case small enough to work by hand
    "Each output row is LayerNorm(word_embeddings[input_ids[b, t]] + position_embeddings[t] + token_type_embeddings[token_type_ids[b, t]]): "
    "three rows looked up by three different ids (the token, its position 0 .. T-1, its segment), summed, then normalised.",
    "Compute one row by hand from your own submodules, `self.LayerNorm(self.word_embeddings.weight[input_ids[0, 1]] + self.position_embeddings.weight[1] + "
    "self.token_type_embeddings.weight[token_type_ids[0, 1]])`, and compare it with your output[0, 1]; then check which lookup takes which ids.",
)


OTHER_EPS = (1e-5, 1e-6, 1e-3, 1e-12)  # PyTorch's default, BERT's, and slips of the exponent


def with_other_eps(
    probe: Probe, out: Any, weights: Weights, ids: torch.Tensor, types: torch.Tensor, eps: float
) -> None:
    """Two independent mistakes, one of them the eps: a catalogue mistake run with another eps reproduces
    the output. Every mistake takes the eps as an argument, so the pair is found by running them, and the
    eps goes under "Also wrong" by its own code."""
    for other in OTHER_EPS:
        if other == eps:
            continue
        for code, faces in probe.known_mistakes(weights, ids, types, other)().items():
            if code != "layernorm_eps" and any(close(out, face) for face in faces):
                said = probe.explain("layernorm_eps").split(")", 1)[-1]
                probe.also.append(f"layernorm_eps: {eps_said(out, weights, ids, types, eps, used=other)}{said}")
                probe.fail(code, probe.explain(code))


def eps_said(
    out: Any, weights: Weights, ids: torch.Tensor, types: torch.Tensor, eps: float, used: float | None = None
) -> str:
    """Which eps the student's LayerNorm used, said as what it is: a number written into the code is not a default."""
    if used is None:
        word, pos, seg = bert_parts(weights, ids, types)
        used = next(
            (other for other in OTHER_EPS if other != eps and close(out, bert_norm(weights, word + pos + seg, other))),
            None,
        )
    if used is None:
        return "Your LayerNorm's eps is not the `layer_norm_eps` you were given"
    default = (
        " (PyTorch's default: nn.LayerNorm was built without eps=)"
        if used == 1e-5
        else " (BERT's value, written into your code?)"
        if used == 1e-12
        else ""
    )
    return f"Your LayerNorm uses eps = {used:g}{default}, not the `layer_norm_eps` it was given ({eps:g} here)"


def expect_bert(
    probe: Probe,
    out: Any,
    expected: torch.Tensor,
    weights: Weights,
    ids: torch.Tensor,
    types: torch.Tensor,
    eps: float,
    homeless: list[str],
    what: str,
) -> None:
    expect_no_dropout_in_eval(probe, out, expected)
    try:
        probe.expect(
            out,
            expected,
            what=what,
            mistakes=probe.known_mistakes(weights, ids, types, eps),
            hint=BERT_VALUES[0],
            fix=BERT_VALUES[1],
        )
    except Failure as failure:
        if failure.code == "layernorm_eps":
            failure.message = eps_said(out, weights, ids, types, eps) + failure.message.split(")", 1)[-1]
        if failure.code == "wrong_values":
            with_other_eps(probe, out, weights, ids, types, eps)
        if homeless and failure.code not in ("missing_layernorm", "missing_token_type"):
            fail_state_dict(probe, homeless, [])
        raise
    if homeless:
        fail_state_dict(probe, homeless, [])


def call_bert(probe: Probe, module: nn.Module, ids: torch.Tensor, types: torch.Tensor | None) -> torch.Tensor:
    try:
        return probe.call(module, ids) if types is None else probe.call(module, ids, types)
    except Failure as failure:
        if failure.code != "raised":
            raise
        one_hot_too_narrow(probe, failure, ids, torch.zeros_like(ids) if types is None else types)
        if "Boolean value of Tensor" in failure.message and types is not None:
            probe.fail(  # review BE5: `token_type_ids or torch.zeros_like(input_ids)`
                "raised",
                f"{failure.message} (called with token_type_ids given, a tensor of shape {tuple(types.shape)})",
                hint="`a or b`, `if token_type_ids:` and `not token_type_ids` ask a tensor for one truth value, and a tensor of "
                "more than one entry has none. Only None means 'no segments given'.",
                fix="Test for None explicitly: `if token_type_ids is None: token_type_ids = torch.zeros_like(input_ids)`.",
            )
        if types is None:
            probe.fail(
                "raised",
                f"{failure.message} (called with token_type_ids=None, which must mean all zeros: one segment)",
                hint="token_type_ids is optional: for a single sentence, callers pass input_ids alone, and every token is then in segment 0.",
                fix="At the start of forward: `if token_type_ids is None: token_type_ids = torch.zeros_like(input_ids)`.",
            )
        raise


def one_hot_too_narrow(probe: Probe, failure: Failure, ids: torch.Tensor, types: torch.Tensor) -> None:
    """ "(N x K and R x d) cannot be multiplied" with K < R: a one-hot as wide as the largest id + 1, met by a table
    of R rows (google-research/bert's one-hot lookup ported without its depth=)."""
    shapes = re.search(r"cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)", failure.message)
    read_off_ids = {int(ids.max()) + 1, int(types.max()) + 1}  # what F.one_hot(ids) makes its width
    if shapes is None or not int(shapes.group(2)) < int(shapes.group(3)) or int(shapes.group(2)) not in read_off_ids:
        return
    width, rows = shapes.group(2), shapes.group(3)
    probe.fail(
        "size_from_ids",
        f"{failure.message}: a one-hot {width} wide met a table of {rows} rows. F.one_hot without num_classes makes "
        "its width the largest id + 1, so it fits the table only when the ids happen to hold its last row.",
        hint="A table's height is fixed by the config (vocab_size, type_vocab_size), and one batch of ids rarely uses its "
        "last row: a single sentence has segment 0 only, and the last ids of a vocabulary are rare.",
        fix="Give the one-hot the table's height, `F.one_hot(ids, num_classes=self.token_type_embeddings.num_embeddings)` "
        "(likewise for the words), or look the rows up: `self.token_type_embeddings(token_type_ids)`.",
    )


BERT_GRADIENT_FIX = "Compute the output from the submodules themselves, `self.word_embeddings(input_ids)` and the others, with no .detach() or torch.no_grad() on the way."


@dataclass(frozen=True)
class BertInputs:
    """What BertEmbeddings' aspects feed a module, drawn up front in the order they use it: a seed gives the same."""

    cpu_weights: Weights  # a first run's, on the CPU
    cpu_ids: torch.Tensor
    cpu_types: torch.Tensor
    weights: Weights
    ids: torch.Tensor  # (4, P): every position, every token row, every segment
    types: torch.Tensor
    short: tuple[torch.Tensor, torch.Tensor]  # (4, 1) ids and types: T = 1
    reference_module: nn.Module  # the small config's, `weights` loaded


def bert_inputs(probe: Probe) -> BertInputs:
    """The CPU run's inputs (bert_values_minilm's) first, then the small config's: the order the aspects use them."""
    (V, d), small = BERT_SMALL_SIZES, BERT_SMALL
    P, S, pad = small["max_position_embeddings"], small["type_vocab_size"], small["pad_token_id"]
    cpu_weights = {k: v.cpu() for k, v in bert_small_weights(probe).items()}
    cpu_ids = probe.sequence(probe.ids(V, 4, 11, device="cpu"), P)
    cpu_types = probe.segments(S, 4, 11, device="cpu")
    weights = bert_small_weights(probe)
    # T = max_position_embeddings: every position; ids that use every token row, then 3 [PAD] columns; every segment.
    words = torch.cat([probe.ids(V, 4, P - 3, every=True), torch.full((4, 3), pad, device=probe.device)], dim=1)
    ids = probe.sequence(probe.tag(words, "ids", V), P)
    types = probe.sequence(probe.segments(S, 4, P, every=True), P)
    short = (probe.sequence(probe.ids(V, 4, 1), P), probe.sequence(probe.segments(S, 4, 1), P))
    reference_module = reference.BertEmbeddings(V, d, **small).to(probe.device).eval()
    reference_module.load_state_dict(weights)
    return BertInputs(cpu_weights, cpu_ids, cpu_types, weights, ids, types, short, reference_module)


def bert_small_module(probe: Probe, cls: type[nn.Module], inputs: BertInputs) -> tuple[nn.Module, list[str]]:
    """The student's module in the small config, in eval mode, its weights loaded; and the keys that found no home."""
    module = probe.build(cls, *BERT_SMALL_SIZES, **BERT_SMALL)
    probe.call(module.eval)
    return module, load_pretrained(probe, module, inputs.weights)


def bert_device(probe: Probe, cls: type[nn.Module]) -> None:
    """Position ids and default token types made on input_ids' device: a meta pass as strict as CUDA."""
    module_device_pass(
        probe,
        cls,
        BERT_SMALL_SIZES,
        lambda device: (probe.ids(BERT_SMALL_SIZES[0], 4, 11, device=device),),
        kwargs=dict(BERT_SMALL),
        mode=StrictLikeCuda,
        code="positions_on_cpu",
        message=f"`{probe.name}` builds position ids (or the default token_type_ids) on the CPU whatever input_ids' device: on a GPU the lookup then fails with "
        "'Expected all tensors to be on the same device'.",
        hint="A tensor made in forward without a device lands on the CPU, while the tables moved with the module to input_ids' device; "
        "both the position ids and the default segment ids are made in forward.",
        fix="Write `torch.arange(T, device=input_ids.device)` for the positions and `torch.zeros_like(input_ids)` for token_type_ids=None.",
    )


def bert_values_minilm(probe: Probe, cls: type[nn.Module], inputs: BertInputs) -> None:
    """MiniLM's weights on real sentence pairs, with token_type_ids and None, against transformers' BertEmbeddings."""
    # A first run on the CPU: an index past a table is an IndexError there, but on CUDA a device-side assert
    # that would break every later check. Its weights load first: a table built too small is then named, not hit.
    on_cpu = probe.call(cls, *BERT_SMALL_SIZES, **BERT_SMALL, what=f"`{probe.name}(...)`")
    probe.call(on_cpu.eval)
    load_pretrained(probe, on_cpu, inputs.cpu_weights)
    call_bert(probe, on_cpu, inputs.cpu_ids, inputs.cpu_types)
    call_bert(probe, on_cpu, inputs.cpu_ids, None)
    from helpers import models

    real = models.bert_embeddings_reference()
    weights = models.bert_embeddings_state_dict(copy=False)  # read only
    with NoRandomInit():  # every parameter is loaded below, or the check fails with state_dict_mismatch
        module = probe.build(cls, 30522, 384)
    probe.call(module.eval)
    homeless = load_pretrained(probe, module, weights)
    weights = {k: v.to(probe.device) for k, v in weights.items()}
    ids, types = real["input_ids"].to(probe.device), real["token_type_ids"].to(probe.device)
    what = f"the embeddings of {ids.shape[0]} real sentence pairs {tuple(ids.shape)}, with MiniLM's weights loaded (eval mode)"
    out = call_bert(probe, module, ids, types)
    expect_bert(probe, out, real["expected"].to(probe.device), weights, ids, types, 1e-12, homeless, what)
    out = call_bert(probe, module, ids, None)
    expected, no_types = real["expected_no_types"].to(probe.device), torch.zeros_like(ids)
    what = what.replace("(eval", "and token_type_ids=None (eval")
    expect_bert(probe, out, expected, weights, ids, no_types, 1e-12, homeless, what)


def bert_values_small(probe: Probe, cls: type[nn.Module], inputs: BertInputs) -> None:
    """A small config: non-default arguments, low-variance weights; T = max_position_embeddings, then 1."""
    (V, d), eps = BERT_SMALL_SIZES, BERT_SMALL["layer_norm_eps"]
    module, homeless = bert_small_module(probe, cls, inputs)
    made = f"{probe.name}({V}, {d}, " + ", ".join(f"{k}={v}" for k, v in BERT_SMALL.items()) + ")"
    for ids, types in ((inputs.ids, inputs.types), inputs.short):
        with torch.no_grad():
            expected = inputs.reference_module(ids, types)
        what = f"the output of {made} for input_ids of shape {tuple(ids.shape)} on low-variance weights (eval mode)"
        out = call_bert(probe, module, ids, types)
        expect_bert(probe, out, expected, inputs.weights, ids, types, eps, homeless, what)


def bert_dropout(probe: Probe, cls: type[nn.Module], inputs: BertInputs) -> None:
    """Training mode: dropout at rate hidden_dropout_prob, last, on the module's own eval-mode output (right or not)."""
    module, _ = bert_small_module(probe, cls, inputs)
    expected = probe.call(module, inputs.ids, inputs.types)
    if drops_in_eval(expected, BERT_SMALL["hidden_dropout_prob"]):
        return
    probe.call(module.train)
    out = probe.call(module, inputs.ids, inputs.types)
    expect_dropout(
        probe,
        out,
        expected.detach(),
        BERT_SMALL["hidden_dropout_prob"],
        f"`{probe.name}`'s output",
        where="Build `self.dropout = nn.Dropout(hidden_dropout_prob)` in __init__ and apply it last: `return self.dropout(self.LayerNorm(words + positions + segments))`.",
        hint="BERT (like the original Transformer) drops values of the normalised sum in training: dropout is the last step of the embedding block, "
        "and a dropout module switches itself off after .eval().",
        not_dropout=(
            "layernorm_order",
            f"In training mode `{probe.name}`'s output is not dropout(LayerNorm(sum)): its entries are not all either 0 or the eval-mode value / (1 - p), "
            "which is what dropout after the LayerNorm gives (dropout before it, or on each embedding, gives something else).",
        ),
    )


def bert_gradients(probe: Probe, cls: type[nn.Module], inputs: BertInputs) -> None:
    """Every table's gradient, on every row the inputs used but [PAD]'s word row (padding_idx=pad_token_id, as HF's)."""
    if not (probe.passed("values_minilm") and probe.passed("values_small")):
        return  # wrong values give wrong gradients: the values said so
    module, _ = bert_small_module(probe, cls, inputs)
    out = probe.call(module, inputs.ids, inputs.types)
    if not out.requires_grad:
        probe.fail(
            "no_gradient",
            f"`{probe.name}`'s output does not require grad although its weights do: it is cut off from their gradient, so it could never be fine-tuned.",
            hint=NO_GRADIENT_HINT,
            fix=BERT_GRADIENT_FIX,
        )
    upstream = probe.randn(*out.shape)
    probe.call(lambda: (out * upstream).sum().backward(), what=f"backward through `{probe.name}`")
    inputs.reference_module.zero_grad(set_to_none=True)
    (inputs.reference_module(inputs.ids, inputs.types) * upstream).sum().backward()
    expect_bert_gradients(probe, module, inputs.reference_module, inputs.ids, inputs.types)


def bert_padding_default(probe: Probe, cls: type[nn.Module], inputs: BertInputs) -> None:
    """Built without pad_token_id, [PAD] is id 0 (BERT's and the exercise's default): its word row gets no gradient.
    The contract's defaults axis compares shapes, outputs and dropout, which padding_idx leaves alike."""
    if not all(probe.passed(aspect) for aspect in ("values_minilm", "values_small", "gradients")):
        return  # wrong values, or a [PAD] row trained whatever the module is told: those aspects said so
    given = {k: v for k, v in BERT_SMALL.items() if k != "pad_token_id"}
    module = probe.build(cls, *BERT_SMALL_SIZES, **given)
    ids = inputs.ids.clone()
    ids[:, -3:] = 0  # the [PAD] columns, with the default's id
    out = probe.call(module, ids, inputs.types)
    probe.call(lambda: out.sum().backward(), what=f"backward through `{probe.name}`")
    grad = dense_grad(dict(module.named_parameters())["word_embeddings.weight"])  # the gradients aspect found it
    if grad is not None and bool(grad[0].abs().max() > 0):
        default = BERT_CONTRACT.init["pad_token_id"]
        probe.fail(
            "default_changed",
            f"Built without `pad_token_id`, `{probe.name}` gives row 0 of word_embeddings a gradient: its default "
            "pad_token_id is not 0, the [PAD] id of BERT's vocabulary and the default the exercise gives.",
            **default_advice("pad_token_id", default),
        )


def check_bert_embeddings(cls: type[nn.Module], probe: Probe) -> None:
    """Independent aspects, so that a class with several mistakes (seed 002's: no segment, eps written
    into the code, a bare nn.Dropout(), positions on the CPU) meets them all in one run."""
    inputs = bert_inputs(probe)
    probe.independent(
        values_minilm=lambda: bert_values_minilm(probe, cls, inputs),
        values_small=lambda: bert_values_small(probe, cls, inputs),
        dropout=lambda: bert_dropout(probe, cls, inputs),
        device=lambda: bert_device(probe, cls),
        gradients=lambda: bert_gradients(probe, cls, inputs),
        padding_default=lambda: bert_padding_default(probe, cls, inputs),
    )


BERT_TABLES = {  # HF's name -> what its rows are
    "word_embeddings.weight": "token",
    "position_embeddings.weight": "position",
    "token_type_embeddings.weight": "segment",
    "LayerNorm.weight": None,
    "LayerNorm.bias": None,
}


def expect_bert_gradients(
    probe: Probe, module: nn.Module, reference_module: nn.Module, ids: torch.Tensor, types: torch.Tensor
) -> None:
    """After the same backward pass through the student's module and the reference, every table's
    gradient: [PAD]'s word row none (missing_padding_idx), no row the inputs used frozen (frozen_rows),
    and the values those of the reference. Each table is an aspect of its own (probe.independent)."""
    pad = BERT_SMALL["pad_token_id"]
    tensors = {
        **dict(module.named_buffers()),
        **dict(module.named_parameters()),
    }  # a table kept as a buffer is frozen too
    expected = {name: p.grad for name, p in reference_module.named_parameters()}
    word = tensors["word_embeddings.weight"]
    word_grad = dense_grad(word)
    word_pad_trained = word_grad is not None and bool(word_grad[pad].abs().max() > 0)
    inputs = f"input_ids {tuple(ids.shape)} that use every token row, every position and every segment"
    used = {
        "word_embeddings.weight": torch.bincount(ids.flatten().cpu(), minlength=len(word)) > 0,
        "token_type_embeddings.weight": torch.bincount(
            types.flatten().cpu(), minlength=len(expected["token_type_embeddings.weight"])
        )
        > 0,
    }

    def pad_row() -> None:
        if word.grad is None and word.requires_grad:
            probe.fail(
                "no_gradient",
                f"`{probe.name}`'s output does not reach `word_embeddings.weight`: after backward it has no gradient.",
                hint=NO_GRADIENT_HINT,
                fix=BERT_GRADIENT_FIX,
            )
        if word_pad_trained:
            probe.fail(
                "missing_padding_idx",
                f"Built with pad_token_id={pad}, `{probe.name}` still gives the [PAD] row {pad} of word_embeddings a gradient.",
                hint="[PAD] tokens only fill a batch up; they carry no meaning, so BERT keeps their row out of training. nn.Embedding can be told which row that is, and then never gives it a gradient.",
                fix="`self.word_embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=pad_token_id)`, as HF does.",
            )

    def table(name: str, rows: str | None) -> None:
        if name not in tensors:
            return  # a table under another name: load_pretrained said so
        fix = (
            f"Build `{name.split('.')[0]}` as HF does, {'nn.LayerNorm(hidden_size, eps=layer_norm_eps)' if rows is None else f'an nn.Embedding with no padding_idx: every {rows} row is trained'}"
            + (" (only word_embeddings takes padding_idx=pad_token_id)" if rows in ("position", "segment") else "")
            + ", and use its Parameters themselves: no requires_grad_(False), .detach(), .data or gradient hook."
        )
        expect_gradient(
            probe,
            tensors[name],
            expected[name],
            used.get(name, torch.ones(len(expected[name]), dtype=torch.bool)),
            name=name,
            inputs=inputs,
            compare=not (name == "word_embeddings.weight" and word_pad_trained),  # pad_row() says that one
            fix=fix,
        )

    probe.independent(pad_row, *[lambda name=name, rows=rows: table(name, rows) for name, rows in BERT_TABLES.items()])


def bert_expected(
    probe: Probe, module: nn.Module, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None, **init: Any
) -> torch.Tensor:
    """The reference BertEmbeddings built alike, holding the student's weights (its own probes loaded HF's names into it)."""
    right = reference.BertEmbeddings(**init).to(input_ids.device).eval()
    right.load_state_dict(probe.call(module.state_dict, what=f"`{probe.name}.state_dict()`"))
    return right(input_ids, token_type_ids)


def learned_expected(probe: Probe, module: nn.Module, max_len: int, d_model: int, x: torch.Tensor) -> torch.Tensor:
    """x + the first T rows of the module's own table (found by its shape, as its own probes find it)."""
    rows = oriented(learned_table(probe, module, max_len, d_model)[1], max_len, d_model)
    assert rows is not None  # learned_table found it by this shape
    return x + rows[: x.shape[1]]


LEARNED_CONTRACT = Contract(
    init={"max_len": Arg("size", "L"), "d_model": Arg("size", "d")},
    args={"x": Arg("activations", "B T d", grad=True)},
    result=Result("B T d", dtype="x"),
    sizes={"L": MAX_LEN, "d": D, "B": 3, "T": 7},
    ones="B T",
    expected=learned_expected,
)
BERT_CONTRACT = Contract(
    init={
        "vocab_size": Arg("size", "V"),
        "hidden_size": Arg("size", "d"),
        "max_position_embeddings": Arg("size", "L", default=512),
        "type_vocab_size": Arg("size", "S", default=2),
        "layer_norm_eps": Arg("number", domain="> 0", default=1e-12),
        "hidden_dropout_prob": Arg("rate", domain=">= 0 and < 1", default=0.1),
        "pad_token_id": Arg("index", bound="V", default=0),
    },
    args={"input_ids": Arg("ids", "B T", bound="V"), "token_type_ids": Arg("segments", "B T", bound="S", default=None)},
    result=Result("B T d"),
    sizes={"V": 40, "d": 24, "L": 16, "S": 3, "B": 3, "T": 7},
    ones="B T",
    expected=bert_expected,
)

EXERCISES = [
    Exercise(
        id="LearnedPositionalEmbedding",
        chapter=4,
        points=2,
        kind="module",
        reference=reference.LearnedPositionalEmbedding,
        check=check_learned_positions,
        oracle=oracle.positions_in_gpt2,
        mistakes={**POSITION_ADDING_MISTAKES, "input_scaled": learned_input_scaled},  # review LP8
        difficulty=1,
        importance=3,
        minutes=10,
        edges=("lengths",),
        contract=LEARNED_CONTRACT,
    ),
    Exercise(
        id="BertEmbeddings",
        chapter=4,
        points=3,
        kind="module",
        reference=reference.BertEmbeddings,
        check=check_bert_embeddings,
        mistakes=BERT_MISTAKES,
        difficulty=3,
        importance=3,
        minutes=25,
        edges=("ids", "segments", "lengths"),
        contract=BERT_CONTRACT,
    ),
]
