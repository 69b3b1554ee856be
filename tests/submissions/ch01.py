"""Chapter 01 submissions, written as students write them.

RIGHT: different correct implementations; every one must pass.
WRONG: (exercise id, the diagnosis it must get, the code); each is a real
mistake, and the check must name exactly that code.
"""

import torch
import torch.nn.functional as F

# --- right -----------------------------------------------------------------


def lookup_indexing(weight, ids):
    return weight[ids]


def lookup_index_select(weight, ids):
    rows = weight.index_select(0, ids.reshape(-1))
    return rows.reshape(*ids.shape, weight.shape[1])


def lookup_loop(weight, ids):
    rows = [weight[i] for i in ids.reshape(-1).tolist()]
    return torch.stack(rows).reshape(*ids.shape, weight.shape[-1])


def one_hot_matmul(weight, ids):
    return F.one_hot(ids, weight.shape[0]).to(weight.dtype) @ weight


def one_hot_einsum(weight, ids):
    one_hot = torch.zeros(*ids.shape, weight.shape[0], dtype=weight.dtype, device=weight.device)
    one_hot.scatter_(-1, ids.unsqueeze(-1), 1.0)
    return torch.einsum("...v,vd->...d", one_hot, weight)


def one_hot_eye_rows(weight, ids):
    eye = torch.eye(weight.shape[0], dtype=weight.dtype, device=weight.device)
    return torch.matmul(eye[ids], weight)


def one_hot_float_then_moved(weight, ids):
    one_hot = torch.zeros(ids.numel(), weight.shape[0]).to(weight.device)  # made on the CPU, then moved
    one_hot[torch.arange(ids.numel(), device=weight.device), ids.reshape(-1)] = 1.0
    return (one_hot @ weight).reshape(*ids.shape, -1)


def one_hot_dot_float(weight, ids):
    return F.one_hot(ids, num_classes=weight.shape[0]).float() @ weight


RIGHT = {
    "lookup": [lookup_indexing, lookup_index_select, lookup_loop],
    "one_hot_lookup": [one_hot_matmul, one_hot_einsum, one_hot_eye_rows, one_hot_float_then_moved, one_hot_dot_float],
}

# --- wrong -----------------------------------------------------------------


def columns_not_rows(weight, ids):
    return weight.T[ids]


def columns_first(weight, ids):
    return weight[:, ids]


def one_hot_times_transpose(weight, ids):
    return F.one_hot(ids, weight.shape[1]).to(weight.dtype) @ weight.T


def uses_f_embedding(weight, ids):
    return F.embedding(ids, weight)


def uses_nn_embedding(weight, ids):
    return torch.nn.Embedding.from_pretrained(weight, freeze=False)(ids)


def plain_indexing_for_one_hot(weight, ids):
    return weight[ids]


def detached(weight, ids):
    return weight.detach()[ids]


def through_numpy(weight, ids):
    return torch.from_numpy(weight.detach().cpu().numpy()[ids.cpu().numpy()])


def computes_in_float64(weight, ids):
    return F.one_hot(ids, weight.shape[0]).double() @ weight.double()


def one_hot_without_num_classes(weight, ids):
    return F.one_hot(ids).float() @ weight


def fills_a_cpu_tensor(weight, ids):
    out = torch.zeros(*ids.shape, weight.shape[1])  # no device=
    out[...] = weight[ids]
    return out


def cpu_identity_rows(weight, ids):
    return torch.eye(weight.shape[0])[ids] @ weight  # no device=


def flattened(weight, ids):
    return weight[ids.reshape(-1)]


def off_by_a_little(weight, ids):
    return weight[ids] + 1e-3


def off_by_one_row(weight, ids):
    return weight[(ids + 1) % weight.shape[0]]


def divides_by_zero_norm(weight, ids):
    rows = weight[ids]
    return rows / (rows - rows).sum(-1, keepdim=True)


def indexes_past_the_end(weight, ids):
    return weight[ids + weight.shape[0]]


def scales_weight_in_place(weight, ids):
    weight.mul_(1.0)
    weight += 0.0
    weight[0, 0] = 42.0
    return weight[ids]


def spins_forever(weight, ids):
    while True:
        pass


def allocates_a_terabyte(weight, ids):
    torch.zeros(10**6, 10**6)
    return weight[ids]


def sets_default_dtype(weight, ids):
    torch.set_default_dtype(torch.float64)
    return weight[ids]


