"""What runs in a graded kernel besides the function server (serve): the safety net around each
call into the notebook's code. Both sides use `state_key`
and `put` to tell when a tensor's values changed and to write new ones in place."""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from helpers import safety  # the safety net, imported before any cell runs
from helpers.grading.wire import Kind, Outcome, Settings


def state_key(tensor: torch.Tensor) -> tuple[Any, ...]:
    """Changes when the values may have: an in-place op, new storage, another shape, dtype or device."""
    pointer = 0 if tensor.is_meta or tensor.layout != torch.strided else tensor.data_ptr()
    # An inference tensor (made under torch.inference_mode) keeps no version counter: reading it raises.
    version = -1 if tensor.is_inference() else tensor._version
    return (version, pointer, tuple(tensor.shape), tensor.dtype, str(tensor.device), tensor.requires_grad)


def put(target: torch.Tensor, values: torch.Tensor) -> None:
    with torch.no_grad():
        if (
            target.shape == values.shape
            and target.dtype == values.dtype
            and target.device == values.device
            and not target.is_meta
        ):
            target.copy_(values)
        else:
            target.data = values


def run_student_code(
    fn: Any, args: list[Any], kwargs: dict[str, Any], settings: Settings
) -> tuple[Outcome, Any, set[str], list[str]]:
    """Call into the notebook's code with the course's safety net; (outcome, result, torch
    functions seen, torch settings it changed). The same net as a check in a notebook."""
    forbidden = tuple(f for f in (safety.from_torch_path(path) for path in settings.forbidden) if f is not None)
    watch = safety._Watch(forbidden)
    result, outcome, changed = None, Outcome(Kind.OK), []
    with torch.set_grad_enabled(settings.grad):
        state = safety.TorchState.capture()
        try:
            with (
                safety.time_limit(settings.timeout),
                safety.memory_cap(settings.memory_mb, torch.device(settings.device)),
                watch,
                safety._FactoriesOnMeta()  # type: ignore[no-untyped-call]  # the framework is not strict
                if settings.factories_on_meta
                else safety._CopiesOffMeta()
                if settings.copies_off_meta
                else contextlib.nullcontext(),
                safety._ReferenceWatch(
                    "it"
                ),  # in a sandbox, what is left of the reference (sandbox.reference_stand_in)
            ):
                result = fn(*args, **kwargs)
        except (safety.CheckTimeout, KeyboardInterrupt):
            outcome = Outcome(Kind.TIMEOUT)
        except safety.ForbiddenCall as call:
            outcome = Outcome(Kind.FORBIDDEN, name=call.name)
        except safety.Failure as failure:  # _ReferenceWatch's
            name = failure.message.split("`")[1] if "`" in failure.message else "helpers.reference"
            outcome = Outcome(Kind.REFERENCE, name=name)
        except NotImplementedError as error:
            outcome = Outcome(Kind.NOT_IMPLEMENTED, safety._last_line(error), stub=safety._stub_that_raised(error))
        except SystemExit as error:
            outcome = Outcome(Kind.EXIT, safety._last_line(error))
        except BaseException as error:
            if (
                type(error).__name__ == "ReferenceUnavailable"
            ):  # the sandbox's stand-in (grading/stand_ins/reference.py)
                outcome = Outcome(Kind.REFERENCE, name=str(getattr(error, "name", "helpers.reference")))
            else:
                outcome = Outcome(Kind.RAISED, safety._last_line(error), oom=safety._is_out_of_memory(error))
        finally:
            changed = safety.TorchState.capture().changes_since(state)
            state.restore()
    return outcome, result, {getattr(f, "__name__", "") for f in watch.seen}, changed
