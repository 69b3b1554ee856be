"""The course's figures. Each function draws one picture and shows it.

matplotlib is imported inside each function (never by `import helpers`).
Every figure has a title and labelled axes; the notebook says, above it,
what to notice.

One module a chapter (`helpers.plots.rope` draws chapter 05's figures); this package
re-exports them all, so a notebook writes `plots.rope_decay(...)`.
"""

from __future__ import annotations

from helpers.plots.comparing import accuracy_by_position, alibi_heads, alibi_reach
from helpers.plots.learned import learned_vs_sinusoidal, position_components, position_similarity_row
from helpers.plots.long_context import curves_by_position, extrapolation_by_task, slowdown_by_pair
from helpers.plots.lookup_tables import gradient_rows, lookup_cost, lookup_picture
from helpers.plots.positions_in_practice import decode_positions, first_token_share, packed_masks, streaming_cache
from helpers.plots.rope import (
    bf16_positions,
    relative_scores,
    rope_decay,
    rope_frequencies,
    rope_matrices,
    rope_pairs,
    rope_table,
    rotary_pairs_of_model,
)
from helpers.plots.scaling import (
    D_MODELS,
    embedding_norms,
    embedding_norms_at,
    loss_curves,
    tied_gradients,
    trained_row_norms,
)
from helpers.plots.sinusoidal import (
    additive_vs_rotary,
    dot_product_vs_offset,
    shift_matrix,
    sinusoidal_heatmap,
    sinusoidal_slices,
)

__all__ = [
    "D_MODELS",
    "accuracy_by_position",
    "additive_vs_rotary",
    "alibi_heads",
    "alibi_reach",
    "bf16_positions",
    "curves_by_position",
    "decode_positions",
    "dot_product_vs_offset",
    "embedding_norms",
    "embedding_norms_at",
    "extrapolation_by_task",
    "first_token_share",
    "gradient_rows",
    "learned_vs_sinusoidal",
    "lookup_cost",
    "lookup_picture",
    "loss_curves",
    "packed_masks",
    "position_components",
    "position_similarity_row",
    "relative_scores",
    "rope_decay",
    "rope_frequencies",
    "rope_matrices",
    "rope_pairs",
    "rope_table",
    "rotary_pairs_of_model",
    "shift_matrix",
    "sinusoidal_heatmap",
    "sinusoidal_slices",
    "slowdown_by_pair",
    "streaming_cache",
    "tied_gradients",
    "trained_row_norms",
]
