"""What `check()` is handed in place of a notebook's objects (helpers.grading.remote makes them):
a function, a class, or a module whose calls go to the kernel; Opaque for anything else."""

from __future__ import annotations

import functools
import inspect
import keyword
import re
from collections.abc import Callable
from typing import Any

from torch import nn


def identifier(name: Any, default: str = "submission") -> str:
    """A name from the kernel, as a Python identifier (it names local classes and parameters)."""
    name = re.sub(r"\W", "_", str(name))[:80]
    return name if name.isidentifier() and not keyword.iskeyword(name) else default


class Opaque:
    """Any other object of the notebook: only its type's name travels."""


class RemoteFunction:
    def __init__(self, session: Any, name: str, label: str, params: list[str]):  # a remote.Session
        self._session, self._name, self.__name__ = session, name, label
        self.__signature__ = inspect.Signature(
            [inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in params]
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._session.call({"name": self._name}, "__call__", args, kwargs)


class RemoteClassMeta(type(nn.Module)):  # type: ignore[misc]  # nn.Module's metaclass
    """Calling the stand-in class builds the object in the kernel and mirrors it here."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return cls._course_session.call(cls._course_target, "__call__", args, kwargs)

    @property
    def __signature__(cls) -> inspect.Signature:
        return inspect.Signature(
            [inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in cls.__init_params__]
        )


class RemoteObject(metaclass=RemoteClassMeta):
    """A class of the notebook that is not an nn.Module."""


def _remote(method: str) -> Callable[..., Any]:
    def call(self: Mirror, *args: Any, **kwargs: Any) -> Any:
        return self._course_session.call({"token": self._course_token}, method, args, kwargs)

    call.__name__ = method
    return call


class Mirror(nn.Module):
    """A student's module as the grader sees it: its tensors and submodules mirrored here,
    everything it does done in the kernel."""

    __call__ = forward = _remote("__call__")
    train, eval, to, cpu, cuda = (_remote(m) for m in ("train", "eval", "to", "cpu", "cuda"))
    float, double, half, bfloat16 = (_remote(m) for m in ("float", "double", "half", "bfloat16"))
    state_dict, load_state_dict, requires_grad_ = (
        _remote(m) for m in ("state_dict", "load_state_dict", "requires_grad_")
    )

    def __getattribute__(self, name: str) -> Any:
        """An attribute the kernel reported (`self.offset`, a plain tensor) is its word alone: a check
        that reads one is noted (remote.Session.attributes_read), and its verdict is best effort."""
        if name[:1] != "_":
            said = object.__getattribute__(self, "__dict__").get("_course_said", ())
            if name in said:
                session = object.__getattribute__(self, "__dict__")["_course_session"]
                session.attributes_read.setdefault(f"{type(self).__name__}.{name}")
        return object.__getattribute__(self, name)


@functools.cache
def mirror_class(name: Any) -> type:
    return type(identifier(name, "Module"), (Mirror,), {"__module__": "submission"})
