"""The checker framework: `check(exercise_id, submission) -> CheckResult`.

A check is a short list of named probes (shape -> dtype -> device -> values ->
properties -> module hygiene) written per exercise in its chapter's module
under `helpers.exercises`. This module joins the catalogue to the probes' tools
(`helpers.probe`) and their safety net (`helpers.safety`):

* every call into student code goes through `Probe.call` and the one seam of
  `helpers.calls`, which times it out, caps its memory, says how it ended, and
  `Probe.call` notices if it changed its inputs in place;
* `check()` snapshots torch's global state (default dtype, grad mode, RNG...)
  and puts it back afterwards, whatever the student's code did;
* when the output is wrong, `Probe.expect` runs the exercise's catalogue of
  known-wrong variants (declared with the exercise) on the same inputs: the one that
  reproduces the student's output names the mistake. We diagnose by running
  code, never by reading the student's source.

Nothing in here raises because of a submission: every failure becomes a
`CheckResult` with a diagnosis code from `helpers.registry.DIAGNOSES`.
"""

from __future__ import annotations

import html
import inspect
import re
from dataclasses import dataclass, field
from typing import Any

import torch

from helpers import exercises, registry, tracking
from helpers.calls import RUNNER, Ended, Ending, last_line
from helpers.probe import Probe, advice
from helpers.probe import check_device as check_device  # helpers exports it from here
from helpers.safety import CheckTimeout, Failure, TorchState, reference_name

# --------------------------------------------------------------------------
# The result a student sees
# --------------------------------------------------------------------------


@dataclass
class CheckResult:
    """What a check found. The message says what is wrong, on which input, in the
    student's names; the hint gives the idea that leads to the fix; the fix is
    the concrete change. In Jupyter the hint and the fix are folded (HTML
    <details>, no JavaScript), so a student asks for help one step at a time."""

    exercise: str
    passed: bool
    diagnosis: str | None
    message: str
    score: float
    max_score: float
    submission_name: str = ""
    hint: str = ""
    fix: str = ""
    also: list[str] = field(default_factory=list)  # further independent mistakes found

    def __bool__(self) -> bool:
        return self.passed

    @property
    def started(self) -> bool:
        return self.diagnosis != "not_implemented"

    def _headline(self) -> str:
        who = f" ({self.submission_name})" if self.submission_name not in ("", self.exercise) else ""
        points = f"{self.score:g}/{self.max_score:g} points"
        if self.passed:
            return f"✔ {self.exercise}{who}: passed, {points}"
        if not self.started:
            return f"○ {self.exercise}{who}: not started yet, {points}"
        return f"✘ {self.exercise}{who}: {self.diagnosis}, {points}"

    def __str__(self) -> str:
        lines = [self._headline(), f"  {self.message}"]
        lines += [f"  Also: {finding}" for finding in self.also]
        lines += [
            f"  {label}: {text}" for label, text in (("Hint", self.hint), ("Fix", self.fix)) if text and not self.passed
        ]
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        css_class, colour, background = (
            ("check-pass", "#1a7f37", "#dafbe1")
            if self.passed
            else ("check-todo", "#57606a", "#eef1f4")
            if not self.started
            else ("check-fail", "#cf222e", "#ffebe9")
        )

        # The texts are written with markdown's `code`: escaped first, so a student's name or value stays text, then shown as code.
        def text(words: str) -> str:
            return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(words))

        also = "".join(f"<li>{text(finding)}</li>" for finding in self.also)
        help_ = ""
        if self.hint and not self.passed:  # the fix is folded inside the hint: a second click away
            fix = (
                f'<details class="check-fix" style="margin:4px 0 0 12px"><summary>Show the fix</summary>{text(self.fix)}</details>'
                if self.fix
                else ""
            )
            help_ = f'<details class="check-hint" style="margin-top:6px"><summary>Hint</summary>{text(self.hint)}{fix}</details>'
        return (
            f'<div class="course-check {css_class}" data-diagnosis="{self.diagnosis or ""}" '
            f'style="border-left:6px solid {colour};background:{background};'
            f'padding:8px 12px;margin:4px 0;color:#1f2328;font-family:sans-serif">'
            f"<b>{html.escape(self._headline())}</b><br>{text(self.message)}"
            + (f'<ul class="check-also" style="margin:4px 0">Also wrong: {also}</ul>' if also else "")
            + f"{help_}</div>"
        )


# --------------------------------------------------------------------------
# The public entry points
# --------------------------------------------------------------------------


GRADED_OUTSIDE = (
    "This notebook is being graded: the grader checks `{}` itself, outside this kernel, once every cell has run."
)


