"""One registry class for everything the YAML names: negative strategies (``negatives.name``) and
losses (``loss.name``). A leaf module (imports only the standard library), so strategy and loss
modules import it without a cycle; ``negatives`` never imports ``pretrain``, so it lives here and
``pretrain.losses.modules`` imports it (as timm keeps its registry in a leaf module that model files
import).

    strategies = Registry("negative strategy")

    @strategies.register("mine")
    class Mine(NegativeStrategy): ...

    strategies.create("mine", alpha=0.5)   # unknown name or kwarg: ValueError with a suggestion
"""

from __future__ import annotations

import difflib
import inspect
import typing
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def suggest(word: str, choices: list[str]) -> str:
    """' (did you mean 'x'?)' for the closest choice, or ''."""
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


class Registry(Generic[T]):
    """Classes (or functions: detectors) keyed by their YAML / command-line name.

    Args:
        kind: what the entries are, for messages ("negative strategy", "loss").
        drop_none: ``create`` drops kwargs that are None, so the class defaults apply (a config
            that leaves a strategy kwarg empty).
    """

    def __init__(self, kind: str, *, drop_none: bool = False) -> None:
        self.kind, self.drop_none = kind, drop_none
        self._classes: dict[str, type[T]] = {}

    def register(self, name: str) -> Callable[[type[T]], type[T]]:
        """Class decorator adding ``cls`` under ``name`` (also set as ``cls.name``); a duplicate
        name is an error and leaves the registry unchanged."""

        def add(cls: type[T]) -> type[T]:
            if name in self._classes:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            cls.name = name  # type: ignore[attr-defined]  (functions take attributes too)
            self._classes[name] = cls
            return cls

        return add

    def names(self) -> list[str]:
        return sorted(self._classes)

    def __contains__(self, name: object) -> bool:
        return name in self._classes

    def __iter__(self) -> Iterator[str]:
        """The names in registration order (``names()`` is sorted)."""
        return iter(self._classes)

    def __len__(self) -> int:
        return len(self._classes)

    def __getitem__(self, name: str) -> type[T]:
        return self.get(name)

    def get(self, name: str) -> type[T]:
        if name not in self._classes:
            raise ValueError(
                f"unknown {self.kind} {name!r}{suggest(name, self.names())}; "
                f"available: {', '.join(self.names())}"
            )
        return self._classes[name]

    def _init(self, name: str) -> Callable[..., Any] | None:
        """``name``'s own constructor, or None when it is inherited from a library base class
        (``torch.nn.Module.__init__``: then the class takes no arguments)."""
        for klass in self.get(name).__mro__:
            if "__init__" in vars(klass):
                return None if klass.__module__.split(".")[0] == "torch" else klass.__init__
        return None

    def parameters(self, name: str) -> list[str]:
        """The keyword arguments ``name``'s constructor accepts."""
        init = self._init(name)
        if init is None:
            return []
        kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        params = inspect.signature(init).parameters.values()
        return [p.name for p in params if p.kind in kinds and p.name != "self"]

    def annotations(self, name: str) -> dict[str, Any]:
        """{argument: its type annotation, resolved} of ``name``'s constructor; {} when the
        annotations cannot be resolved (a name imported only for type checking)."""
        init = self._init(name)
        if init is None:
            return {}
        try:
            hints = typing.get_type_hints(init)
        except Exception:  # noqa: BLE001  (any failure to resolve: no coercion, not an error)
            return {}
        return {k: v for k, v in hints.items() if k in self.parameters(name)}

    def check_kwargs(self, name: str, kwargs: dict[str, Any]) -> None:
        """ValueError naming each kwarg ``name`` does not take, with a suggestion and the list."""
        init = self._init(name)
        params = inspect.signature(init).parameters.values() if init else ()
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            return
        valid = self.parameters(name)
        for key in kwargs:
            if key not in valid:
                hint = ""
                if ":" in str(key):  # YAML reads {a:1} as the key 'a:1' with no value
                    hint = " (YAML needs a space after the colon: {a: 1}, not {a:1})"
                close = suggest(str(key).split(":")[0], valid)
                raise ValueError(
                    f"bad arguments for {self.kind} {name!r}: no argument {key!r}{hint}{close}; "
                    f"valid: {', '.join(valid) or '(none)'}"
                )

    def create(self, name: str, /, **kwargs: Any) -> T:
        """Build ``name`` from kwargs, checked against its constructor's signature first."""
        self.check_kwargs(name, kwargs)  # every key, the None ones too (a misspelt empty key)
        if self.drop_none:
            kwargs = {k: v for k, v in kwargs.items() if v is not None}
        return self.get(name)(**kwargs)


#: The negative strategies (``negatives.name``); kwargs left None in a config take the defaults.
strategies: Registry[Any] = Registry("negative strategy", drop_none=True)
