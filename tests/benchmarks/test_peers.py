"""benchmarks/peers.py sets lightly's benchmark MoCo and negmine's cifar10_moco side by side at the
same settings (the same parameters in backbone and head, queue, temperature, momentum, BN splits,
learning rate, a symmetric loss on both), and its --quick mode (CI) prints the whole table.
Without lightly (``pip install -e ".[bench]"``), the model tests skip with that reason and the
quick run checks the moco part's skip note and the OC-SVM table."""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from negmine_core.step import Batch
from pretrain import config
from pretrain.model import encoders
from pretrain.model.split_bn import SplitBatchNorm
from tests.helpers.ddp import clean_env
from tests.helpers.paths import ROOT

sys.path.insert(0, str(ROOT))  # benchmarks/ is a folder of scripts beside the packages
from benchmarks import peers, peers_run  # noqa: E402
from benchmarks.peers_models import (  # noqa: E402
    ARCHS,
    LOSS_SCALE,
    LightlyMoco,
    Sizes,
    negmine_overrides,
    parameter_counts,
)
from tests.helpers.troubleshooting_quotes import assert_documented  # noqa: E402

try:
    import lightly  # noqa: F401

    HAS_LIGHTLY = True
except ImportError:
    HAS_LIGHTLY = False
needs_lightly = pytest.mark.skipif(
    not HAS_LIGHTLY, reason='lightly is not installed (pip install -e ".[bench]")'
)
HEADING = "`benchmarks/host_overhead.py`, `peers.py` and `train.py`"  # docs/troubleshooting.md
SIZES = {
    "resnet-18, the benchmark's": Sizes(),
    "resnet-9 width 0.125, --quick's": Sizes(arch="resnet-9", width=0.125, batch=32, queue=64),
}


def negmine_model(s: Sizes) -> tuple[config.Config, encoders.MoCo]:
    cfg = config.load("cifar10_moco.yaml", negmine_overrides(s, "unused"))
    m = cfg.model
    return cfg, encoders.build(arch=m.arch, width=m.width, cifar_stem=m.cifar_stem, dim=m.dim,
                               mlp=m.mlp, bn_splits=m.bn_splits, momentum=cfg.moco.momentum,
                               symmetric=cfg.loss.symmetric,
                               symmetric_keys=cfg.moco.symmetric_keys)  # fmt: skip


def count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@needs_lightly
@pytest.mark.parametrize("s", SIZES.values(), ids=SIZES.keys())
def test_both_models_have_the_matched_settings(s):
    from lightly.models.batchnorm import SplitBatchNorm as LightlySplit

    lightly = LightlyMoco(s)
    cfg, moco = negmine_model(s)
    enc = moco.encoder_q
    # the same parameters, counted here (not by the benchmark's helper) and by the helper
    assert count(lightly.backbone) == count(enc.backbone) > 0
    assert count(lightly.projection_head) == count(enc.head) > 0
    assert parameter_counts(lightly.backbone, lightly.projection_head) == (
        count(enc.backbone), count(enc.head))  # fmt: skip
    convs = [tuple(c.weight.shape) for c in lightly.backbone.modules()
             if isinstance(c, torch.nn.Conv2d)]  # fmt: skip
    assert convs == [tuple(c.weight.shape) for c in enc.backbone.modules()
                     if isinstance(c, torch.nn.Conv2d)]  # fmt: skip
    assert cfg.model.arch == ARCHS[s.arch] and cfg.model.cifar_stem and cfg.model.mlp
    # queue, temperature, momentum, output dimension
    assert lightly.criterion.memory_bank.size == (cfg.moco.queue_size, cfg.model.dim)
    assert cfg.moco.queue_size == s.queue
    assert lightly.criterion.temperature == cfg.moco.temperature == s.temperature
    assert lightly.momentum == cfg.moco.momentum == s.momentum
    # split BN with the same number of splits in every norm layer of both backbones
    ours = [m for m in enc.backbone.modules() if isinstance(m, SplitBatchNorm)]
    theirs = [m for m in lightly.backbone.modules() if isinstance(m, LightlySplit)]
    assert len(ours) == len(theirs) > 0
    assert {m.num_splits for m in theirs} == {cfg.model.bn_splits} == {s.splits}
    assert {m.num_splits for m in ours} == {s.splits}
    # the learning rate: lightly 0.06 x batch / 128, weight decay 5e-4; negmine's summed loss
    # (twice lightly's mean) at half the lr and twice the decay: the same updates (test below)
    optim, _ = lightly.optimizer(s)
    group = optim.param_groups[0]
    assert group["lr"] == pytest.approx(0.06 * s.batch / 128)
    assert config.derived(cfg, 50000).lr == pytest.approx(group["lr"] / 2)
    assert (group["momentum"], group["weight_decay"]) == (cfg.train.sgd_momentum,
                                                          cfg.train.weight_decay / 2)  # fmt: skip
    assert cfg.train.batch_size == s.batch


