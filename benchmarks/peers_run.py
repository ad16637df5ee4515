"""The runs of benchmarks/peers.py's moco part: lightly's model and negmine's trainer step, each
driven one whole epoch (a block) at a time, interleaved, then the kNN of each.

    res = contest(["lightly", "negmine"], Sizes(...), root, work, "cpu", seeds=1, epochs=2,
                  budget=0, workers=-1)

A negmine run is built and stepped as ``python -m pretrain`` does (``loop.setup``, then per step
``loop.set_lr`` and ``loop.train_step`` on ``Batch.from_loader(item).to(device)``); lightly's as
its benchmark's ``training_step`` under Lightning (forward, backward, SGD step, zero_grad; the
cosine schedule stepped per epoch).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from benchmarks.peers_models import (
    ARCHS,
    LightlyMoco,
    Sizes,
    lightly_transforms,
    negmine_overrides,
    parameter_counts,
)
from benchmarks.step import PeakMemory
from pretrain import config
from pretrain.engine import loop, monitor
from pretrain.engine.step import Batch
from pretrain.metrics import knn
from pretrain.runtime import cores
from pretrain.runtime import precision as amp

CONTESTANTS = {"lightly": None, "negmine": "off", "negmine_resident": "device"}  # data.resident
KNN_K, KNN_T = 200, 0.1


def top1(
    bank: torch.Tensor,
    bank_y: torch.Tensor,
    test: torch.Tensor,
    test_y: torch.Tensor,
    device: torch.device,
    classes: int,
) -> float:
    """negmine's weighted kNN top-1 (%) for both runs, computed on ``device``."""
    to = [t.to(device) for t in (bank, bank_y, test, test_y)]
    return knn.knn_top1(*to, KNN_K, KNN_T, classes)


class Negmine:
    def __init__(self, name: str, s: Sizes, root: Path, out: Path, seed: int, workers: int) -> None:
        over = [*negmine_overrides(s, str(root)), f"data.resident={CONTESTANTS[name]}",
                f"out_dir={out}", f"seed={seed}", f"data.num_workers={workers}"]  # fmt: skip
        self.cfg = config.load("cifar10_moco.yaml", over)
        self.run = loop.setup(self.cfg)  # the strategy's and the loss's setup hooks ran
        self.device = self.run.device
        self.steps = self.run.derived.steps_per_epoch
        self.workers = self.run.data.num_workers
        enc = self.run.moco.encoder_q
        self.params = parameter_counts(enc.backbone, enc.head)
        dtype = amp.amp_dtype(self.cfg.train.amp, self.device)
        self.precision = {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]

    def epoch(self, e: int) -> list[float]:
        """One whole epoch; returns each step's data wait (s)."""
        run, st = self.run, self.run.state
        st.epoch, st.step_in_epoch = e, 0
        run.data.sampler.set_epoch(e, 0)
        run.moco.train()
        waits, it = [], iter(run.data.train_loader)
        for _ in range(self.steps):
            tic = time.perf_counter()
            batch = Batch.from_loader(next(it)).to(run.device)
            waits.append(time.perf_counter() - tic)
            epoch_f = e + st.step_in_epoch / self.steps
            loop.set_lr(run, epoch_f)
            loss = (run.graph or loop.train_step)(run, batch, epoch_f)
            st.loss_sum += loss.detach()
            st.step_in_epoch += 1
            st.global_step += 1
        for _ in it:  # the loader's rest (none: drop_last), so its workers end the epoch
            pass
        return waits

    def fixed_step(self) -> Callable[[], None]:
        """One training step on one batch taken now (no loader): the step alone."""
        run = self.run
        batch = Batch.from_loader(next(iter(run.data.train_loader))).to(run.device)
        return lambda: loop.train_step(run, batch, float(run.state.epoch))

    def knn(self) -> float:
        net, d = self.run.moco.encoder_q.backbone, self.run.data
        bank, bank_y = monitor.extract(net, d.bank_loader, self.device)
        test, test_y = monitor.extract(net, d.test_loader, self.device)
        return top1(bank, bank_y, test, test_y, self.device, d.num_classes)

    def close(self) -> None:
        self.run.close()


