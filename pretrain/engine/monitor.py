"""The training monitor: the encoder's features over a loader (:func:`extract`, :class:`Taps`), and
at an epoch's end the online probe's test accuracy and the kNN monitor (:func:`measure_epoch`,
:func:`evaluate`) on the maths that ``linear_eval`` shares (:mod:`pretrain.metrics.knn`)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from pretrain.engine.run import Run
from pretrain.metrics import knn
from pretrain.runtime import dist


@torch.no_grad()
def extract(
    net: nn.Module, loader: DataLoader, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run ``net`` in eval mode over ``loader``; returns features (N, F) and labels (N,) on CPU.

    The module's train/eval mode is restored afterwards.
    """
    was_training = net.training
    net.eval()
    feats, labels = [], []
    try:
        for x, y in loader:
            feats.append(net(x.to(device, non_blocking=True)).float().cpu())
            labels.append(torch.as_tensor(y))
    finally:
        net.train(was_training)
    return torch.cat(feats), torch.cat(labels)


class Taps(nn.Module):
    """An encoder's kNN features in one forward: the pooled backbone output and/or the projection
    head's output (before the L2 normalisation, which the kNN applies), side by side in ``names``'
    order. The MoCo CIFAR colab's monitor reads the head (its ``ModelBase`` ends in the fc);
    ``linear_eval`` and our default monitor read the backbone."""

    def __init__(self, encoder: nn.Module, names: tuple[str, ...]) -> None:
        super().__init__()
        if not names or any(n not in ("backbone", "head") for n in names):
            raise ValueError(f"kNN features must be 'backbone' and/or 'head', got {names}")
        self.encoder, self.names = encoder, names

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.encoder.backbone(x)
        tap = {"backbone": h, "head": self.encoder.head(h) if "head" in self.names else None}
        parts = [tap[n].flatten(1) for n in self.names]
        self.widths = [p.shape[1] for p in parts]
        return torch.cat(parts, dim=1)

    def split(self, feats: torch.Tensor) -> dict[str, torch.Tensor]:
        """The (N, sum of widths) output cut back into {name: (N, width)}."""
        return dict(zip(self.names, feats.split(self.widths, dim=1)))


def measure_epoch(run: Run, record: dict[str, Any]) -> dict[str, Any]:
    """The finished epoch's ``record`` with the online probe's test accuracy and (every
    ``eval.knn_every``) the kNN monitor's numbers (:func:`evaluate`), measured on rank 0 while the
    others wait, then logged to ``metrics.jsonl``."""
    cfg = run.cfg
    epoch = record["epoch"]
    if run.probe is not None:
        if dist.is_main():
            feats, labels = extract(run.moco.encoder_q.backbone, run.data.test_loader, run.device)
            record["online_test_top1"] = run.probe.top1(feats, labels)
        else:
            record["online_test_top1"] = math.nan
        dist.barrier()
    every = cfg.eval.knn_every
    if epoch == cfg.train.epochs or (every > 0 and epoch % every == 0):
        if dist.is_main():
            record.update(evaluate(run))
        else:
            record.update({"oc_auroc" if run.data.in_classes else "knn_top1": math.nan})
        dist.barrier()
    run.log.write(record, "epoch")
    return record


def evaluate(run: Run) -> dict[str, float]:
    """The monitor on the query encoder, training images as bank and held-out as queries (both
    under the eval transform): weighted kNN top-1 (%) on ``eval.knn_features`` (the pooled
    backbone, the head's output, or both in one pass; the first is ``knn_top1``), or for one-class
    runs (``data.in_classes``) the AUROC (%) of s_con (k=1) with the held-out images of those
    classes as in-distribution."""
    cfg = run.cfg
    taps = Taps(run.moco.encoder_q, tuple(cfg.eval.knn_features.split("+")))
    bank, bank_y = extract(taps, run.data.bank_loader, run.device)
    banks = taps.split(bank)
    test, test_y = extract(taps, run.data.test_loader, run.device)
    tests = taps.split(test)
    first = taps.names[0]
    if run.data.in_classes:
        auroc = knn.one_class_auroc(banks[first], tests[first], test_y, run.data.in_classes, k=1)
        return {"oc_auroc": auroc}
    out = {}
    for name in taps.names:
        out[f"knn_top1_{name}"] = knn.knn_top1(
            banks[name],
            bank_y,
            tests[name],
            test_y,
            cfg.eval.knn_k,
            cfg.eval.knn_temperature,
            run.data.num_classes,
        )
    out["knn_top1"] = out[f"knn_top1_{first}"]
    return out if len(taps.names) > 1 else {"knn_top1": out["knn_top1"]}