@needs_lightly
def test_both_losses_are_the_two_key_layout():
    """lightly's step calls its loss twice, (q(x0), k(x1)) then (q(x1), k(x0)); negmine's config
    is the same two-key layout (moco.symmetric_keys): view 2's queries and view 1's keys too."""
    s = SIZES["resnet-9 width 0.125, --quick's"]
    torch.manual_seed(0)
    lightly = LightlyMoco(s)
    calls = []
    lightly.criterion.register_forward_hook(lambda m, args, out: calls.append(args))
    x0, x1 = torch.randn(2, s.batch, 3, 32, 32).unbind(0)
    lightly.training_step(x0, x1)
    assert len(calls) == 2
    (q_a, k_a), (q_b, k_b) = calls
    with torch.no_grad():  # each call's query is the query encoder's output of the other view
        lightly.eval()
        assert not torch.allclose(q_a, q_b)
        assert q_a.requires_grad and q_b.requires_grad
        assert not k_a.requires_grad and not k_b.requires_grad
    cfg, moco = negmine_model(s)
    assert cfg.moco.symmetric_keys and cfg.loss.name == "infonce" and not cfg.loss.symmetric
    assert moco.symmetric_keys and moco.momentum == cfg.moco.momentum  # set at construction
    e = moco.embed(Batch.make(x0, x1, torch.zeros(len(x0), dtype=torch.long)))
    assert e.q2 is not None and e.q2.shape == e.q.shape and e.q2.requires_grad
    assert e.k1 is not None and e.k1.shape == e.k.shape and not e.k1.requires_grad


def unit(n: int, d: int, g: torch.Generator) -> torch.Tensor:
    return torch.nn.functional.normalize(torch.randn(n, d, generator=g, dtype=torch.float64), dim=1)


