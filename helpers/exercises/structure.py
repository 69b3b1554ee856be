"""Structural probes: read a wave table's layout and frequencies from the table itself.

The catalogue of known mistakes names the slips someone foresaw. These probes
name the rest from what the output *is*: which columns hold sines and which
cosines (row 0: sin 0 = 0, cos 0 = 1), which columns share a frequency, and
each column's frequency, estimated from the column alone. A pure wave
v_t = A·sin(ω·t + φ) obeys v_(t+1) + v_(t-1) = 2·cos(ω)·v_t at every t, so a
least-squares fit of that one number gives ω whatever the phase.

Each finding is independent (layout, frequencies, first position), so a table
with two mistakes gets both named: the first as the diagnosis, the rest in `also`.
Chapters 03 (sinusoidal tables) and 05 (RoPE's cos/sin tables) use them.
"""

from __future__ import annotations

import math

import torch

from helpers.probe import Probe
from helpers.safety import Failure

TOLERANCE = 1e-3  # on row 0's zeros and ones, and on relative frequency errors


def column_frequencies(table: torch.Tensor) -> torch.Tensor:
    """ω of every column of a (positions, d) table of waves, in radians per position (NaN where no wave fits)."""
    v = table.detach().to("cpu", torch.float64)
    middle, around = v[1:-1], v[2:] + v[:-2]  # v_t and v_(t+1) + v_(t-1)
    power = (middle * middle).sum(0)
    cosine = (middle * around).sum(0) / (2 * power)
    residual = (around - 2 * cosine * middle).pow(2).sum(0) / power.clamp_min(1e-30)
    omega = torch.arccos(cosine.clamp(-1, 1))
    return torch.where((power > 1e-12) & (residual < 1e-4), omega, torch.full_like(omega, math.nan))


def frequency_finding(
    found: torch.Tensor, expected: torch.Tensor, base: float, d: int, rows: int
) -> tuple[str, str] | None:
    """Compare per-pair frequencies (found and expected, in pair order) and say what differs:
    all off by one factor reads as another base; right first and wrong later ones as the exponent.
    Only pairs that turn by a good part of a circle over the table are read (slower ones hide in rounding)."""
    readable = ~found.isnan() & (expected * rows > 2)
    if not readable.any() or torch.allclose(found[readable], expected[readable], rtol=TOLERANCE):
        return None
    shown = ", ".join(f"{w:.4g}" for w in found[:4].tolist())
    wanted = ", ".join(f"{w:.4g}" for w in expected[:4].tolist())
    said = f"The frequencies read from your table are {shown}, ... where {wanted}, ... are expected"
    ratio = found[readable] / expected[readable]
    if torch.allclose(ratio, ratio[0], rtol=10 * TOLERANCE):
        return "wrong_base", f"{said}: every one is {float(ratio[0]):.4g} times the right one."
    if abs(found[0] - expected[0]) < TOLERANCE * expected[0]:
        slope = _log_slope(found[readable], readable.nonzero().flatten())
        if slope is None and bool((ratio <= 1 + TOLERANCE).all()):
            # No exponent makes frequencies that fall unevenly, some pairs kept and others slowed: a rescaling of a
            # right set (Llama 3.1's bands, position interpolation on some pairs), not another exponent or base.
            factors = ", ".join(f"{r:.3g}" for r in ratio[:6].tolist())
            return (
                "wrong_values",
                f"{said}: pair by pair, they are the right ones times {factors}{', ...' if len(ratio) > 6 else ''}: "
                "some pairs slowed, others kept, as a context-extension rescaling does (Llama 3.1's rope_scaling, position interpolation). "
                "No base and no exponent gives that; this exercise asks for the plain θ_i = base^(-2i/d), unscaled.",
            )
        implied = math.exp(-slope * d / 2) if slope is not None else None
        other = (
            f" (they fall like a base of {implied:.4g} instead of {base:g})" if implied and 1 < implied < 1e12 else ""
        )
        code = "wrong_base" if implied and _near_a_usual_base(implied, base) else "wrong_exponent"
        return code, f"{said}: the first pair is right and the later ones are not{other}.{_speeding_up(found)}"
    return "wrong_exponent", f"{said}.{_speeding_up(found)}"


