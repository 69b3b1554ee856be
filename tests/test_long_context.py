"""Chapter 07: the course's RoPE scalings against transformers' own.

The references must be the library's maths (ROPE_INIT_FUNCTIONS) to float32 rounding;
the library oracle of the checks must pass right code, name wrong code
(library_mismatch), and say in one line when it compared against a version outside
the tested range, skipped, or met a library whose maths differ; and a course function
swapped in for a rope type must drive a real Llama to the library's own logits.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

from helpers import check, check_device, library, probe, reference
from helpers.exercises import ch07_long_context as chapter
from helpers.exercises import get
from helpers.library import LibraryUnavailable
from helpers.probe import Probe
from helpers.safety import Failure
from tests.submissions import ch07

ROOT = Path(__file__).resolve().parent.parent

CASES = {
    "linear_scaling": [(8, 10000.0, 4.0), (128, 500000.0, 8.0), (64, 1000000.0, 2.5)],
    "dynamic_ntk_scaling": [
        (16, 10000.0, 2.0, 8, 16),
        (16, 10000.0, 2.0, 16, 16),
        (64, 10000.0, 4.0, 100, 32),
        (128, 1000000.0, 2.0, 40000, 16384),
    ],
    "yarn_scaling": [
        (32, 10000.0, 4.0, 64),
        (128, 10000.0, 16.0, 4096),
        (32, 500000.0, 4.0, 256, 16.0, 2.0),
        (128, 1000000.0, 4.0, 32768),
        (16, 10000.0, 1.0, 128),
        (128, 10000.0, 4.0, 65536),  # the slow edge past pair 63: the library clamps it to d - 1
        (16, 10000.0, 4.0, 100000),
    ],
    "llama3_scaling": [
        (16, 10000.0, 4.0, 1.0, 4.0, 64),
        (128, 500000.0, 8.0, 1.0, 4.0, 8192),
        (128, 500000.0, 32.0, 1.0, 4.0, 8192),
        (32, 10000.0, 8.0, 2.0, 8.0, 128),
        (128, 500000.0, 16.0, 1.0, 1.0, 8192),  # Llama 4 Scout: equal band factors, no middle band
        (32, 500000.0, 16.0, 1.0, 1.0, 256),
    ],
}
ROPE_TYPE = {
    "linear_scaling": "linear",
    "dynamic_ntk_scaling": "dynamic",
    "yarn_scaling": "yarn",
    "llama3_scaling": "llama3",
}


@pytest.mark.parametrize("exercise, args", [(e, a) for e, cases in CASES.items() for a in cases])
def test_the_reference_is_the_library(exercise, args):
    ours, our_scale = getattr(reference, exercise)(*args)
    theirs, their_scale = chapter.library_result(ROPE_TYPE[exercise], args)
    assert ours.dtype == theirs.dtype == torch.float32 and ours.shape == theirs.shape == (args[0] // 2,)
    torch.testing.assert_close(ours, theirs, rtol=2e-7, atol=0)
    assert our_scale == pytest.approx(their_scale, rel=1e-12) and isinstance(our_scale, float)


def test_ntk_slows_the_slowest_pair_by_exactly_the_factor():
    """bloc97's exponent d/(d-2): θ_0 stays 1, the last pair is divided by the factor, as interpolation would."""
    for d, base, factor in [(8, 10000.0, 4.0), (128, 500000.0, 8.0)]:
        scaled, plain = reference.ntk_scaling(d, base, factor)[0], reference.rope_inv_freq(d, base)
        assert scaled[0] == 1.0 and torch.isclose(plain[-1] / scaled[-1], torch.tensor(factor), rtol=1e-5)


def run_oracle(exercise: str, fn) -> tuple[Failure | None, list[str]]:
    """The exercise's library oracle alone (the direct probes bypassed), on its own library cases."""
    probe = Probe(get(exercise), fn.__name__, torch.device("cpu"))
    try:
        get(exercise).oracle(probe, fn)
    except Failure as failure:
        return failure, probe.notes
    return None, probe.notes


