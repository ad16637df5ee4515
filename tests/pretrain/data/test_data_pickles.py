"""A CIFAR pickle cannot forge pointers: :mod:`pretrain.data.pickles` builds numpy arrays of plain
numbers only. An object array's items are pointers, and numpy takes them from the pickle's own
bytes when it builds one over a buffer (``numpy.ndarray(shape, dtype('O'), buffer)``), or rebuilds
one (``_reconstruct`` and a BUILD, ``_frombuffer``) with a dtype whose flags a BUILD of the dtype
set to 0. Every attack here points at 0x4141414141414141; read by ``pickle.load`` or a reader that
lets it through, the run dies of a segmentation fault."""

from __future__ import annotations

import codecs
import os
import pickle
import pickletools
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pretrain.data import datasets
from pretrain.data.imagefiles import DatasetError
from pretrain.testing.fakedata import write_cifar10
from tests.helpers.paths import ROOT
from tests.helpers.troubleshooting_quotes import assert_documented

HEADING = "A CIFAR batch or meta file is refused"
POINTER = b"\x41" * 8
N = 4
RECONSTRUCT = np.arange(1).__reduce__()[0]  # numpy...multiarray._reconstruct
FROMBUFFER = np.arange(1).__reduce_ex__(5)[0]  # numpy...numeric._frombuffer


class Call:
    """Pickles as ``func(*args)``, then a BUILD with ``state`` when given."""

    def __init__(self, func: object, args: tuple, state: object = None) -> None:
        self.reduced = (func, args) if state is None else (func, args, state)

    def __reduce__(self) -> tuple:
        return self.reduced


def restated(code: str, fields: dict | None) -> np.dtype:
    """A copy of dtype ``code`` after a BUILD with flags 0 (and ``fields``): what a pickle's
    ``numpy.dtype(code, False, True)`` and BUILD make of it."""
    dtype = np.dtype(code, False, True)
    layout = (tuple(fields), fields, 8, 1) if fields else (None, None, -1, -1)
    dtype.__setstate__((3, "|", None, *layout, 0))
    return dtype


def forged(kind: str, real_flags: bool = False) -> Call:
    """A batch of N rows of 3072 pointers 0x41...41. The dtypes carry flags 0 (numpy then
    neither asks for a list of objects nor drops references when the array is freed, so a
    reader that lets one through fails the test instead of crashing it), or, with
    ``real_flags``, the real 'O'."""
    shape, raw = (N, 3072), POINTER * N * 3072  # a batch's shape: stacked as the others are
    obj = {"a": (np.dtype("O"), 0)}
    if kind == "ndarray":  # the report's repro: it names numpy.ndarray and numpy.dtype only
        return Call(np.ndarray, (shape, np.dtype("O") if real_flags else restated("O", None), raw))
    base = {"structured": "V8", "object_build": "O", "restated_u1": "u1", "frombuffer": "V8"}
    dtype = restated(base[kind], None if kind == "object_build" else obj)
    if kind == "frombuffer":
        return Call(FROMBUFFER, (raw, dtype, shape, "C"))
    return Call(RECONSTRUCT, (np.ndarray, (0,), b"b"), (1, shape, dtype, False, raw))


DTYPE_REFUSED = (
    "it asks for a numpy dtype of {}, which a data file has no use for (only arrays of booleans, "
    "integers and floats are read); it was not built"
)
WHY = {
    "ndarray": DTYPE_REFUSED.format("'O8'"),
    "structured": DTYPE_REFUSED.format("'V8'"),
    "object_build": DTYPE_REFUSED.format("'O8'"),
    "frombuffer": DTYPE_REFUSED.format("'V8'"),
    "restated_u1": DTYPE_REFUSED.format("'O8'"),  # its object field's dtype, read first
}


def refusal(path: Path, why: str) -> str:
    return (
        f"{path} is not a CIFAR batch file ({why}); replace it with the file of the dataset's "
        "download"
    )


def write_batch(path: Path, data: object, protocol: int = 3) -> Path:
    path.write_bytes(pickle.dumps({"data": data, "labels": [0] * N}, protocol=protocol))
    return path


def globals_named(blob: bytes) -> set[str]:
    return {str(arg) for op, arg, _ in pickletools.genops(blob) if op.name == "GLOBAL"}