def check(exercise_id: str, submission: Any) -> CheckResult:
    """Check a student's function or nn.Module class against exercise `exercise_id`.

    Never raises because of the submission; an unknown exercise id is the
    caller's mistake and raises KeyError with the close matches."""
    name = getattr(submission, "__name__", type(submission).__name__)
    if not exercises.AVAILABLE:  # a kernel being graded: the grader checks, outside it
        return CheckResult(exercise_id, False, "not_implemented", GRADED_OUTSIDE.format(exercise_id), 0, 0, name)
    exercise = exercises.get(exercise_id)
    device = check_device()
    probe = Probe(exercise, name, torch.device("cpu"))  # first on the CPU: the same diagnosis on every machine
    before = TorchState.capture()
    # A module's dropout draws from torch's global CPU generator, where the probes run: seeded here (and put back
    # after), its masks and so the verdict are the same whatever the notebook drew before. Not torch.manual_seed:
    # before CUDA starts, it queues a seed for the GPU that nothing would put back.
    torch.default_generator.manual_seed(probe.seed)
    try:
        what = "a function" if exercise.kind == "function" else "an nn.Module class"
        if submission is None or not callable(submission):
            raise Failure("wrong_type", f"check() needs {what} for {exercise_id!r}, got {type(submission).__name__}.")
        if exercise.kind == "function" and inspect.isclass(submission):
            raise Failure(
                "wrong_type", f"check() needs {what} for {exercise_id!r}, got the class {name}: pass your own function."
            )
        built_on = [c for c in getattr(submission, "__mro__", ()) if c.__module__ == "helpers.reference"]
        reference = f"helpers.reference.{built_on[0].__name__}" if built_on else reference_name(submission)
        if reference is not None:  # the reference itself (solution_or_reference's), or a subclass
            raise Failure(
                "uses_reference",
                f"`{name}` is, or is built on, the course's own reference `{reference}`, not code of your own.",
            )
        exercise.check(submission, probe)
        if exercise.oracle is not None:  # after the direct probes, which name a mistake more precisely; on the CPU only
            exercise.oracle(probe, submission)
        if device.type != "cpu":
            on_device(exercise, submission, name, device)
        code, message, hint, fix = None, "All probes passed: shapes, dtypes, devices, values and properties.", "", ""
    except Failure as failure:
        code, message, hint, fix = failure.code, failure.message, failure.hint, failure.fix
    except (CheckTimeout, Ended) as ended:  # fired just after the student's call returned; graded: a kernel's
        # call that ended outside any probe's call (a backward through its result)
        code, message, hint, fix = "timeout", f"`{name}` ran past the {probe.timeout:g} s limit.", "", ""
        if isinstance(ended, Ended) and ended.outcome.ending is not Ending.TIMEOUT:
            said = ended.said()
            message = broken_gpu(said) if gpu_is_broken(said) else f"checking `{name}` failed with {said}"
            code = "raised"
    except KeyboardInterrupt:
        before.restore()
        raise
    except BaseException as error:  # a submission that broke the check itself
        said = f"{type(error).__name__}: {error}"
        code, message, hint, fix = (
            "raised",
            broken_gpu(said) if gpu_is_broken(said) else f"checking `{name}` failed with {last_line(error)}",
            "",
            "",
        )
    before.restore()  # e.g. the RNG draws of a module's dropout: the notebook's seeds stay reproducible
    if code is None:
        result = CheckResult(
            exercise_id, True, None, " ".join([message, *probe.notes]), exercise.points, exercise.points, name
        )
    else:
        _, default_hint, default_fix = advice(exercise, code)
        result = CheckResult(
            exercise_id,
            False,
            code,
            message,
            0,
            exercise.points,
            name,
            hint or default_hint,
            fix or default_fix,
            probe.also,
        )
    if RUNNER.get().records_progress:  # the grader's checks are no student's progress
        tracking.record(result)
    return result


def on_device(exercise: registry.Exercise, submission: Any, name: str, device: torch.device) -> None:
    """The check again, its values compared on `device` (a GPU), after it passed on the CPU.
    Whatever fails here fails only on this device: said so, a device clash as wrong_device."""
    try:
        exercise.check(submission, Probe(exercise, name, device))
    except Failure as failure:
        if failure.code == "raised" and gpu_is_broken(failure.message):
            raise Failure("raised", broken_gpu(failure.message)) from None
        clash = failure.code == "raised" and "device" in failure.message.lower()
        code = "wrong_device" if clash else failure.code
        said = f"Your code passes every probe on the CPU, but not on {device} (this machine's GPU): {failure.message}"
        raise Failure(code, said, "" if clash else failure.hint, "" if clash else failure.fix) from None


def gpu_is_broken(said: str) -> bool:
    return any(sign in said for sign in ("AcceleratorError", "device-side assert", "CUDA error"))


def broken_gpu(said: str) -> str:
    return (
        f"The GPU reported an error ({said.strip().splitlines()[-1][:300]}). After a device-side assert (usually an index out of range, "
        "in this cell or an earlier one) CUDA refuses all further work in this process: restart the kernel "
        "(Kernel → Restart), run the cells again, and look for the index that is out of range."
    )


def solution_or_reference(exercise_id: str, submission: Any) -> Any:
    """For the cells that *use* an exercise: the student's version once it
    passes, else the reference, clearly labelled, so the chapter still runs."""
    if not exercises.AVAILABLE:  # a kernel being graded: the student's own, else the reference's stand-in, which raises
        from helpers import reference

        return submission if callable(submission) else getattr(reference, exercise_id)
    exercise = exercises.get(exercise_id)
    if check(exercise_id, submission).passed:
        return submission
    print(f"(using the course's reference `{exercise_id}`: yours does not pass its check yet)")
    return exercise.reference
