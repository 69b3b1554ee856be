"""Checks on a GPU, tested without one.

On a machine with CUDA, check() runs every probe on the CPU first (so a
diagnosis is the same on every machine, and the catalogue of mistakes, which
may index out of range, never runs on the GPU), then the same probes once more
with their values on the GPU. These tests stand a fake exercise or a
monkeypatched device in for the GPU; the course's GPU runs (README) cover the rest."""

import dataclasses

import pytest
import torch

from helpers import check, checking, exercises
from helpers.exercises import get
from helpers.probe import Probe
from helpers.safety import Failure, TorchState
from tests.conftest import submission_modules

CUDA = torch.device("cuda")  # a device object only: nothing here allocates on it


def right_lookup(weight, ids):
    return weight[ids]


def on_gpu_it_fails_with(code: str, message: str):
    """The lookup exercise, with a check that passes on the CPU and fails like this on the GPU."""

    def fake_check(fn, probe):
        if probe.device.type == "cuda":
            probe.fail(code, message)

    return dataclasses.replace(get("lookup"), check=fake_check)


def test_the_gpu_pass_follows_a_passed_cpu_pass(monkeypatch):
    seen = []
    monkeypatch.setattr(checking, "check_device", lambda: CUDA)
    monkeypatch.setattr(
        checking, "on_device", lambda exercise, submission, name, device: seen.append((exercise.id, device))
    )
    assert check("lookup", right_lookup).passed
    assert seen == [("lookup", CUDA)]
    assert check("lookup", lambda w, i: w.T[i]).diagnosis == "transposed_weight"  # found on the CPU...
    assert len(seen) == 1  # ...so the GPU pass never ran


def test_no_gpu_pass_on_a_cpu_machine(monkeypatch):
    monkeypatch.setattr(checking, "check_device", lambda: torch.device("cpu"))
    monkeypatch.setattr(checking, "on_device", lambda *args: pytest.fail("a GPU pass on a CPU machine"))
    assert check("lookup", right_lookup).passed


def test_a_device_clash_on_the_gpu_is_wrong_device():
    exercise = on_gpu_it_fails_with(
        "raised", "`f` raised RuntimeError: Expected all tensors to be on the same device, but found cuda:0 and cpu"
    )
    with pytest.raises(Failure) as caught:
        checking.on_device(exercise, right_lookup, "f", CUDA)
    assert caught.value.code == "wrong_device"
    assert "passes every probe on the CPU, but not on cuda" in caught.value.message


def test_other_gpu_failures_keep_their_code_and_say_where():
    exercise = on_gpu_it_fails_with("wrong_values", "the output differs at index [0, 1].")
    with pytest.raises(Failure) as caught:
        checking.on_device(exercise, right_lookup, "f", CUDA)
    assert (
        caught.value.code == "wrong_values"
        and "not on cuda" in caught.value.message
        and "index [0, 1]" in caught.value.message
    )


def test_a_broken_gpu_says_restart_the_kernel(monkeypatch):
    exercise = on_gpu_it_fails_with("raised", "`f` raised AcceleratorError: CUDA error: device-side assert triggered")
    with pytest.raises(Failure) as caught:
        checking.on_device(exercise, right_lookup, "f", CUDA)
    assert caught.value.code == "raised" and "restart the kernel" in caught.value.message

    def reference_breaks(fn, probe):  # an error outside the student's call: the check's own work on the GPU
        raise RuntimeError("CUDA error: device-side assert triggered")

    monkeypatch.setattr(
        exercises, "get", lambda exercise_id: dataclasses.replace(get("lookup"), check=reference_breaks)
    )
    result = check("lookup", right_lookup)
    assert result.diagnosis == "raised" and "restart the kernel" in result.message


def test_the_gpu_pass_replays_no_mistake_and_runs_no_meta_pass():
    probe = Probe(get("lookup"), "f", CUDA)
    assert probe.accelerator_pass
    assert probe.known_mistakes(torch.zeros(3, 2), torch.tensor([0, 2]))() == {}  # w.T[ids] would be out of range
    probe.device_pass(lambda device: pytest.fail("a meta pass on the GPU pass"))
    assert not Probe(get("lookup"), "f", torch.device("cpu")).accelerator_pass


def test_a_broken_gpu_state_does_not_break_the_capture(monkeypatch):
    def broken():
        raise RuntimeError("CUDA error: device-side assert triggered")

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", broken)
    assert TorchState.capture().cuda_rng is None
    assert check("lookup", right_lookup).passed


# --- the meta emulation against a real GPU (issue 32): run by `course.py gpu`, skipped elsewhere ---------

DEVICE_MISTAKES = [
    (exercise, fn)
    for module in submission_modules()
    for exercise, code, fn in module.WRONG
    if code in ("wrong_device", "positions_on_cpu")
]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: the meta emulation is compared with a real GPU")
@pytest.mark.parametrize("exercise, fn", DEVICE_MISTAKES, ids=[f"{ex}-{fn.__name__}" for ex, fn in DEVICE_MISTAKES])
def test_what_the_emulation_calls_a_device_mistake_fails_on_a_real_gpu(exercise, fn):
    """On a CPU-only machine the device pass's meta emulation gives these wrong_device; on a GPU they must fail as
    well (the right submissions, which pass the emulation, pass the GPU pass in test_checks.py): the verdict is
    the same on every machine."""
    with pytest.raises(Failure):
        checking.on_device(get(exercise), fn, fn.__name__, torch.device("cuda"))