def turns_grad_off(weight, ids):
    torch.set_grad_enabled(False)
    return weight[ids]


def stub(weight, ids):
    raise NotImplementedError("your code here")


def returns_a_list(weight, ids):
    return weight[ids].tolist()


def output_made_on_the_cpu(weight, ids):
    out = torch.zeros(*ids.shape, weight.shape[1], dtype=weight.dtype)  # no device=: always the CPU
    return out + weight[ids]


WRONG = [
    ("lookup", "transposed_weight", columns_not_rows),
    ("lookup", "transposed_weight", columns_first),
    ("one_hot_lookup", "transposed_weight", one_hot_times_transpose),
    ("lookup", "forbidden_api", uses_f_embedding),
    ("lookup", "forbidden_api", uses_nn_embedding),
    ("one_hot_lookup", "forbidden_api", uses_f_embedding),
    ("one_hot_lookup", "not_a_matrix_product", plain_indexing_for_one_hot),
    ("lookup", "no_gradient", detached),
    ("lookup", "no_gradient", through_numpy),
    ("one_hot_lookup", "wrong_dtype", computes_in_float64),
    ("one_hot_lookup", "raised", one_hot_without_num_classes),
    ("lookup", "wrong_device", fills_a_cpu_tensor),
    ("one_hot_lookup", "wrong_device", cpu_identity_rows),
    ("lookup", "wrong_shape", flattened),
    ("lookup", "wrong_values", off_by_a_little),
    ("lookup", "wrong_values", off_by_one_row),
    ("lookup", "nan_or_inf", divides_by_zero_norm),
    ("lookup", "raised", indexes_past_the_end),
    ("lookup", "mutated_input", scales_weight_in_place),
    ("lookup", "timeout", spins_forever),
    ("lookup", "out_of_memory", allocates_a_terabyte),
    ("lookup", "changed_global_state", sets_default_dtype),
    ("one_hot_lookup", "changed_global_state", turns_grad_off),
    ("lookup", "not_implemented", stub),
    ("one_hot_lookup", "not_implemented", stub),
    ("lookup", "wrong_type", returns_a_list),
    ("lookup", "wrong_device", output_made_on_the_cpu),
]


def swallows_every_exception(weight, ids):
    while True:
        try:
            pass
        except:  # noqa: E722  (the point: a bare except must not swallow the time limit)
            pass


def assumes_a_batch(weight, ids):
    batch, length = ids.shape[0], ids.shape[1]  # fails on a single text (T,)
    return weight[ids.reshape(batch * length, *ids.shape[2:])].view(batch, length, *ids.shape[2:], -1)


def squeezes(weight, ids):
    return weight[ids].squeeze()


def sparse_one_hot(weight, ids):
    one_hot = F.one_hot(ids.reshape(-1), weight.shape[0]).to(weight.dtype).to_sparse()
    return torch.sparse.mm(one_hot, weight).reshape(*ids.shape, -1)


RIGHT["one_hot_lookup"].append(sparse_one_hot)
WRONG += [
    ("lookup", "timeout", swallows_every_exception),
    ("lookup", "raised", assumes_a_batch),
    ("lookup", "wrong_shape", squeezes),
    ("lookup", "wrong_type", torch.nn.Embedding),
]


# --- wrong: the course's own reference, reached two ways ---------------------------


def wraps_the_reference(weight, ids):
    from helpers.reference import lookup

    return lookup(weight, ids)


def reference_through_importlib(weight, ids):
    import importlib

    return importlib.import_module("helpers.reference").one_hot_lookup(weight, ids)


WRONG += [
    ("lookup", "uses_reference", wraps_the_reference),
    ("one_hot_lookup", "uses_reference", reference_through_importlib),
]


# --- embedding_backward --------------------------------------------------------------


def backward_index_add(grad_out, ids, vocab_size, padding_idx=None):
    grad = torch.zeros(vocab_size, grad_out.shape[-1], dtype=grad_out.dtype, device=grad_out.device)
    grad.index_add_(0, ids.flatten(), grad_out.reshape(-1, grad_out.shape[-1]))
    if padding_idx is not None:
        grad[padding_idx] = 0.0
    return grad