@pytest.mark.parametrize("kind", ["ndarray", "object_build"])
def test_a_batch_of_forged_pointers_ends_the_command_line_with_its_message(tmp_path, kind):
    """The repro (only numpy.ndarray and numpy.dtype named) and a variant (an object dtype whose
    flags a BUILD set to 0, the array through _reconstruct and BUILD), through ``python -m
    pretrain`` in a process of its own: before the fix each died of SIGSEGV (rc -11), with no
    message."""
    write_cifar10(tmp_path, per_batch=N, test=N)
    batch = write_batch(tmp_path / "cifar-10-batches-py" / "data_batch_1", forged(kind, True))
    if kind == "ndarray":
        assert globals_named(batch.read_bytes()) == {"numpy ndarray", "numpy dtype"}
    done = subprocess.run(
        [sys.executable, "-m", "pretrain", "--cfg", "cifar10_moco.yaml", f"data.root={tmp_path}",
         f"out_dir={tmp_path / 'run'}", "data.num_workers=0", "train.progress_bar=false"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    message = refusal(batch, WHY[kind])
    assert done.stderr.strip().splitlines()[-1] == f"error: {message}", done.stderr[-2000:]
    assert_documented(message, HEADING)
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.parametrize("protocol", [2, 5])
@pytest.mark.parametrize("kind", list(WHY))
def test_read_pickle_refuses_every_forged_pointer_array(tmp_path, kind, protocol):
    path = write_batch(tmp_path / "data_batch_1", forged(kind), protocol)
    with pytest.raises(DatasetError) as info:
        datasets.read_pickle(path, "CIFAR batch")
    assert str(info.value) == refusal(path, WHY[kind])
    assert_documented(str(info.value), HEADING)


NEVER_WRITTEN = {  # calls numpy's and pickle's own pickles never make; each harmless here
    "ndarray": (
        Call(np.ndarray, ((N,), np.dtype("u1"), b"x" * N)),
        "it calls numpy.ndarray, which builds an array over memory the file chooses; it was not "
        "run",
    ),
    "reconstruct": (
        Call(RECONSTRUCT, (np.ndarray, (N,), "O")),
        "it calls numpy's _reconstruct with arguments numpy never writes (only "
        "_reconstruct(numpy.ndarray, (0,), b'b') is read); it was not run",
    ),
    "frombuffer": (
        Call(FROMBUFFER, ([1, 2], np.dtype("u1"), (2,), "C")),
        "it calls numpy's _frombuffer with arguments numpy never writes (only bytes, a plain "
        "dtype, a shape and an order are read); it was not run",
    ),
    "dtype_state": (
        Call(
            RECONSTRUCT,
            (np.ndarray, (0,), b"b"),
            (1, (N,), restated("u1", {"a": (np.dtype("u1"), 0)}), False, b"x" * 8 * N),
        ),
        "it gives numpy dtype 'u1' fields, a layout or flags (a structured or object dtype), "
        "which a data file has no use for; it was not built",
    ),  # fmt: skip
    "state": (
        Call(RECONSTRUCT, (np.ndarray, (0,), b"b"), (1, (2,), np.dtype("u1"), False, [1, 2])),
        "it gives a numpy array a state numpy never writes (only a shape, a plain dtype and the "
        "array's bytes are read); it was not built",
    ),
    "encode": (
        Call(codecs.encode, ("abc", "rot13")),
        "it calls _codecs.encode with arguments pickle never writes (only latin-1 text is read); "
        "it was not run",
    ),
}


@pytest.mark.parametrize("kind", list(NEVER_WRITTEN))
def test_numpy_calls_numpy_never_pickles_are_refused(tmp_path, kind):
    call, why = NEVER_WRITTEN[kind]
    path = write_batch(tmp_path / "data_batch_1", call, protocol=2)
    with pytest.raises(DatasetError) as info:
        datasets.read_pickle(path, "CIFAR batch")
    assert str(info.value) == refusal(path, why)
    assert_documented(str(info.value), HEADING)


def test_an_array_takes_no_real_dtype_in_its_state():
    """Were a pickle to hold a real dtype (none of its calls gives one), the array's BUILD still
    refuses it: only the reader's own plain dtypes are read."""
    from pretrain.data import pickles

    array = pickles.reconstruct(pickles.NDARRAY, (0,), b"b")
    for dtype in (np.dtype("O"), np.dtype("u1")):
        with pytest.raises(pickle.UnpicklingError, match="a state numpy never writes"):
            array.__setstate__((1, (N,), dtype, False, POINTER * N))
    assert array.shape == (0,)


PLAIN = {
    "uint8": np.arange(2 * 3072, dtype=np.uint8).reshape(2, 3072),
    "int64": np.array([-3, 0, 2**40], dtype=np.int64),
    "big-endian float32": np.array([1.5, -2.0], dtype=">f4"),
    "float64 Fortran order": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
    "bool": np.array([True, False]),
}


@pytest.mark.parametrize("protocol", [2, 3, 5])
def test_arrays_of_plain_numbers_read_as_pickle_load_reads_them(tmp_path, protocol):
    blob = pickle.dumps({**PLAIN, "nested": [PLAIN["int64"]], "text": "a", "n": 3}, protocol)
    (tmp_path / "x").write_bytes(blob)
    got, want = datasets.read_pickle(tmp_path / "x", "CIFAR batch"), pickle.loads(blob)
    assert got.keys() == want.keys()
    for key in PLAIN:
        assert type(got[key]) is np.ndarray, key
        assert got[key].dtype == want[key].dtype and got[key].flags.f_contiguous == (
            want[key].flags.f_contiguous
        )
        assert got[key].tobytes("A") == want[key].tobytes("A"), key
    assert np.array_equal(got["nested"][0], want["nested"][0])
    assert (got["text"], got["n"]) == ("a", 3)


def test_a_python_2_batch_reads_as_pickle_load_reads_it(tmp_path):
    """The download's own layout (Python 2's cPickle, protocol 2: numpy.core names, the dtype
    built as dtype('u1', 0, 1) and restated with (3, '|', None, None, None, -1, -1, 0), the
    pixels a Python 2 str, which latin-1 decoding makes text), written byte for byte."""
    rows = np.arange(2 * 3072, dtype=np.uint8).reshape(2, 3072)
    blob = (
        b"\x80\x02}q\x01(U\x04dataq\x02cnumpy.core.multiarray\n_reconstruct\nq\x03cnumpy\nndarray"
        b"\nq\x04K\x00\x85U\x01b\x87Rq\x05(K\x01K\x02M\x00\x0c\x86cnumpy\ndtype\nq\x06U\x02u1K\x00"
        b"K\x01\x87Rq\x07(K\x03U\x01|NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb\x89T"
        + struct.pack("<I", rows.size)
        + rows.tobytes()
        + b"tbU\x06labelsq\x08]q\t(K\x03K\x04eU\x0bbatch_labelq\nU\x15training batch 1 of 5u."
    )
    (tmp_path / "data_batch_1").write_bytes(blob)
    got = datasets.read_pickle(tmp_path / "data_batch_1", "CIFAR batch")
    want = pickle.loads(blob, encoding="latin1")
    assert type(got["data"]) is np.ndarray and got["data"].dtype == want["data"].dtype
    assert np.array_equal(got["data"], want["data"]) and np.array_equal(got["data"], rows)
    assert (got["labels"], got["batch_label"]) == ([3, 4], "training batch 1 of 5")


@pytest.mark.parametrize(
    ("global_", "name"),
    [("numpy\ndtype", "numpy.dtype"), ("numpy\nndarray", "numpy.ndarray"),
     ("numpy.core.multiarray\n_reconstruct", "numpy's _reconstruct"),
     ("numpy._core.numeric\n_frombuffer", "numpy's _frombuffer"),
     ("_codecs\nencode", "_codecs.encode")],
)  # fmt: skip
def test_a_pickle_sets_no_attribute_of_a_global_it_names(tmp_path, global_, name):
    """A BUILD on a named global (state None, then its attributes by name) would set them for
    every later read in the process; it is refused, and the next file reads as before."""
    blob = (b"\x80\x02c" + global_.encode() + b"\nN}X\x0c\x00\x00\x00__qualname__X\x06\x00\x00\x00"
            b"forgeds\x86b}X\x04\x00\x00\x00dataX\x01\x00\x00\x00xs.")  # fmt: skip
    path = tmp_path / "data_batch_1"
    path.write_bytes(blob)
    with pytest.raises(DatasetError) as info:
        datasets.read_pickle(path, "CIFAR batch")
    why = f"it sets attributes of {name}, which a data file has no use for; it was not run"
    assert str(info.value) == refusal(path, why)
    assert_documented(str(info.value), HEADING)
    ref = {"data": PLAIN["uint8"], "labels": [1, 2]}
    path.write_bytes(pickle.dumps(ref, protocol=2))
    again = datasets.read_pickle(path, "CIFAR batch")
    assert np.array_equal(again["data"], ref["data"]) and again["labels"] == [1, 2]
