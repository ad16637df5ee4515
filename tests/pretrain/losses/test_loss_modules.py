"""The losses as the trainer uses them: MoCo's layout, CIDER's prototypes in the run, the kappa
terms, the one-class monitor, refused combinations, and every issue-4 config for one epoch on tiny
data in the true on-disk format."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.metrics import roc_auc_score

from negatives.base import ExtraNegatives
from negmine_core.conventions import NO_LABEL, OUTLIER_LABEL
from negmine_core.step import Embeddings, StepContext
from pretrain import build, config, losses
from pretrain.config import ConfigError
from pretrain.engine import loop, monitor
from pretrain.metrics import knn
from pretrain.runtime import checkpoint_io
from pretrain.testing.fakedata import write_cifar10, write_imagenet100
from tests.helpers import multiview
from tests.helpers.fd_grad import assert_grad_matches_fd
from tests.helpers.paths import ROOT
from tests.helpers.vectors import unit

pytestmark = pytest.mark.early  # among the suite's longest files: started first (tests/conftest.py)

TINY = [
    "model.arch=resnet_small",
    "model.width=8",
    "train.epochs=1",
    "train.progress_bar=false",
    "train.log_every=1",
    "data.num_workers=0",
    "train.deterministic=true",
]


def step_tensors(n=4, world=1, rank=0, k_size=6, d=8, labels=None, shared=None, per_query=None):
    k_all = unit(world * n, d, seed=1)
    labels_all = torch.arange(world * n) if labels is None else labels
    q = unit(n, d, seed=2).requires_grad_()
    off = rank * n
    return losses.Step(
        emb=Embeddings(q=q, k=k_all[off : off + n]),
        k_all=k_all,
        labels=labels_all[off : off + n],
        labels_all=labels_all,
        queue=unit(k_size, d, seed=3),
        queue_labels=torch.full((k_size,), NO_LABEL),
        extra=ExtraNegatives(shared, per_query),
        ctx=StepContext(rank=rank, world_size=world),
    )


def test_infonce_objective_is_mocos_loss():
    s = step_tensors(shared=unit(3, 8, seed=4), per_query=unit(4, 2, 8, seed=5))
    got = losses.create("infonce", temperature=0.2)(s)
    logits = losses.moco_logits(s.emb.q, s.emb.k, s.queue, 0.2, s.extra.shared, s.extra.per_query)
    assert torch.allclose(got, losses.info_nce(logits), atol=1e-12)


@pytest.mark.parametrize("name", ["nt_xent", "supcon", "sincere"])
@pytest.mark.parametrize("rank", [0, 1])
def test_distinct_labels_give_infonce_over_batch_keys_queue_and_extras(name, rank):
    """With every label distinct, the labelled losses are InfoNCE whose negatives are the
    other keys of the (gathered) batch, the queue and the shared negatives: the own key of each
    rank's query sits at offset + i."""
    shared = unit(3, 8, seed=4)
    s = step_tensors(world=2, rank=rank, shared=shared)
    got = losses.create(name, temperature=0.1)(s)
    n = s.emb.q.shape[0]
    per_anchor = []
    for i in range(n):
        own = s.offset + i
        others = torch.cat([s.k_all[:own], s.k_all[own + 1 :], s.queue, shared])
        logits = losses.moco_logits(s.emb.q[i : i + 1], s.k_all[own : own + 1], others, 0.1)
        per_anchor.append(losses.info_nce(logits))
    ref = torch.stack(per_anchor).mean()
    assert torch.allclose(got, ref, atol=1e-12)
    (grad,), (grad_ref,) = torch.autograd.grad(got, s.emb.q), torch.autograd.grad(ref, s.emb.q)
    assert grad_ref.abs().max() > 1e-2
    torch.testing.assert_close(grad, grad_ref, rtol=1e-10, atol=1e-12)