def backward_one_hot(grad_out, ids, vocab_size, padding_idx=None):
    """The transpose of the one-hot product: grad = one_hot(ids).T @ grad_out."""
    one_hot = F.one_hot(ids.reshape(-1), vocab_size).to(grad_out.dtype)  # (N, V)
    grad = one_hot.T @ grad_out.reshape(-1, grad_out.shape[-1])  # (V, N) @ (N, d)
    if padding_idx is not None:
        grad = grad * (torch.arange(vocab_size, device=grad.device) != padding_idx).unsqueeze(1)
    return grad


def backward_loop(grad_out, ids, vocab_size, padding_idx=None):
    rows = grad_out.reshape(-1, grad_out.shape[-1])
    grad = torch.zeros(vocab_size, rows.shape[1], dtype=rows.dtype, device=rows.device)
    for n, token in enumerate(ids.reshape(-1).tolist()):
        if token != padding_idx:
            grad[token] += rows[n]
    return grad


def backward_assigns(grad_out, ids, vocab_size, padding_idx=None):
    grad = torch.zeros(vocab_size, grad_out.shape[-1], dtype=grad_out.dtype, device=grad_out.device)
    grad[ids.flatten()] = grad_out.reshape(-1, grad_out.shape[-1])  # repeats overwrite each other
    if padding_idx is not None:
        grad[padding_idx] = 0.0
    return grad


def backward_forgets_padding(grad_out, ids, vocab_size, padding_idx=None):
    grad = torch.zeros(vocab_size, grad_out.shape[-1], dtype=grad_out.dtype, device=grad_out.device)
    return grad.index_add(0, ids.flatten(), grad_out.reshape(-1, grad_out.shape[-1]))


def backward_columns(grad_out, ids, vocab_size, padding_idx=None):
    grad = torch.zeros(grad_out.shape[-1], vocab_size, dtype=grad_out.dtype, device=grad_out.device)
    grad.index_add_(1, ids.flatten(), grad_out.reshape(-1, grad_out.shape[-1]).T)
    if padding_idx is not None:
        grad[:, padding_idx] = 0.0
    return grad


def backward_zeros_on_cpu(grad_out, ids, vocab_size, padding_idx=None):
    grad = torch.zeros(vocab_size, grad_out.shape[-1], dtype=grad_out.dtype)  # no device=
    grad.index_add_(0, ids.flatten(), grad_out.reshape(-1, grad_out.shape[-1]))
    if padding_idx is not None:
        grad[padding_idx] = 0.0
    return grad


def backward_always_float32(grad_out, ids, vocab_size, padding_idx=None):
    return backward_index_add(grad_out.float(), ids, vocab_size, padding_idx)


def backward_scales_grad_out(grad_out, ids, vocab_size, padding_idx=None):
    if padding_idx is not None:
        grad_out[ids == padding_idx] = 0.0  # zeroes the caller's gradient in place
    return backward_index_add(grad_out, ids, vocab_size)


def backward_through_autograd(grad_out, ids, vocab_size, padding_idx=None):
    weight = torch.zeros(
        vocab_size, grad_out.shape[-1], dtype=grad_out.dtype, device=grad_out.device, requires_grad=True
    )
    F.embedding(ids, weight, padding_idx=padding_idx).backward(grad_out)
    return weight.grad


RIGHT["embedding_backward"] = [backward_index_add, backward_one_hot, backward_loop]
WRONG += [
    ("embedding_backward", "no_accumulation", backward_assigns),
    ("embedding_backward", "padding_row_updated", backward_forgets_padding),
    ("embedding_backward", "transposed_weight", backward_columns),
    ("embedding_backward", "wrong_device", backward_zeros_on_cpu),
    ("embedding_backward", "wrong_dtype", backward_always_float32),
    ("embedding_backward", "mutated_input", backward_scales_grad_out),
    ("embedding_backward", "forbidden_api", backward_through_autograd),
]


# --- issue 13: code nobody here wrote, other routes, two mistakes at once -----------


def lookup_gather(weight, ids):
    """gather along the rows: an index per output entry."""
    index = ids.reshape(-1, 1).expand(-1, weight.shape[1])
    return weight.gather(0, index).reshape(*ids.shape, weight.shape[1])


def lookup_float64_then_cast(weight, ids):
    return weight.double()[ids].to(weight.dtype)


def one_hot_f_linear(weight, ids):
    """F.linear(x, A) is x @ A.T: the one-hot times the transposed transpose."""
    return F.linear(F.one_hot(ids, weight.shape[0]).to(weight.dtype), weight.T)


