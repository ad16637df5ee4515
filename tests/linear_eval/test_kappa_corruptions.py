"""kappa vs corruption severity (vMF-κ Table 1) on CIFAR-10-C's .npy files: the features of
severity s against the encoder run directly on rows (s-1)n:sn of ``<kind>.npy``, labels from
``labels.npy``, ``--corruptions-root`` over the default folder, the fallback to our own
corruptions (against scipy), the cache key naming the files, CIFAR-100-C for cifar100 runs and
the errors (exit 2)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import ndimage

from linear_eval.__main__ import main
from linear_eval.cli import kappa as kappa_cli
from linear_eval.inputs import checkpoints
from linear_eval.inputs.features import FeatureStore
from linear_eval.inputs.session import Options, Session
from pretrain.testing.fakedata import write_cifar10
from tests.helpers.fakeckpt import make_checkpoint
from tests.helpers.fakedata_eval import write_cifar_c

N_TEST, N_C = 16, 12  # clean test images; CIFAR-10-C images per severity (the files decide)
KINDS = ("gaussian_noise", "gaussian_blur")
MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)
BLUR_SIGMA = (0.4, 0.6, 0.7, 0.8, 1.0)  # make_cifar_c.py gaussian_blur, severities 1..5


def cifar_checkpoint(run: Path, data_root: Path) -> Path:
    """A tiny cifar10 kappa model (resnet_small, width 8, kappa head of 8) reading ``data_root``,
    evaluated at 32 px like the CIFAR configs (resize 32, centre crop 32)."""
    return make_checkpoint(
        run,
        "data.name=cifar10",
        f"data.root={data_root}",
        "data.image_size=32",
        "data.eval_resize=32",
        f"data.mean={list(MEAN)}",
        f"data.std={list(STD)}",
        "kappa.hidden=8",
    )


def write_c(root: Path, folder: str, seed: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """CIFAR-10-C's two files per kind in the true format, with labels unlike the clean ones."""
    images = {k: write_cifar_c(root, k, N_C, seed + i, folder)[0] for i, k in enumerate(KINDS)}
    labels = np.random.default_rng(seed).integers(0, 10, 5 * N_C).astype(np.uint8)
    np.save(root / folder / "labels.npy", labels)
    return images, labels