def test_firm_objective_treats_id_keys_as_positives_and_outliers_alone():
    """Numpy re-derivation of FIRM's rule in MoCo's layout, outlier labels in batch and queue;
    value, and gradient wrt q (keys and queue are constants) against its central differences."""
    labels = torch.tensor([3, 3, OUTLIER_LABEL, 3])
    s = step_tensors(labels=labels)
    s = s.replace(queue_labels=torch.tensor([3, OUTLIER_LABEL, NO_LABEL, 3, 3, OUTLIER_LABEL]))
    loss = losses.create("firm", temperature=0.2)(s)
    cand = torch.cat([s.k_all, s.queue]).numpy()
    cand_y = torch.cat([labels, s.queue_labels]).numpy()

    def reference(q):
        total = 0.0
        for i in range(4):
            logits = cand @ q[i] / 0.2
            log_den = np.log(np.exp(logits).sum())
            pos = [i] if labels[i] < 0 else [j for j in range(len(cand)) if cand_y[j] >= 0]
            total += -np.mean([logits[p] - log_den for p in pos])
        return total / 4

    assert loss.item() == pytest.approx(reference(s.emb.q.detach().numpy()), abs=1e-10)
    (grad,) = torch.autograd.grad(loss, s.emb.q)
    assert_grad_matches_fd(grad.numpy(), reference, s.emb.q.detach().numpy())


def test_firm_pairwise_layout_is_the_authors_n_by_n_loss():
    """The authors' FIRMLoss: view-1 anchors vs the N view-2 keys only (no queue); ID positives
    are all ID keys including the own pair; an outlier's only positive is its own key. Value, and
    gradient wrt q (the keys are constants) against central differences of the loop."""
    labels = torch.tensor([3, OUTLIER_LABEL, 3, 3])
    s = step_tensors(labels=labels)
    loss = losses.create("firm", temperature=0.2, contrast_queue=False)(s)
    k, y = s.k_all.numpy(), labels.numpy()

    def reference(q):
        total = 0.0
        for i in range(4):
            logits = k @ q[i] / 0.2
            log_den = np.log(np.exp(logits).sum())
            pos = [j for j in range(4) if y[j] >= 0] if y[i] >= 0 else [i]
            total += -np.mean([logits[p] - log_den for p in pos])
        return total / 4

    got = loss.item()
    assert got == pytest.approx(reference(s.emb.q.detach().numpy()), abs=1e-10)
    (grad,) = torch.autograd.grad(loss, s.emb.q)
    assert_grad_matches_fd(grad.numpy(), reference, s.emb.q.detach().numpy())
    moco_layout = losses.create("firm", temperature=0.2)(s).item()
    assert abs(moco_layout - got) > 1e-3  # the queue is in the default layout's denominator


def test_cider_objective_uses_queries_then_keys_and_keeps_prototypes():
    s = step_tensors(labels=torch.tensor([0, 1, 1, 0]))
    obj = losses.create("cider", temperature=0.1, num_classes=2, dim=8)
    start = unit(2, 8, seed=7).float()
    obj.prototypes.copy_(start)
    loss = obj(s)
    z = torch.cat([s.emb.q, s.k_all])
    expected, updated = losses.cider(
        z, torch.tensor([0, 1, 1, 0, 0, 1, 1, 0]), start.double(), 0.95, 0.1, 2.0
    )
    assert torch.allclose(loss, expected, atol=1e-6)
    assert torch.allclose(obj.prototypes.double(), updated, atol=1e-6)
    loss.backward()
    assert s.emb.q.grad.abs().sum() > 0


def test_cider_subset_classes_map_labels_to_their_prototypes():
    obj = losses.create("cider", temperature=0.1, num_classes=10, dim=8, classes=[7, 3])
    z, y = unit(6, 8, seed=8).float(), torch.tensor([3, 7, 3, 7, 7, 3])
    obj.init_class_means(z, y)
    means = F.normalize(torch.stack([z[y == 3].mean(0), z[y == 7].mean(0)]), dim=1)
    assert torch.allclose(obj.prototypes, means, atol=1e-6)
    with pytest.raises(ValueError, match=r"classes \[7\] have no training image"):
        obj.init_class_means(z[y == 3], y[y == 3])