def one_hot_by_comparison(weight, ids):
    one_hot = (ids.unsqueeze(-1) == torch.arange(weight.shape[0], device=ids.device)).to(weight.dtype)
    return one_hot @ weight


def one_hot_row_by_row(weight, ids):
    """A loop: one one-hot vector per token, times the weight."""
    rows = []
    for token in ids.reshape(-1).tolist():
        vector = torch.zeros(weight.shape[0], dtype=weight.dtype, device=weight.device)
        vector[token] = 1.0
        rows.append(vector @ weight)
    return torch.stack(rows).reshape(*ids.shape, weight.shape[1])


def one_hot_float64_then_cast(weight, ids):
    return (F.one_hot(ids, weight.shape[0]).double() @ weight.double()).to(weight.dtype)


RIGHT["lookup"] += [lookup_gather, lookup_float64_then_cast]
RIGHT["one_hot_lookup"] += [one_hot_f_linear, one_hot_by_comparison, one_hot_row_by_row, one_hot_float64_then_cast]


def aten_embedding(weight, ids):
    return torch.ops.aten.embedding(weight, ids)


def aten_embedding_overload(weight, ids):
    return torch.ops.aten.embedding.default(weight, ids)


def torch_embedding_bag_sum(weight, ids):
    """One bag per id, summed: a lookup through embedding_bag."""
    flat = ids.reshape(-1)
    offsets = torch.arange(flat.numel(), device=ids.device)
    return torch.embedding_bag(weight, flat, offsets, False, 0)[0].reshape(*ids.shape, weight.shape[1])


def one_hot_scattered_on_cpu(weight, ids):
    one_hot = torch.zeros(*ids.shape, weight.shape[0])  # no device=
    one_hot.scatter_(-1, ids.unsqueeze(-1), 1.0)
    return one_hot @ weight


def one_hot_compared_with_cpu_arange(weight, ids):
    return (ids.unsqueeze(-1) == torch.arange(weight.shape[0])).to(weight.dtype) @ weight  # no device=


def one_hot_broadcast_sum(weight, ids):
    one_hot = F.one_hot(ids, weight.shape[0]).to(weight.dtype)
    return (one_hot.unsqueeze(-1) * weight).sum(-2)  # the product written out, no matmul


def transposed_one_hot_on_cpu(weight, ids):
    """Two mistakes: a one-hot d wide times weight.T, and made on the CPU."""
    one_hot = torch.zeros(*ids.shape, weight.shape[1])  # no device=
    one_hot.scatter_(-1, ids.unsqueeze(-1), 1.0)
    return one_hot @ weight.T


def detached_columns(weight, ids):
    return weight.detach().T[ids]


def detached_into_cpu_buffer(weight, ids):
    out = torch.zeros(*ids.shape, weight.shape[1], dtype=weight.dtype)  # no device=
    out[...] = weight.detach()[ids]
    return out


WRONG += [
    ("lookup", "forbidden_api", aten_embedding),
    ("lookup", "forbidden_api", aten_embedding_overload),
    ("lookup", "forbidden_api", torch_embedding_bag_sum),
    ("one_hot_lookup", "forbidden_api", aten_embedding),
    ("one_hot_lookup", "wrong_device", one_hot_scattered_on_cpu),
    ("one_hot_lookup", "wrong_device", one_hot_compared_with_cpu_arange),
    ("one_hot_lookup", "not_a_matrix_product", one_hot_broadcast_sum),
    ("one_hot_lookup", "transposed_weight", transposed_one_hot_on_cpu),
    ("lookup", "transposed_weight", detached_columns),
    ("lookup", "no_gradient", detached_into_cpu_buffer),
]

# (exercise, diagnosis, a further finding in result.also, the code)
ALSO = [
    ("one_hot_lookup", "transposed_weight", "wrong_device", transposed_one_hot_on_cpu),
    ("lookup", "transposed_weight", "no_gradient", detached_columns),
    ("lookup", "no_gradient", "wrong_device", detached_into_cpu_buffer),
]


# --- issue 16: rows that never train, found by a gradient probe whose ids hold 0 and V - 1 ----------


def lookup_pad_row_fixed(weight, ids):
    """Keeps row 0 (a [PAD] token) fixed by detaching it where it is used."""
    rows = weight[ids]
    return torch.where((ids == 0).unsqueeze(-1), rows.detach(), rows)


