"""The checker framework itself: results, the safety net, devices.

Each way a submission can misbehave (it raises, loops, allocates, mutates its
inputs, changes torch's settings...) has a test here or a wrong submission in
tests/submissions that must get its code."""

import os
import threading

import pytest
import torch

from helpers import check, checking, solution_or_reference
from helpers.exercises import all_exercises, get
from helpers.probe import Probe
from helpers.registry import DIAGNOSES
from helpers.safety import Failure


def good_lookup(weight, ids):
    return weight[ids]


def test_result_is_truthy_renders_as_text_and_html():
    passed, failed = check("lookup", good_lookup), check("lookup", lambda w, i: w.T[i])
    assert bool(passed) and not bool(failed)
    assert "passed" in str(passed) and "2/2" in str(passed)
    assert "transposed_weight" in str(failed) and "0/2" in str(failed)
    html = failed._repr_html_()
    assert 'class="course-check check-fail"' in html and 'data-diagnosis="transposed_weight"' in html
    assert "check-pass" in passed._repr_html_()


def test_html_escapes_the_message():
    def shouty(weight, ids):
        raise ValueError("<script>alert(1)</script>")

    html = check("lookup", shouty)._repr_html_()
    assert "<script>" not in html and "&lt;script&gt;" in html


def test_a_result_has_the_report_fields():
    result = check("lookup", good_lookup)
    keys = ("exercise", "passed", "score", "max_score", "diagnosis", "message", "hint", "fix", "also")
    assert {key: getattr(result, key) for key in keys} == {
        "exercise": "lookup",
        "passed": True,
        "score": 2,
        "max_score": 2,
        "diagnosis": None,
        "message": "All probes passed: shapes, dtypes, devices, values and properties.",
        "hint": "",
        "fix": "",
        "also": [],
    }


def test_unknown_exercise_raises_with_a_suggestion():
    with pytest.raises(KeyError, match="Did you mean 'lookup'"):
        check("lokup", good_lookup)


@pytest.mark.parametrize(
    "submission",
    [None, 42, "weight[ids]", good_lookup(torch.eye(3), torch.tensor([0]))],
    ids=["None", "int", "str", "tensor"],
)
def test_a_non_callable_is_a_wrong_type(submission):
    result = check("lookup", submission)
    assert result.diagnosis == "wrong_type" and "needs a function" in result.message


def test_exit_and_base_exceptions_become_results():
    def exits(weight, ids):
        raise SystemExit(3)

    def generator_exit(weight, ids):
        raise GeneratorExit

    assert check("lookup", exits).diagnosis == "raised"
    assert check("lookup", generator_exit).diagnosis == "raised"


def test_the_callers_rng_and_settings_are_restored():
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)

    def noisy(weight, ids):
        torch.rand(1000)  # draws from the global RNG
        return weight[ids]

    assert check("lookup", noisy).passed
    assert torch.equal(torch.rand(3), expected_next)


def test_a_dropout_verdict_never_depends_on_what_the_notebook_drew(monkeypatch):
    """check() seeds the CPU generator its probes draw dropout masks from, and only that one: the GPU's
    generator, not started yet, is left alone (torch.manual_seed would queue a seed for it)."""
    from tests.submissions.ch03 import TokenAndPositionDropoutTwice

    seeded_gpu = []
    monkeypatch.setattr(torch.cuda, "manual_seed_all", lambda seed: seeded_gpu.append(seed))
    results = []
    for seed in (0, 1, 2):
        torch.manual_seed(seed)
        torch.rand(seed * 1000 + 17)  # the notebook's own draws before the check
        before = torch.get_rng_state()
        results.append(check("TokenAndPositionEmbedding", TokenAndPositionDropoutTwice))
        assert torch.equal(torch.get_rng_state(), before)
    assert {(r.diagnosis, r.message) for r in results} == {(results[0].diagnosis, results[0].message)}
    assert results[0].diagnosis == "dropout_twice"
    assert seeded_gpu == [0, 1, 2]  # the test's own torch.manual_seed calls, none of check()'s


@pytest.mark.parametrize(
    "change",
    [
        lambda: torch.set_default_dtype(torch.float64),
        lambda: torch.set_grad_enabled(False),
        lambda: torch.use_deterministic_algorithms(True),
    ],
    ids=["dtype", "grad", "deterministic"],
)
def test_global_state_changes_are_reported_and_undone(change):
    def meddles(weight, ids):
        change()
        return weight[ids]

    result = check("lookup", meddles)
    assert result.diagnosis == "changed_global_state"
    assert torch.get_default_dtype() == torch.float32
    assert torch.is_grad_enabled() and not torch.are_deterministic_algorithms_enabled()


def test_timeout_also_works_off_the_main_thread():
    def spins(weight, ids):
        while True:
            pass

    results = []
    worker = threading.Thread(target=lambda: results.append(check("lookup", spins)))
    worker.start()
    worker.join(30)
    assert not worker.is_alive() and results[0].diagnosis == "timeout"


def test_memory_cap_is_lifted_afterwards():
    def greedy(weight, ids):
        return torch.ones(2**40, dtype=torch.uint8)

    assert check("lookup", greedy).diagnosis == "out_of_memory"
    assert torch.ones(2**28, dtype=torch.uint8).sum() == 2**28  # 256 MB still fine


