"""Frozen features of a checkpoint (:mod:`linear_eval.inputs.checkpoints`), extracted once and
cached: with that module, the only one that touches models and datasets.

One pass of the query encoder gives, per image, the pooled backbone (penultimate) features h
(N, F), the unit-norm head output z (N, D), the concentration kappa (N,) when the model has a kappa
head (vMF-κ), and the label. They are written to
``RUN/features/<dataset>-<split>-<view>-<key>.pt``, ``key`` a hash of the checkpoint (path, size,
mtime, step), the dataset root, the transform, the view and the corruption, so a changed checkpoint
or transform never reads a stale file.

Test-time views (FIRM, eqs. 5-6; authors' ``evaluate_oneclass.py``): a rotation by 0,
90, 180 or 270 degrees, optionally after a random crop. The crop is torchvision's
RandomResizedCrop(image_size, scale=(0.55, 1), ratio=(1, 1)) of the eval-transformed image, as
FIRM's ``crop_transform`` does (resize, centre-crop, then RandomResizedCrop), seeded per (crop
index, image index), so crop i of image j is the same in every run and with any batch size.
NOTE: FIRM's paper (Lunardi et al. 2025, eqs. 5-6) says scale [0.5, 1]; its code uses [0.55, 1]
and a square ratio.
The crop and rotation act on the normalised tensor: per-channel normalisation commutes with both.

Corruptions (vMF-κ Table 1) are either read from CIFAR-10-C's ``<kind>.npy`` files (given
their folder: the images go through the full transform, like clean ones) or applied by
:func:`linear_eval.inputs.corruptions.corrupt` to the un-normalised test images in [0, 1], then the
transform's ``Normalize`` follows. The cache key names the source (the files' paths, sizes, mtimes).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms import v2

from linear_eval.inputs import corruptions, eval_datasets
from linear_eval.inputs.checkpoints import Model, file_id
from pretrain.data import datasets, imagefiles, loaders, pipeline, views
from pretrain.model.encoders import Encoder
from pretrain.runtime import checkpoint_io

CROP_SCALE = (0.55, 1.0)  # FIRM evaluate_oneclass.py crop_transform (paper: [0.5, 1])
CROP_RATIO = (1.0, 1.0)  # FIRM: square crops
ROTATIONS = (0, 90, 180, 270)
# bump when the stored layout or meaning changes; 2: an image-folder run's test split labelled by
# the training split's class names (version-1 files may hold shifted labels)
CACHE_VERSION = 2
CORRUPT_SOURCE = (
    "linear_eval.inputs.corruptions.corrupt"  # cache-key source of computed corruptions
)


@dataclass
class Features:
    """Per-image outputs of the frozen encoder in dataset order (as extracted: on the CPU)."""

    backbone: torch.Tensor  # (N, F) pooled penultimate features, unnormalised
    head: torch.Tensor  # (N, D) unit-norm projection-head output z
    labels: torch.Tensor  # (N,) int64; -1 for unlabelled (OOD) sets
    kappa: torch.Tensor | None = None  # (N,) softplus concentration, None without a kappa head

    def __len__(self) -> int:
        return self.labels.shape[0]

    def subset(self, rows: torch.Tensor) -> Features:
        """The rows selected by a boolean mask or an index tensor."""
        pick = None if self.kappa is None else self.kappa[rows]
        return Features(self.backbone[rows], self.head[rows], self.labels[rows], pick)

    def to(self, device: torch.device) -> Features:
        """These features on ``device``; labels stay on the CPU (masks are built there)."""
        kappa = None if self.kappa is None else self.kappa.to(device)
        return Features(self.backbone.to(device), self.head.to(device), self.labels, kappa)

    def to_dict(self) -> dict[str, torch.Tensor]:
        out = {"backbone": self.backbone, "head": self.head, "labels": self.labels}
        return out if self.kappa is None else {**out, "kappa": self.kappa}

    @staticmethod
    def from_dict(d: dict[str, torch.Tensor]) -> Features:
        return Features(d["backbone"], d["head"], d["labels"], d.get("kappa"))


@dataclass(frozen=True)
class View:
    """A test-time view: rotation in degrees (0/90/180/270), then ``crop`` >= 0 for the crop with
    that index (-1 = the plain eval transform), the crops drawn from ``seed``."""

    rotation: int = 0
    crop: int = -1
    seed: int = 0

    def __post_init__(self) -> None:
        if self.rotation not in ROTATIONS:
            raise ValueError(f"rotation must be one of {ROTATIONS}, got {self.rotation}")
        if self.crop < -1:
            raise ValueError(f"crop must be -1 (none) or a crop index >= 0, got {self.crop}")

    @property
    def name(self) -> str:
        crop = "" if self.crop < 0 else f"crop{self.crop}s{self.seed}"
        if self.rotation == 0:
            return crop or "plain"
        return f"rot{self.rotation}" + (f"+{crop}" if crop else "")


PLAIN = View()


class Viewed(Dataset):
    """``(transform(image), label)`` under a :class:`View`; crops seeded per (crop, index)."""

    def __init__(
        self, base: Dataset, transform: v2.Compose, view: View, *, image_size: int
    ) -> None:
        self.base, self.transform, self.view = base, transform, view
        self.crop = v2.RandomResizedCrop(
            image_size, scale=CROP_SCALE, ratio=CROP_RATIO, antialias=True
        )

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image, label = self.base[index]
        x = self.transform(image)  # (C, H, W)
        if self.view.crop >= 0:
            # fork_rng: the caller's global RNG stays untouched (num_workers=0 runs in-process)
            with torch.random.fork_rng(devices=[]):
                seed = loaders.sample_seed(self.view.seed, self.view.crop, index, stream=2)
                torch.manual_seed(seed)
                x = self.crop(x)
        if self.view.rotation:
            x = torch.rot90(x, self.view.rotation // 90, dims=(-2, -1))  # counter-clockwise
        return x, int(label)


@torch.no_grad()
def encode(
    encoder: Encoder,
    loader: DataLoader,
    device: torch.device,
    corruption: tuple[str, int] | None = None,
    normalize: v2.Normalize | None = None,
    seed: int = 0,
) -> Features:
    """Run the frozen encoder over ``loader``: backbone features, head output and kappa.

    With ``corruption=(kind, severity)`` the loader must yield un-normalised images in [0, 1];
    each batch is corrupted (noise drawn from a generator seeded per batch) and then normalised
    with ``normalize``. The encoder stays in eval mode (BatchNorm uses its running statistics).
    """
    captured: list[torch.Tensor] = []
    hook = encoder.backbone.register_forward_hook(lambda m, i, out: captured.append(out))
    was_training = encoder.training
    encoder.eval()
    parts: dict[str, list[torch.Tensor]] = {"backbone": [], "head": [], "kappa": [], "labels": []}
    try:
        for b, (x, y) in enumerate(loader):
            x = x.to(device, non_blocking=True)
            if corruption is not None:
                g = torch.Generator(device=x.device)
                g.manual_seed(loaders.sample_seed(seed, corruption[1], b, stream=3))
                x = normalize(corruptions.corrupt(x, corruption[0], corruption[1], generator=g))
            captured.clear()
            z, kappa = encoder(x, with_kappa=True)  # (B, D), (B,) or None
            parts["backbone"].append(captured[0].float().cpu())
            parts["head"].append(z.float().cpu())
            if kappa is not None:
                parts["kappa"].append(kappa.float().cpu())
            parts["labels"].append(torch.as_tensor(y, dtype=torch.long))
    finally:
        hook.remove()
        encoder.train(was_training)
    cat = {k: torch.cat(v) if v else None for k, v in parts.items()}
    return Features(cat["backbone"], cat["head"], cat["labels"], cat["kappa"])


@dataclass
class ViewSet:
    """Features of one image set: the plain view, the 4 rotations (0 = plain) and, per rotation,
    N random crops (test side of ``s_ens`` only). Rows are the same images in every view."""

    plain: Features
    rotations: dict[int, Features] = field(default_factory=dict)
    crops: dict[int, list[Features]] = field(default_factory=dict)

    def subset(self, rows: torch.Tensor) -> ViewSet:
        return ViewSet(
            self.plain.subset(rows),
            {r: f.subset(rows) for r, f in self.rotations.items()},
            {r: [f.subset(rows) for f in fs] for r, fs in self.crops.items()},
        )


class FeatureStore:
    """Features of one checkpoint on any dataset, split, view or corruption, cached on disk.

    Args:
        model: from :func:`load_model`.
        cache_dir: where ``.pt`` files go (normally RUN/features); None = no cache.
        device: where the encoder runs.
        batch_size: extraction batch (the run's ``eval.batch_size`` makes the features equal to
            the training monitor's, bit for bit).
        num_workers: DataLoader processes.
        data_root: root of the run's dataset and of the evaluation sets (default: the run's
            ``data.root``).
    """

    def __init__(
        self,
        model: Model,
        cache_dir: Path | None,
        device: torch.device,
        *,
        batch_size: int = 256,
        num_workers: int = 0,
        data_root: str | None = None,
    ) -> None:
        self.model, self.cache_dir, self.device = model, cache_dir, device
        self.batch_size, self.num_workers = batch_size, num_workers
        self.data_root = data_root or model.cfg.data.root
        self.model.encoder.to(device)
        self._datasets: dict[tuple[str, str], Dataset] = {}

    @property
    def run_dataset(self) -> str:
        return self.model.cfg.data.name

    def transform(self, dataset: str, kind: str) -> v2.Compose:
        """``run``: the run's eval transform (ID and OOD sets); ``transfer``: the seed transfer
        protocol's resizing for ``dataset`` with the run's normalisation."""
        d = self.model.cfg.data
        if kind == "run":
            return pipeline.eval_transform(d)
        if kind == "transfer":
            return eval_datasets.transfer_transform(dataset, d.mean, d.std)
        raise ValueError(f"transform must be 'run' or 'transfer', got {kind!r}")

    def dataset(self, name: str, split: str) -> Dataset:
        """The run's own dataset through :mod:`pretrain.data.datasets`, anything else through
        :mod:`linear_eval.inputs.eval_datasets`; raises DatasetNotFoundError naming the path.
        For a run on image folders, ``train``/``test`` are its ``data.train_split`` and
        ``data.test_split``, the test split labelled by the training split's class names."""
        if (name, split) not in self._datasets:
            if name == self.run_dataset or name == "digits":
                d, classes = self.model.cfg.data, None
                if name in pipeline.IMAGE_FILES:  # the run's own splits; labels named by training
                    where = {"train": d.train_split, "test": d.test_split}.get(split, split)
                    if split != "train" and name == "imagefolder":
                        classes = self.dataset(name, "train").classes
                else:
                    where = split
                ds = datasets.build(name, self.data_root, where, classes=classes)
            else:
                ds = eval_datasets.build_eval_dataset(name, self.data_root, split)
            self._datasets[(name, split)] = ds
        return self._datasets[(name, split)]

    def augmented_loader(self, batch_size: int, seed: int) -> DataLoader:
        """The run's training images under MoCo ``main_lincls.py``'s augmentation
        (RandomResizedCrop with the run's crop scale, horizontal flip with the run's
        probability), shuffled by a seeded generator: for the linear probe on images."""
        d = self.model.cfg.data
        spec = views.ViewSpec(
            image_size=d.image_size, crop_scale=d.crop_scale, hflip_prob=d.hflip_prob
        )
        aug = loaders.train_transform(spec=spec, mean=d.mean, std=d.std)
        return DataLoader(
            loaders.Transformed(self.dataset(d.name, "train"), aug),
            batch_size,
            shuffle=True,
            num_workers=self.num_workers,
            generator=torch.Generator().manual_seed(seed),
        )

    def features(
        self,
        dataset: str | None = None,
        split: str = "train",
        transform: str = "run",
        view: View = PLAIN,
        corruption: tuple[str, int] | None = None,
        corruption_files: Path | None = None,
    ) -> Features:
        """Features of ``dataset`` (default: the run's) ``split`` under ``transform`` and
        ``view``, optionally corrupted; read from the cache when present.

        ``corruption=(kind, severity)`` with ``corruption_files`` (a CIFAR-10-C-layout folder)
        reads severity ``severity``'s rows of ``<kind>.npy`` and their labels from ``labels.npy``
        (``dataset`` and ``split`` then only name the cache file); without it, ``corrupt`` is
        applied to ``split``'s images. Raises DatasetNotFoundError if a file is missing.
        """
        name = dataset or self.run_dataset
        tf = self.transform(name, transform)
        npy = None
        if corruption_files is not None:
            if corruption is None:
                raise ValueError("corruption_files needs corruption=(kind, severity)")
            folder = Path(corruption_files).expanduser()
            npy = corruptions.Cifar10C(str(folder.parent), *corruption, folder=folder.name)
        if corruption is not None and (
            view != PLAIN or (npy is None and not isinstance(tf.transforms[-1], v2.Normalize))
        ):
            raise ValueError("corruptions need the plain view and a transform ending in Normalize")
        key = {
            "version": CACHE_VERSION,
            "model": self.model.tag,
            "dataset": _resolved(name),
            "root": str(Path(self.data_root).expanduser().resolve()),
            "split": split,
            "transform": repr(tf),
            "view": view.name,
            "corruption": list(corruption) if corruption else None,
            "batch_size": self.batch_size,
        }
        if corruption is not None:  # absent from clean keys: their cache files stay valid
            source = CORRUPT_SOURCE if npy is None else [file_id(f) for f in npy.files]
            key["corruption_source"] = source
        digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
        suffix = f"-{corruption[0]}{corruption[1]}" if corruption else ""
        suffix += "-npy" if npy is not None else ""
        path = None
        if self.cache_dir is not None:
            path = (
                self.cache_dir / f"{name.replace('/', '_')}-{split}-{view.name}{suffix}-{digest}.pt"
            )
            cached = _read_cache(path) if path.exists() else None
            if cached is not None:
                return cached
        # .npy images are corrupted already: the full transform, nothing applied after it
        feats = self._extract(name, split, tf, view, corruption if npy is None else None, npy)
        if path is not None:
            checkpoint_io.save({"key": key, "features": feats.to_dict()}, path)
        return feats

    def _extract(
        self,
        name: str,
        split: str,
        tf: v2.Compose,
        view: View,
        corruption: tuple[str, int] | None,
        base: Dataset | None = None,
    ) -> Features:
        base = base if base is not None else self.dataset(name, split)
        normalize = None
        if corruption is not None:
            normalize = tf.transforms[-1]
            tf = v2.Compose(tf.transforms[:-1])  # images in [0, 1]; normalised after corruption
        size = _output_size(tf)
        ds = Viewed(base, tf, view, image_size=size)
        loader = pipeline.eval_loader(ds, self.batch_size, self.num_workers)
        return encode(self.model.encoder, loader, self.device, corruption, normalize)


