"""Feature extraction and its cache: backbone, head and kappa against direct module calls, the
test-time views against torchvision's v1 crop API and PIL rotations, corruptions before the
normalisation, cache keys, and the frozen-encoder check."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import torchvision.transforms.functional as TF
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms as T
from torchvision.transforms import v2

from linear_eval.inputs import checkpoints, corruptions, features
from linear_eval.inputs.features import FeatureStore, View, Viewed
from pretrain.data import pipeline
from pretrain.data.loaders import sample_seed
from pretrain.runtime import checkpoint_io
from tests.helpers.fakeckpt import make_checkpoint


class PilImages(Dataset):
    """Random RGB PIL images of 12 px with labels 0..n-1."""

    def __init__(self, n: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.images = [
            Image.fromarray(rng.integers(0, 256, (12, 12, 3), np.uint8)) for _ in range(n)
        ]

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int):
        return self.images[i], i


TF_12 = v2.Compose(
    [
        v2.ToImage(),
        v2.Resize(12, antialias=True),
        v2.CenterCrop(12),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize([0.5] * 3, [0.25] * 3),
    ]
)


@pytest.fixture(scope="module")
def kappa_ckpt(tmp_path_factory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("kappa"), "kappa.hidden=16")


def test_encode_matches_the_modules_called_directly(kappa_ckpt):
    model = checkpoints.load_model(kappa_ckpt)
    enc = model.encoder
    x = torch.randn(10, 3, 16, 16)
    loader = DataLoader(list(zip(x, range(10))), batch_size=4)
    got = features.encode(enc, loader, torch.device("cpu"))
    with torch.no_grad():
        h = enc.backbone(x)
        z = F.normalize(enc.head(h), dim=1)
        kappa = F.softplus(enc.kappa_head(h)).view(-1)
    torch.testing.assert_close(got.backbone, h, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got.head, z, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got.kappa, kappa, rtol=1e-5, atol=1e-6)
    assert got.labels.tolist() == list(range(10)) and not enc.training
    assert model.has_kappa and (got.kappa > 0).all()


def test_no_kappa_head_gives_none(tmp_path):
    model = checkpoints.load_model(make_checkpoint(tmp_path))
    loader = DataLoader(list(zip(torch.randn(3, 3, 16, 16), range(3))), batch_size=2)
    assert not model.has_kappa
    assert features.encode(model.encoder, loader, torch.device("cpu")).kappa is None


def test_crop_view_is_torchvision_random_resized_crop_seeded_per_image():
    base = PilImages(6)
    view = View(rotation=0, crop=3, seed=7)
    ds = Viewed(base, TF_12, view, image_size=12)
    for i in (0, 4):
        torch.manual_seed(sample_seed(7, 3, i, stream=2))  # the documented per-image seed
        plain = TF_12(base[i][0])
        top, left, h, w = T.RandomResizedCrop.get_params(plain, [0.55, 1.0], [1.0, 1.0])
        ref = TF.resized_crop(plain, top, left, h, w, [12, 12], antialias=True)
        torch.testing.assert_close(ds[i][0], ref)
        assert h == w and 0.55 * 144 <= h * w  # square crop of at least 55% of the area
    # the same image gives the same crop whatever was drawn before; another crop index differs
    assert torch.equal(Viewed(base, TF_12, view, image_size=12)[4][0], ds[4][0])
    other = Viewed(base, TF_12, View(0, 4, 7), image_size=12)
    assert not all(torch.equal(other[i][0], ds[i][0]) for i in range(len(base)))


@pytest.mark.parametrize("angle", [90, 180, 270])
def test_rotation_view_equals_a_pil_rotation(angle):
    base = PilImages(3)
    ds = Viewed(base, TF_12, View(rotation=angle), image_size=12)
    for i in range(3):
        ref = TF_12(base[i][0].rotate(angle))  # PIL: counter-clockwise, exact for multiples of 90
        torch.testing.assert_close(ds[i][0], ref)


def test_view_validation():
    with pytest.raises(ValueError, match="rotation"):
        View(rotation=45)
    with pytest.raises(ValueError, match="crop"):
        View(crop=-2)
    assert View().name == "plain" and View(90, 2, 1).name == "rot90+crop2s1"


def test_store_caches_by_key_and_reads_back(tmp_path, monkeypatch):
    model = checkpoints.load_model(make_checkpoint(tmp_path / "run"))
    store = FeatureStore(model, tmp_path / "cache", torch.device("cpu"), batch_size=512)
    test = store.features(None, "test")
    assert test.backbone.shape == (360, model.encoder.backbone.feature_dim) and len(test) == 360
    from pretrain.data.datasets import Digits

    assert test.labels.tolist() == Digits(train=False).targets
    files = list((tmp_path / "cache").glob("digits-test-plain-*.pt"))
    assert len(files) == 1
    monkeypatch.setattr(store, "_extract", lambda *a: pytest.fail("read the cache instead"))
    again = store.features(None, "test")
    assert torch.equal(again.backbone, test.backbone) and torch.equal(again.head, test.head)
    monkeypatch.undo()
    rotated = store.features(None, "test", view=View(90))
    assert len(list((tmp_path / "cache").glob("*.pt"))) == 2  # another view, another file
    assert not torch.allclose(rotated.backbone, test.backbone)


def test_corruption_is_applied_before_the_normalisation(tmp_path):
    model = checkpoints.load_model(make_checkpoint(tmp_path))
    store = FeatureStore(model, None, torch.device("cpu"), batch_size=512)
    got = store.features(None, "test", corruption=("gaussian_blur", 3))
    d = model.cfg.data
    mean, std = torch.tensor(d.mean).view(1, 3, 1, 1), torch.tensor(d.std).view(1, 3, 1, 1)
    tf = pipeline.eval_transform(d)
    base = store.dataset("digits", "test")
    x = torch.stack([tf(base[i][0]) for i in range(len(base))]) * std + mean  # back to [0, 1]
    x = (corruptions.corrupt(x.clamp(0, 1), "gaussian_blur", 3) - mean) / std
    with torch.no_grad():
        ref = model.encoder.backbone(x)
    torch.testing.assert_close(got.backbone, ref, rtol=1e-4, atol=1e-4)


def test_frozen_check_sees_a_changed_batchnorm_statistic(tmp_path):
    model = checkpoints.load_model(make_checkpoint(tmp_path))
    model.assert_unchanged()
    bn = next(m for m in model.encoder.modules() if isinstance(m, torch.nn.BatchNorm2d))
    bn.running_mean += 1e-3
    with pytest.raises(RuntimeError, match="running_mean"):
        model.assert_unchanged()


def test_unusable_checkpoints_raise_checkpoint_error(tmp_path):
    with pytest.raises(checkpoint_io.CheckpointError, match="does not exist"):
        checkpoints.load_model(tmp_path / "missing.pt")
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(checkpoint_io.CheckpointError, match="corrupt"):
        checkpoints.load_model(bad)
