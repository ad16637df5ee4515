"""Build the ImageNet-100 subset (the 100 CMC classes) from an ImageNet (ILSVRC-2012) download.

    python scripts/make_imagenet100.py --train SRC/train --val SRC/val DEST
    python scripts/make_imagenet100.py --train ILSVRC2012_img_train --val ILSVRC2012_img_val \\
        --val-labels LOC_val_solution.csv DEST

writes the layout ``data.name=imagenet100`` reads::

    DEST/train/<wnid>/<image>.JPEG     100 class folders, ~1,300 images each (126,689 in all)
    DEST/val/<wnid>/<image>.JPEG       the same 100 folders, 50 images each (5,000)

for the class list shipped with the package (``pretrain/resources/imagenet100_classes.txt``,
HobbitLong/CMC's ``imagenet100.txt``, checked against its sha256). Images are symbolic links to
the download (no copy; ``--copy`` copies them instead), so the download must stay where it is.

``--train`` is either a folder of class folders (``n01440764/*.JPEG``) or a folder of the
per-class tar files inside ``ILSVRC2012_img_train.tar`` (``n01440764.tar``): the 100 classes'
tars are extracted into ``DEST/train`` (always a copy). ``--val`` is either a folder of class
folders (the val images already sorted) or the flat folder of ``ILSVRC2012_val_*.JPEG`` with
``--val-labels``: Kaggle's ``LOC_val_solution.csv`` (``ImageId,PredictionString`` whose first word
is the WordNet id) or a text file of ``FILENAME WNID`` lines. Nothing is downloaded. Exit 2 with
what is missing when the download lacks a class or an image; DEST must not exist or be empty.

Then train with an absolute ``data.root`` (``python -m slurm`` makes a relative one absolute)::

    python -m pretrain --cfg imagenet100_mioc.yaml data.root=/abs/path/to/DEST
"""

from __future__ import annotations

import argparse
import csv
import shutil
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pretrain.data.datasets import imagenet100_classes  # noqa: E402

IMAGE_SUFFIXES = {".jpeg", ".jpg", ".png"}


class SubsetError(Exception):
    """A download that does not hold what the subset needs (exit 2)."""


def images(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)


def read_val_labels(path: Path) -> dict[str, str]:
    """Image file stem -> WordNet id, from Kaggle's CSV or ``FILENAME WNID`` lines."""
    labels: dict[str, str] = {}
    text = path.read_text()
    if text.startswith("ImageId,"):
        for row in csv.DictReader(text.splitlines()):
            labels[row["ImageId"]] = row["PredictionString"].split()[0]
        return labels
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2:
            raise SubsetError(f"{path} line {n}: expected 'FILENAME WNID', got {line!r}")
        labels[Path(parts[0]).stem] = parts[1]
    return labels


def place(src: Path, dest: Path, copy: bool) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    if copy:
        shutil.copy2(src, dest)
    else:
        dest.symlink_to(src.resolve())


def build_train(src: Path, dest: Path, classes: list[str], copy: bool) -> int:
    folders = [src / c for c in classes if (src / c).is_dir()]
    tars = [src / f"{c}.tar" for c in classes if (src / f"{c}.tar").is_file()]
    have = {p.name for p in folders} | {p.stem for p in tars}
    missing = [c for c in classes if c not in have]
    if missing:
        raise SubsetError(
            f"{len(missing)} of the 100 ImageNet-100 classes are missing under {src} (first: "
            f"{', '.join(missing[:5])}); expected {src}/<wnid>/ folders or {src}/<wnid>.tar files "
            "of ILSVRC2012_img_train.tar"
        )
    empty = [c for c in classes if (src / c).is_dir() and not images(src / c)]
    if empty:
        raise SubsetError(f"{src / empty[0]} holds no images ({len(empty)} empty class folder(s))")
    count = 0
    for c in classes:
        out = dest / "train" / c
        if (src / c).is_dir():
            files = images(src / c)
            for f in files:
                place(f, out / f.name, copy)
            count += len(files)
        else:
            out.mkdir(parents=True, exist_ok=True)
            with tarfile.open(src / f"{c}.tar") as tar:
                members = [m for m in tar.getmembers() if m.isfile()
                           and Path(m.name).suffix.lower() in IMAGE_SUFFIXES]  # fmt: skip
                for m in members:
                    m.name = Path(m.name).name  # flat: no paths from the archive
                safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
                tar.extractall(out, members=members, **safe)  # names flattened above
            count += len(members)
    return count


def plan_val(src: Path, labels_file: Path | None, classes: list[str]) -> list[tuple[Path, str]]:
    """(image, its wnid) for the 100 classes' val images; checked before anything is written."""
    wanted = set(classes)
    if labels_file is None:
        missing = [c for c in classes if not (src / c).is_dir()]
        if missing:
            raise SubsetError(
                f"{len(missing)} of the 100 ImageNet-100 classes are missing under {src} (first: "
                f"{', '.join(missing[:5])}); give the val images sorted into <wnid>/ folders, or "
                "the flat folder with --val-labels (LOC_val_solution.csv or FILENAME WNID lines)"
            )
        return [(f, c) for c in classes for f in images(src / c)]
    labels = read_val_labels(labels_file)
    chosen = {stem: wnid for stem, wnid in labels.items() if wnid in wanted}
    found = {p.stem: p for p in images(src)}
    absent = sorted(stem for stem in chosen if stem not in found)
    if absent:
        raise SubsetError(
            f"{len(absent)} val image(s) listed in {labels_file} for the 100 classes are not in "
            f"{src} (first: {', '.join(absent[:5])})"
        )
    empty = sorted(wanted - set(chosen.values()))
    if empty:
        raise SubsetError(
            f"{labels_file} lists no val image of {len(empty)} of the 100 ImageNet-100 classes "
            f"(first: {', '.join(empty[:5])})"
        )
    return [(found[stem], wnid) for stem, wnid in sorted(chosen.items())]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train", required=True, type=Path,
                   help="ILSVRC-2012 train: <wnid>/ folders or <wnid>.tar files")  # fmt: skip
    p.add_argument(
        "--val",
        required=True,
        type=Path,
        help="ILSVRC-2012 val: <wnid>/ folders, or the flat folder with --val-labels",
    )
    p.add_argument("--val-labels", type=Path, default=None,
                   help="LOC_val_solution.csv, or a file of 'FILENAME WNID' lines")  # fmt: skip
    p.add_argument("--copy", action="store_true", help="copy the images instead of linking them")
    p.add_argument("dest", type=Path, help="the new ImageNet-100 folder (data.root)")
    a = p.parse_args(argv)
    dest = a.dest.resolve()
    try:
        for path in (a.train, a.val, *([a.val_labels] if a.val_labels else [])):
            if not path.exists():
                raise SubsetError(f"{path} does not exist")
        if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
            raise SubsetError(f"{dest} exists and is not an empty folder; choose a new DEST")
        classes = imagenet100_classes()
        val = plan_val(a.val, a.val_labels, classes)  # every check before the first write
        n_train = build_train(a.train, dest, classes, a.copy)
        for image, wnid in val:
            place(image, dest / "val" / wnid / image.name, a.copy)
    except SubsetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {dest}: {len(classes)} classes, {n_train} train and {len(val)} val images")
    print(f"train with: python -m pretrain --cfg imagenet100_mioc.yaml data.root={dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