class Lightly:
    def __init__(self, s: Sizes, root: Path, device: torch.device, seed: int, workers: int) -> None:
        from lightly.data import LightlyDataset

        torch.manual_seed(seed)
        self.device, self.s, self.workers = device, s, workers
        self.model = LightlyMoco(s).to(device)
        self.optim, self.sched = self.model.optimizer(s)
        train_t, test_t = lightly_transforms(s)
        loader = torch.utils.data.DataLoader
        self.train = loader(LightlyDataset(input_dir=str(root / "train"), transform=train_t),
                            batch_size=s.batch, shuffle=True, drop_last=True,
                            num_workers=workers)  # fmt: skip
        self.bank, self.test = (loader(LightlyDataset(input_dir=str(root / split),
                                                      transform=test_t),
                                       batch_size=s.batch, shuffle=False, num_workers=workers)
                                for split in ("train", "test"))  # fmt: skip
        self.steps = len(self.train)
        self.params = parameter_counts(self.model.backbone, self.model.projection_head)
        self.precision = s.precision

    def epoch(self, e: int) -> list[float]:
        self.model.train()
        waits, it = [], iter(self.train)
        for _ in range(self.steps):
            tic = time.perf_counter()
            (x0, x1), _, _ = next(it)
            x0, x1 = x0.to(self.device), x1.to(self.device)
            waits.append(time.perf_counter() - tic)
            loss = self.model.training_step(x0, x1)
            loss.backward()
            self.optim.step()
            self.optim.zero_grad()
        self.sched.step()
        return waits

    def fixed_step(self) -> Callable[[], None]:
        (x0, x1), _, _ = next(iter(self.train))
        x0, x1 = x0.to(self.device), x1.to(self.device)

        def step() -> None:
            self.model.training_step(x0, x1).backward()
            self.optim.step()
            self.optim.zero_grad()

        return step

    @torch.no_grad()
    def knn(self) -> float:
        self.model.eval()
        out = {}
        for name, loader in (("bank", self.bank), ("test", self.test)):
            feats, labels = [], []
            for x, y, _ in loader:
                feats.append(self.model.features(x.to(self.device)).float().cpu())
                labels.append(y)
            out[name] = (torch.cat(feats), torch.cat(labels))
        self.model.train()
        return top1(*out["bank"], *out["test"], self.device, 10)

    def close(self) -> None:
        pass


def block(run: Negmine | Lightly, e: int, batch: int) -> dict:
    """One epoch of ``run``, timed: images/s, data wait and compute per step, peak bytes."""
    sync = torch.cuda.synchronize if run.device.type == "cuda" else (lambda: None)
    with PeakMemory(run.device) as mem:
        sync()
        tic = time.perf_counter()
        waits = run.epoch(e)
        sync()
        wall = time.perf_counter() - tic
    n = len(waits)
    wait = sum(waits)
    return {"ips": n * batch / wall, "wait_ms": 1e3 * wait / n, "epoch": e,
            "compute_ms": 1e3 * (wall - wait) / n, "peak": mem.peak, "wall": wall}  # fmt: skip


def warm(bl: list[dict]) -> list[dict]:
    """The blocks after each run's first epoch (allocator, autotuning, decode), if any."""
    return [b for b in bl if b["epoch"] > 0] or bl


def medians(bl: list[dict]) -> dict[str, float]:
    """A run's medians over its blocks after the warm-up epoch (:func:`warm`; every block of a
    one-epoch run): images/s, data wait and compute ms per step, and the block's wall seconds."""
    timed = warm(bl)
    return {
        k: statistics.median(b[k] for b in timed) for k in ("ips", "wait_ms", "compute_ms", "wall")
    }


def order(names: list[str], r: int) -> list[str]:
    """The runs' order in round ``r``: as given in even rounds (lightly first), reversed in odd
    ones (lightly last), so that neither side always runs after the other (a warm cache, a
    loader's leftover work, the machine's drift)."""
    return list(names) if r % 2 == 0 else list(reversed(names))


def step_alone(runs: dict, rounds: int) -> dict[str, float]:
    """Each run's training step on one fixed batch (no loader, no data wait), timed round-robin
    after one warm-up step each: the median ms. The models train on (after their kNN)."""
    steps = {name: run.fixed_step() for name, run in runs.items()}
    dev = next(iter(runs.values())).device
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    times: dict[str, list[float]] = {name: [] for name in runs}
    for r in range(rounds + 1):
        names = list(steps)
        for name in names[r % len(names) :] + names[: r % len(names)]:
            sync()
            tic = time.perf_counter()
            steps[name]()
            sync()
            if r:
                times[name].append(time.perf_counter() - tic)
    return {name: 1e3 * statistics.median(ts) for name, ts in times.items()}


SAFETY = 1.3  # a round's estimate times this must fit what is left of the budget
MIN_EPOCHS = 4  # with --budget: at least a warm-up epoch and 3 timed ones


def make_run(name: str, s: Sizes, root: Path, out: Path, device: str, seed: int,
             workers: int) -> Negmine | Lightly:  # fmt: skip
    """One contestant, built as its benchmark builds it."""
    if name == "lightly":
        return Lightly(s, root, torch.device(device), seed, workers)
    return Negmine(name, s, root, out, seed, workers)


def train_images(root: Path) -> int:
    """The training images under ``root/train`` (a file each)."""
    return sum(1 for f in (root / "train").rglob("*") if f.is_file())


