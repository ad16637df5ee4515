"""One checkpoint under evaluation: its feature store, the standard feature sets the evaluators
read, and where results go (``RUN/eval/<evaluator>.json``, ``RUN/reports/``)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from linear_eval.inputs import checkpoints, features, guards
from linear_eval.inputs.features import Features, FeatureStore, View, ViewSet
from linear_eval.records import summary
from pretrain.data import identity
from pretrain.runtime import dist, run_folder
from pretrain.runtime import threads as pretrain_threads


@dataclass(frozen=True, kw_only=True)
class Options:
    """Settings every subcommand shares (the CLI's common flags)."""

    data_root: str | None = None
    batch_size: int | None = None  # None: the run's eval.batch_size (monitor-identical features)
    num_workers: int = 0
    cache: bool = True
    random_init: bool = False
    device: str | None = None  # None: cuda if available, else cpu
    config: str | None = None  # weights made elsewhere: the evaluation config (dataset, eval.*)
    overrides: tuple[str, ...] = ()  # dotted overrides of that config
    own_data_only: bool = False  # the command reads the run's dataset only (not transfer sets)


def configure_threads(threads: int | None, device: str | None) -> int:
    """Set torch's intra-op threads (:func:`pretrain.runtime.threads.configure`: ``threads`` if
    given, else this process's share of its cores, one thread on a share of <= 4 cores). Returns the
    number in use.

    Why: on a small CPU shared with other jobs, intra-op threads cost far more than they give on
    these small matrices (``all`` on the digits checkpoint, 2 cores at load ~4: 50 s with one
    thread, 3 min with two)."""
    if threads is not None and threads < 1:
        raise ValueError(f"--threads must be >= 1, got {threads}")
    dev = device or dist.device_type()
    pretrain_threads.configure(threads or 0, "cpu" if dev.startswith("cpu") else "cuda")
    return torch.get_num_threads()


class Session:
    """Evaluate one checkpoint; every feature set is extracted once (and cached on disk)."""

    def __init__(self, ckpt: str | Path, opts: Options) -> None:
        self.opts = opts
        guards.require_checkpoint(ckpt)
        if opts.config:
            self.model = checkpoints.load_foreign(ckpt, opts.config, list(opts.overrides))
        else:
            self.model = checkpoints.load_model(ckpt, opts.random_init)
        cfg = self.model.cfg
        written = (self.eval_dir, self.report_dir, *([self.cache_dir] if opts.cache else []))
        run_folder.check_run_folder(self.model.run_dir, (), tuple(d.name for d in written))
        if opts.own_data_only:
            guards.check_data_root(opts.data_root, cfg.data.name)
        for d, what in (
            (self.eval_dir, "the results directory"),
            (self.report_dir, "the report directory"),
        ):
            guards.require_writable(d, what)
        if opts.cache:
            guards.require_writable(self.cache_dir, "the feature cache (--no-cache turns it off)")
        device = torch.device(opts.device or dist.device_type())
        cache = self.cache_dir if opts.cache else None
        self.store = FeatureStore(
            self.model,
            cache,
            device,
            batch_size=opts.batch_size or cfg.eval.batch_size,
            num_workers=opts.num_workers,
            data_root=opts.data_root,
        )
        self._memo: dict[tuple, Features] = {}
        self._test_set: dict[str, Any] | None = None

    @property
    def cache_dir(self) -> Path:
        """RUN/features: the feature cache."""
        return self.model.run_dir / "features"

    @property
    def eval_dir(self) -> Path:
        return self.model.run_dir / "eval"

    @property
    def report_dir(self) -> Path:
        """RUN/reports (RUN/reports_random for the untrained baseline)."""
        return self.model.run_dir / f"reports{self.suffix}"

    @property
    def suffix(self) -> str:
        return "_random" if self.opts.random_init else ""

    def features(
        self,
        split: str,
        dataset: str | None = None,
        transform: str = "run",
        view: View = features.PLAIN,
    ) -> Features:
        key = (split, dataset, transform, view)
        if key not in self._memo:  # kept on the evaluation device (labels on the CPU)
            feats = self.store.features(dataset, split, transform, view)
            self._memo[key] = feats.to(self.store.device)
        return self._memo[key]

    def train(self) -> Features:
        """The run's training split (all classes), eval transform."""
        return self.features("train")

    def test(self) -> Features:
        return self.features("test")

    @property
    def num_classes(self) -> int:
        return int(max(self.train().labels.max(), self.test().labels.max())) + 1

    def normal_sets(self) -> list[list[int]]:
        """One-class normal sets: the run's ``data.in_classes`` as one set when it trained on a
        subset, else every test class in turn."""
        own = self.model.cfg.data.in_classes
        if own:
            return [sorted(own)]
        return [[int(c)] for c in self.test().labels.unique() if c >= 0]

    def view_set(
        self,
        split: str,
        rotations: bool = False,
        crops: int = 0,
        crop_seed: int = 0,
        dataset: str | None = None,
    ) -> ViewSet:
        """Plain features plus, on request, the 4 rotations and ``crops`` random crops at each
        rotation (FIRM's s_shift / s_ens views)."""
        plain = self.features(split, dataset)
        out = ViewSet(plain)
        if rotations or crops:
            out.rotations = {
                r: plain if r == 0 else self.features(split, dataset, view=View(r))
                for r in features.ROTATIONS
            }
        if crops:
            out.crops = {
                r: [self.features(split, dataset, view=View(r, i, crop_seed)) for i in range(crops)]
                for r in features.ROTATIONS
            }
        return out

    def test_set(self) -> dict[str, Any]:
        """The test split's identity (:func:`pretrain.data.identity.train_set_identity` applied to
        it: size, and the files' paths, labels and sizes, or pixels), which pairs and groups results
        of one test set."""
        if self._test_set is None:
            ds = self.store.dataset(self.store.run_dataset, "test")
            self._test_set = identity.train_set_identity(ds, self.store.data_root)
        return self._test_set

    def header(self, evaluator: str) -> dict[str, Any]:
        m = self.model
        return {
            "evaluator": evaluator,
            "checkpoint": str(m.ckpt),
            "weights": "random" if self.opts.random_init else "pretrained",
            "epoch": m.epoch,
            "global_step": m.global_step,
            "dataset": m.cfg.data.name,
            "in_classes": list(m.cfg.data.in_classes),
            "arch": m.cfg.model.arch,
            "kappa_head": m.has_kappa,
            "train_set": m.train_set,  # the checkpoint's (None: recorded before it was)
            "test_set": self.test_set(),
            "features": "backbone: pooled penultimate, unnormalised; head: unit-norm z",
            "intervals": f"bootstrap {summary.LEVEL:.0%}, {summary.N_RESAMPLES} resamples of the "
            "test set (percentile)",
        }

    def result_path(self, evaluator: str) -> Path:
        """``RUN/eval/<evaluator>[_random].json``."""
        return self.eval_dir / f"{evaluator}{self.suffix}.json"

    def result_text(self, evaluator: str, record: dict[str, Any]) -> str:
        """The JSON of a result: :meth:`header` + ``record`` (the record's keys win)."""
        return json.dumps(clean(self.header(evaluator) | record), indent=2) + "\n"

    def write(self, evaluator: str, record: dict[str, Any], out: Path | None = None) -> Path:
        """``RUN/eval/<evaluator>[_random].json`` holding header + record, inside the run folder;
        or ``out``, a file the user named (``--out``), wherever it is (never through a link)."""
        path = out or self.result_path(evaluator)
        root = None if out else self.model.run_dir
        return run_folder.write_text(path, self.result_text(evaluator, record), root)


def clean(obj: Any) -> Any:
    """JSON-safe: tensors and numpy scalars to numbers, non-finite floats to None, keys to str."""
    if isinstance(obj, dict):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    if isinstance(obj, torch.Tensor):
        return clean(obj.tolist())
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def read(eval_dir: Path, evaluator: str, suffix: str = "") -> dict[str, Any] | None:
    """A result written by :meth:`Session.write`, or None if absent."""
    path = eval_dir / f"{evaluator}{suffix}.json"
    return run_folder.read_json(path) if path.exists() else None