def _speeding_up(found: torch.Tensor) -> str:
    """A remark when pair 1 turns faster than pair 0: frequencies that grow with the pair (base^(+2i/d)) cannot be
    read past π radians per position, so the numbers shown after the first are aliases, not the code's own."""
    if len(found) < 2 or found[:2].isnan().any() or found[1] <= found[0] * (1 + TOLERANCE):
        return ""
    return (
        " Your second pair turns faster than the first, where each pair should turn slower than the one before: "
        "is the exponent's minus sign (or the 1/) missing? (Read off whole positions, a frequency above π radians "
        "per position shows as a slower one, so the numbers after the first are not your frequencies themselves.)"
    )


def _log_slope(omega: torch.Tensor, pairs: torch.Tensor) -> float | None:
    """The slope of log ω against the pair index, if the points lie on a line."""
    if len(omega) < 2 or (omega <= 0).any():
        return None
    x, y = pairs.double(), omega.log()
    slope = float(((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum())
    straight = (y - (y.mean() + slope * (x - x.mean()))).abs().max() < 1e-3
    return slope if straight else None


def _near_a_usual_base(implied: float, base: float) -> bool:
    return any(abs(implied / usual - 1) < 0.01 for usual in (1000.0, 10000.0, 500000.0) if usual != base)


def pair_columns(d: int, layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The two columns of every pair: (2i, 2i+1) interleaved, (i, i + d/2) as halves."""
    i = torch.arange(d // 2)
    return (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + d - d // 2)


def sinusoidal_findings(table: torch.Tensor, base: float) -> list[tuple[str, str]]:
    """What a (max_len, d) sinusoidal table gets wrong, aspect by aspect: (code, message), most basic first.
    The right table interleaves: PE[pos, 2i] = sin(pos·ω_i), PE[pos, 2i+1] = cos(pos·ω_i), ω_i = base^(-2i/d)."""
    t = table.detach().to("cpu", torch.float64)
    if t.dim() != 2 or t.shape[0] < 8 or t.shape[1] < 2 or not torch.isfinite(t).all():
        return []
    if t.abs().max() < TOLERANCE:
        return [("all_zeros", "Your table is all zeros.")]
    max_len, d = t.shape
    # Layout: the two members of a pair lie on the unit circle, sin² + cos² = 1, in every row.
    layouts = [
        layout
        for layout in ("interleaved", "halves")
        if ((t[:, pair_columns(d, layout)[0]] ** 2 + t[:, pair_columns(d, layout)[1]] ** 2 - 1).abs() < 1e-2).all()
    ]
    if not layouts:
        return []
    first, second = pair_columns(d, layouts[0])
    phase = torch.atan2(t[:, first], t[:, second])  # the angle, if the first member is the sine
    turn = float(torch.remainder(phase[1, 0] - phase[0, 0] + math.pi, 2 * math.pi) - math.pi)
    sines, cosines = (first, second) if turn > 0 else (second, first)  # a sine-first angle grows with the position
    findings = []
    if layouts[0] == "halves":
        findings.append(
            (
                "concatenated_halves",
                f"Your table pairs column i with column i + {d - d // 2} (row 0 reads {_row(t[0])}): sin and cos as two halves, where each (sin, cos) pair should sit in adjacent columns 2i, 2i+1.",
            )
        )
    elif turn < 0:
        findings.append(
            (
                "sin_cos_swapped",
                f"Row 0 of your table reads {_row(t[0])}: cos is in the even columns and sin in the odd ones.",
            )
        )
    found = column_frequencies(t[:, sines])
    expected = base ** (-2 * torch.arange(len(found), dtype=torch.float64) / d)
    start = float(torch.atan2(t[0, sines[0]], t[0, cosines[0]]) / (found[0] if not found[0].isnan() else 1.0))
    if abs(start) > 0.01:
        findings.append(
            (
                "position_offset",
                f"Row 0 of your table is the encoding of position {start:.3g}, not of position 0 (whose angles are all 0: sines 0, cosines 1).",
            )
        )
    frequency = frequency_finding(found, expected, base, d, max_len)
    if frequency:
        findings.append(frequency)
    return findings


def _row(row: torch.Tensor) -> str:
    shown = ", ".join(f"{v:.2g}" for v in row[:8].tolist())
    return f"[{shown}{', ...' if len(row) > 8 else ''}]"


def rope_findings(cos: torch.Tensor, sin: torch.Tensor, base: float) -> list[tuple[str, str]]:
    """What RoPE's (max_len, head_dim) cos and sin tables get wrong, aspect by aspect.
    The right ones are half-split: pair i's angle m·θ_i in columns i and i + head_dim/2, θ_i = base^(-2i/head_dim)."""
    c, s = (x.detach().to("cpu", torch.float64) for x in (cos, sin))
    if (
        c.dim() != 2
        or c.shape != s.shape
        or c.shape[0] < 8
        or c.shape[1] % 2
        or not (torch.isfinite(c).all() and torch.isfinite(s).all())
    ):
        return []
    max_len, d = c.shape

    def same(a: torch.Tensor, b: torch.Tensor) -> bool:
        return bool(((a - b).abs() < TOLERANCE).all())

    findings = []
    if same(c[:, : d // 2], c[:, d // 2 :]):
        angles_in = torch.arange(d // 2)
    elif same(c[:, 0::2], c[:, 1::2]):
        findings.append(
            (
                "rope_interleaved_convention",
                "Your tables repeat each angle in adjacent columns (2i, 2i+1): the interleaved layout, where columns i and i + head_dim/2 should share an angle.",
            )
        )
        angles_in = torch.arange(0, d, 2)
    else:
        return [
            (
                "rope_mixed_pairing",
                "No two of your columns hold the same angle, so no pair of components would turn together: each pair's angle must appear twice.",
            )
        ]
    found = column_frequencies(c[:, angles_in])
    expected = base ** (-2 * torch.arange(d // 2, dtype=torch.float64) / d)
    phase = torch.atan2(s[:2, angles_in[0]], c[:2, angles_in[0]])  # pair 0's angle in rows 0 and 1: it must grow
    if float(torch.remainder(phase[1] - phase[0] + math.pi, 2 * math.pi) - math.pi) < 0:
        findings.append(
            (
                "rope_sign_flip",
                "Your sin table has the wrong sign: from row to row the angle atan2(sin, cos) decreases, so every pair would turn backwards.",
            )
        )
    start = float(
        torch.atan2(s[0, angles_in[0]], c[0, angles_in[0]]).abs() / (found[0] if not found[0].isnan() else 1.0)
    )
    if abs(start) > 0.01:
        findings.append(
            (
                "position_offset",
                f"Row 0 of your tables holds the angles of position {start:.3g}, not of position 0 (cos 1, sin 0).",
            )
        )
    frequency = frequency_finding(found, expected, base, d, max_len)
    if frequency:
        findings.append(frequency)
    return findings


def rotation_findings(
    images: torch.Tensor, positions: tuple[int, int], layout: str, base: float
) -> list[tuple[str, str]]:
    """What a RoPE gets wrong, read from what it makes of one-hot vectors: images[k, j] is e_j
    turned at positions[k] (a small position, then a larger one), shape (2, d, d).

    A turn by angle a of the pair (p, q), p < q, takes e_p to cos a·e_p + sin a·e_q and e_q to
    cos a·e_q − sin a·e_p: the components that move name the pairing, the sign of a the direction,
    and a over the position each pair's θ (the larger position refines the first reading).
    `layout` is the one asked for: "half" (i, i + d/2) or "adjacent" (2i, 2i+1)."""
    m = images.detach().to("cpu", torch.float64)
    if m.dim() != 3 or m.shape[0] != 2 or m.shape[1] != m.shape[2] or m.shape[1] % 2 or not torch.isfinite(m).all():
        return []
    d, j = m.shape[1], torch.arange(m.shape[1])
    reach = m.abs().sum(0) * (1 - torch.eye(d, dtype=m.dtype))  # how much of e_j lands on component k != j
    partner = reach.argmax(1)
    outside = m.clone()
    outside[:, j, j], outside[:, j, partner] = 0.0, 0.0
    if not (partner[partner] == j).all() or outside.abs().max() > TOLERANCE or reach.max() < TOLERANCE:
        return []  # not a turn of pairs (or no turn at all): the other probes say more
    first = j[j < partner]
    second = partner[first]
    if (second == first + d // 2).all():
        found_layout = "half"
    elif (second == first + 1).all() and (first % 2 == 0).all():
        found_layout = "adjacent"
    else:
        return [
            (
                "rope_mixed_pairing",
                f"Your code turns component 0 together with component {int(partner[0])}: that is neither the half-split pairing (i, i + d/2) nor the interleaved one (2i, 2i+1).",
            )
        ]
    a = torch.atan2(m[:, first, second], m[:, first, first])  # (2, d/2): the angle the first member meets...
    b = torch.atan2(-m[:, second, first], m[:, second, second])  # ...and the second
    if (torch.remainder(a - b + math.pi, 2 * math.pi) - math.pi).abs().max() > TOLERANCE:
        pair = int((a - b).abs().amax(0).argmax())
        return [
            (
                "rope_mixed_pairing",
                f"The two members of a pair do not turn together: at position {positions[0]}, e_{int(first[pair])} comes out turned by {float(a[0, pair]):.4g} rad "
                f"and its partner e_{int(second[pair])} by {float(b[0, pair]):.4g} rad, so this is no rotation.",
            )
        ]
    if not (a[0].abs() > 1e-7).all() or len(set(torch.sign(a[0]).tolist())) != 1:
        return []
    sign = float(torch.sign(a[0, 0]))
    coarse = sign * a[0] / positions[0]
    late = sign * a[1]
    theta = (late + 2 * math.pi * torch.round((positions[1] * coarse - late) / (2 * math.pi))) / positions[1]
    if ((theta - coarse).abs() > 1e-5 + 1e-2 * theta.abs()).any():
        return []  # the two positions disagree: positions are used otherwise than as given
    findings = []
    names = {
        "half": "the half-split layout, pairs (i, i + d/2)",
        "adjacent": "the interleaved layout, pairs (2i, 2i+1)",
    }
    if found_layout != layout:
        code = "rope_interleaved_convention" if layout == "half" else "rope_half_split_convention"
        findings.append(
            (
                code,
                f"Your code turns component 0 together with component {int(partner[0])}: {names[found_layout]}, where {names[layout]} is asked for.",
            )
        )
    if sign < 0:
        findings.append(
            (
                "rope_sign_flip",
                f"Your rotation goes the wrong way: at position {positions[0]}, e_0 turns by {float(a[0, 0]):.4g} rad, where +θ_0 is expected.",
            )
        )
    expected = base ** (-2 * torch.arange(d // 2, dtype=torch.float64) / d)
    frequency = frequency_finding(theta, expected, base, d, 10**9)
    if frequency:
        findings.append((frequency[0], frequency[1].replace("read from your table", "read from your rotations")))
    return findings


def name_what_is_wrong(probe: Probe, failure: Failure, findings: list[tuple[str, str]]) -> None:
    """A wrong_values failure that the structural findings explain: the first finding
    becomes the diagnosis (its message, then what was compared), the others go to `also`."""
    if failure.code != "wrong_values" or not findings:
        return
    (code, message), *others = findings
    probe.also.extend(
        f"{other}: {said}" for other, said in others if other != "wrong_values"
    )  # no code: no finding of its own
    probe.fail(code, f"{message} ({failure.message})")
