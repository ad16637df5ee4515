"""Reading a dataset's pickles (CIFAR's batch and meta files) as data, never as code or memory.

A pickle may name any callable, so :class:`DataUnpickler` hands it stand-ins instead of numpy's
own, each :class:`Sealed` (a BUILD can set nothing on them): ``numpy.dtype`` gives a
:class:`PlainDtype` (bool, integer and float dtypes only), ``numpy.ndarray`` may only be named as
``_reconstruct``'s first argument, and every array it builds is a :class:`CheckedArray`, whose
state is checked before numpy reads it. So no object or structured array ever exists: such an
array's items are pointers (``numpy.ndarray(shape, dtype('O'), buffer)`` takes them from the
file's bytes, and so does ``ndarray.__setstate__`` for an object or structured dtype whose flags
a BUILD of the dtype rewrote), and reading one would dereference addresses the file chose.
"""

from __future__ import annotations

import codecs
import importlib
import io
import pickle
import re
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from pretrain.data import imagefiles

# the codes numpy pickles its plain dtypes as: b1, i1 ... i8, u1 ... u8, f2 ... f16
PLAIN_CODE = re.compile(r"[biuf][0-9]{1,2}")
# numpy's dtype state, versions 3 and 4 (4 adds metadata): (version, byte order, subarray, names,
# fields, item size, alignment, flags); a plain dtype has none of the middle five
PLAIN_STATE = (None, None, None, -1, -1, 0)
BYTE_ORDERS = ("<", ">", "|", "=")


def _numpy(module: str, name: str) -> Any:
    """numpy's ``_core.<module>.<name>`` (numpy 2), or ``core.<module>.<name>`` (numpy 1)."""
    for package in ("numpy._core", "numpy.core"):
        try:
            return getattr(importlib.import_module(f"{package}.{module}"), name)
        except (ImportError, AttributeError):
            continue
    raise ImportError(f"numpy has no {module}.{name}")


_RECONSTRUCT = _numpy("multiarray", "_reconstruct")
_FROMBUFFER = _numpy("numeric", "_frombuffer")


def refuse(why: str) -> NoReturn:
    raise pickle.UnpicklingError(why)


def _ints(shape: Any) -> bool:
    return type(shape) is tuple and all(type(n) is int for n in shape)


class PlainDtype:
    """What a pickle's ``numpy.dtype(code, align, copy)`` gets: a plain numeric dtype, held here
    where the pickle cannot reach it (a BUILD of a real dtype rewrites its fields and flags,
    turning a copy of uint8 into a dtype of object fields)."""

    __slots__ = ("dtype",)

    def __init__(self, code: Any, align: Any = False, copy: Any = False) -> None:
        if not (isinstance(code, str) and PLAIN_CODE.fullmatch(code)):
            refuse(
                f"it asks for a numpy dtype of {short(code)}, which a data file has no use for "
                "(only arrays of booleans, integers and floats are read); it was not built"
            )
        self.dtype = np.dtype(code)

    def __setstate__(self, state: Any) -> None:
        """A BUILD of the dtype: only a byte order may be set."""
        plain = (
            type(state) is tuple
            and len(state) in (8, 9)
            and type(state[0]) is int
            and state[0] == len(state) - 5  # version 3 has 8 items, version 4 has 9
            and type(state[1]) is str
            and state[1] in BYTE_ORDERS
            and all(type(a) is type(b) and a == b for a, b in zip(state[2:8], PLAIN_STATE))
            and (len(state) == 8 or state[8] is None)
        )
        if not plain:
            refuse(
                f"it gives numpy dtype {self.dtype.str[1:]!r} fields, a layout or flags (a "
                "structured or object dtype), which a data file has no use for; it was not built"
            )
        if state[1] in "<>":
            self.dtype = self.dtype.newbyteorder(state[1])


class CheckedArray(np.ndarray):
    """Every array a pickle builds: ``__setstate__`` (a BUILD) takes only a :class:`PlainDtype`
    and bytes, so the array can only ever hold plain numbers."""

    __slots__ = ()

    def __setstate__(self, state: Any) -> None:
        parts = state if type(state) is tuple and len(state) in (4, 5) else (None,) * 4
        version = parts[:1] if len(parts) == 5 else ()
        shape, dtype, fortran, raw = parts[-4:]
        if not (
            _ints(version)
            and version in ((), (1,))
            and _ints(shape)
            and type(dtype) is PlainDtype
            and type(fortran) in (bool, int)
            and type(raw) in (bytes, bytearray, str)  # str: a Python 2 pickle read as latin-1
        ):
            refuse(
                "it gives a numpy array a state numpy never writes (only a shape, a plain dtype "
                "and the array's bytes are read); it was not built"
            )
        np.ndarray.__setstate__(self, (*version, shape, dtype.dtype, fortran, raw))