@needs_lightly
def test_negmines_loss_is_twice_lightlys_on_the_same_inputs():
    """On the same embeddings and bank, negmine's two-key loss (infonce with k1) is the sum of
    lightly's NTXentLoss over the two directions: twice lightly's step loss, 0.5 (l1 + l2), where
    each of lightly's terms sees the same bank (lightly's own second call sees the first's
    enqueue: UNMATCHED)."""
    from lightly.loss import NTXentLoss

    from negmine_core.step import Step
    from pretrain import losses

    g = torch.Generator().manual_seed(0)
    n, d, k = 8, 16, 32
    q1, q2, k1, k2, queue = (unit(m, d, g) for m in (n, n, n, n, k))
    ours = losses.create("infonce", temperature=0.1)(Step.single(q1, k2, queue=queue, q2=q2, k1=k1))
    theirs = NTXentLoss(temperature=0.1, memory_bank_size=(k, d)).double()

    def term(q: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        theirs.memory_bank.bank.copy_(queue)  # (K, D), read as (D, K) by the loss
        return theirs(q, key)

    lightly_step = 0.5 * (term(q1, k2) + term(q2, k1))
    torch.testing.assert_close(ours, LOSS_SCALE * lightly_step, rtol=1e-12, atol=1e-12)


def test_half_the_lr_and_twice_the_weight_decay_make_lightlys_updates():
    """negmine's lr and weight decay (benchmarks/peers_models.py) on its summed loss give the
    SGD updates (momentum 0.9) of lightly's on the mean of the same two terms."""
    s = Sizes(batch=64)
    cfg = config.load("cifar10_moco.yaml", negmine_overrides(s, "unused"))
    lr = cfg.train.base_lr * s.batch / cfg.train.lr_base_batch
    g = torch.Generator().manual_seed(0)
    start = torch.randn(5, generator=g, dtype=torch.float64)
    a, b = (torch.randn(5, generator=g, dtype=torch.float64) for _ in range(2))
    params = {}
    settings = {"lightly": (s.lr, 5e-4, 0.5), "negmine": (lr, cfg.train.weight_decay, 1.0)}
    for name, (step_lr, wd, scale) in settings.items():
        w = torch.nn.Parameter(start.clone())
        opt = torch.optim.SGD([w], lr=step_lr, momentum=cfg.train.sgd_momentum, weight_decay=wd)
        for _ in range(4):
            loss = scale * (((w - a) ** 2).sum() + (w * b).sin().sum())  # two terms
            opt.zero_grad()
            loss.backward()
            opt.step()
        params[name] = w.detach()
    assert params["negmine"].sub(start).abs().min() > 0  # it moved
    torch.testing.assert_close(params["negmine"], params["lightly"], rtol=1e-12, atol=1e-14)


def test_each_round_reverses_the_order_of_the_last():
    names = ["lightly", "negmine", "negmine_resident"]
    assert [peers_run.order(names, r)[0] for r in range(4)] == ["lightly", "negmine_resident"] * 2
    assert peers_run.order(names, 1) == names[::-1] and peers_run.order(names, 2) == names


def test_defaults_are_matched_pairs_over_timed_epochs_and_seeds(capsys):
    """Without --quick: 4 epochs (a warm-up, 3 timed), 3 seeds on a CPU; fp32 pairs on a CPU,
    fp32 and bf16 pairs on CUDA; --quick: one epoch, one seed, the fp32 pair."""
    cpu = peers.options(["--device", "cpu"])
    assert (cpu.epochs, cpu.seeds, cpu.precision) == (4, 3, ["fp32"])
    cuda = peers.options(["--device", "cuda"])
    assert (cuda.epochs, cuda.seeds, cuda.precision) == (4, 1, ["fp32", "bf16"])
    quick = peers.options(["--device", "cpu", "--quick"])
    assert (quick.epochs, quick.seeds, quick.precision) == (1, 1, ["fp32"])
    assert peers.options(["--device", "cuda", "--budget", "50"]).epochs == 0  # as many as fit
    for bad in (["--precision", "fp16"], ["--precision", "fp32,fp32"], ["--seeds", "0"],
                ["--epochs", "0"]):  # fmt: skip
        with pytest.raises(SystemExit) as exit_:
            peers.options(["--device", "cpu", *bad])
        assert exit_.value.code == 2, bad
        message = capsys.readouterr().err.strip().splitlines()[-1]
        assert_documented(message.split(": error: ", 1)[1], HEADING)


def test_a_resnet18_with_a_width_multiplier_is_refused():
    with pytest.raises(ValueError, match="no width multiplier"):
        negmine_overrides(Sizes(width=0.5), "unused")


def test_the_ratio_leaves_out_each_runs_first_epoch():
    blocks = {"lightly": [{"ips": 10.0, "epoch": 0}, {"ips": 10.0, "epoch": 1},
                          {"ips": 20.0, "epoch": 0}, {"ips": 20.0, "epoch": 1}],
              "negmine": [{"ips": 50.0, "epoch": 0}, {"ips": 15.0, "epoch": 1},
                          {"ips": 90.0, "epoch": 0}, {"ips": 40.0, "epoch": 1}]}  # fmt: skip
    assert peers.ratio_line(blocks, "negmine", "lightly") == "1.75x [1.50, 2.00] over 2 blocks"
    one = {k: v[:1] for k, v in blocks.items()}  # one epoch: the only block counts
    assert peers.ratio_line(one, "negmine", "lightly") == "5.00x [5.00, 5.00] over 1 blocks"


def test_the_medians_leave_out_each_runs_first_epoch():
    """The table's images/s, data wait and compute, and the block seconds in ``meta``, are medians
    over the blocks after each seed's warm-up epoch (epoch 0 of every seed; its slow first block
    would pull them), every block of a one-epoch run; re-derived with ``statistics``."""
    keys = ("ips", "wait_ms", "compute_ms", "wall")
    values = {0: (5.0, 90.0, 400.0, 60.0), 1: (40.0, 2.0, 20.0, 8.0), 2: (50.0, 3.0, 25.0, 6.0),
              3: (45.0, 4.0, 30.0, 7.0)}  # fmt: skip
    blocks = [dict(zip(keys, values[e]), epoch=e) for e in (0, 1, 2, 3)] * 2  # two seeds
    got = peers_run.medians(blocks)
    for i, k in enumerate(keys):
        assert got[k] == statistics.median(values[e][i] for e in (1, 2, 3)), k
    assert got["ips"] == 45.0 and got["wall"] == 7.0  # with epoch 0: 42.5 and 7.5
    assert peers_run.medians(blocks[:1]) == dict(zip(keys, values[0]))  # one epoch: it counts


def test_the_knn_verdict_uses_the_seeds_spread():
    out = peers.knn_verdict({"lightly": [30.0, 34.0], "negmine": [31.0, 32.0]},
                            ["lightly", "negmine"])  # fmt: skip
    assert out == [
        "- kNN negmine - lightly: -0.50 points, within the seeds' spread (4.00 "
        "points); the seeds' ranges [31.00, 32.00] and [30.00, 34.00] overlap"
    ]
    out = peers.knn_verdict({"lightly": [30.0, 31.0], "negmine": [40.0, 40.5]},
                            ["lightly", "negmine"])  # fmt: skip
    assert "OUTSIDE the seeds' spread (1.00 points)" in out[0]
    assert out[0].endswith("do not overlap: above in every seed")
    out = peers.knn_verdict({"lightly": [28.3, 28.1, 28.6], "negmine": [26.5, 26.3, 22.9]},
                            ["lightly", "negmine"])  # fmt: skip
    assert "-3.10 points, within the seeds' spread (3.60 points)" in out[0]  # the spread rule
    assert out[0].endswith("do not overlap: below in every seed")  # but never as high
    out = peers.knn_verdict({"lightly": [30.0], "negmine": [31.0]}, ["lightly", "negmine"])
    assert "one seed: no spread" in out[0]


def test_the_subset_takes_the_same_images_of_every_class(tmp_path):
    src = tmp_path / "src"
    for c in ("a", "b"):
        for i in range(5):
            (src / "train" / c).mkdir(parents=True, exist_ok=True)
            (src / "train" / c / f"{i}.jpg").write_bytes(bytes([i]))
    assert peers.subset(src, tmp_path / "dst", "train", 6) == 6
    got = sorted(p.relative_to(tmp_path / "dst").as_posix()
                 for p in (tmp_path / "dst").rglob("*.jpg"))  # fmt: skip
    assert got == [f"train/{c}/{i}.jpg" for c in "ab" for i in range(3)]


def quick_run(tmp_path, *args: str) -> str:
    """benchmarks/peers.py --quick on the CPU with ``args``; its results file's text."""
    results = tmp_path / "results.md"
    cmd = [sys.executable, "benchmarks/peers.py", "--quick", "--device", "cpu",
           "--results", str(results), *args]  # fmt: skip
    env = clean_env(CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    return results.read_text()


def check_moco_rows(text: str, precision: str) -> None:
    """Both runs' rows at ``precision`` (one precision per pair, named in the header line), each
    marked matched (``yes``) in its own column, and the two-key layout named as matched."""
    assert f"precision {precision} on both sides (matched)" in text, text
    assert "Matched (benchmarks/peers_models.py MATCHED):" in text
    assert "- loss layout: the two-key symmetric loss on both" in text
    for run in ("lightly", "negmine"):
        row = re.search(rf"^\| {run} \| {precision} \| yes \| (\d+) \| ([\d.]+) \| ([\d.]+) \| "
                        r"(\d+) \| ([\d.]+) \| ([\d.]+)x.*? \| ([\d.]+) \| ([\d.]+)x \|$", text,
                        flags=re.M)  # fmt: skip
        assert row, (run, text)
        ips, wait, compute, _, knn, ratio, alone, alone_ratio = map(float, row.groups())
        assert ips > 0 and wait >= 0 and compute > 0 and 0 <= knn <= 100 and ratio > 0
        assert alone > 0 and alone_ratio > 0


def test_quick_run_prints_the_table(tmp_path):
    """The CI run: both models a whole epoch on random JPEGs, interleaved, their kNN, the ratio,
    both in fp32 (given explicitly: on a CPU with bf16, negmine's train.amp=auto would pick bf16
    and pair it with an fp32 lightly); the OC-SVM at n = 256 beside scikit-learn, agreeing with
    it; the results file written."""
    text = quick_run(tmp_path, "--precision", "fp32")
    assert "## Compared with lightly (MoCo v2, CIFAR-10) and OC-SVM peers" in text
    assert "command: python benchmarks/peers.py --quick" in text and "commit " in text
    if HAS_LIGHTLY:
        check_moco_rows(text, "fp32")
        same = re.search(r"parameters \(backbone, head\): lightly (\(\d+, \d+\)), negmine "
                         r"(\(\d+, \d+\))", text)  # fmt: skip
        assert same and same.group(1) == same.group(2), text
        assert "- kNN negmine - lightly: " in text and "Not matched" in text
    else:
        assert "moco part skipped: lightly is not installed" in text
    rows = re.findall(r"^\| 256 \| (.+?) \| (\d+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|", text,
                      flags=re.M)  # fmt: skip
    names = [r[0] for r in rows]
    assert names[:2] == ["scikit-learn", "torch (cpu)"], text
    for _, n_sv, fit, score, agree in rows:
        assert int(n_sv) > 0 and float(fit) > 0 and float(score) > 0
        assert float(agree) >= 99.0  # the same decisions as scikit-learn on held-out points


@pytest.mark.skipif(not HAS_LIGHTLY, reason="lightly is not installed (pip install -e '.[bench]')")
def test_quick_run_bf16_pairs_bf16_on_both_sides(tmp_path):
    """The other path, forced: bf16 on both sides whatever the CPU has (emulated where it lacks
    bf16), never a bf16 negmine beside an fp32 lightly."""
    check_moco_rows(quick_run(tmp_path, "--precision", "bf16", "--parts", "moco"), "bf16")


def test_sizes_name_one_precision_for_both_sides():
    """negmine's train.amp is set from the pair's precision, never left at auto."""
    from benchmarks.peers_models import PRECISIONS, Sizes, negmine_overrides

    for precision, (amp, _) in PRECISIONS.items():
        over = negmine_overrides(Sizes(precision=precision), "ROOT")
        assert [o for o in over if o.startswith("train.amp=")] == [f"train.amp={amp}"]


class Clock:
    """A fake ``time`` for peers_run: the fake runs below advance it by what they would take."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t


NAMES = ["lightly", "negmine", "negmine_resident"]
PER_IMAGE = {"lightly": 1e-3, "negmine": 5e-4, "negmine_resident": 1e-4}  # s per image, a block
WARM = {"lightly": 10.0, "negmine": 2.0, "negmine_resident": 0.0}  # its first epoch: s more
SETUP_S = 1.0  # building one run


class FakeRun:
    """A contestant whose epoch takes PER_IMAGE seconds per image, its first one in the process
    WARM more (autotuning: process-wide, so a run built again does not pay it twice)."""

    warmed: set[str] = set()

    def __init__(self, name, s, root, out, device, seed, workers, clock, log):  # noqa: ANN001
        self.name, self.clock, self.log = name, clock, log
        self.device, self.precision, self.params = torch.device("cpu"), s.precision, (1, 1)
        self.n = peers_run.train_images(root)
        self.steps = self.n // s.batch
        self.closed = False
        clock.t += SETUP_S

    def epoch(self, e: int) -> list[float]:
        self.log.append((self.name, self.n, e))
        self.clock.t += self.n * PER_IMAGE[self.name]
        if self.name not in self.warmed:
            self.warmed.add(self.name)
            self.clock.t += WARM[self.name]
        return [0.0] * self.steps

    def knn(self) -> float:
        return 50.0

    def fixed_step(self):  # noqa: ANN201
        return lambda: None

    def close(self) -> None:
        self.closed = True


def fake_contest(tmp_path, monkeypatch, budget: float) -> tuple[dict, list, list, Clock]:
    """peers_run.contest with the fake runs on 2,000 empty files in 10 classes, batch 100."""
    for c in range(10):
        for i in range(200):
            f = tmp_path / "data" / "train" / f"c{c}" / f"{i:03d}.jpg"
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_bytes(b"")
        (tmp_path / "data" / "test" / f"c{c}").mkdir(parents=True)
        (tmp_path / "data" / "test" / f"c{c}" / "0.jpg").write_bytes(b"")
    clock, log, built = Clock(), [], []
    monkeypatch.setattr(peers_run, "time", type("T", (), {"monotonic": clock.now,
                                                          "perf_counter": clock.now}))  # fmt: skip
    monkeypatch.setattr(FakeRun, "warmed", set())

    def make(*args):  # noqa: ANN002, ANN202
        built.append(FakeRun(*args, clock=clock, log=log))
        return built[-1]

    def shrink(n: int) -> Path:
        return peers.shrunk(tmp_path / "data", tmp_path / f"data_{n}", n)

    s = Sizes(arch="resnet-9", width=0.125, batch=100, queue=64)
    res = peers_run.contest(NAMES, s, tmp_path / "data", tmp_path / "work", "cpu", 1, 0, budget,
                            0, 1, shrink=shrink, make=make)  # fmt: skip
    return res, log, built, clock


def check_structure(res: dict, log: list, images: int) -> None:
    """At least a warm-up and 3 timed epochs per run, on ``images`` images, the runs in the
    order of :func:`peers_run.order` round by round, the figures without the warm-up epoch."""
    meta, blocks = res["meta"], res["blocks"]
    assert meta["epochs"] >= 4 and meta["images"] == images
    final = [entry for entry in log if entry[1] == images]
    assert len(final) == 3 * meta["epochs"]
    first_round = meta["rounds"] - meta["epochs"]
    for r in range(meta["epochs"]):
        rnd = final[3 * r : 3 * r + 3]
        assert [name for name, *_ in rnd] == peers_run.order(NAMES, first_round + r)
        assert {e for *_, e in rnd} == {r}
    for name in NAMES:
        assert [b["epoch"] for b in blocks[name]] == list(range(meta["epochs"]))
        steady = images // 100 * 100 / (images * PER_IMAGE[name])  # images/s of a timed epoch
        assert peers_run.medians(blocks[name])["ips"] == pytest.approx(steady)


def test_a_budget_runs_a_warm_up_and_at_least_3_timed_epochs(tmp_path, monkeypatch):
    """40 s: the 2,000 images fit (3 s of setup, a 15.2 s warm-up round, 3.2 s rounds): as many
    whole rounds as fit, the order alternating, the warm-up left out of the figures."""
    res, log, _, clock = fake_contest(tmp_path, monkeypatch, 40.0)
    check_structure(res, log, 2000)
    assert "sized_from" not in res["meta"] and res["meta"]["epochs"] == 7
    assert clock.t <= 40.0


def test_a_short_budget_sizes_the_images_down_instead_of_running_past_it(tmp_path, monkeypatch,
                                                                         capsys):  # fmt: skip
    """26 s: after the warm-up and one timed round (21.4 s spent) two more rounds at 2,000 images
    (2 x 1.3 x 3.2 s) do not fit; the runs are built again on the images that do, by
    peers_run.sized's rule (re-derived here), each with its own warm-up epoch, within the share;
    the table's data line says what ran."""
    res, log, built, clock = fake_contest(tmp_path, monkeypatch, 26.0)
    left, setup, round_s = 26.0 - 21.4, 3 * SETUP_S, 2000 * sum(PER_IMAGE.values())
    fewer = int(2000 * (left - setup) / (4 * 1.3 * round_s)) // 10 * 10
    assert 100 <= fewer < 2000
    check_structure(res, log, fewer)
    assert res["meta"]["sized_from"] == 2000 and clock.t <= 26.0
    assert all(run.closed for run in built) and len(built) == 6  # the first three closed first
    out = capsys.readouterr().out
    assert "3 timed epochs at 2000 images do not fit the 26 s share" in out
    assert f"built again on {fewer} images" in out
    assert peers.ran(res["meta"], 26.0) == (f"{fewer} training images (sized down from 2000: a "
                                            "warm-up and 3 timed epochs at those did not fit "
                                            "the pair's 26 s)")  # fmt: skip


def test_the_pairs_share_the_budget_left():
    """The second pair gets what the first (its kNN too) left; no budget, no share."""
    assert peers.pair_share(60.0, 0.0, 2) == 30.0
    assert peers.pair_share(60.0, 35.0, 1) == 25.0
    assert peers.pair_share(60.0, 70.0, 1) == 0.0 and peers.pair_share(0.0, 5.0, 2) == 0.0
