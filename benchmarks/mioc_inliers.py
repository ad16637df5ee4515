"""MiOC's inlier set O on real images: how selective is the OC-SVM at the paper's (nu, gamma)?

MiOC (Jain et al., Alg. 1) fits a One-Class SVM on the batch's queries and keys (2B points, unit
vectors) and keeps the queue keys with f(n) > 0 as O, the pool S_o is drawn from. For unit vectors
|x - y|^2 lies in [0, 4], so the RBF kernel exp(-gamma |x - y|^2) lies in [e^{-4 gamma}, 1]: at the
paper's gamma = 0.01 that is [0.96, 1], nearly flat, and O can be the whole queue. This script
embeds real images with a checkpoint's encoders (or a random init), then for a grid of (gamma, nu)
fits the OC-SVM on cat(q, k) of each batch and scores a queue of the other images' keys, and reports
the inlier fraction |O| / K, the support vectors and the kernel's range over the queue.

Embeddings are taken in eval mode (running BatchNorm statistics, no key shuffle), the two views
under the training augmentation; the queue of each batch is K keys of images outside that batch.

    python benchmarks/mioc_inliers.py --root /work/data/cifar10-jpg --ckpt RUN/checkpoints/last.pt
    python benchmarks/mioc_inliers.py --quick      # digits, random init, tiny grid (CI smoke)
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.results_md import record_table  # noqa: E402
from negatives.ocsvm.svm import OneClassSVM  # noqa: E402
from pretrain import config  # noqa: E402
from pretrain.engine import loop  # noqa: E402
from pretrain.runtime import checkpoint_io  # noqa: E402

RESULTS = Path(__file__).with_name("RESULTS.md")


@torch.no_grad()
def embed(run: loop.Run, limit: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, k) of up to ``limit`` training images: two augmented views through encoder_q and
    encoder_k, L2-normalised, float64 on CPU."""
    run.moco.eval()
    qs, ks, seen = [], [], 0
    for x1, x2, _y, _idx, *rows in run.data.train_loader:
        if rows:  # stage 2 of the two-stage pipeline: photometric ops, batched
            params = torch.cat([rows[0][:, 0], rows[0][:, 1]]).to(run.device)
            x = run.data.augment(torch.cat([x1, x2]).to(run.device), params)
            x1, x2 = x.chunk(2)
        qs.append(run.moco.encoder_q(x1.to(run.device)).double().cpu())
        ks.append(run.moco.encoder_k(x2.to(run.device)).double().cpu())
        seen += len(x1)
        if seen >= limit:
            break
    return torch.cat(qs)[:limit], torch.cat(ks)[:limit]


def sweep(q: torch.Tensor, k: torch.Tensor, batch: int, queue: int, gammas, nus, batches: int):
    """Per (gamma, nu): mean inlier fraction, its min/max over batches, mean support vectors and
    the RBF kernel's range between the fit points and the queue."""
    n = len(q)
    starts = [i * batch for i in range(min(batches, n // batch))]
    out = {}
    for g in gammas:
        for nu in nus:
            frac, svs, kmin, kmax = [], [], [], []
            for s in starts:
                pts = torch.cat([q[s : s + batch], k[s : s + batch]])
                rest = torch.cat([k[:s], k[s + batch :]])[:queue]
                svm = OneClassSVM(nu=nu, gamma=g).fit(pts)
                f = svm.decision_function(rest)
                frac.append(float((f > 0).double().mean()))
                svs.append(len(svm.support_))
                kern = torch.exp(-g * torch.cdist(pts, rest).square())
                kmin.append(float(kern.min()))
                kmax.append(float(kern.max()))
            out[g, nu] = (statistics.mean(frac), min(frac), max(frac), statistics.mean(svs),
                          min(kmin), max(kmax), len(starts))  # fmt: skip
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cfg", default="cifar10_mioc.yaml")
    p.add_argument("--root", default="", help="CIFAR-10 image folder (train/<class>/*.jpg)")
    p.add_argument("--ckpt", default="", help="a pretrain checkpoint; empty = random init")
    p.add_argument("--images", type=int, default=5000)
    p.add_argument("--batch", type=int, default=512, help="B: the OC-SVM fits 2B points")
    p.add_argument("--queue", type=int, default=4096)
    p.add_argument("--batches", type=int, default=8, help="batches averaged")
    p.add_argument("--gammas", default="0.01,0.1,0.5,1,2,5,10")
    p.add_argument("--nus", default="0.01,0.1,0.5")
    p.add_argument("--quick", action="store_true", help="digits, random init, tiny grid")
    p.add_argument("--device", default="cpu")
    p.add_argument("overrides", nargs="*", help="config overrides (e.g. the checkpoint's model.*)")
    p.add_argument("--results", default=str(RESULTS))
    p.add_argument("--no-record", action="store_true")
    a = p.parse_args()
    if a.quick:
        a.cfg, a.images, a.batch, a.queue, a.batches = "digits_mioc.yaml", 320, 64, 192, 2
        a.gammas, a.nus, a.ckpt = "0.01,5", "0.01", ""
    overrides = [f"data.subset={max(1, a.images // 10)}", f"train.batch_size={a.batch}",
                 "data.num_workers=0", "model.bn_splits=1", f"moco.queue_size={a.queue}",
                 "train.threads=0", *a.overrides]  # fmt: skip
    if a.root:
        overrides += ["data.name=imagefolder", f"data.root={a.root}"]
    cfg = config.load(a.cfg, overrides)
    run = loop.setup(cfg)
    what = "random init"
    if a.ckpt:
        state = checkpoint_io.load(a.ckpt)
        checkpoint_io.load_module(run.moco, state["model"], "model")
        what = f"{a.ckpt} (epoch {state['epoch']}, step {state['step_in_epoch']})"
    q, k = embed(run, a.images)
    gammas = [float(g) for g in a.gammas.split(",")]
    nus = [float(v) for v in a.nus.split(",")]
    res = sweep(q, k, a.batch, a.queue, gammas, nus, a.batches)
    rows = [
        f"{len(q)} images of {cfg.data.name} ({a.root or cfg.data.root}), encoders: {what}; "
        f"fit on 2B = {2 * a.batch} points, queue K = {a.queue} keys of other images",
        "",
        "| gamma | nu | inlier fraction |O|/K (mean) | min | max | support vectors | kernel min | "
        "kernel max | batches |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (g, nu), (fr, lo, hi, sv, kmin, kmax, nb) in res.items():
        rows.append(f"| {g:g} | {nu:g} | {fr:.3f} | {lo:.3f} | {hi:.3f} | {sv:.1f} | "
                    f"{kmin:.3f} | {kmax:.3f} | {nb} |")  # fmt: skip
        print(rows[-1], flush=True)
    record_table("MiOC inlier set O on real images: (gamma, nu) sweep", rows, a.results,
                 not a.no_record, a.device)  # fmt: skip


if __name__ == "__main__":
    main()