def _read_cache(path: Path) -> Features | None:
    """The features stored at ``path``, or None (after one warning naming the file) when it is
    corrupt: truncated, not a torch file, or of another layout; the caller extracts them again
    and rewrites the file (atomically)."""
    try:
        stored = torch.load(path, weights_only=True)["features"]
        feats = Features.from_dict(stored)
        n = len(feats.labels)
        parts = [feats.backbone, feats.head] + ([] if feats.kappa is None else [feats.kappa])
        if not all(isinstance(t, torch.Tensor) and t.shape[0] == n for t in parts):
            raise ValueError("its arrays differ in length")
        return feats
    except Exception as e:  # noqa: BLE001 - any unreadable cache file is rebuilt, none is fatal
        reason = (str(e).split(". ")[0] or type(e).__name__).strip()[:160]
        imagefiles.warn(
            f"the feature cache file {path} is corrupt ({type(e).__name__}: {reason}); "
            "extracting the features again and rewriting it"
        )
        return None


def _output_size(tf: v2.Compose) -> int:
    """The side of the transform's centre crop (the network's input size)."""
    for op in reversed(tf.transforms):
        if isinstance(op, v2.CenterCrop):
            return int(op.size[0])
    raise ValueError(f"transform {tf} has no CenterCrop: cannot tell the input size")


def describe(feats: Features) -> dict[str, Any]:
    """Shapes for the JSON records."""
    return {
        "n": len(feats),
        "backbone_dim": int(feats.backbone.shape[1]),
        "head_dim": int(feats.head.shape[1]),
        "kappa": feats.kappa is not None,
    }


def _resolved(name: str) -> str:
    """``folder:``/``imagefolder:`` names with their path made absolute (the cache key of a
    relative path must not depend on the working directory)."""
    prefix, sep, path = name.partition(":")
    if not sep:
        return name
    return f"{prefix}:{Path(path).expanduser().resolve()}"