def lookup_last_row_through_data(weight, ids):
    """The last row (an [UNK] token) read through .data: that use is cut off the graph."""
    rows = weight[ids]
    last = ids == weight.shape[0] - 1
    return rows.masked_scatter(last.unsqueeze(-1), weight.data[ids[last]])


def one_hot_without_the_pad_column(weight, ids):
    """The one-hot column of id 0 built from a detached weight: row 0 never gets a gradient."""
    one_hot = F.one_hot(ids, weight.shape[0]).to(weight.dtype)
    return one_hot[..., 1:] @ weight[1:] + one_hot[..., :1] @ weight[:1].detach()


WRONG += [
    ("lookup", "frozen_rows", lookup_pad_row_fixed),
    ("lookup", "frozen_rows", lookup_last_row_through_data),
    ("one_hot_lookup", "frozen_rows", one_hot_without_the_pad_column),
]


# --- issue 16: NaN is the finding, whatever else is wrong with the result ---------------


def one_hot_masked_softmax_flat(weight, ids):
    # "every row but the chosen one masked out": (1 - one_hot) * -inf is 0 * -inf = NaN on the chosen row,
    # and the batch flattened to (B*T, d) on top
    scores = (1 - F.one_hot(ids.flatten(), weight.shape[0]).to(weight.dtype)) * float("-inf")
    return scores.softmax(-1) @ weight


WRONG += [("one_hot_lookup", "nan_or_inf", one_hot_masked_softmax_flat)]


# --- issue 22: autograd writing the gradient for the student (the review's loophole) -------------


def backward_indexing_then_backward(grad_out, ids, vocab_size, padding_idx=None):
    """`W[ids].backward(grad_out)`: no embedding API, but autograd computes the answer."""
    weight = torch.zeros(
        vocab_size, grad_out.shape[-1], dtype=grad_out.dtype, device=grad_out.device, requires_grad=True
    )
    weight[ids].backward(grad_out)
    grad = weight.grad
    if padding_idx is not None:
        grad[padding_idx] = 0
    return grad


def backward_autograd_grad(grad_out, ids, vocab_size, padding_idx=None):
    weight = torch.zeros(
        vocab_size, grad_out.shape[-1], dtype=grad_out.dtype, device=grad_out.device, requires_grad=True
    )
    (grad,) = torch.autograd.grad(weight[ids], weight, grad_out)
    return grad.index_fill(0, torch.tensor([padding_idx], device=grad.device), 0) if padding_idx is not None else grad


WRONG += [
    ("embedding_backward", "forbidden_api", backward_indexing_then_backward),
    ("embedding_backward", "forbidden_api", backward_autograd_grad),
]


# --- issue 22: .cpu() in student code, which the meta device could not copy out of ----------------


def lookup_on_the_cpu(weight, ids):
    """Looks up on the CPU "to be safe": on a GPU the result stays on the CPU."""
    return weight.cpu()[ids.cpu()]


def lookup_to_cpu_and_back(weight, ids):
    """Right: the CPU detour ends on the input's device."""
    return weight.to("cpu")[ids.to("cpu")].to(weight.device)


WRONG += [("lookup", "wrong_device", lookup_on_the_cpu)]
RIGHT["lookup"].append(lookup_to_cpu_and_back)


# INDEPENDENT: which catalogue mistakes are independent aspects of the code (each pair made together by an ALSO
# submission); ONE_ASPECT: why an exercise's mistakes are all values of one choice. tests/test_also_wrong.py reads both.
INDEPENDENT = {
    # the sum over a repeated id's uses, and the padding row zeroed (transposed_weight: the whole result's layout, which hides both)
    "embedding_backward": [("no_accumulation", "padding_row_updated")],
}


# --- issue 32: lookup asks for indexing; a one-hot product is the next exercise -----------------


def lookup_through_one_hot(weight, ids):
    return F.one_hot(ids, weight.shape[0]).to(weight.dtype) @ weight


def lookup_through_eye(weight, ids):
    return torch.einsum("...v,vd->...d", torch.eye(weight.shape[0], device=weight.device)[ids], weight)


WRONG += [("lookup", "method_not_used", lookup_through_one_hot), ("lookup", "method_not_used", lookup_through_eye)]
ALSO += [("lookup", "no_gradient", "wrong_device", through_numpy)]  # a trip through NumPy lands on the CPU too


