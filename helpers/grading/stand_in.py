"""What `check()` is handed in place of a notebook's objects (helpers.grading.remote makes them):
a function, a class, or a module whose calls go to the kernel; Opaque for anything else."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from torch import nn

from helpers.grading.wire import METHODS, identifier


class RemoteFunction:
    def __init__(self, session: Any, name: str, label: str, params: list[str]):  # a remote.Session
        self._session, self._name, self.__name__ = session, name, label
        self.__signature__ = inspect.Signature(
            [inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in params]
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._session.call_in_kernel({"name": self._name}, "__call__", args, kwargs)


class RemoteClassMeta(type(nn.Module)):  # type: ignore[misc]  # nn.Module's metaclass
    """Calling the stand-in class builds the object in the kernel and mirrors it here."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return cls._course_session.call_in_kernel(cls._course_target, "__call__", args, kwargs)

    @property
    def __signature__(cls) -> inspect.Signature:
        return inspect.Signature(
            [inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in cls.__init_params__]
        )


class RemoteObject(metaclass=RemoteClassMeta):
    """A class of the notebook that is not an nn.Module."""


def _remote(method: str) -> Callable[..., Any]:
    def call(self: Mirror, *args: Any, **kwargs: Any) -> Any:
        return self._course_session.call_in_kernel({"token": self._course_token}, method, args, kwargs)

    call.__name__ = method
    return call


class Mirror(nn.Module):
    """A student's module as the grader sees it: its tensors and submodules mirrored here,
    everything it does done in the kernel (the methods of wire.METHODS, set below)."""

    forward = _remote("__call__")

    def __getattribute__(self, name: str) -> Any:
        """An attribute the kernel reported (`self.offset`, a plain tensor) is its word alone: a check
        that reads one is noted (remote.Session.attributes_read), and its verdict is best effort."""
        if name[:1] != "_":
            said = object.__getattribute__(self, "__dict__").get("_course_said", ())
            if name in said:
                session = object.__getattribute__(self, "__dict__")["_course_session"]
                session.attributes_read.setdefault(f"{type(self).__name__}.{name}")
        return object.__getattribute__(self, name)


for _method in METHODS:
    setattr(Mirror, _method, _remote(_method))


@functools.cache
def mirror_class(name: Any) -> type:
    return type(identifier(name, "Module"), (Mirror,), {"__module__": "submission"})