def test_kappa_terms_are_added_to_any_objective():
    s = step_tensors()
    kappa_q = torch.rand(4, dtype=torch.float64, requires_grad=True)
    s = s.replace(emb=replace(s.emb, kappa_q=kappa_q, kappa_k=torch.rand(4, dtype=torch.float64)))
    base = losses.create("supcon", temperature=0.1)
    both = losses.WithKappa(base, lambda_align=0.05, lambda_reg=0.005)
    got = both(s)
    kappa = losses.kappa_alignment(s.emb.q, s.emb.kappa_q, s.emb.k, s.emb.kappa_k, 0.05, 0.005)
    assert torch.allclose(got, base(s) + kappa, atol=1e-12)
    got.backward()
    assert s.emb.kappa_q.grad.abs().sum() > 0
    assert set(both.diagnostics()) >= {"kappa_mean", "kappa_std", "base", "kappa_terms"}
    s = s.replace(emb=replace(s.emb, kappa_q=None))
    with pytest.raises(ValueError, match="kappa head"):
        both(s)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["loss.name=cider", "negatives.name=mochi"], "cannot be combined with negative strategy"),
        (["loss.name=cider", "negatives.name=outliers"], "synthetic outliers have no prototype"),
        (["loss.name=cider", "data.name=stl10", "data.train_split=train+unlabeled"], "unlabelled"),
        (["loss.kwargs.kappa_lambda_align=0.1"], r"moved: write kappa.lambda_align=0.1 \(in YAML"),
        (["model.kappa_hidden=512"], r"moved: write kappa.hidden=512 \(in YAML: kappa: \{hidden"),
        (["loss.supcon_reference_scale=true"], r"moved: write loss.kwargs.reference_scale=True"),
        (["loss.kwargs.reference_scale=true"], "no argument 'reference_scale'"),
        (["loss.kwargs.temperature=0.5"], "takes temperature from moco.temperature"),
        (["loss.contrast_queue=false"], "for firm, nt_xent, sincere, supcon only"),
        (["loss.symmetric=true"], r"needs a batch loss \(cider, .*infonce has its own layout"),
        (["loss.name=supcon", "loss.symmetric=true", "negatives.name=mochi"], "per-query"),
        (["loss.name=simclr"], "expected one of"),
    ],
)
def test_refused_combinations_say_why(overrides, message):
    with pytest.raises(ConfigError, match=message):
        build.loss_fn(config.load("digits_moco.yaml", overrides), 10)


def test_one_class_monitor_is_the_s_con_auroc(tmp_path):
    bank, test = torch.randn(30, 16), torch.randn(50, 16)
    test_y = torch.arange(50) % 5
    got = knn.one_class_auroc(bank, test, test_y, [1, 3], k=1)
    b, t = F.normalize(bank, dim=1).numpy(), F.normalize(test, dim=1).numpy()
    s_con = (t @ b.T).max(1)
    expected = 100 * roc_auc_score(np.isin(test_y.numpy(), [1, 3]), s_con)
    assert got == pytest.approx(expected, abs=1e-9)


def read_epoch(out) -> dict:
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return [r for r in lines if r["kind"] == "epoch"][-1], [r for r in lines if r["kind"] == "step"]


def test_cider_run_initialises_prototypes_from_class_means_and_saves_them(tmp_path):
    cfg = config.load(
        "digits_cider.yaml",
        [
            f"out_dir={tmp_path}",
            *TINY,
            "data.in_classes=[2,5]",
            "train.batch_size=32",
            "moco.queue_size=64",
            "eval.knn_every=0",
        ],  # fmt: skip
    )
    run = loop.setup(cfg)  # the loss's setup hook ran: its prototypes are the class means
    z, y = monitor.extract(run.moco.encoder_q, run.data.bank_loader, run.device)
    means = F.normalize(torch.stack([z[y == 2].mean(0), z[y == 5].mean(0)]), dim=1)
    assert torch.allclose(run.loss_fn.prototypes, means, atol=1e-5)
    assert loop.main(cfg) == 0
    state = checkpoint_io.load(tmp_path / "checkpoints" / "last.pt")
    saved = state["loss"]["prototypes"]
    assert saved.shape == (2, cfg.model.dim) and not torch.allclose(saved, means, atol=1e-3)
    assert torch.allclose(saved.norm(dim=1), torch.ones(2), atol=1e-5)