def backward_index_add_dropped(grad_out, ids, vocab_size, padding_idx=None):
    """index_add without the underscore: its result is dropped, grad stays zero."""
    d = grad_out.shape[-1]
    grad = torch.zeros(vocab_size, d, dtype=grad_out.dtype, device=grad_out.device)
    grad.index_add(0, ids.reshape(-1), grad_out.reshape(-1, d))
    if padding_idx is not None:
        grad[padding_idx] = 0
    return grad


WRONG += [("embedding_backward", "all_zeros", backward_index_add_dropped)]


# --- issue 41: the contract's axes (helpers/contracts.py) -------------------------------


def lookup_views_the_ids(weight, ids):
    """.view on ids that arrive as a transposed view: it refuses them."""
    return weight[ids.view(-1)].view(*ids.shape, weight.shape[1])


def one_hot_of_viewed_ids(weight, ids):
    one_hot = F.one_hot(ids.view(-1), weight.shape[0]).to(weight.dtype)
    return (one_hot @ weight).view(*ids.shape, -1)


def backward_sized_by_largest_id(grad_out, ids, vocab_size, padding_idx=None):
    """B7 of the 2026-11-27 review: the table is as big as the ids at hand say."""
    d = grad_out.shape[-1]
    grad = torch.zeros(int(ids.max()) + 1, d, dtype=grad_out.dtype, device=grad_out.device)
    grad.index_add_(0, ids.reshape(-1), grad_out.reshape(-1, d))
    if padding_idx is not None:
        grad[padding_idx] = 0
    return grad


def backward_bincount_without_minlength(grad_out, ids, vocab_size, padding_idx=None):
    """B11 of the 2026-11-27 review: one weighted bincount per column, without minlength."""
    d = grad_out.shape[-1]
    flat, rows = ids.reshape(-1), grad_out.reshape(-1, d)
    grad = torch.stack([torch.bincount(flat, weights=rows[:, j]) for j in range(d)], dim=1).to(grad_out.dtype)
    if padding_idx is not None:
        grad[padding_idx] = 0
    return grad


def backward_accumulates_in_float32(grad_out, ids, vocab_size, padding_idx=None):
    """A float32 accumulator, cast back to grad_out's dtype at the end: a float64 gradient rounded to float32."""
    d = grad_out.shape[-1]
    grad = torch.zeros(vocab_size, d, device=grad_out.device)
    grad.index_add_(0, ids.reshape(-1), grad_out.reshape(-1, d).float())
    if padding_idx is not None:
        grad[padding_idx] = 0
    return grad.to(grad_out.dtype)


def backward_one_hot_in_float32(grad_out, ids, vocab_size, padding_idx=None):
    one_hot = F.one_hot(ids.reshape(-1), vocab_size).float()  # (N, V)
    grad = one_hot.T @ grad_out.reshape(-1, grad_out.shape[-1]).float()
    if padding_idx is not None:
        grad[padding_idx] = 0
    return grad.to(grad_out.dtype)


RIGHT["one_hot_lookup"].remove(one_hot_float_then_moved)  # a float32 one-hot: issue 41's dtype axis refuses it
RIGHT["one_hot_lookup"].remove(one_hot_dot_float)
WRONG += [
    ("one_hot_lookup", "fixed_dtype", one_hot_float_then_moved),
    ("one_hot_lookup", "fixed_dtype", one_hot_dot_float),
    ("lookup", "contiguity_assumed", lookup_views_the_ids),
    ("one_hot_lookup", "contiguity_assumed", one_hot_of_viewed_ids),
    ("embedding_backward", "size_from_ids", backward_sized_by_largest_id),
    ("embedding_backward", "size_from_ids", backward_bincount_without_minlength),
    ("embedding_backward", "precision_lost", backward_accumulates_in_float32),
    ("embedding_backward", "precision_lost", backward_one_hot_in_float32),
]


# --- the 2026-11-27 review's false messages (B3, O2) -----------------------------------------


def backward_unguarded_padding(grad_out, ids, vocab_size, padding_idx=None):
    """B3: `grad[None] = 0` zeroes every row when there is no padding row."""
    d = grad_out.shape[-1]
    grad = torch.zeros(vocab_size, d, dtype=grad_out.dtype, device=grad_out.device)
    grad.index_add_(0, ids.reshape(-1), grad_out.reshape(-1, d))
    grad[padding_idx] = 0
    return grad


