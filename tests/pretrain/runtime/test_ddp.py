"""Two (and three) gloo ranks equal one process with split BatchNorm; rank agreement; launcher
variables.

The equivalence test runs ``tests/helpers/ddp_worker.py`` (the engine's own ``setup`` and
``train_step``) once as one process with a global batch of 16 and ``model.bn_splits=2`` (two splits
of 8) and once under ``torchrun --nproc_per_node 2`` (gloo) with plain BatchNorm on each rank's 8
images, and compares loss, all-reduced gradients, queue and pointer after each of 3 steps. Every
variant runs in the same two launches (``ddp_worker.py --plan``: one process, then one torchrun),
one after the other, each from its own ``setup``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from torch.utils.data import Dataset
from torchvision import tv_tensors

from pretrain.data import loaders
from pretrain.data.augment_params import ViewSpec
from pretrain.runtime import dist
from tests.helpers.ddp import clean_env, free_port, run_worker
from tests.helpers.paths import HELPERS, ROOT

pytestmark = pytest.mark.early  # among the suite's longest files: started first (tests/conftest.py)

WORKER = HELPERS / "ddp_worker.py"
TINY = [
    "model.width=8",
    "train.batch_size=16",
    "moco.queue_size=32",
    "train.deterministic=true",
    "data.num_workers=0",
    "train.progress_bar=false",
]
TOL = 1e-5  # the acceptance bound on every compared value, but for a strategy's own state:
# AdCo's bank takes gradient-ascent steps of mem_lr / mem_t = 3 / 0.02 = 150x its gradient, so
# float32's reduction-order error (DDP's all-reduce sums in another order) reaches 1.2e-5 there at
# step 2 on a 2-core Xeon without AVX-512 (within 1e-5 on the AVX-512 Xeon)
TOL_STRATEGY = 5e-5


# InfoNCE; and a labelled loss in MoCo's layout (each rank's queries against the gathered
# keys, own key at rank * n + i) with a kappa head (its BN split like the backbone's)
# and the papers' symmetric layout (both views through the query encoder, all ranks' views as
# candidates with the gradient routed back) and CIDER (prototypes from every rank's views)
VARIANTS = {
    "infonce": [],
    # the MoCo CIFAR-10 demo's symmetric loss: two query forwards (BatchNorm per view), two
    # shuffled key forwards, both views' keys enqueued as [every rank's view 1; view 2]
    "symmetric_keys": ["moco.symmetric_keys=true", "moco.queue_size=64"],
    "supcon_kappa": ["loss.name=supcon", "kappa.hidden=16"],
    "symmetric_sincere": ["loss.name=sincere", "loss.symmetric=true", "kappa.hidden=16"],
    "cider": ["loss.name=cider"],
    # the negative re-weighting baselines: hard (the debiased estimator + importance weights,
    # per row) and decoupled with DCLW's weights over the global batch: constants (lightly's,
    # the default) and differentiated through (the positives gathered with their gradient)
    "hard": ["loss.name=hard", "loss.kwargs={tau_plus: 0.1, beta: 1.0}"],
    "decoupled_sigma": ["loss.name=decoupled", "loss.kwargs={sigma: 0.5}"],
    "decoupled_sigma_grad": ["loss.name=decoupled", "loss.kwargs={sigma: 0.5, weight_grad: true}"],
    # ring: per-query bands of the queue; i-Mix: lambda and partners drawn for the global batch,
    # partners inside each BN group (a rank under DDP); AdCo: the bank's gradient from the
    # gathered queries, the same bank on every rank; 40 columns: filled over 3 steps, the last
    # partly (at 24 the digits' constant background sits on a ReLU edge of conv1 at step 3 and
    # float32 rounding flips it, in one process as in two: a property of those weights)
    "ring": ["loss.name=ring", "loss.kwargs={thres_outer: 0.5, thres_inner: 0.2}"],
    "imix": ["loss.name=imix"],
    # FNC: support crops (stage 2, sample-major so each rank / BN split holds whole samples)
    # through the key encoder with the key shuffle; false negatives found per query in the queue
    "fnc": [
        "loss.name=fnc",
        "data.support_views=2",
        "loss.kwargs={fn_threshold: 0.0}",
        "data.jitter_strength=0.4",
        "data.grayscale_prob=0.2",
        "data.blur_prob=0.5",
        "data.hflip_prob=0.5",
    ],  # fmt: skip
    "adco": [
        "negatives.name=adco",
        "negatives.kwargs={bank_size: 40}",
        "loss.name=nt_xent",
        "loss.contrast_queue=false",
    ],  # fmt: skip
    # data.resident=device: the split on the device, each rank's half of every global batch
    # gathered there, view parameters from the same per-epoch uniforms on every rank
    "resident": [
        "data.resident=device",
        "data.jitter_strength=0.4",
        "data.grayscale_prob=0.2",
        "data.blur_prob=0.5",
        "data.hflip_prob=0.5",
    ],
    # the input pipeline: stage 2 with every photometric op on (default augment_on: device) is
    # the "fnc" variant above (its support crops go through it too); the per-sample reference:
    "photometric_workers": [
        "data.augment_on=workers",
        "data.jitter_strength=0.4",
        "data.grayscale_prob=0.2",
        "data.blur_prob=0.5",
        "data.hflip_prob=0.5",
    ],
}


@pytest.fixture(scope="module")
def all_runs(tmp_path_factory) -> dict[str, tuple[dict, list[dict]]]:
    """Every variant at 2 ranks: one process of all, then one torchrun of all (``--plan``)."""
    return plan_runs(tmp_path_factory, 2, {k: [*TINY, *v] for k, v in VARIANTS.items()})


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def runs(request, all_runs) -> tuple[dict, list[dict]]:
    """(one process with 2 BN splits, [rank 0, rank 1] of the torchrun run)."""
    return variant(all_runs, request.param)


# 3 ranks differ from 2 (an odd split of the global batch, a rank with neither end of it): the
# methods whose cross-rank logic is their own, with 8 images per rank as above. The worker swaps
# ReLU for SiLU (tests/helpers/ddp_worker.py: a ReLU mask on the digits' constant background flipped
# under one-ulp kernel differences, for FNC at seed 0 here and i-Mix at 2 ranks on an AVX-512 Xeon).
THREE_RANKS = {"adco": [], "fnc": [], "imix": []}
TINY3 = [*TINY, "train.batch_size=24", "moco.queue_size=48"]


@pytest.fixture(scope="module")
def all_runs3(tmp_path_factory) -> dict[str, tuple[dict, list[dict]]]:
    """The variants of THREE_RANKS: one process of all, then one 3-rank torchrun of all."""
    plans = {k: [*TINY3, *VARIANTS[k], *v] for k, v in THREE_RANKS.items()}
    return plan_runs(tmp_path_factory, 3, plans)


@pytest.fixture(scope="module", params=sorted(THREE_RANKS))
def runs3(request, all_runs3) -> tuple[dict, list[dict]]:
    """(one process with 3 BN splits, [rank 0, 1, 2] of a 3-rank torchrun run)."""
    return variant(all_runs3, request.param)


def plan_runs(factory, world: int, plans: dict[str, list[str]]) -> dict:
    """``{name: (one process's record, [each rank's record])}`` or ``{name: error text}``: every
    plan as one process with ``world`` BN splits, then all under one torchrun of ``world`` ranks.
    One launch of each kind for all plans: a launch and its imports cost ~10x a run's 3 steps."""
    single, ddp = factory.mktemp("single"), factory.mktemp("ddp")
    for folder, bn_splits in ((single, world), (ddp, 1)):
        split = {k: [*v, f"model.bn_splits={bn_splits}"] for k, v in plans.items()}
        (folder / "plan.json").write_text(json.dumps(split))
    run_worker(sys.executable, str(WORKER), "--plan", str(single / "plan.json"), str(single),
               timeout=60 + 30 * len(plans))  # fmt: skip
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1"]
    torchrun += ["--nproc_per_node", str(world), "--master_addr", "127.0.0.1"]
    torchrun += ["--master_port", str(free_port())]
    run_worker(*torchrun, str(WORKER), "--plan", str(ddp / "plan.json"), str(ddp),
               timeout=60 + 60 * len(plans))  # fmt: skip
    results: dict = {}
    for name in plans:
        errors = [f / name / "error.txt" for f in (single, ddp)]
        errors = [e for e in errors if e.exists()]
        if errors:
            results[name] = "\n".join(f"{e.parent.parent.name}: {e.read_text()}" for e in errors)
            continue
        ranks = [torch.load(ddp / name / f"rank{r}.pt") for r in range(world)]
        results[name] = (torch.load(single / name / "rank0.pt"), ranks)
    return results