def sized(n: int, left: float, setup_s: float, round_s: float, batch: int, classes: int,
          epochs: int = MIN_EPOCHS) -> int:  # fmt: skip
    """The training images (a whole number per class) whose runs can be built again and trained
    ``epochs`` rounds in ``left`` seconds, a round at ``n`` images having taken ``round_s`` and
    the runs' building ``setup_s`` (both upper bounds at fewer images), the rounds' time taken as
    proportional to the images, times SAFETY; at least one batch (one step), at most ``n``."""
    fit = n * (left - setup_s) / (epochs * SAFETY * max(round_s, 1e-9))
    per = max(int(fit) // classes, -(-batch // classes))
    return min(per * classes, n)


def contest(
    names: list[str],
    s: Sizes,
    root: Path,
    work: Path,
    device: str,
    seeds: int,
    epochs: int,
    budget: float,
    workers: int,
    alone_rounds: int = 5,
    shrink: Callable[[int], Path] | None = None,
    make: Callable[..., Negmine | Lightly] = make_run,
) -> dict:
    """Every run in ``names`` for ``epochs`` whole epochs (0: as many as fit in ``budget``
    seconds, at least MIN_EPOCHS: a warm-up and 3 timed), interleaved epoch by epoch in rounds
    (one block of each run; the order reversed every other round, :func:`order`), for each seed;
    then each one's kNN.

    With ``budget`` (``epochs`` 0) the first seed checks after its first timed round that the
    timed rounds still to come fit the seed's share: where they do not, ``shrink(n)`` (the root
    of the first ``n`` training images, the same held-out set) gives fewer images, sized by
    :func:`sized`, the runs are built again on them and start over with their own warm-up epoch;
    the blocks at the first size are dropped. ``meta["images"]`` is the images trained on,
    ``meta["sized_from"]`` the count asked for when it was sized down (else absent)."""
    workers = cores.loader_workers(workers)
    blocks: dict[str, list[dict]] = {n: [] for n in names}
    knns: dict[str, list[float]] = {n: [] for n in names}
    meta: dict = {"precision": {}, "params": {}, "workers": workers}
    meta["images"] = train_images(root)
    rounds = 0  # over the seeds: the order alternates from round to round
    share = budget / seeds

    def build(at: Path, seed: int) -> dict:
        runs = {name: make(name, s, at, work / f"{name}_{seed}", device, seed, workers)
                for name in names}  # fmt: skip
        for name, run in runs.items():
            meta["precision"][name] = run.precision
            meta["params"][name.split("_")[0]] = run.params
        return runs

    for seed in range(seeds):
        start = time.monotonic()
        may_size = not epochs and shrink is not None and seed == 0
        runs = build(root, seed)
        setup_s = time.monotonic() - start
        precisions = {r.precision for r in runs.values()}
        if precisions != {s.precision}:  # a pair at two precisions is no comparison
            raise RuntimeError(f"the runs' precisions differ from --precision {s.precision}: "
                               f"{meta['precision']}")  # fmt: skip
        steps = {r.steps for r in runs.values()}
        if len(steps) != 1:
            raise RuntimeError(f"steps per epoch differ between the runs: {steps}")
        meta["steps"], e, round_s = steps.pop(), 0, 0.0
        meta["negmine_arch"] = ARCHS[s.arch]
        while True:
            if epochs and e >= epochs:
                break
            spent = time.monotonic() - start
            if not epochs and e >= MIN_EPOCHS and spent + SAFETY * round_s > share:
                break  # the next round (and the kNN) would not fit in this seed's share
            if may_size and e == 2 and spent + (MIN_EPOCHS - e) * SAFETY * round_s > share:
                n = meta["images"]
                fewer = sized(n, share - spent, setup_s, round_s, s.batch, classes(root))
                if fewer < n:
                    print(f"peers: {s.precision} pair: {MIN_EPOCHS - 1} timed epochs at {n} "
                          f"images do not fit the {share:.0f} s share ({round_s:.1f} s a round, "
                          f"{share - spent:.0f} s left): the runs built again on {fewer} "
                          "images, each with its own warm-up epoch", flush=True)  # fmt: skip
                    for run in runs.values():
                        run.close()
                    root = shrink(fewer)
                    meta["sized_from"], meta["images"] = n, train_images(root)
                    runs = build(root, seed)
                    meta["steps"] = {r.steps for r in runs.values()}.pop()
                    blocks = {name: [] for name in names}
                    e = 0
                may_size = False
            tic = time.monotonic()
            for name in order(list(runs), rounds):
                run = runs[name]
                blocks[name].append(block(run, e, s.batch))
                b = blocks[name][-1]
                print(f"peers: seed {seed} epoch {e + 1} {name}: {b['ips']:.0f} images/s, "
                      f"wait {b['wait_ms']:.1f} ms, compute {b['compute_ms']:.1f} ms per step",
                      flush=True)  # fmt: skip
            round_s, e, rounds = time.monotonic() - tic, e + 1, rounds + 1
        epochs = epochs or e  # every later seed runs as many
        meta["epochs"], meta["rounds"] = e, rounds
        for name, run in runs.items():
            knns[name].append(run.knn())
            print(f"peers: seed {seed} {name}: kNN top-1 {knns[name][-1]:.2f}", flush=True)
        if seed == 0:
            meta["step_alone_ms"] = step_alone(runs, alone_rounds)
            print(f"peers: the step alone, ms: {meta['step_alone_ms']}", flush=True)
        for run in runs.values():
            run.close()
    meta["block_s"] = {n: medians(bl)["wall"] for n, bl in blocks.items()}
    return {"blocks": blocks, "knn": knns, "meta": meta}


def classes(root: Path) -> int:
    """The class folders under ``root/train``."""
    return sum(1 for p in (root / "train").iterdir() if p.is_dir())