class Sealed:
    """What a pickle naming an allowed global gets: a callable with nothing a BUILD could set. A
    function or a Python class handed to the pickle would take any attribute a BUILD gives it
    (``__defaults__``, ``__setstate__``), for every later read in the process."""

    __slots__ = ("_name", "_call")

    def __init__(self, name: str, call: Any) -> None:
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_call", call)

    def __call__(self, *args: Any) -> Any:
        return self._call(*args)

    def __setstate__(self, state: Any) -> NoReturn:
        refuse(
            f"it sets attributes of {self._name}, which a data file has no use for; it was not run"
        )

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        self.__setstate__(None)


def _ndarray(*args: Any) -> NoReturn:
    """``numpy.ndarray(shape, dtype, buffer)`` builds an array over bytes the file chooses."""
    refuse(
        "it calls numpy.ndarray, which builds an array over memory the file chooses; it was not run"
    )


NDARRAY = Sealed("numpy.ndarray", _ndarray)  # only ever _reconstruct's first argument


def reconstruct(subtype: Any, shape: Any, typecode: Any) -> CheckedArray:
    """``numpy...multiarray._reconstruct`` as every numpy pickle calls it: an empty array whose
    BUILD (:meth:`CheckedArray.__setstate__`) gives its contents."""
    named = subtype is NDARRAY and type(typecode) in (str, bytes) and typecode in ("b", b"b")
    if not (named and _ints(shape) and shape == (0,)):
        refuse(
            "it calls numpy's _reconstruct with arguments numpy never writes (only "
            "_reconstruct(numpy.ndarray, (0,), b'b') is read); it was not run"
        )
    return _RECONSTRUCT(CheckedArray, (0,), b"b")


def frombuffer(buffer: Any, dtype: Any, shape: Any, order: Any) -> CheckedArray:
    """``numpy...numeric._frombuffer`` (protocol-5 pickles): bytes, a plain dtype, a shape."""
    if not (
        type(buffer) in (bytes, bytearray)
        and type(dtype) is PlainDtype
        and _ints(shape)
        and type(order) is str
        and order in ("C", "F")
    ):
        refuse(
            "it calls numpy's _frombuffer with arguments numpy never writes (only bytes, a plain "
            "dtype, a shape and an order are read); it was not run"
        )
    return _FROMBUFFER(buffer, dtype.dtype, shape, order).view(CheckedArray)


def encode(text: Any, encoding: Any) -> bytes:
    """``_codecs.encode``, as protocol-2 pickles write bytes: latin-1 text."""
    if not (type(text) is str and type(encoding) is str and encoding in ("latin1", "latin-1")):
        refuse(
            "it calls _codecs.encode with arguments pickle never writes (only latin-1 text is "
            "read); it was not run"
        )
    return codecs.encode(text, "latin1")


def short(value: Any) -> str:
    """``value`` in a message: the repr of a short text or number, else its type."""
    text = repr(value) if type(value) in (str, bytes, int, float, bool) else ""
    return text if 0 < len(text) <= 40 else f"a {type(value).__name__}"


class DataUnpickler(pickle.Unpickler):
    """Unpickles numpy arrays of plain numbers, lists, dicts, text, bytes and numbers only: any
    other global a pickle names (``os.system``, a class whose ``__reduce__`` runs code) is
    refused before it is looked up, so it never runs, and the numpy names it may use lead to the
    checked stand-ins of this module."""

    ALLOWED = {
        ("numpy", "ndarray"): NDARRAY,
        ("numpy", "dtype"): Sealed("numpy.dtype", PlainDtype),
        # what an array pickles as, under numpy 1 (numpy.core) and 2 (numpy._core) alike
        **{
            (f"numpy.{core}.multiarray", "_reconstruct"): Sealed(
                "numpy's _reconstruct", reconstruct
            )
            for core in ("core", "_core")
        },
        **{
            (f"numpy.{core}.numeric", "_frombuffer"): Sealed("numpy's _frombuffer", frombuffer)
            for core in ("core", "_core")
        },
        ("_codecs", "encode"): Sealed("_codecs.encode", encode),  # bytes in protocol-2 pickles
    }

    def find_class(self, module: str, name: str) -> Any:
        found = self.ALLOWED.get((module, name))
        if found is None:
            raise pickle.UnpicklingError(
                f"it names {module}.{name}, which a data file has no use for (only numpy arrays, "
                "lists, dicts, text and numbers are read); it was not run"
            )
        return found


def not_a(path: Path, what: str, why: str) -> imagefiles.DatasetError:
    return imagefiles.DatasetError(
        f"{path} is not a {what} file ({why}); replace it with the file of the dataset's download"
    )


def read_pickle(path: Path, what: str) -> dict:
    """The dict pickled in ``path`` (:class:`DataUnpickler`), its arrays plain numpy arrays; a
    file that is no such pickle is a :class:`imagefiles.DatasetError` naming it."""
    try:
        data = DataUnpickler(io.BytesIO(path.read_bytes()), encoding="latin1").load()
    except Exception as e:  # noqa: BLE001  (pickle, EOF, value errors: a file that is not one)
        raise not_a(path, what, str(e)) from None
    if type(data) is not dict:
        raise not_a(path, what, f"it holds a {type(data).__name__}, not a dict")
    return {k: np.asarray(v) if isinstance(v, CheckedArray) else v for k, v in data.items()}