def encoded(ckpt: Path, hwc: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Backbone features and kappa of (N, 32, 32, 3) images, uint8 or float in [0, 1], after the
    eval transform written out (at 32 px: uint8 / 255 in float32, then per-channel
    normalisation), the encoder called directly."""
    if hwc.dtype == np.uint8:
        hwc = hwc.astype(np.float32) / 255  # ToDtype(float32, scale=True)
    x = torch.from_numpy(np.ascontiguousarray(hwc.transpose(0, 3, 1, 2))).float()
    x = (x - torch.tensor(MEAN).view(1, 3, 1, 1)) / torch.tensor(STD).view(1, 3, 1, 1)
    encoder = checkpoints.load_model(ckpt).encoder
    with torch.no_grad():
        _, kappa = encoder(x, with_kappa=True)
        return encoder.backbone(x), kappa


def kappa_record(ckpt: Path, *extra: str) -> dict:
    assert main(["kappa", "--ckpt", str(ckpt), *extra]) == 0
    return json.loads((ckpt.parent.parent / "eval" / "kappa.json").read_text())["severity"]


@pytest.fixture(scope="module")
def clean_root(tmp_path_factory) -> tuple[Path, np.ndarray]:
    """CIFAR-10 pickles without any CIFAR-10-C folder; returns the root and the test images."""
    root = tmp_path_factory.mktemp("data")
    return root, write_cifar10(root, per_batch=16, test=N_TEST)["test"]


def test_npy_features_are_the_encoder_on_the_severity_rows(tmp_path, capsys):
    data = tmp_path / "data"
    clean = write_cifar10(data, per_batch=16, test=N_TEST)["test"]
    images, labels = write_c(data, "CIFAR-10-C", seed=100)
    assert all(not np.array_equal(images[k][:N_C], clean[:N_C]) for k in KINDS)
    ckpt = cifar_checkpoint(tmp_path / "run", data)
    sev = kappa_record(ckpt)
    assert sev["corruptions"] == f"CIFAR-10-C .npy files at {(data / 'CIFAR-10-C').resolve()}"
    assert "corruptions_note" not in sev and sev["n"] == N_TEST + len(KINDS) * 5 * N_C
    cache = ckpt.parent.parent / "features"
    for kind in KINDS:
        for s in range(1, 6):
            rows = slice((s - 1) * N_C, s * N_C)
            backbone, kappa = encoded(ckpt, images[kind][rows])
            mean = sev["per_kind"][kind]["mean_kappa_per_severity"][str(s)]
            assert mean == pytest.approx(kappa.double().mean().item(), rel=0, abs=1e-6)
            (path,) = cache.glob(f"cifar10-test-plain-{kind}{s}-*.pt")  # no corrupt() file
            stored = torch.load(path, weights_only=True)
            source = stored["key"]["corruption_source"]
            assert [p.split(":")[0] for p in source] == [
                str((data / "CIFAR-10-C" / f).resolve()) for f in (f"{kind}.npy", "labels.npy")
            ]
            got = stored["features"]
            torch.testing.assert_close(got["backbone"], backbone, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(got["kappa"], kappa, rtol=1e-5, atol=1e-6)
            assert got["labels"].tolist() == labels[rows].tolist()
    capsys.readouterr()


def test_corruptions_root_wins_over_the_default_folder(tmp_path, capsys):
    data = tmp_path / "data"
    write_cifar10(data, per_batch=16, test=N_TEST)
    write_c(data, "CIFAR-10-C", seed=200)  # the default folder, not to be read
    other, _ = write_c(tmp_path, "elsewhere", seed=300)
    ckpt = cifar_checkpoint(tmp_path / "run", data)
    sev = kappa_record(ckpt, "--corruptions-root", str(tmp_path / "elsewhere"))
    assert sev["corruptions"] == f"CIFAR-10-C .npy files at {(tmp_path / 'elsewhere').resolve()}"
    for kind in KINDS:
        _, kappa = encoded(ckpt, other[kind][4 * N_C :])
        mean = sev["per_kind"][kind]["mean_kappa_per_severity"]["5"]
        assert mean == pytest.approx(kappa.double().mean().item(), rel=0, abs=1e-6)
    capsys.readouterr()


def test_without_files_our_own_corruptions_are_used(tmp_path, clean_root, capsys):
    data, clean = clean_root
    ckpt = cifar_checkpoint(tmp_path / "run", data)
    sev = kappa_record(ckpt)
    assert sev["corruptions"] == "linear_eval.inputs.corruptions.corrupt"
    assert str((data / "CIFAR-10-C").resolve()) in sev["corruptions_note"]
    x = clean.transpose(0, 3, 1, 2).astype(np.float64) / 255  # (N, 3, 32, 32) in [0, 1]
    for s, sigma in enumerate(BLUR_SIGMA, start=1):
        blurred = ndimage.gaussian_filter(x, (0, 0, sigma, sigma), mode="nearest", truncate=4.0)
        _, kappa = encoded(ckpt, np.clip(blurred, 0, 1).transpose(0, 2, 3, 1))
        mean = sev["per_kind"]["gaussian_blur"]["mean_kappa_per_severity"][str(s)]
        assert mean == pytest.approx(kappa.double().mean().item(), rel=0, abs=1e-6)
    assert sev["n"] == N_TEST * 11
    capsys.readouterr()


def test_a_missing_corruptions_root_is_exit_2_naming_the_path(tmp_path, clean_root, capsys):
    data, _ = clean_root
    ckpt = cifar_checkpoint(tmp_path / "run", data)
    missing = tmp_path / "no_such_folder"
    for command in ("kappa", "all"):  # all: refused before its first step
        assert main([command, "--ckpt", str(ckpt), "--corruptions-root", str(missing)]) == 2
        assert str(missing) in capsys.readouterr().err
    assert not (tmp_path / "run" / "eval").exists()
    digits = make_checkpoint(tmp_path / "digits", "kappa.hidden=8")
    assert main(["kappa", "--ckpt", str(digits), "--corruptions-root", str(tmp_path)]) == 2
    assert "this run's dataset is digits" in capsys.readouterr().err


def test_incomplete_or_misshapen_files_are_exit_2(tmp_path, capsys):
    data = tmp_path / "data"
    write_cifar10(data, per_batch=16, test=N_TEST)
    write_cifar_c(data, "gaussian_noise", N_C)  # no gaussian_blur.npy
    ckpt = cifar_checkpoint(tmp_path / "run", data)
    assert main(["kappa", "--ckpt", str(ckpt)]) == 2
    assert "gaussian_blur.npy" in capsys.readouterr().err
    write_cifar_c(data, "gaussian_blur", N_C)
    np.save(data / "CIFAR-10-C" / "labels.npy", np.zeros(5 * N_C - 1, np.uint8))
    assert main(["kappa", "--ckpt", str(ckpt)]) == 2
    assert re.search(r"labels.npy.*\(59,\).*expected", capsys.readouterr().err)


def test_rewritten_files_are_not_read_from_the_cache(tmp_path, clean_root):
    data, _ = clean_root
    ckpt = cifar_checkpoint(tmp_path / "run", data)
    store = FeatureStore(checkpoints.load_model(ckpt), tmp_path / "cache", torch.device("cpu"))
    folder = tmp_path / "c"
    first, _ = write_c(tmp_path, "c", seed=400)
    a = store.features(None, "test", corruption=("gaussian_noise", 2), corruption_files=folder)
    second, _ = write_c(tmp_path, "c", seed=500)  # same size: only the mtime tells them apart
    stat = (folder / "gaussian_noise.npy").stat()
    os.utime(folder / "gaussian_noise.npy", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    b = store.features(None, "test", corruption=("gaussian_noise", 2), corruption_files=folder)
    for got, images in ((a, first), (b, second)):
        _, kappa = encoded(ckpt, images["gaussian_noise"][N_C : 2 * N_C])
        torch.testing.assert_close(got.kappa, kappa, rtol=1e-5, atol=1e-6)
    assert len(list((tmp_path / "cache").glob("*-npy-*.pt"))) == 2
    with pytest.raises(ValueError, match="corruption_files needs corruption"):
        store.features(None, "test", corruption_files=folder)


def test_a_cifar100_run_reads_cifar100_c(tmp_path):
    write_cifar_c(tmp_path, "gaussian_noise", 2, folder="CIFAR-100-C")
    write_cifar_c(tmp_path, "gaussian_blur", 2, folder="CIFAR-100-C")
    write_cifar_c(tmp_path, "gaussian_noise", 2, folder="CIFAR-10-C")  # not this one
    ckpt = make_checkpoint(
        tmp_path / "run", "data.name=cifar100", f"data.root={tmp_path}", "kappa.hidden=8"
    )
    source = kappa_cli.corruption_source(Session(ckpt, Options()))
    assert source.files == (tmp_path / "CIFAR-100-C").resolve() and source.note is None
    assert source.description == f"CIFAR-100-C .npy files at {source.files}"
