"""Chapter 06: the bucket probes where float32 and float64 logs disagree.

T5's bucket of a far distance is a truncated logarithm; transformers computes it in float32. Where
the exact value is a whole number, float32 and float64 can truncate to different buckets, so the
check's probes must hold such configurations, in both directions, or a float64 implementation
passes on probes that cannot tell them apart."""

import math

import torch

from helpers import check
from helpers import probe as probe_module
from helpers.exercises import ch06_comparing as chapter
from helpers.exercises import get


def disagreement(relative: torch.Tensor, *more) -> tuple[bool, bool]:
    """(float32 above float64 somewhere, float32 below float64 somewhere) for one bucket configuration."""
    f32 = chapter._buckets(relative, *more)
    f64 = chapter._buckets(relative, *more, precision=torch.float64)
    return bool((f32 > f64).any()), bool((f32 < f64).any())


def test_float32_and_float64_buckets_disagree_somewhere_and_the_probes_hold_both_directions():
    searched = {
        (buckets, bidirectional, far): disagreement(torch.arange(-far - 5, far + 6), bidirectional, buckets, far)
        for buckets in range(8, 41)
        for bidirectional in (True, False)
        for far in range(buckets, 200, 3)
    }
    assert any(up for up, _ in searched.values()) and any(down for _, down in searched.values())
    probe = probe_module.Probe(get("t5_relative_bucket"), "t5_relative_bucket", torch.device("cpu"))
    found = [disagreement(relative, *more) for _, relative, more in chapter.bucket_cases(probe)]
    assert any(up for up, _ in found) and any(down for _, down in found), found


def test_a_bucket_mistake_the_defaults_hide_gets_a_print_with_the_case_s_own_numbers():
    """Review B9: max_distance // max_exact is 16 exactly with the defaults, so the default print shows the
    expected list; the fix also gives the failing case's arguments, where the list differs."""

    def bucket_floor_ratio(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
        n = num_buckets // 2 if bidirectional else num_buckets
        exact = n // 2
        offset = (relative_position > 0).long() * n if bidirectional else 0
        d = relative_position.abs() if bidirectional else (-relative_position).clamp(min=0)
        scaled = torch.log(d.float() / exact) / math.log(max_distance // exact) * (n - exact)
        return offset + torch.where(d < exact, d, (exact + scaled.long()).clamp(max=n - 1))

    result = check("t5_relative_bucket", bucket_floor_ratio)
    sample = torch.tensor([0, -1, 1, -20, 20, -200, 200])
    assert result.diagnosis == "wrong_values" and "num_buckets=17, max_distance=27" in result.fix, result
    assert (
        bucket_floor_ratio(sample, False, 17, 27).tolist()
        != chapter.reference.t5_relative_bucket(sample, False, 17, 27).tolist()
    )
    assert str(chapter.reference.t5_relative_bucket(sample, False, 17, 27).tolist()) in result.fix
