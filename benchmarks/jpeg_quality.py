"""The JPEG quality and chroma subsampling of an image folder (issue 15: how lossy are the
CIFAR-10 JPEGs?). Quality is estimated as the libjpeg quality whose scaled standard luminance
table (Annex K, scaled as libjpeg's ``jpeg_quality_scaling``) is closest to the file's.

    python benchmarks/jpeg_quality.py data/cifar10-jpg/train --every 500
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

from PIL import Image, JpegImagePlugin

# ITU T.81 Annex K.1 luminance table, natural order (as PIL's ``quantization``).
LUMA = (16, 11, 10, 16, 24, 40, 51, 61, 12, 12, 14, 19, 26, 58, 60, 55,
        14, 13, 16, 24, 40, 57, 69, 56, 14, 17, 22, 29, 51, 87, 80, 62,
        18, 22, 37, 56, 68, 109, 103, 77, 24, 35, 55, 64, 81, 104, 113, 92,
        49, 64, 78, 87, 103, 121, 120, 101, 72, 92, 95, 98, 112, 100, 103, 99)  # fmt: skip
SAMPLING = {0: "4:4:4", 1: "4:2:2", 2: "4:2:0", -1: "unknown"}


def scaled(quality: int) -> list[int]:
    scale = 5000 // quality if quality < 50 else 200 - 2 * quality
    return [min(255, max(1, (v * scale + 50) // 100)) for v in LUMA]


def estimate_quality(table: list[int]) -> int:
    """The quality 1..100 whose scaled Annex-K table is nearest (L1) to ``table``."""
    return min(range(1, 101), key=lambda q: sum(abs(a - b) for a, b in zip(scaled(q), table)))


def survey(root: Path, every: int = 1) -> tuple[collections.Counter, collections.Counter, int]:
    files = sorted(root.rglob("*.jpg")) + sorted(root.rglob("*.jpeg"))
    if not files:
        sys.exit(f"no .jpg/.jpeg files under {root}")
    qualities, samplings = collections.Counter(), collections.Counter()
    for f in files[::every]:
        with Image.open(f) as im:
            qualities[estimate_quality(list(im.quantization[0]))] += 1
            samplings[SAMPLING.get(JpegImagePlugin.get_sampling(im), "other")] += 1
    return qualities, samplings, len(files[::every])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("root", type=Path)
    p.add_argument("--every", type=int, default=1, help="read every Nth file (sorted)")
    a = p.parse_args(argv)
    qualities, samplings, n = survey(a.root, a.every)
    print(f"{n} files under {a.root}")
    print("quality:", ", ".join(f"{q}: {c}" for q, c in qualities.most_common()))
    print("chroma subsampling:", ", ".join(f"{s}: {c}" for s, c in samplings.most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
