"""Every tolerance, tested on both sides: a right result just inside passes, a result just
outside (or a real mistake it exists to catch) fails. The bounds are entry by entry
(common.angle_tolerance, close() with a tensor atol) or constants in the chapter modules."""

import math

import pytest
import torch
import torch.nn.functional as F

from helpers import reference
from helpers.exercises import common, rope, sinusoidal, structure
from helpers.exercises.common import angle_tolerance, frequencies, half_precision_error
from helpers.probe import close

DTYPES = (torch.float32, torch.float64, torch.bfloat16)
POSITIONS = {
    "small angles": torch.arange(8),
    "large angles": torch.arange(2044, 2052),
}  # past 2048: float16 loses integers


def sines(
    positions: torch.Tensor, d: int = 8, dtype: torch.dtype = torch.float64
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(sin of the angles computed in `dtype` then in float64, angles, ω): a table's sin columns."""
    omega = frequencies(d, 10000.0)
    angles = positions.double()[:, None] * omega
    computed = (positions.to(dtype)[:, None] * omega.to(dtype)).double().sin()
    return computed, angles, omega


# --- angle_tolerance with an entry-by-entry close -------------------------------------


@pytest.mark.parametrize("where", POSITIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_angle_tolerance_just_under_passes_just_over_fails(dtype, where):
    expected, angles, omega = sines(POSITIONS[where])
    bound = angle_tolerance(dtype, angles, omega)
    for sign in (1, -1):
        assert close(expected + sign * 0.99 * bound, expected, rtol=0.0, atol=bound)
        assert not close(expected + sign * 1.01 * bound, expected, rtol=0.0, atol=bound)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_each_entry_has_its_own_bound(dtype):
    """An entry at a small angle may not use the room a large angle has: the loosest bound would let it pass."""
    expected, angles, omega = sines(torch.arange(0, 4000, 500))
    bound = angle_tolerance(dtype, angles, omega)
    assert float(bound[0, 0]) == 2 * torch.finfo(dtype).eps  # angle 0: the result's own rounding only
    off = expected.clone()
    off[0, 0] += (float(bound[0, 0]) + float(bound.max())) / 2  # beyond its own bound, within the loosest
    assert close(off, expected, rtol=0.0, atol=float(bound.max()))
    assert not close(off, expected, rtol=0.0, atol=bound)


@pytest.mark.parametrize("where", POSITIONS)
def test_right_float32_sines_pass_and_float16_ones_fail(where):
    """The real margins: sin of float32 angles lies within the float32 bound, sin of float16 ones
    (rounded positions or frequencies) does not, at small and at large angles alike."""
    expected, angles, omega = sines(POSITIONS[where])
    bound = angle_tolerance(torch.float32, angles, omega)
    float32, _, _ = sines(POSITIONS[where], dtype=torch.float32)
    float16, _, _ = sines(POSITIONS[where], dtype=torch.float16)
    assert close(float32, expected, rtol=0.0, atol=bound)
    assert not close(float16, expected, rtol=0.0, atol=bound)
    assert not close(expected.half(), expected, rtol=0.0, atol=bound)  # the table itself stored in float16


@pytest.mark.parametrize("where", POSITIONS)
def test_float64_bound_passes_float64_code_and_fails_float32_code(where):
    expected, angles, omega = sines(POSITIONS[where])
    bound = angle_tolerance(torch.float64, angles, omega, angle_dtype=torch.float64)
    exp_log = (
        POSITIONS[where].double()[:, None] * torch.exp(-math.log(10000.0) * torch.arange(0, 8, 2).double() / 8)
    ).sin()
    float32, _, _ = sines(POSITIONS[where], dtype=torch.float32)
    assert close(exp_log, expected, rtol=0.0, atol=bound)
    assert not close(float32, expected, rtol=0.0, atol=bound)


@pytest.mark.parametrize("where", POSITIONS)
def test_bfloat16_bound_passes_one_rounding(where):
    expected, angles, omega = sines(POSITIONS[where])
    float32, _, _ = sines(POSITIONS[where], dtype=torch.float32)
    assert close(
        float32.bfloat16(), expected, rtol=0.0, atol=angle_tolerance(torch.bfloat16, angles, omega)
    )  # computed in float32, rounded once


def test_bfloat16_bound_fails_bfloat16_positions():
    expected, angles, omega = sines(POSITIONS["large angles"])
    bfloat16, _, _ = sines(POSITIONS["large angles"], dtype=torch.bfloat16)  # 2044..2051 rounded to multiples of 8
    assert not close(bfloat16.bfloat16(), expected, rtol=0.0, atol=angle_tolerance(torch.bfloat16, angles, omega))


# --- half_precision_error: says half precision only when it explains the error ----------


def test_half_precision_error_names_half_tables_not_wrong_formulas():
    args = (50, 16)
    angles, _ = sinusoidal.table_angles(*args)
    tight = sinusoidal.table_tolerance(*args)["atol"]
    loose = angle_tolerance(torch.bfloat16, angles, torch.ones(()), 1.0, torch.bfloat16)
    right = reference.sinusoidal_encoding(*args)
    assert half_precision_error(right.half().float(), right, tight, loose) is not None
    assert half_precision_error(right.bfloat16().float(), right, tight, loose) is not None
    assert half_precision_error(right, right, tight, loose) is None  # nothing beyond float32 rounding
    assert (
        half_precision_error(reference.sinusoidal_encoding(50, 16, 1000.0), right, tight, loose) is None
    )  # another base: O(1) off
    assert half_precision_error(right[:, :8], right, tight, loose) is None  # another shape


# --- the constants still in helpers/exercises ----------------------------------------


def test_table_tolerance_passes_float32_code_and_fails_half_precision():
    """ch03's bound: float32 code passes at every position up to 2100, a table stored in float16
    (2.4e-4 off even at position 0) fails, and so do float16 positions (2049 is 2048)."""
    args = (2100, 8)
    bound = sinusoidal.table_tolerance(*args)
    expected = reference.sinusoidal_encoding(*args)
    omega = torch.exp(torch.arange(0, 8, 2, dtype=torch.float32) * (-math.log(10000.0) / 8))
    for positions, right in (
        (torch.arange(2100, dtype=torch.float32), True),
        (torch.arange(2100, dtype=torch.float16).float(), False),
    ):
        angles = positions[:, None] * omega
        assert close(torch.stack([angles.sin(), angles.cos()], -1).flatten(1), expected, **bound) == right
    assert not close(expected.half().float(), expected, **bound)


def test_half_tolerance_passes_one_bfloat16_rounding_and_fails_bfloat16_angles():
    """ch05.HALF_TOLERANCE, for a bfloat16 rotated x: float32 arithmetic cast once passes, angles rounded to bfloat16 fail."""
    torch.manual_seed(0)
    T, d = 300, 8
    q = torch.randn(1, 2, T, d).bfloat16()
    expected = rope.rope64(q, None, 10000.0)
    cos, sin = reference.rope_cache(d, T)
    right, _ = reference.apply_rope(q, q, cos, sin)
    assert close(right, expected, **rope.HALF_TOLERANCE)
    angles = (torch.arange(T).bfloat16()[:, None] * reference.rope_frequencies(d).bfloat16()).float()
    angles = torch.cat([angles, angles], -1)
    wrong, _ = reference.apply_rope(q, q, angles.cos(), angles.sin())
    assert not close(wrong, expected, **rope.HALF_TOLERANCE)


def test_dropout_rate_tolerance():
    """DROPOUT_RATE_TOLERANCE: the rate read from the scale is exact for the right p, 0.05 off for a wrong one."""
    torch.manual_seed(0)
    x, p = torch.randn(250) + 3, 0.25
    assert abs(common.dropout_rate(F.dropout(x, p), x) - p) < common.DROPOUT_RATE_TOLERANCE
    assert abs(common.dropout_rate(F.dropout(x, p + 0.05), x) - p) > common.DROPOUT_RATE_TOLERANCE


def test_dropped_fraction_tolerance():
    """dropped_fraction_tolerance: right dropout's share of zeros stays within it over many draws, at
    the rates and sizes the checks use; a mask of another share, scaled by the right 1/(1-p), is beyond it."""
    torch.manual_seed(0)
    for p, n in ((0.25, 250), (0.36, 252), (0.1, 1000)):
        x = torch.randn(n) + 3
        shares = [float((F.dropout(x, p) == 0).float().mean()) for _ in range(500)]
        assert max(abs(share - p) for share in shares) < common.dropped_fraction_tolerance(p, n) * 0.8
    x, p = torch.randn(250) + 3, 0.25
    mask = torch.rand(250) >= 0.4  # 40% zeroed, scaled as if 25%
    assert abs(float((x * mask / (1 - p) == 0).float().mean()) - p) > common.dropped_fraction_tolerance(p, 250)


def test_structure_tolerance_on_frequencies():
    """structure.TOLERANCE: frequencies read within it are right; a relative error twice as large is another base."""
    expected = frequencies(16, 10000.0)
    assert structure.frequency_finding(expected * (1 + structure.TOLERANCE / 2), expected, 10000.0, 16, 50) is None
    code, _ = structure.frequency_finding(expected * (1 + 2 * structure.TOLERANCE), expected, 10000.0, 16, 50)
    assert code == "wrong_base"
