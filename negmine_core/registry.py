"""One registry class for everything the YAML names: negative strategies (``negatives.name``,
``negatives.strategies``), losses (``loss.name``, ``pretrain.losses.registry``) and detectors
(``linear_eval.detect``). A leaf module (imports only the standard library), so strategy, loss and
detector modules import it without a cycle (as timm keeps its registry in a leaf module that model
files import).

    strategies = Registry("negative strategy")

    @strategies.register("mine")
    class Mine(NegativeStrategy): ...

    strategies.create("mine", alpha=0.5)   # unknown name or kwarg: ValueError with a suggestion

Plugins: a registry with an entry point group (``negmine.strategies``, ``negmine.losses``) also
holds the classes that installed packages declare there (``name = "module:Class"``, the name being
the YAML name), loaded the first time the registry is asked for a name or the list. An entry point
that fails to import, or a second class claiming a name, is not raised while listing (a broken
plugin must not break every command): [`Registry.problem`][negmine_core.registry.Registry.problem]
names it, and asking for that name raises the message, which names the plugin, its entry point and
package (both classes for a name claimed twice).
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import sys
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
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

    def __init__(self, kind: str, *, drop_none: bool = False, group: str = "") -> None:
        self.kind, self.drop_none, self.group = kind, drop_none, group
        self._classes: dict[str, type[T]] = {}
        self._origins: dict[str, str] = {}  # name -> where it came from (plugins only)
        self._problems: dict[str, str] = {}  # name -> why it cannot be used (broken plugins)
        self._loading: str = ""  # the entry point being loaded, for the messages
        self._scanned = not group

    def __repr__(self) -> str:
        return f"Registry({self.kind!r})"

    def register(self, name: str) -> Callable[[type[T]], type[T]]:
        """Class decorator adding ``cls`` under ``name`` (also set as ``cls.name``); a duplicate
        name is an error naming both classes and leaves the registry unchanged (the same class,
        or one defined by the same file and line loaded again, is no duplicate)."""

        def add(cls: type[T]) -> type[T]:
            old = self._classes.get(name)
            if old is not None and not same_class(old, cls):
                raise ValueError(
                    f"{self.kind} {name!r} is already registered: claimed by "
                    f"{describe(old)}{self._origin_note(name)} and by "
                    f"{describe(cls)}{' (' + self._loading + ')' if self._loading else ''}"
                )
            cls.name = name  # type: ignore[attr-defined]  (functions take attributes too)
            if old is None:
                self._classes[name] = cls
                if self._loading:
                    self._origins[name] = self._loading
            return cls

        return add

    def _origin_note(self, name: str) -> str:
        return f" ({self._origins[name]})" if name in self._origins else ""

    def origin(self, name: str) -> str:
        """Where ``name`` came from: an entry point (plugin), else '' (the package or a file)."""
        self._scan()
        return self._origins.get(name, "")

    def _scan(self) -> None:
        """Load the entry points of :attr:`group` once (installed plugins)."""
        if self._scanned:
            return
        self._scanned = True
        for ep in importlib.metadata.entry_points(group=self.group):
            dist = getattr(ep, "dist", None)
            package = f"{dist.name} {dist.version}" if dist is not None else "unknown package"
            where = f"entry point '{ep.name} = {ep.value}' in group {self.group}, {package}"
            self._loading = where
            try:
                cls = ep.load()
                if ep.name not in self._classes:
                    self.register(ep.name)(cls)
                elif not same_class(self._classes[ep.name], cls):
                    self.register(ep.name)(cls)  # raises, naming both
            except Exception as e:  # noqa: BLE001  (any failure in a plugin's import: named)
                clash = isinstance(e, ValueError) and "already registered" in str(e)
                why = (
                    str(e)
                    if clash
                    else (
                        f"{self.kind} plugin {ep.name!r} ({where}) failed to import: "
                        f"{type(e).__name__}: {e}"
                    )
                )
                self._problems[ep.name] = why
                if clash:  # one warning; only the runs that use the name stop
                    print(
                        f"warning: {why}: runs that use {ep.name!r} stop with this error; "
                        "other runs go on",
                        file=sys.stderr,
                    )
            finally:
                self._loading = ""

    def problem(self, name: str) -> str:
        """Why plugin ``name`` cannot be used (it failed to import, or its name is claimed twice),
        or ''."""
        self._scan()
        return self._problems.get(name, "")

    def problems(self) -> dict[str, str]:
        self._scan()
        return dict(self._problems)

    def names(self) -> list[str]:
        self._scan()
        return sorted(self._classes)

    def __contains__(self, name: object) -> bool:
        self._scan()
        return name in self._classes

    def __iter__(self) -> Iterator[str]:
        """The names in registration order (``names()`` is sorted)."""
        self._scan()
        return iter(self._classes)

    def __len__(self) -> int:
        self._scan()
        return len(self._classes)

    def __getitem__(self, name: str) -> type[T]:
        return self.get(name)

    def name_of(self, cls: Any) -> str | None:
        """The name ``cls`` itself is registered under (installed plugins included), else None
        (a subclass of a registered class is not registered by inheriting its ``name``)."""
        self._scan()
        return next((name for name, held in self._classes.items() if held is cls), None)

    @contextlib.contextmanager
    def registered(self, name: str, cls: type[T]) -> Iterator[str]:
        """Hold ``cls`` under ``name`` for the block only (a test's class, the contract kit's
        runs), then remove it and restore its ``name`` attribute. A class registered already
        (under any name) is used under that name and left registered."""
        held = self.name_of(cls)
        if held is not None:
            yield held
            return
        had = vars(cls).get("name")
        self.register(name)(cls)  # a name another class holds: the duplicate error
        try:
            yield name
        finally:
            self._classes.pop(name, None)
            self._origins.pop(name, None)
            if had is None:
                with contextlib.suppress(AttributeError):
                    delattr(cls, "name")
            else:
                cls.name = had  # type: ignore[attr-defined]

    def get(self, name: str) -> type[T]:
        self._scan()
        if name in self._problems:
            raise ValueError(self._problems[name])
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


class PluginError(ValueError):
    """A plugin named in a config (``plugins:``) that cannot be loaded."""


def import_plugin(spec: str, base: Path | None = None) -> tuple[str, list[Any]]:
    """Import one plugin of a config's ``plugins:`` list: a Python file (``path/to/mine.py``; its
    ``@register`` decorators run) or an importable ``module`` / ``module:Class``. Returns the spec
    as stored (a file as its absolute path) and the object named (the class, or nothing). A file
    already loaded is not loaded twice. PluginError names the plugin and the cause. A relative
    file path resolves against ``base`` (the config file's folder) first, then the working
    directory; "no such file" shows the paths tried."""
    path = Path(spec).expanduser()
    if spec.endswith(".py") or path.suffix == ".py":
        if path.is_dir():
            raise PluginError(
                f"plugin {spec!r} is a folder, not a Python file: name the .py file "
                "(or give a package as a module name, without .py)"
            )
        tried = [path] if path.is_absolute() or base is None else [Path(base) / path, path]
        found = next((p for p in tried if p.is_file()), None)
        if found is None:
            where = ", ".join(str(p.resolve()) for p in tried)
            raise PluginError(f"plugin {spec!r}: no such file (tried {where})")
        path = found.resolve()
        tag = hashlib.sha1(str(path).encode()).hexdigest()[:8]
        module_name = f"negmine_plugin_{path.stem}_{tag}"
        if module_name not in sys.modules:
            loader = importlib.util.spec_from_file_location(module_name, path)
            if loader is None or loader.loader is None:
                raise PluginError(f"plugin {spec!r}: not a Python file")
            module = importlib.util.module_from_spec(loader)
            sys.modules[module_name] = module
            try:
                loader.loader.exec_module(module)
            except Exception as e:  # noqa: BLE001  (any failure in the plugin: named)
                del sys.modules[module_name]
                raise PluginError(
                    f"plugin {spec!r} failed to import: {type(e).__name__}: {e}"
                ) from e
        return str(path), []
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # noqa: BLE001
        raise PluginError(f"plugin {spec!r} failed to import: {type(e).__name__}: {e}") from e
    if not attr:
        return spec, []
    if not hasattr(module, attr):
        raise PluginError(f"plugin {spec!r}: module {module_name!r} has no {attr!r}")
    return spec, [getattr(module, attr)]


def describe(cls: Any) -> str:
    """``module.Class`` and its file, for messages."""
    try:
        where = inspect.getsourcefile(cls) or "?"
    except TypeError:
        where = "?"
    return f"{cls.__module__}.{cls.__qualname__} ({where})"


def same_class(a: Any, b: Any) -> bool:
    """The same class, or the same definition loaded twice (one file and line, two imports)."""
    if a is b:
        return True
    try:
        return (
            a.__qualname__ == b.__qualname__
            and inspect.getsourcefile(a) is not None
            and inspect.getsourcefile(a) == inspect.getsourcefile(b)
            and definition_line(a) == definition_line(b)
        )
    except (TypeError, OSError):
        return False


def definition_line(cls: Any) -> int:
    """The line of ``cls``'s own definition: ``__firstlineno__`` (Python >= 3.13), else its first
    method's; ``inspect.getsourcelines`` before 3.13 finds the first class of that name in the
    file, the same line for two classes of one qualname."""
    line = getattr(cls, "__firstlineno__", None)
    if line is not None:
        return line
    for value in vars(cls).values():
        code = getattr(getattr(value, "__func__", value), "__code__", None)
        if code is not None:
            return code.co_firstlineno
    return inspect.getsourcelines(cls)[1]