def variant(results: dict, name: str) -> tuple[dict, list[dict]]:
    got = results[name]
    if isinstance(got, str):
        pytest.fail(f"variant {name!r} failed in the worker:\n{got}")
    return got


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.double() - b.double()).abs().max().item()


def test_two_ranks_equal_one_process_with_split_bn(runs):
    assert_ranks_equal_one_process(*runs, world=2, batch=16)


def test_three_ranks_equal_one_process_with_split_bn(runs3):
    assert_ranks_equal_one_process(*runs3, world=3, batch=24)


def assert_ranks_equal_one_process(one: dict, ranks: list[dict], world: int, batch: int) -> None:
    assert one["world_size"] == 1 and not one["ddp"] and one["shuffle_keys"]
    assert all(r["world_size"] == world and r["ddp"] and r["shuffle_keys"] for r in ranks)
    assert [r["rank"] for r in ranks] == list(range(world))
    assert len(one["steps"]) == 3 and all(len(r["steps"]) == 3 for r in ranks)
    for t, step in enumerate(one["steps"]):
        parts = [r["steps"][t] for r in ranks]
        # rank r holds the r-th part of the same global batch
        assert torch.equal(step["index"], torch.cat([p["index"] for p in parts]))
        # each rank's loss is a mean over its queries: the global loss is their mean
        mean_loss = torch.stack([p["loss"] for p in parts]).mean()
        assert max_diff(step["loss"], mean_loss) <= TOL, f"step {t} loss"
        assert all(step["grads"].keys() == p["grads"].keys() for p in parts)
        assert len(step["grads"]) > 0
        for p in parts:
            for name, g in step["grads"].items():
                assert max_diff(g, p["grads"][name]) <= TOL, f"step {t} grad {name}"
            assert max_diff(step["keys"], p["keys"]) <= TOL, f"step {t} queue keys"
            assert torch.equal(step["labels"], p["labels"]), f"step {t} queue labels"
            assert torch.equal(step["ptr"], p["ptr"]), f"step {t} queue pointer"
            assert step["strategy"].keys() == p["strategy"].keys()
            for name, v in step["strategy"].items():  # e.g. AdCo's bank: the same on every rank
                assert max_diff(v, p["strategy"][name]) <= TOL_STRATEGY, f"step {t} strategy {name}"
    per_step = batch * (2 if one["symmetric_keys"] else 1)  # moco.symmetric_keys: both views'
    assert one["steps"][-1]["ptr"].item() == 3 * per_step % one["steps"][-1]["keys"].shape[0]
    for encoder in ("encoder_q", "encoder_k"):
        for r in ranks:
            assert one[encoder].keys() == r[encoder].keys()
            for name, w in one[encoder].items():
                assert max_diff(w, r[encoder][name]) <= TOL, f"{encoder}.{name}"