def one_hot_through_f_linear(weight, ids):
    """O2: F.linear transposes its weight: (N, V) @ (d, V).T does not fit."""
    return F.linear(F.one_hot(ids, weight.shape[0]).to(weight.dtype), weight)


WRONG += [
    ("embedding_backward", "all_zeros", backward_unguarded_padding),
    ("one_hot_lookup", "raised", one_hot_through_f_linear),
]


def backward_truthy_padding(grad_out, ids, vocab_size, padding_idx=None):
    """B4: `if padding_idx:` skips padding row 0."""
    grad = backward_index_add(grad_out, ids, vocab_size)
    if padding_idx:
        grad[padding_idx] = 0
    return grad


def backward_positive_padding(grad_out, ids, vocab_size, padding_idx=None):
    """B8: `padding_idx > 0` skips row 0 too."""
    grad = backward_index_add(grad_out, ids, vocab_size)
    if padding_idx is not None and padding_idx > 0:
        grad[padding_idx] = 0
    return grad


def backward_float32_zeros(grad_out, ids, vocab_size, padding_idx=None):
    """B9: a float32 accumulator meets a float64 grad_out."""
    grad = torch.zeros(vocab_size, grad_out.shape[-1], device=grad_out.device)
    grad.index_add_(0, ids.reshape(-1), grad_out.reshape(-1, grad_out.shape[-1]))
    if padding_idx is not None:
        grad[padding_idx] = 0
    return grad


WRONG += [
    ("embedding_backward", "padding_row_updated", backward_truthy_padding),
    ("embedding_backward", "padding_row_updated", backward_positive_padding),
    ("embedding_backward", "raised", backward_float32_zeros),
]


# --- the blind review of 2026-11-27 (shared/reviews/teaching-2026-11-27.md): messages made true ---------


def lookup_flattened_with_view(weight, ids):
    """L4: the rows of a flattened batch, never reshaped back: (B*T, d)."""
    return weight[ids.view(-1)]


def lookup_squeezes_a_batch_of_one(weight, ids):
    """L5: `torch.squeeze` "to tidy up" drops the batch axis of a (1, T) batch."""
    return torch.squeeze(weight.index_select(0, ids.reshape(-1)).reshape(*ids.shape, -1))


def one_hot_in_half(weight, ids):
    """O5: a one-hot cast to float16 "to save memory", whatever the table's dtype."""
    return F.one_hot(ids, weight.shape[0]).half() @ weight


def one_hot_in_bfloat16_by_einsum(weight, ids):
    one_hot = F.one_hot(ids, num_classes=weight.shape[0]).to(torch.bfloat16)
    return torch.einsum("...v,vd->...d", one_hot, weight)


WRONG += [
    ("lookup", "wrong_shape", lookup_flattened_with_view),
    ("lookup", "wrong_shape", lookup_squeezes_a_batch_of_one),
    ("one_hot_lookup", "raised", one_hot_in_half),
    ("one_hot_lookup", "raised", one_hot_in_bfloat16_by_einsum),
]


# --- issue 41, dtypes where they matter: a gradient summed in half precision ------------------------------


def backward_float16_accumulator(grad_out, ids, vocab_size, padding_idx=None):
    """An accumulator made in float16 "to save memory" (as in a half model), cast back at the end."""
    d = grad_out.shape[-1]
    grad = torch.zeros(vocab_size, d, dtype=torch.float16, device=grad_out.device)
    grad.index_add_(0, ids.reshape(-1), grad_out.reshape(-1, d).half())
    if padding_idx is not None:
        grad[padding_idx] = 0
    return grad.to(grad_out.dtype)


def backward_bfloat16_one_hot(grad_out, ids, vocab_size, padding_idx=None):
    """The one-hot form, under a bfloat16 autocast habit: one_hot.T @ grad_out in bfloat16."""
    one_hot = F.one_hot(ids.reshape(-1), vocab_size).to(torch.bfloat16)
    grad = (one_hot.T @ grad_out.reshape(-1, grad_out.shape[-1]).to(torch.bfloat16)).to(grad_out.dtype)
    if padding_idx is not None:
        grad[padding_idx] = 0
    return grad


WRONG += [
    ("embedding_backward", "low_precision", backward_float16_accumulator),
    ("embedding_backward", "low_precision", backward_bfloat16_one_hot),
]
