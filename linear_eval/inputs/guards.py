"""Checks made before any feature is computed, so a bad path costs no work: the checkpoint file
exists (exit 2, as a bad argument) and every directory an evaluator will write into can be
written."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from pretrain.runtime import run_folder


class UsageError(ValueError):
    """A bad argument found before any work: the CLI exits 2 with this message."""


def require_checkpoint(path: str | Path) -> Path:
    """``path`` as a Path when it is an existing file, else :class:`UsageError` naming it."""
    p = Path(path)
    if not p.is_file():
        what = "is a directory" if p.is_dir() else "does not exist"
        raise UsageError(f"--ckpt {p} {what}: give a checkpoint file (RUN/checkpoints/last.pt)")
    return p


def require_writable(directory: str | Path, what: str) -> Path:
    """Check, creating nothing, that ``directory`` can be created or written: its nearest existing
    ancestor must be a directory this process may write into (read-only mounts count as not
    writable); otherwise a :class:`UsageError` naming ``what`` and the path."""
    d = Path(directory).absolute()
    p = d
    while not p.exists() and p != p.parent:
        p = p.parent
    if not p.is_dir():
        raise UsageError(f"{what} {d} cannot be written: {p} is a file; nothing was computed")
    if not os.access(p, os.W_OK | os.X_OK):
        raise UsageError(
            f"{what} {d} cannot be written ({p} is not writable); nothing was computed"
        )
    return d


def require_output_file(path: Path, run_dir: Path | None) -> Path:
    """Check, before any work, that the results file ``path`` is not a folder, not a symbolic
    link and, given the ``run_dir`` it lies in, in a folder that resolves inside it."""
    if path.is_dir() and not path.is_symlink():
        raise UsageError(f"--out {path} is a directory: give a file name; nothing was computed")
    return run_folder.refuse_link(path, run_dir)


#: The seeds every flag takes, as pretraining's config key ``seed``: numpy's generators take 32-bit
#: seeds (scikit-learn's ``random_state`` too), torch's 64-bit.
SEED_MAX = 2**32 - 1

#: The flags that name a seed, and the attribute argparse gives each.
SEED_FLAGS = (("--seed", "seed"), ("--seeds", "seeds"), ("--crop-seed", "crop_seed"))


def check_seeds(args: Any) -> None:
    """Every seed flag's values within [0, :data:`SEED_MAX`], else :class:`UsageError` naming
    it (``--seed 2**64`` failed deep in torch with "Overflow when unpacking long long", and
    ``--seed -1`` ran where pretraining refuses ``seed=-1``)."""
    for flag, name in SEED_FLAGS:
        value = getattr(args, name, None)
        for v in value if isinstance(value, list) else [] if value is None else [value]:
            if not 0 <= v <= SEED_MAX:
                raise UsageError(
                    f"{flag} {v}: give a whole number in [0, {SEED_MAX}] (as pretraining's "
                    "seed: numpy's generators take 32-bit seeds)"
                )


def check_set_needs_config(overrides: list[str], config: str | None) -> None:
    """``--set`` without ``--config`` would be ignored: refused, naming both."""
    if overrides and not config:
        raise UsageError(
            f"--set {' '.join(overrides)} is given without --config: --set overrides the file "
            "that --config names (for weights made elsewhere), and a negmine checkpoint carries "
            "its own config; drop --set (--data-root PATH points a run at moved data)"
        )


def check_device(device: str | None) -> None:
    """``--device`` names a device this host has, else :class:`UsageError` (``cuda`` on a host
    without a GPU failed with torch's traceback at the first tensor moved there)."""
    if device is None:
        return
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise UsageError(f"--device {device!r} is not a device: give cpu, cuda or cuda:N") from None
    if dev.type != "cuda":
        return
    count = torch.cuda.device_count()  # 0 without a driver; does not initialise CUDA
    if count == 0:
        raise UsageError(
            f"--device {device}: no CUDA device is visible on this host; give --device cpu, or "
            "leave --device out (cuda where present, else cpu)"
        )
    if dev.index is not None and dev.index >= count:
        raise UsageError(
            f"--device {device}: this host has {count} CUDA device(s), cuda:0 to cuda:{count - 1}"
        )


#: Datasets that read no files under a data root (scikit-learn's bundled digits).
BUILT_IN_DATASETS = {"digits": "scikit-learn's bundled 8x8 digits"}


def check_data_root(data_root: str | None, dataset: str) -> None:
    """``--data-root`` for a command that reads only the run's own dataset, when that dataset is
    built in, would be ignored: refused, naming the flag and the dataset."""
    if data_root is not None and dataset in BUILT_IN_DATASETS:
        raise UsageError(
            f"--data-root {data_root} is not used: the run's dataset {dataset!r} is "
            f"{BUILT_IN_DATASETS[dataset]}, which reads no files, and this command reads no other "
            "dataset; drop --data-root"
        )