@pytest.mark.parametrize(
    "exercise, right, wrong",
    [
        ("linear_scaling", ch07.linear_pow, ch07.linear_times),
        ("dynamic_ntk_scaling", ch07.dynamic_branch, ch07.dynamic_ratio_only),
        ("yarn_scaling", ch07.yarn_by_turns, ch07.yarn_no_temperature),
        ("llama3_scaling", ch07.llama3_meta, ch07.llama3_smooth_reversed),
    ],
)
def test_the_library_oracle_alone_names_the_library(exercise, right, wrong):
    failure, notes = run_oracle(exercise, right)
    outside = library.outside_tested_range()  # a GPU image may ship another transformers: then one line says so
    assert failure is None and (notes == [] if outside is None else len(notes) == 1 and outside in notes[0]), notes
    failure, _ = run_oracle(exercise, wrong)
    assert (
        failure is not None
        and failure.code == "library_mismatch"
        and f"transformers {library.transformers_version()}" in failure.message
    ), failure


def test_a_version_outside_the_tested_range_is_said_in_one_line(monkeypatch):
    monkeypatch.setattr(library, "transformers_version", lambda: "6.1.0")
    result = check("yarn_scaling", ch07.yarn_hf)
    assert result.passed
    assert (
        "transformers 6.1.0 is installed, outside the range 5.23 to <6" in result.message
        and result.message.count("\n") == 0
    )


def test_a_library_whose_maths_differ_is_not_held_against_the_student(monkeypatch):
    monkeypatch.setattr(library, "rope_init", lambda *args, **kwargs: (torch.zeros(64), 1.0))
    result = check("llama3_scaling", ch07.llama3_meta)
    assert result.passed and "computes 'llama3' differently" in result.message


def test_without_the_library_the_oracle_is_skipped_in_one_line(monkeypatch):
    def missing():
        raise LibraryUnavailable("transformers is not installed (test)")

    monkeypatch.setattr(library, "transformers_version", missing)
    result = check("linear_scaling", ch07.linear_pow)
    assert result.passed and "was skipped: transformers is not installed (test)" in result.message


def test_the_tested_range_is_the_one_pyproject_pins():
    low, high = library.TESTED_TRANSFORMERS
    assert re.search(rf'"transformers>={re.escape(low)},<{re.escape(high)}"', (ROOT / "pyproject.toml").read_text())


@pytest.mark.parametrize(
    "rope_type, ours, wrong, extra",
    [
        ("linear", reference.linear_scaling, ch07.linear_times, {}),
        ("dynamic", reference.dynamic_ntk_scaling, ch07.dynamic_ratio_only, {}),
        ("yarn", reference.yarn_scaling, ch07.yarn_no_temperature, {}),
        ("llama3", reference.llama3_scaling, ch07.llama3_no_two_pi, {"low_freq_factor": 1.0, "high_freq_factor": 4.0}),
    ],
)
def test_a_course_function_drives_a_real_llama(rope_type, ours, wrong, extra):
    """Swapped in for its rope type, the course's function gives the library's own logits on a
    sequence 3x the trained length (dynamic recomputes its frequencies there); a wrong one does not."""
    parameters, max_positions = library.rope_parameters(rope_type, 10000.0, 4.0, 16, **extra)
    ids = torch.randint(0, library.VOCAB, (1, 48), generator=torch.Generator().manual_seed(0))

    def logits(fn=None):
        with library.rope_type_from(rope_type, fn) if fn else torch.no_grad(), torch.no_grad():
            return library.tiny_scaled_llama(parameters, max_positions)(ids).logits

    theirs = logits()
    torch.testing.assert_close(logits(ours), theirs, rtol=1.3e-6, atol=1e-5)
    assert not torch.allclose(logits(wrong), theirs, rtol=1e-3, atol=1e-3)
    assert (
        library.library_attr("modeling_rope_utils", "ROPE_INIT_FUNCTIONS")[rope_type].__module__
        == "transformers.modeling_rope_utils"
    )  # put back


