"""Checkpoint files: written atomically, read with ``weights_only=True``, checked as negmine's.

A checkpoint is a dict of plain containers and tensors (nothing that needs pickle's globals):

    format, epoch, step_in_epoch, global_step, config (dict), model, strategy, optimizer,
    scaler, scheduler, rng, epoch_stats, metrics

What the trainer puts in one and how it resumes from it is :mod:`pretrain.engine.checkpoint`;
this module is the file format alone, which ``linear_eval`` and ``python -m pretrain export``
read too.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch

from pretrain.runtime import run_folder

FORMAT = "negmine-1"
REQUIRED = (
    "format",
    "epoch",
    "step_in_epoch",
    "global_step",
    "config",
    "model",
    "optimizer",
    "rng",
)


class CheckpointError(RuntimeError):
    """A checkpoint that is missing, corrupt or belongs to a different run."""


class NotNegmineError(CheckpointError):
    """A readable torch file that is not a negmine checkpoint (weights made elsewhere, say):
    its own class so that a caller that can read such weights adds how (``linear_eval``:
    ``--config CFG``)."""


def save(state: dict[str, Any], path: str | Path, run_dir: str | Path | None = None) -> None:
    """Write ``state`` to ``path`` atomically (:func:`pretrain.runtime.run_folder.atomic_write`:
    temporary file in the same folder, fsync, rename), never through a symbolic link; given the
    ``run_dir`` it lies in, its folder must resolve inside it.

    A write that fails (a full disk: ``OSError``, or torch's ``RuntimeError: ... unexpected pos``)
    removes its temporary file and raises :class:`CheckpointError` naming the path, the free space
    and whether the previous ``path`` is intact (it always is: only the rename replaces it).
    Temporary files of ``path`` left by a process killed mid-write are removed first.
    """
    path = run_folder.refuse_link(path, run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_tmp(path.parent, path.name)
    try:
        run_folder.atomic_write(path, lambda f: torch.save(state, f), run_dir, private=True)
    except run_folder.RunFolderLinkError:
        raise
    except Exception as e:
        raise CheckpointError(write_failure(path, e)) from None


def remove_stale_tmp(folder: str | Path, name: str = "*") -> list[Path]:
    """Remove the temporary files a killed :func:`save` left in ``folder`` (those of ``name``, or
    all); only the one process that writes there may call it (the run's lock holder)."""
    removed = []
    for stale in Path(folder).glob(f".{name}.*.tmp"):
        stale.unlink(missing_ok=True)
        removed.append(stale)
    return removed


def write_failure(path: Path, e: Exception) -> str:
    """Why writing ``path`` failed, the free space there, and what survived."""
    why = (e.strerror or str(e)) if isinstance(e, OSError) else first_line(e)
    if isinstance(e, RuntimeError):  # torch's zip writer: "[enforce fail ...] unexpected pos"
        why += ", torch's report of a failed write (most often a full disk)"
    try:
        free = f"{shutil.disk_usage(path.parent).free / 2**30:.1f} GiB free"
    except OSError:
        free = "free space unknown"
    survived = (
        f"the previous checkpoint {path} is intact"
        if path.is_file()
        else f"there is no previous checkpoint {path}"
    )
    return (
        f"cannot write checkpoint {path} ({type(e).__name__}: {why}); {free} on its file system "
        f"({path.parent}); {survived}. Free space (or choose another out_dir) and run the same "
        "command again"
    )


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else ""


def read(path: str | Path, map_location: str | torch.device = "cpu") -> Any:
    """``torch.load(path, weights_only=True)``; a file that is missing, a folder, unreadable or not
    a torch file of plain tensors is a :class:`CheckpointError`. Torch's advice to retry with
    ``weights_only=False`` is not passed on: that runs the file's code, unsafe for a file of
    unknown origin."""
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(
            f"checkpoint {path} is a directory, not a checkpoint file; move it away"
        )
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except PermissionError as e:  # other OSErrors (EINVAL of a cut zip) mean a damaged file
        raise CheckpointError(f"checkpoint {path} cannot be read ({e.strerror or e})") from None
    except Exception as e:  # zipfile, pickle, EOF and torch errors all mean "unreadable"
        if "weights_only" in str(e) or "Weights only" in str(e):
            why = "a weights-only load refused it" + unpickler_reason(str(e))
        else:
            why = f"{type(e).__name__}: {first_line(e)}"
        raise CheckpointError(
            f"checkpoint {path} is corrupt or not a torch checkpoint ({why}). Older copies may "
            "sit beside it (checkpoints/epoch_N.pt); move the bad file away to resume from one "
            "of them."
        ) from None


def unpickler_reason(text: str) -> str:
    """The one line of torch's weights-only refusal that says what was found, without the advice
    around it (retry with ``weights_only=False``, allow-list globals)."""
    for line in text.splitlines():
        if "WeightsUnpickler error:" in line:
            reason = line.split("WeightsUnpickler error:", 1)[1].split(". Please")[0].strip()
            if reason and "weights_only" not in reason:
                return f": {reason.rstrip('.')}"
    return ""


def load(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load and check a negmine checkpoint; any failure is a :class:`CheckpointError`."""
    path = Path(path)
    state = read(path, map_location)
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        keys = sorted(state)[:8] if isinstance(state, dict) else type(state).__name__
        raise NotNegmineError(
            f"checkpoint {path} is not a {FORMAT} negmine checkpoint (its top-level keys: {keys})"
        )
    missing = [k for k in REQUIRED if k not in state]
    if missing:
        raise CheckpointError(f"checkpoint {path} lacks {', '.join(missing)}")
    return state


def load_module(module: torch.nn.Module, weights: dict[str, torch.Tensor], what: str) -> None:
    """``load_state_dict`` with a :class:`CheckpointError` that lists what does not fit."""
    own = module.state_dict()
    missing = [k for k in own if k not in weights]
    extra = [k for k in weights if k not in own]
    shapes = [
        f"{k} {tuple(weights[k].shape)} vs {tuple(v.shape)}"
        for k, v in own.items()
        if k in weights and isinstance(v, torch.Tensor) and weights[k].shape != v.shape
    ]  # (non-tensor entries: a module's extra state, e.g. AdCo's fill count)
    if missing or extra or shapes:
        raise CheckpointError(
            f"the checkpoint's {what} does not match this model: "
            + "; ".join(
                part
                for part in (
                    f"missing {missing[:5]}" if missing else "",
                    f"unexpected {extra[:5]}" if extra else "",
                    f"shape {shapes[:5]}" if shapes else "",
                )
                if part
            )
        )
    module.load_state_dict(weights)