def test_global_rng_stays_in_step_across_ranks_and_with_one_process(runs):
    """The key shuffle draws randperm(world * n) on every rank: the RNG streams stay equal, so
    strategies that draw on the global batch (MiOC, modified MoCHi) agree across ranks."""
    one, ranks = runs
    assert torch.equal(ranks[0]["rng"], ranks[1]["rng"])
    assert torch.equal(one["rng"], ranks[0]["rng"])


def test_any_rank_is_an_or_over_ranks_and_the_identity_in_one_process(runs):
    one, ranks = runs
    assert one["any_rank"] == {"none": False, "last_only": True, "first_only": True, "all": True}
    for r in ranks:
        assert r["any_rank"] == {"none": False, "last_only": True, "first_only": True, "all": True}
    assert dist.any_rank(True) is True and dist.any_rank(False) is False  # no group here


def test_srun_without_torchrun_forms_the_group_from_slurm_variables(tmp_path):
    """Two tasks as ``srun -n 2`` starts them: only SLURM_* variables, no torchrun's."""
    port = str(free_port())
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), "--control", str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=clean_env(
                SLURM_PROCID=str(r),
                SLURM_LOCALID=str(r),
                SLURM_NTASKS="2",
                SLURM_STEP_NUM_TASKS="2",
                SLURM_STEP_ID="0",
                SLURM_JOB_ID="4242",
                SLURM_JOB_NODELIST="localhost",
                MASTER_PORT=port,  # a free one; the job-derived port may be taken on a CI host
            ),
        )
        for r in range(2)
    ]
    try:
        outs = [p.communicate(timeout=300) for p in procs]  # 2 torch imports on a loaded host
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, f"task failed:\n{out}\n{err}"
    for r in range(2):
        got = torch.load(tmp_path / f"control{r}.pt")
        assert got["rank"] == r and got["world_size"] == 2
        assert got["env"] == {
            "RANK": str(r),
            "WORLD_SIZE": "2",
            "LOCAL_RANK": str(r),
            "MASTER_ADDR": "localhost",
            "MASTER_PORT": port,
        }
        assert got["any_rank"] == {
            "none": False,
            "last_only": True,
            "first_only": True,
            "all": True,
        }