# Each issue-4 config for one epoch on a few steps of tiny data (digits embedded; CIFAR-10 pickles
# and an ImageNet-100 folder written in their true formats).
CONFIG_RUNS = {
    "digits_supcon.yaml": ["data.in_classes=[0,1]", "train.batch_size=64", "moco.queue_size=64"],
    "digits_sincere.yaml": ["data.in_classes=[0,1]", "train.batch_size=64", "moco.queue_size=64"],
    "digits_cider.yaml": ["data.in_classes=[0,1]", "train.batch_size=64", "moco.queue_size=64"],
    "digits_kappa.yaml": ["data.in_classes=[0,1]", "train.batch_size=64", "moco.queue_size=64"],
    "digits_firm.yaml": [],
    "digits_nt_xent_oneclass.yaml": [],
    "cifar10_supcon.yaml": ["train.batch_size=32", "moco.queue_size=32"],
    "cifar10_sincere.yaml": ["train.batch_size=32", "moco.queue_size=32"],
    "cifar10_cider.yaml": ["train.batch_size=32", "moco.queue_size=32", "train.warmup_epochs=0"],
    "cifar10_kappa.yaml": ["train.batch_size=32", "moco.queue_size=32"],
    "cifar10_firm.yaml": ["train.batch_size=16", "moco.queue_size=16", "train.warmup_epochs=0"],
    "imagenet100_sincere.yaml": ["train.batch_size=16", "moco.queue_size=32",
                                 "data.image_size=32", "data.eval_resize=32"],
}  # fmt: skip