def test_device_follows_the_override(monkeypatch):
    monkeypatch.setenv("COURSE_DEVICE", "cpu")
    assert checking.check_device() == torch.device("cpu")
    monkeypatch.setenv("COURSE_DEVICE", "meta")
    assert checking.check_device() == torch.device("meta")
    monkeypatch.delenv("COURSE_DEVICE")
    assert checking.check_device().type == (
        "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    )


def test_cuda_is_preferred_when_present(monkeypatch):
    monkeypatch.delenv("COURSE_DEVICE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert checking.check_device() == torch.device("cuda")


def test_inputs_are_made_on_the_check_device(monkeypatch):
    """With COURSE_DEVICE=meta every probe input is a meta tensor: what a GPU
    run would see, without a GPU. Code that builds on the CPU is caught."""
    monkeypatch.setenv("COURSE_DEVICE", "meta")
    probe = Probe(get("lookup"), "x")
    assert probe.randn(2, 3).device.type == "meta" and probe.randint(5, 4).device.type == "meta"


def test_device_pass_flags_cpu_tensors_and_stays_quiet_on_missing_meta_kernels():
    probe = Probe(get("lookup"), "x", torch.device("cpu"))  # the CPU pass: the one that runs device passes
    with pytest.raises(Failure) as caught:
        probe.device_pass(lambda device: probe.call(lambda: torch.arange(3) + torch.zeros(3, device=device)))
    assert caught.value.code == "wrong_device"
    with pytest.raises(Failure):
        probe.device_pass(lambda device: probe.call(lambda: torch.zeros(3)))  # returned on the CPU
    probe.device_pass(lambda device: probe.call(lambda: torch.zeros(3, device=device).tolist()))  # no verdict


def test_solution_or_reference_falls_back_with_a_label(capsys):
    def stub(weight, ids):
        raise NotImplementedError

    assert solution_or_reference("lookup", good_lookup) is good_lookup
    assert solution_or_reference("lookup", stub) is get("lookup").reference
    assert "reference" in capsys.readouterr().out


def test_failure_codes_are_documented():
    with pytest.raises(ValueError):
        Failure("made_up_code", "...")
    assert all(isinstance(text, str) and text for text in DIAGNOSES.values())


def test_every_exercise_has_a_signature_and_points():
    for exercise in all_exercises().values():
        assert exercise.points > 0 and exercise.signature.startswith(exercise.id + "(")


def test_check_environment_variables_are_read(monkeypatch):
    monkeypatch.setenv("COURSE_CHECK_TIMEOUT", "0.5")
    monkeypatch.setenv("COURSE_CHECK_MEMORY_MB", "64")
    probe = Probe(get("lookup"), "x")
    assert (probe.timeout, probe.memory_mb) == (0.5, 64)
    assert os.environ["COURSE_CHECK_TIMEOUT"] == "0.5"


def test_a_class_is_not_a_function():
    result = check("lookup", torch.nn.Embedding)
    assert result.diagnosis == "wrong_type" and "class Embedding" in result.message


def test_a_bare_except_cannot_swallow_the_time_limit():
    def stubborn(weight, ids):
        while True:
            try:
                torch.zeros(1)
            except:  # noqa: E722
                pass

    assert check("lookup", stubborn).diagnosis == "timeout"
    import sys

    assert sys.gettrace() is None or "coverage" in type(sys.gettrace()).__module__  # the tracer is gone


@pytest.mark.parametrize("shape", [(1,), (2,), (3, 5), (2, 3, 4)])
def test_probe_ids_hold_both_edges_on_every_seed(shape):
    """Probe.ids puts 0 and high - 1 among the ids on purpose (one id: high - 1); every=True each value."""
    for exercise in ("lookup", "ScaledEmbedding", "BertEmbeddings"):
        probe = Probe(get(exercise), "x")
        ids = probe.ids(50, *shape)
        assert ids.shape == shape and 0 <= int(ids.min()) and int(ids.max()) <= 49
        assert 49 in ids.flatten().tolist() and (ids.numel() == 1 or 0 in ids.flatten().tolist())
    every = Probe(get("lookup"), "x").ids(7, 3, 4, every=True)
    assert set(every.flatten().tolist()) == set(range(7))


def test_independent_runs_every_aspect_and_says_which_named_ones_passed():
    probe = Probe(get("lookup"), "f", torch.device("cpu"))
    ran = []

    def fails(code: str):
        def run():
            ran.append(code)
            probe.fail(code, f"{code} happened")

        return run

    with pytest.raises(Failure) as first:
        probe.independent(
            fails("wrong_shape"), values=lambda: ran.append("values"), dtype=fails("wrong_dtype"), hygiene=lambda: None
        )
    assert first.value.code == "wrong_shape" and ran == ["wrong_shape", "values", "wrong_dtype"]
    assert probe.also == ["wrong_dtype: wrong_dtype happened"]
    assert probe.passed("values") and probe.passed("hygiene") and not probe.passed("dtype")
    assert not probe.passed("gradient")  # never ran