# ------------------------------------------------------------------------------------------------
# Launcher variables, without processes

LAUNCHER = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def no_scontrol(*args, **kwargs):
    raise FileNotFoundError("scontrol")  # as on a host without Slurm's tools: parse the list


@pytest.fixture
def slurm_env(monkeypatch):
    for k in list(os.environ):
        if k.startswith("SLURM"):
            monkeypatch.delenv(k)
    for k in LAUNCHER:  # setenv first so that monkeypatch removes what slurm_env_to_torch() adds
        monkeypatch.setenv(k, "")
        monkeypatch.delenv(k)

    monkeypatch.setattr(dist.subprocess, "run", no_scontrol)

    def set_env(**values: str) -> dict[str, str | None]:
        for k, v in values.items():
            monkeypatch.setenv(k, v)
        dist.slurm_env_to_torch()
        return {k: os.environ.get(k) for k in LAUNCHER}

    return set_env


def test_srun_task_exports_rank_world_master(slurm_env):
    got = slurm_env(
        SLURM_PROCID="5",
        SLURM_LOCALID="1",
        SLURM_NTASKS="8",
        SLURM_STEP_NUM_TASKS="8",
        SLURM_JOB_ID="123456",
        SLURM_JOB_NODELIST="gpu[007-008,012]",
    )
    assert got == {
        "RANK": "5",
        "WORLD_SIZE": "8",
        "LOCAL_RANK": "1",
        "MASTER_ADDR": "gpu007",
        "MASTER_PORT": str(10000 + 123456 % 20000),
    }