@pytest.fixture(scope="module")
def data_roots(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    write_cifar10(root / "cifar", per_batch=64)  # 320 images, 32 of each class
    write_imagenet100(root / "in100")
    return {"cifar10": root / "cifar", "imagenet100": root / "in100", "digits": root}


@pytest.mark.parametrize("name", sorted(CONFIG_RUNS))
def test_each_recipe_config_runs_an_epoch(name, data_roots, tmp_path):
    dataset = name.split("_")[0]
    cfg = config.load(
        name, [f"out_dir={tmp_path}", f"data.root={data_roots[dataset]}", *TINY, *CONFIG_RUNS[name]]
    )
    assert loop.main(cfg) == 0
    epoch, steps = read_epoch(tmp_path)
    assert steps and all(np.isfinite(r["loss"]) for r in steps)
    assert ("oc_auroc" if cfg.data.in_classes else "knn_top1") in epoch
    if cfg.kappa.hidden:
        assert all(r["loss_kappa_mean"] > 0 for r in steps)
        events = list((tmp_path / "tensorboard").glob("events.*"))
        assert events and b"train/kappa" in events[0].read_bytes()  # the histogram
    state = checkpoint_io.load(tmp_path / "checkpoints" / "last.pt")
    assert state["config"]["loss"]["name"] == cfg.loss.name


def test_the_recipe_configs_are_shipped():
    shipped = {p.name for p in config.CONFIG_DIR.glob("*.yaml")}
    assert set(CONFIG_RUNS) <= shipped


@pytest.mark.parametrize(
    ("name", "extra"),
    [
        ("digits_cider.yaml", CONFIG_RUNS["digits_cider.yaml"] + ["kappa.hidden=8"]),
        ("digits_firm.yaml", ["train.epochs=2"]),
    ],
)
def test_resume_restores_objective_and_strategy_state(name, extra, tmp_path):
    """Two epochs in one go equal one epoch, stop, resume: CIDER's prototypes and the kappa head,
    or FIRM with the outlier strategy's random slots and rotations, replay bit for bit."""
    base = [*TINY, *extra, "eval.knn_every=0"]
    whole = config.load(name, [f"out_dir={tmp_path / 'a'}", *base, "train.epochs=2"])
    assert loop.main(whole) == 0
    for epochs in (1, 2):
        part = config.load(name, [f"out_dir={tmp_path / 'b'}", *base, f"train.epochs={epochs}"])
        assert loop.main(part) == 0
    a = checkpoint_io.load(tmp_path / "a" / "checkpoints" / "last.pt")
    b = checkpoint_io.load(tmp_path / "b" / "checkpoints" / "last.pt")
    for part in ("model", "queue", "loss"):
        assert a[part].keys() == b[part].keys()
        for key, value in a[part].items():
            assert torch.equal(value, b[part][key]), f"{part}.{key}"


@pytest.mark.parametrize("name", ["nt_xent", "supcon", "sincere", "firm"])
def test_symmetric_without_queue_is_the_papers_multiview_loss(name):
    """loss.symmetric + contrast_queue false: anchors [q1; q2] against each other only, i.e. the
    2N x 2N equation (tests/helpers/multiview.py), in value and gradient."""
    labels = torch.tensor([0, 1, 1, OUTLIER_LABEL])
    s = step_tensors(labels=labels)
    s = s.replace(emb=replace(s.emb, q2=unit(4, 8, seed=9).requires_grad_()))
    got = losses.create(name, temperature=0.2, contrast_queue=False)(s)
    z = torch.cat([s.emb.q, s.emb.q2]).detach().requires_grad_()
    y = torch.cat([labels, labels])
    if name == "nt_xent":
        ref = multiview.nt_xent(z, 0.2)
    elif name == "firm":
        ref = multiview.firm(z, y >= 0, 0.2)
    else:
        ref = getattr(multiview, name)(z, y, 0.2)
    assert torch.allclose(got, ref, atol=1e-12)
    got.backward()
    ref.backward()
    assert torch.allclose(torch.cat([s.emb.q.grad, s.emb.q2.grad]), z.grad, atol=1e-12)


def test_symmetric_cider_and_kappa_use_both_query_views():
    s = step_tensors(labels=torch.tensor([0, 1, 1, 0]))
    kappa_q, kappa_q2 = torch.rand(4, dtype=torch.float64), torch.rand(4, dtype=torch.float64)
    kappa_k = torch.full((4,), float("nan"), dtype=torch.float64)  # must not be used
    q2 = unit(4, 8, seed=9).requires_grad_()
    s = s.replace(emb=replace(s.emb, q2=q2, kappa_q=kappa_q, kappa_q2=kappa_q2, kappa_k=kappa_k))
    cider = losses.create("cider", temperature=0.1, num_classes=2, dim=8)
    start = unit(2, 8, seed=7).float()
    cider.prototypes.copy_(start)
    obj = losses.WithKappa(cider, lambda_align=0.05, lambda_reg=0.005)
    got = obj(s)
    z = torch.cat([s.emb.q, s.emb.q2])
    ref, _ = losses.cider(z, torch.tensor([0, 1, 1, 0] * 2), start.double(), 0.95, 0.1, 2.0)
    ref = ref + losses.kappa_alignment(
        s.emb.q, s.emb.kappa_q, s.emb.q2, s.emb.kappa_q2, 0.05, 0.005
    )
    assert torch.allclose(got, ref, atol=1e-6)
    got.backward()
    assert s.emb.q2.grad.abs().sum() > 0


def test_symmetric_run_pairs_views_per_bn_split(tmp_path):
    from pretrain.model.encoders import pair_views, split_views

    x1, x2 = torch.arange(8.0).view(8, 1), torch.arange(100.0, 108.0).view(8, 1)
    paired = pair_views(x1, x2, 2)
    expected = [0, 1, 2, 3, 100, 101, 102, 103, 4, 5, 6, 7, 104, 105, 106, 107]
    assert paired.flatten().tolist() == expected  # split r = [view 1; view 2] of chunk r
    assert all(torch.equal(a, b) for a, b in zip(split_views(paired, 2), (x1, x2)))
    cfg = config.load(
        "digits_supcon.yaml",
        [
            f"out_dir={tmp_path}",
            *TINY,
            *CONFIG_RUNS["digits_supcon.yaml"],
            "loss.symmetric=true",
            "model.bn_splits=2",
            "kappa.hidden=8",
        ],  # fmt: skip
    )
    assert loop.main(cfg) == 0
    epoch, steps = read_epoch(tmp_path)
    assert all(np.isfinite(r["loss"]) for r in steps) and "oc_auroc" in epoch


def test_the_step_record_is_keyword_only_and_single_fills_one_process_defaults():
    q, k, queue = unit(4, 8, seed=2), unit(4, 8, seed=1), unit(6, 8, seed=3)
    with pytest.raises(TypeError):
        losses.Step(Embeddings(q=q, k=k), k, None, None, queue, None, ExtraNegatives())  # noqa
    s = losses.Step.single(q, k, queue=queue)
    assert s.k_all is k and s.offset == 0 and s.extra.shared is None
    assert (s.labels == NO_LABEL).all() and (s.queue_labels == NO_LABEL).all()
    full = step_tensors(n=4, k_size=6)  # the explicit form: same loss in one process
    two = losses.Step.single(
        full.emb.q, full.emb.k, queue=full.queue, labels=full.labels, queue_labels=full.queue_labels
    )
    for name in ("infonce", "supcon"):
        crit = losses.create(name, temperature=0.2)
        assert torch.equal(crit(full), crit(two))


def test_moved_loss_keys_and_kwargs_messages_are_quoted_in_troubleshooting(tmp_path, monkeypatch):
    """The per-loss keys that moved into loss.kwargs give the new spelling (exit 2), and the
    messages are quoted word for word in docs/troubleshooting.md."""
    monkeypatch.chdir(tmp_path)
    Path("run.yaml").write_text("loss:\n  name: cider\n  cider_alpha: 0.5\n")
    page = (ROOT / "docs" / "troubleshooting.md").read_text()
    found = []
    with pytest.raises(ConfigError) as e:
        config.load("run.yaml")
    found.append(str(e.value))
    for overrides in (
        ["loss.name=supcon", "loss.kwargs.temperature=0.5"],
        ["loss.kwargs.kappa_lambda_align=0.1"],
        ["model.kappa_hidden=512"],
    ):
        with pytest.raises(ConfigError) as e:
            config.load("digits_moco.yaml", overrides)
        found.append(str(e.value))
    for message in found:
        assert f"`{message}`" in page, message


def test_an_old_checkpoint_config_is_migrated_with_a_warning(capsys):
    """A config saved before the move: keys at their old defaults are dropped silently, others
    move into loss.kwargs with a warning naming them; the built loss is the same."""
    raw = config.to_dict(config.load("digits_cider.yaml"))
    raw["loss"].pop("kwargs")
    raw["loss"].update(cider_lambda_c=1.5, cider_alpha=0.95, supcon_reference_scale=False,
                       kappa_lambda_align=0.05, kappa_lambda_reg=0.005)  # fmt: skip
    raw.pop("kappa")
    raw["model"]["kappa_hidden"] = 0
    cfg = config.from_dict(raw, source="old.pt (config)")
    assert capsys.readouterr().err == (
        "note: old.pt (config): an older config, migrated: loss.cider_lambda_c -> "
        "loss.kwargs.lambda_c\n"
    )
    assert cfg.loss.kwargs == {"lambda_c": 1.5}
    assert build.loss_fn(cfg, 10).lambda_c == 1.5


def test_an_old_kappa_config_is_migrated_to_the_kappa_section(capsys):
    """A kappa run's config from before the kappa section: model.kappa_hidden and the weights in
    loss.kwargs move to kappa.* with a warning naming each; the built loss is the same."""
    raw = config.to_dict(config.load("digits_kappa.yaml"))
    raw.pop("kappa")
    raw["model"]["kappa_hidden"] = 512
    raw["loss"]["kwargs"] = {"kappa_lambda_align": 0.1, "kappa_lambda_reg": 0.005}
    cfg = config.from_dict(raw, source="old_kappa.pt (config)")
    assert capsys.readouterr().err.endswith(
        "loss.kwargs.kappa_lambda_align -> kappa.lambda_align, model.kappa_hidden -> kappa.hidden\n"
    )
    assert (cfg.kappa.hidden, cfg.kappa.lambda_align, cfg.kappa.lambda_reg) == (512, 0.1, 0.005)
    assert cfg.loss.kwargs == {}
    made = build.loss_fn(cfg, 10)
    assert isinstance(made, losses.WithKappa) and made.lambda_align == 0.1
