"""Methods that take a run's arguments, written once.

`Swarm.run`, `arun`, `DurableSwarm.start`, `run`... take the same long list of arguments (Swarm's
`run` signature, plus keyword-only options). Each list is written once, as a *shape*: a function
that takes them and returns the `RunRequest` they make. `@takes_run(shape)` turns a method
`(self, run: RunRequest)` into one called with the shape's arguments, so every method of a shape
shows, checks and types the same parameters, and none of them repeats them.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, cast

if TYPE_CHECKING:
    from .loop import RunRequest

__all__ = ["takes_run"]

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")


def takes_run(
    shape: Callable[P, RunRequest],
) -> Callable[[Callable[[S, RunRequest], R]], Callable[Concatenate[S, P], R]]:
    """Decorate `method(self, run)` to be called as `method(self, <shape's arguments>)`.

    The method keeps its name and docstring; `inspect.signature` (and `help`) shows `self` then
    the shape's parameters, and type checkers see them too. Arguments that do not fit raise
    `TypeError` naming the method, as Python does for a method written out. A coroutine
    function stays one.
    """
    signature = inspect.signature(shape)

    def decorate(method: Callable[[S, RunRequest], R]) -> Callable[Concatenate[S, P], R]:
        name = method.__qualname__

        def request(args: tuple[Any, ...], kwargs: dict[str, Any]) -> RunRequest:
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError as e:
                raise TypeError(f"{name}() {e}") from None
            return shape(*bound.args, **bound.kwargs)

        wrapper: Any
        if inspect.iscoroutinefunction(method):

            @functools.wraps(method)
            async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
                return await cast(Any, method)(self, request(args, kwargs))

        else:

            @functools.wraps(method)
            def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
                return method(self, request(args, kwargs))

        own = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        wrapper.__signature__ = signature.replace(
            parameters=[own, *signature.parameters.values()],
            return_annotation=inspect.signature(method).return_annotation,
        )
        return cast(Callable[Concatenate[S, P], R], wrapper)

    return decorate