def test_torchrun_or_submitit_variables_win_over_slurm(slurm_env):
    """submitit's TorchDistributedEnvironment().export() sets WORLD_SIZE and the rest."""
    got = slurm_env(
        RANK="1",
        WORLD_SIZE="4",
        LOCAL_RANK="1",
        MASTER_ADDR="node3",
        MASTER_PORT="29500",
        SLURM_PROCID="3",
        SLURM_NTASKS="4",
        SLURM_STEP_NUM_TASKS="4",
        SLURM_JOB_NODELIST="node[1-4]",
    )
    assert got == {
        "RANK": "1",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "1",
        "MASTER_ADDR": "node3",
        "MASTER_PORT": "29500",
    }


def test_batch_script_without_srun_stays_one_process(slurm_env):
    """sbatch --ntasks=4 running python itself sees SLURM_NTASKS=4 and SLURM_PROCID=0 but no step
    variables: it must not wait for three ranks that never start."""
    got = slurm_env(SLURM_PROCID="0", SLURM_NTASKS="4", SLURM_JOB_NODELIST="node[1-2]")
    assert got == dict.fromkeys(LAUNCHER)


def test_single_task_step_sets_world_one_and_no_master(slurm_env):
    got = slurm_env(SLURM_PROCID="0", SLURM_NTASKS="1", SLURM_STEP_NUM_TASKS="1")
    assert got["WORLD_SIZE"] == "1" and got["MASTER_ADDR"] is None and got["MASTER_PORT"] is None
    assert not dist.is_on() and dist.world_size() == 1


@pytest.mark.parametrize(
    "nodelist, first",
    [
        ("gpu[007-009,12],cpu1", "gpu007"),
        ("node1,node2", "node1"),
        ("a[1-2]-ib", "a1-ib"),
        ("rack[2-3]-n[01-04],x", "rack2-n01"),
        ("solo", "solo"),
        ("", "127.0.0.1"),
    ],
)
def test_first_host_of_a_slurm_nodelist(nodelist, first, monkeypatch):
    monkeypatch.setattr(dist.subprocess, "run", no_scontrol)
    assert dist.first_host(nodelist) == first


# ------------------------------------------------------------------------------------------------
# Sampler: mid-epoch resume with two ranks, through the loader


class TinyImages(Dataset):
    def __init__(self, n: int = 40) -> None:
        g = torch.Generator().manual_seed(0)
        self.images = torch.randint(0, 256, (n, 3, 16, 16), generator=g, dtype=torch.uint8)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int):
        return tv_tensors.Image(self.images[i]), i % 5


def batches(world: int, rank: int, epoch: int, start_step: int, global_batch: int = 8) -> list:
    spec = ViewSpec(image_size=16, crop_scale=(0.2, 1.0), jitter_strength=0.4, jitter_prob=0.8,
                    grayscale_prob=0.2, blur_prob=0.5, hflip_prob=0.5, affine_degrees=15.0,
                    affine_translate=0.1)  # fmt: skip
    transform = loaders.train_transform(spec=spec, mean=(0.5,) * 3, std=(0.25,) * 3)
    views = loaders.TwoViews(TinyImages(), transform, seed=3)
    sampler = loaders.ResumableSampler(
        len(views), global_batch, seed=3, rank=rank, world_size=world
    )
    sampler.set_epoch(epoch, start_step)
    return list(loaders.loader(views, global_batch // world, sampler, num_workers=0))


def test_two_rank_loaders_resume_mid_epoch_on_the_same_global_batches():
    """5 steps of 8 per epoch; each rank resumes at step 2 and gets its half of global steps 2-4,
    with the same views as an uninterrupted one-process run."""
    whole = batches(world=1, rank=0, epoch=1, start_step=0)
    ranks = [batches(world=2, rank=r, epoch=1, start_step=2) for r in range(2)]
    assert len(whole) == 5 and [len(b) for b in ranks] == [3, 3]
    for step in range(3):
        x1, x2, y, index = whole[2 + step]
        for r in range(2):
            half = slice(4 * r, 4 * r + 4)
            got = ranks[r][step]
            assert torch.equal(got[3], index[half])
            assert torch.equal(got[2], y[half])
            assert torch.equal(got[0], x1[half]) and torch.equal(got[1], x2[half])