def test_frequencies_are_compared_relatively():
    """The slow pairs of a base-500,000 head are below 1e-5: an absolute tolerance of 1e-5 would pass
    them doubled. Only the (64, 500000, ...) case of llama3_scaling has such pairs."""

    def slow_pairs_doubled(d, base, factor, low_freq_factor, high_freq_factor, original_max_len):
        inv_freq, scale = ch07.llama3_meta(d, base, factor, low_freq_factor, high_freq_factor, original_max_len)
        return torch.where(inv_freq < 1e-5, 2 * inv_freq, inv_freq), scale

    result = check("llama3_scaling", slow_pairs_doubled)
    assert result.diagnosis == "wrong_values" and "500000.0" in result.message, result


@pytest.mark.parametrize("exercise", [e for e in ch07.RIGHT] + ["alibi_slopes", "alibi_bias", "t5_relative_bucket"])
def test_no_message_starts_with_an_identifier_capitalised(exercise):
    """The panel capitalises the first letter of a message, hint and fix: θ_i would read Θ_i, and an
    argument name would be misspelt. Each of chapters 06 and 07's texts starts with a plain word."""
    for code in get(exercise).mistakes:
        for text in probe.advice(get(exercise), code):
            first = text.split()[0]  # a code span (`...`) is left as it is
            assert first[0] == "`" or ("_" not in first and first[0].isascii()), f"{exercise}/{code}: {text[:60]}"


@pytest.mark.parametrize(
    "exercise, fn, says",
    [
        ("linear_scaling", ch07.linear_raised_base, "not interpolation"),
        ("ntk_scaling", ch07.ntk_and_divided, "leaves pair 0 as it is"),
    ],
)
def test_wrong_values_reads_the_fastest_pair(exercise, fn, says):
    result = check(exercise, fn)
    assert result.diagnosis == "wrong_values" and says in result.hint, result


def notebook_cell(marker: str) -> str:
    """The code of the one cell of chapter 07's master that contains `marker`."""
    text = (ROOT / "solutions" / "07_long_context.md").read_text()
    (cell,) = [c for c in re.findall(r"```\{code-cell\} ipython3\n(.*?)```", text, re.S) if marker in c]
    return cell


def experiment(monkeypatch, model_cell: str) -> dict:
    """The experiment's model and data cells run with COURSE_DEVICE=meta: what a GPU run would make."""
    monkeypatch.setenv("COURSE_DEVICE", "meta")
    # the cell's thread setting is the notebook's, not the tests'
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    namespace = {"torch": torch, "nn": torch.nn, "F": torch.nn.functional, "math": math, "reference": reference}
    namespace.update(check_device=check_device, linear=reference.linear_scaling, ntk=reference.ntk_scaling)
    namespace.update(yarn=reference.yarn_scaling, llama3=reference.llama3_scaling, print=lambda *a, **k: None)
    exec(model_cell, namespace)
    exec(notebook_cell("def batch("), namespace)
    return namespace


def test_the_experiment_makes_no_tensor_on_the_cpu_when_its_device_is_another(monkeypatch):
    """On the meta device a tensor made on the CPU meets the activations and raises, as it would on a GPU;
    the same cell with its mask made without device= (a real slip) does."""
    cell = notebook_cell("class RopeModel")
    ns = experiment(monkeypatch, cell)
    ids, targets = ns["batch"](2, 40, torch.Generator().manual_seed(0))
    model = ns["RopeModel"]().to(ns["device"])
    logits = model(ids, *ns["SCALINGS"]["YaRN"])
    assert ids.is_meta and targets.is_meta and logits.is_meta and logits.shape == (2, 40, len(ns["TASKS"]), ns["VOCAB"])
    slip = cell.replace("dtype=torch.bool, device=x.device", "dtype=torch.bool")
    assert slip != cell
    ns = experiment(monkeypatch, slip)
    ids, _ = ns["batch"](2, 40, torch.Generator().manual_seed(0))
    with pytest.raises((RuntimeError, NotImplementedError)):
        ns["RopeModel"]().to(ns["device"])(ids, *ns["SCALINGS"]["YaRN"])
