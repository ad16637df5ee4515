"""Build a small OpenOOD-format tree (and an ImageFolder pretraining set) from the CIFAR-10 JPEGs,
for a PIPELINE CHECK of ``python -m linear_eval openood`` (not leaderboard numbers).

    python scripts/openood_demo_tree.py --src /work/data/cifar10-jpg --out /tmp/openood_demo

ID ("cifar10" lists) = airplane, automobile, bird, cat, deer, dog (labels 0-5);
near stand-ins: "cifar100" = frog, horse test images, "tin" = ship, truck test images;
far stand-ins: "svhn" = uniform-noise images, "texture" = ID test images pixelated to 4x4 blocks;
"mnist" and "places365" are left out on purpose, so the run shows them as skipped.
OUT/pretrain/{train,val}/<class>/ links the ID images for ``data.name=imagefolder``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from PIL import Image

ID = ["airplane", "automobile", "bird", "cat", "deer", "dog"]
NEAR = {"cifar100": ["frog", "horse"], "tin": ["ship", "truck"]}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--src", default="/work/data/cifar10-jpg")
    p.add_argument("--out", default="/tmp/openood_demo")
    p.add_argument("--train-per-class", type=int, default=500)
    p.add_argument("--test-per-class", type=int, default=200)
    a = p.parse_args()
    src, out = Path(a.src), Path(a.out)
    img = out / "images_classic"
    lists = out / "benchmark_imglist" / "cifar10"
    lists.mkdir(parents=True, exist_ok=True)

    def link(split: str, cls: str, n: int, name: str) -> list[str]:
        rows = []
        for f in sorted((src / split / cls).glob("*.jpg"))[:n]:
            rel = f"{name}/{split}/{cls}/{f.name}"
            (img / rel).parent.mkdir(parents=True, exist_ok=True)
            if not (img / rel).exists():
                (img / rel).symlink_to(f)
            rows.append(rel)
        return rows

    for split, n in (("train", a.train_per_class), ("test", a.test_per_class)):
        lines = []
        for c, cls in enumerate(ID):
            rows = link(split, cls, n, "cifar10")
            lines += [f"{r} {c}" for r in rows]
            pre = out / "pretrain" / ("train" if split == "train" else "val") / cls
            pre.mkdir(parents=True, exist_ok=True)
            for r in rows:
                if not (pre / Path(r).name).exists():
                    (pre / Path(r).name).symlink_to(img / r)
        (lists / f"{split}_cifar10.txt").write_text("\n".join(lines) + "\n")
    for name, classes in NEAR.items():
        rows = [r for cls in classes for r in link("test", cls, a.test_per_class, name)]
        (lists / f"test_{name}.txt").write_text("\n".join(f"{r} -1" for r in rows) + "\n")
    rng = np.random.default_rng(0)
    noise = []
    for i in range(400):
        rel = f"svhn/test/noise_{i:04d}.png"
        (img / rel).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(img / rel)
        noise.append(rel)
    (lists / "test_svhn.txt").write_text("\n".join(f"{r} -1" for r in noise) + "\n")
    tex = []
    for cls in ID:
        for f in sorted((src / "test" / cls).glob("*.jpg"))[: 400 // len(ID)]:
            rel = f"texture/test/{cls}_{f.stem}.png"
            (img / rel).parent.mkdir(parents=True, exist_ok=True)
            im = Image.open(f).convert("RGB").resize((8, 8), Image.BILINEAR)
            im.resize((32, 32), Image.NEAREST).save(img / rel)
            tex.append(rel)
    (lists / "test_texture.txt").write_text("\n".join(f"{r} -1" for r in tex) + "\n")
    print(f"tree in {out}: {sum(1 for _ in img.rglob('*.*'))} images")


if __name__ == "__main__":
    main()
