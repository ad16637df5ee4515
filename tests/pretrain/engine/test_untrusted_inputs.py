"""Files a user was handed are data, never code: a checkpoint whose
config names ``plugins`` (an absolute path, a path relative to the working directory, a module
on the path) imports none of them when it is evaluated, exported or resumed onto; a CIFAR batch
whose pickle names a callable is refused before the callable runs. Each planted file or pickle
writes a marker file when it runs, and the marker must not exist afterwards."""

from __future__ import annotations

import pickle
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest

from pretrain import config, export
from pretrain.config import ConfigError
from pretrain.data import datasets
from pretrain.data.imagefiles import DatasetError
from pretrain.runtime import checkpoint_io
from pretrain.testing.fakedata import write_cifar10
from tests.helpers.fakeckpt import make_checkpoint
from tests.helpers.inproc import pretrain
from tests.helpers.troubleshooting_quotes import assert_documented

PAYLOAD = "from pathlib import Path\nPath({marker!r}).write_text('ran')\n"


def planted(tmp: Path) -> tuple[Path, list[str]]:
    """A marker path and three plugin specs that would each write it when imported: an absolute
    file, a file relative to the working directory, a module name found on ``sys.path``."""
    marker = tmp / "marker"
    tag = uuid.uuid4().hex[:8]
    for name in (f"gift_abs_{tag}.py", f"gift_rel_{tag}.py", f"gift_mod_{tag}.py"):
        (tmp / name).write_text(PAYLOAD.format(marker=str(marker)))
    return marker, [str(tmp / f"gift_abs_{tag}.py"), f"gift_rel_{tag}.py", f"gift_mod_{tag}"]


def with_plugins(path: Path, plugins: list[str]) -> None:
    state = checkpoint_io.load(path)
    state["config"]["plugins"] = plugins
    checkpoint_io.save(state, path)


@pytest.mark.parametrize("which", [0, 1, 2], ids=["absolute", "relative", "module"])
def test_evaluation_and_export_import_no_plugin_named_by_a_checkpoint(tmp_path, monkeypatch, which):
    from linear_eval.inputs.checkpoints import load_model

    marker, specs = planted(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    ckpt = make_checkpoint(tmp_path / "run", "model.arch=resnet18", "model.cifar_stem=false")
    with_plugins(ckpt, [specs[which]])
    model = load_model(ckpt)
    assert model.cfg.plugins == [specs[which]]  # kept as text, for the record
    export.export(ckpt, "torchvision", tmp_path / "r.pth")
    config.from_dict(checkpoint_io.load(ckpt)["config"], source="x")  # the resume's reading too
    assert not marker.exists(), "a plugin named by the checkpoint's config was imported"
    assert not any(k.startswith(("negmine_plugin_gift", "gift_")) for k in sys.modules)


def test_a_resume_onto_a_planted_checkpoint_refuses_its_plugins_without_importing_them(tmp_path):
    marker, specs = planted(tmp_path)
    run = tmp_path / "run"
    args = ["--cfg", "digits_moco.yaml", f"out_dir={run}", "model.width=8", "train.max_steps=1",
            "eval.knn_every=0", "train.progress_bar=false", "data.num_workers=0",
            "train.batch_size=32", "moco.queue_size=64"]  # fmt: skip
    assert pretrain(*args).returncode == 0
    with_plugins(run / "checkpoints" / "last.pt", [specs[0]])
    done = pretrain(*args, "train.max_steps=2")
    assert done.returncode == 2, done.stderr[-2000:]
    assert (
        f'error: {run} holds a run trained with plugins=["{specs[0]}"] but the config gives '
        "plugins=[]; a checkpoint's plugins are never imported from it: give the same plugins in "
        "the config to resume, or choose a new out_dir"
    ) in done.stderr, done.stderr[-2000:]
    assert_documented(done.stderr.strip().splitlines()[-1].removeprefix("error: "))
    assert not marker.exists(), "a plugin named by the checkpoint's config was imported"


def test_from_dict_of_a_config_naming_an_unregistered_loss_is_refused_not_imported(tmp_path):
    """Without the encoder-only leniency, a strategy only a checkpoint's plugin would register is
    an error naming the key (the plugin stays unimported)."""
    marker, specs = planted(tmp_path)
    raw = config.to_dict(config.load("digits_moco.yaml", [f"out_dir={tmp_path}"]))
    raw["plugins"], raw["negatives"]["name"] = [specs[0]], "gift_strategy"
    with pytest.raises(ConfigError, match="negatives.name"):
        config.from_dict(raw, source="the checkpoint's config")
    assert not marker.exists()


class Payload:
    """Unpickles as a call of ``exec`` that writes the marker (what a crafted batch would do)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return exec, (f"open({str(self.marker)!r}, 'w').write('ran')",)


@pytest.mark.parametrize("name", ["data_batch_1", "batches.meta"])
def test_a_crafted_cifar_pickle_is_refused_before_its_payload_runs(tmp_path, name):
    marker = tmp_path / "marker"
    folder = tmp_path / "cifar-10-batches-py"
    write_cifar10(tmp_path, per_batch=4, test=4)
    key = "data" if name == "data_batch_1" else "label_names"
    (folder / name).write_bytes(pickle.dumps({key: Payload(marker), "labels": [0]}, protocol=4))
    with pytest.raises(DatasetError) as info:
        datasets.build("cifar10", str(tmp_path), "train")
    assert str(info.value) == (
        f"{folder / name} is not a CIFAR {'batch' if key == 'data' else 'meta'} file (it names "
        "builtins.exec, which a data file has no use for (only numpy arrays, lists, dicts, text "
        "and numbers are read); it was not run); replace it with the file of the dataset's "
        "download"
    )
    assert_documented(str(info.value))
    assert not marker.exists(), "the crafted pickle's payload ran"
    done = pretrain("--cfg", "cifar10_moco.yaml", f"data.root={tmp_path}", f"out_dir={tmp_path}/r",
                    "data.num_workers=0", "train.progress_bar=false")  # fmt: skip
    assert done.returncode == 2 and "it was not run" in done.stderr, done.stderr[-2000:]
    assert not marker.exists(), "the crafted pickle's payload ran"


def test_the_restricted_unpickler_reads_cifar_as_torchvision_does(tmp_path):
    """The real files' shape of data (protocol 2, text labels as latin-1 bytes, numpy 1's
    global names) and a protocol-5 pickle of numpy 2 read to the same arrays as pickle.load."""
    rows = np.arange(2 * 3072, dtype=np.uint8).reshape(2, 3072)
    entry = {"data": rows, "labels": [3, 4], "batch_label": "training batch 1 of 5",
             "filenames": [b"a.png", b"b.png"]}  # fmt: skip
    for protocol in (2, 5):
        blob = pickle.dumps(entry, protocol=protocol)
        renamed = blob.replace(b"numpy._core", b"numpy.core")  # GLOBAL: text to a newline
        for text in (blob, renamed) if protocol == 2 else (blob,):
            (tmp_path / "x").write_bytes(text)
            got = datasets.read_pickle(tmp_path / "x", "CIFAR batch")
            assert np.array_equal(got["data"], rows) and got["data"].dtype == np.uint8
            assert {k: v for k, v in got.items() if k != "data"} == {
                k: v for k, v in entry.items() if k != "data"
            }
    ds = datasets.build("cifar10", str(write_root(tmp_path)), "train")
    assert np.array_equal(ds.data, write_cifar10(tmp_path / "ref", per_batch=4, test=4)["train"])


def write_root(tmp: Path) -> Path:
    write_cifar10(tmp / "ds", per_batch=4, test=4)
    return tmp / "ds"
