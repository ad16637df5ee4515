"""The config's value rules as data, in one language: :func:`pretrain.config.validate` runs them
in order, and ``scripts/gen_config_docs.py`` lists them (a key's own bounds beside it, the rules
that read several keys under "Rules across keys"), so the page and the check cannot disagree.

A :class:`Rule` names the key it reports, the condition that must hold and its message, a template
in which ``{section.key}`` is that key's value and ``{batch_losses}``-style names are the
registries' lists (:class:`Facts`). A condition is a :class:`Cond`, built from :func:`key` (a
config value), :func:`names` (a registry list) and Python's operators (``&`` and, ``|`` or, ``~``
not, comparisons, :meth:`Cond.isin`); it is evaluated on the config, without ``eval``, and written
out for the page by the same object. :func:`bound` states a numeric bound once, its condition and
its message ("must lie in [0, 1]") made from the same numbers. A failed rule raises
``config key 'KEY' = VALUE <message>`` (exit 2).
"""

from __future__ import annotations

from typing import Any

from pretrain.config import run_settings
from pretrain.config.conditions import (  # noqa: F401  (Cond, Facts, Rule, key, value_of: the API)
    Cond,
    Facts,
    Rule,
    bound,
    check,
    key,
    names,
    value_of,
)
from pretrain.errors import ConfigError


def registries() -> dict[str, Any]:
    """The registries the config names, by the key that names them: the one list of them
    (imported when asked: they import torch, and the config stays light)."""
    from negatives.base import strategies
    from pretrain.losses import registry as losses

    return {"negatives.name": strategies, "loss.name": losses}


def facts(loss_name: str, strategy_name: str) -> Facts:
    """The :class:`Facts` of a config's loss and strategy (from the registries)."""
    reg = registries()
    loss, strategy = reg["loss.name"].get(loss_name), reg["negatives.name"].get(strategy_name)
    return Facts(loss=loss, strategy=strategy, names=registry_names())


def registry_names() -> dict[str, tuple[str, ...]]:
    """The registries' names by rule flag, as the rules name them: one list per flag of the
    contract's flag table (``negmine_core.contract.FLAGS``) that names one (``Flag.names``)."""
    from negmine_core.contract import FLAGS

    reg = registries()
    by_kind = {"loss": reg["loss.name"], "strategy": reg["negatives.name"]}
    flagged = {  # name: (registry, class attribute, the value that puts a name in the list)
        flag.names: (by_kind[flag.kind], flag.attribute, flag.when) for flag in FLAGS if flag.names
    }
    return {
        key: tuple(
            n
            for n in reg.names()  # a name claimed twice is named by validate()
            if not reg.problem(n) and bool(getattr(reg.get(n), flag)) == value
        )
        for key, (reg, flag, value) in flagged.items()
    }


def check_loss_kwargs(cfg: Any, loss_cls: Any) -> None:
    """``loss.kwargs``: the loss's own constructor arguments (not the run settings the trainer
    fills in, ``Loss.from_run``)."""
    own = dict(cfg.loss.kwargs)
    for name in own:
        if name in run_settings.taken(loss_cls):
            raise ConfigError(
                f"config key 'loss.kwargs.{name}': loss {cfg.loss.name!r} takes {name} from "
                f"{run_settings.source(name)}, not from loss.kwargs; set that instead"
            )
    try:
        registries()["loss.name"].check_kwargs(cfg.loss.name, own)
    except ValueError as e:
        raise ConfigError(f"config key 'loss.kwargs': {e}") from None


def _whole_or_fraction(subset: float) -> bool:
    return subset == 0 or 0 < subset < 1 or (subset >= 1 and subset == int(subset))


def _increasing_epochs(milestones: list[int]) -> bool:
    return all(m >= 1 for m in milestones) and list(milestones) == sorted(set(milestones))


def bn_splits_fit(batch: int, splits: int) -> bool:
    """Split BatchNorm's rule, stated once: ``splits`` divides ``batch`` (the images of one rank)
    into BatchNorm groups of at least 2 images. The config rule applies it to train.batch_size,
    :func:`pretrain.engine.world.check` to the per-rank batch of a multi-rank job."""
    return batch % splits == 0 and batch // splits >= 2


BN_SPLITS_FIT = Cond(  # the text: bn_splits_fit's body, as the configuration page states it
    "train.batch_size % model.bn_splits == 0 and train.batch_size // model.bn_splits >= 2",
    lambda c, n: bn_splits_fit(key("train.batch_size")(c, n), key("model.bn_splits")(c, n)),
    frozenset({"train.batch_size", "model.bn_splits"}),
)


def _scale(low_high: tuple[float, float]) -> bool:
    return 0 < low_high[0] <= low_high[1] <= 1


def _distinct_classes(classes: list[int]) -> bool:
    return all(x >= 0 for x in classes) and len(set(classes)) == len(classes)


K = key
RULES: tuple[Rule, ...] = (
    bound("seed", 0, 2**32 - 1, note="numpy's generators take 32-bit seeds"),
    bound("moco.queue_size", 0, low_open=True),
    Rule(key="moco.queue_size", holds=K("moco.queue_size") * K("model.dim") <= 2**32,
         why="x model.dim = {model.dim} floats exceed 16 GiB (2**32 float32 values) for the "
         "queue; a queue is at most the training set (checked once the data is read)"),
    bound("moco.momentum", 0, 1),
    bound("moco.temperature", 1e-3, low_open=True),
    bound("train.epochs", 0, low_open=True),
    bound("train.batch_size", 2),
    bound("train.base_lr", 0, low_open=True),
    bound("train.lr_base_batch", 0, low_open=True,
          note="the lr is base_lr * batch_size / lr_base_batch"),
    Rule(key="train.lr_milestones",
         holds=check("increasing_epochs", _increasing_epochs, "train.lr_milestones"),
         why="must be increasing epochs >= 1 (the lr is multiplied by 0.1 from each)"),
    bound("train.weight_decay", 0),
    bound("train.sgd_momentum", 0, 1, high_open=True),
    Rule(key="train.warmup_epochs",
         holds=(K("train.warmup_epochs") >= 0) & (K("train.warmup_epochs") < K("train.epochs")),
         why="must lie in [0, train.epochs)"),
    bound("train.log_every", 0, low_open=True),
    Rule(key="train.lr_first_epoch",
         holds=K("train.lr_first_epoch").isin((0, 1))
         & ((K("train.lr_first_epoch") == 0) | (K("train.warmup_epochs") == 0)),
         why="must be 0 or 1 (1 only without train.warmup_epochs)"),
    bound("train.ckpt_every", 0, low_open=True),
    bound("train.dist_timeout_min", 0, low_open=True),
    bound("train.threads", 0, note="0 = automatic"),
    bound("model.bn_splits", 1),
    Rule(key="model.bn_splits", holds=BN_SPLITS_FIT,
         why="must divide train.batch_size ({train.batch_size}) into BatchNorm splits of at "
         "least 2 images"),
    Rule(key="data.crop_scale", holds=check("scale", _scale, "data.crop_scale"),
         why="must be (low, high) with 0 < low <= high <= 1"),
    bound("eval.knn_k", 0, low_open=True),
    bound("eval.knn_temperature", 0, low_open=True,
          note="the votes are weighted by exp(similarity / T)"),
    bound("eval.batch_size", 0, low_open=True),
    bound("data.image_size", 0, low_open=True),
    bound("data.image_size", 2, note="a 1-pixel crop has nothing to resize"),
    bound("data.image_size", high=4096, note="a training view of image_size**2 pixels"),
    bound("data.hflip_prob", 0, 1),
    bound("data.grayscale_prob", 0, 1),
    bound("data.jitter_prob", 0, 1),
    bound("data.blur_prob", 0, 1),
    bound("data.jitter_strength", 0, 2, note="ColorJitter's hue, strength / 4, is at most 0.5"),
    bound("data.eval_resize", 0, low_open=True),
    bound("data.eval_resize", 2, note="a 1-pixel short side has nothing to resize"),
    bound("data.eval_resize", high=4096, note="the eval images' short side"),
    bound("data.affine_degrees", 0, 180,
          note="RandomAffine rotates by an angle in [-degrees, degrees]"),
    bound("data.affine_translate", 0, 1,
          note="a fraction of the image: above 1 most views would hold no image pixel"),
    Rule(key="data.std", holds=check("positive", lambda std: all(s > 0 for s in std), "data.std"),
         why="must be positive (images are divided by it)"),
    bound("model.width", 0, low_open=True),
    bound("model.width", high=1024, note="resnet_small's first stage; its last has 8x"),
    bound("model.dim", 0, low_open=True),
    bound("model.dim", high=65536, note="the projection head's output"),
    bound("data.support_views", high=64, note="extra views per image; FNC's official count is 8"),
    Rule(key="data.support_views",
         holds=(K("data.support_views") == 0)
         | ((K("data.support_views") > 0) & (K("data.augment_on") == "device")),
         why="must be 0, or positive with data.augment_on=device (the support crops are batched "
         "in stage 2 like the two views)"),
    Rule(key="data.support_views",
         holds=(K("data.support_views") > 0) | K("loss.name").not_in(names("support_losses")),
         why="must be positive for loss.name={loss.name!r} (its false negatives are found "
         "through the support views; the official count is 8)"),
    Rule(key="data.augment_compile",
         holds=~K("data.augment_compile") | (K("data.augment_on") == "device"),
         why="compiles stage 2, which only data.augment_on=device has; set it false for workers"),
    bound("train.max_steps", 0, note="0 = no limit"),
    bound("train.keep_every", 0, note="0 = never"),
    bound("train.max_requeues", 0),
    bound("data.num_workers", -1, note="-1 = automatic"),
    Rule(key="data.decode_on",
         holds=(K("data.decode_on") != "device")
         | ((K("data.augment_on") == "device")
            & K("data.name").isin(("imagefolder", "imagenet100"))
            & (K("data.affine_degrees") == 0) & (K("data.affine_translate") == 0)),
         why="needs image files (data.name imagefolder or imagenet100), data.augment_on=device "
         "and no RandomAffine (data.affine_degrees = data.affine_translate = 0); use auto or "
         "cpu"),
    Rule(key="data.resident",
         holds=(K("data.resident") != "device")
         | ((K("data.augment_on") == "device") & (K("data.decode_on") != "device")),
         why="needs data.augment_on=device (the two-stage augmentation) and data.decode_on auto "
         "or cpu; use auto or off"),
    Rule(key="data.subset", holds=check("whole_or_fraction", _whole_or_fraction, "data.subset"),
         why="must be 0 (all), a fraction in (0, 1) or a whole number of images per class"),
    bound("kappa.hidden", 0, 65536, note="0 = no head; vMF-kappa uses 512"),
    Rule(key="data.in_classes", holds=check("distinct", _distinct_classes, "data.in_classes"),
         why="must be distinct non-negative class indices"),
    Rule(key="loss.symmetric",
         holds=~K("loss.symmetric") | K("loss.name").isin(names("batch_losses")),
         why="needs a batch loss ({batch_losses}); {loss.name} has its own layout"),
    Rule(key="loss.contrast_queue",
         holds=K("loss.contrast_queue") | K("loss.name").isin(names("queue_optional")),
         why="can be turned off for {queue_optional} only"),
    Rule(key="loss.contrast_queue",
         holds=~(K("negatives.name").isin(names("queue_replacing")) & K("loss.contrast_queue")),
         why="must be false with negatives {negatives.name!r}: its negatives replace the queue "
         "(use loss.name nt_xent, or another of {queue_optional}, with "
         "loss.contrast_queue=false)"),
    Rule(key="loss.symmetric",
         holds=~K("loss.symmetric") | K("negatives.name").not_in(names("per_query_strategies")),
         why="cannot be combined with negatives {negatives.name!r}: its per-query negatives "
         "belong to the first view's queries only"),
    Rule(key="moco.symmetric_keys",
         holds=~K("moco.symmetric_keys") | (K("loss.name") == "infonce"),
         why="cannot be combined with loss {loss.name!r}: the MoCo CIFAR-10 demo's symmetric "
         "loss is two InfoNCE terms in MoCo's layout (loss.name=infonce); for both views as "
         "queries against each other use loss.symmetric with one of {batch_losses}"),
    Rule(key="moco.symmetric_keys",
         holds=~K("moco.symmetric_keys") | (K("negatives.name") == "none"),
         why="cannot be combined with negatives {negatives.name!r}: a strategy's negatives are "
         "made from the first view's queries and keys only; use negatives.name=none"),
    Rule(key="moco.symmetric_keys",
         holds=~K("moco.symmetric_keys") | (K("kappa.hidden") == 0),
         why="cannot be combined with kappa.hidden={kappa.hidden} (a kappa head): its terms read "
         "the first view's queries and keys only; set kappa.hidden=0"),
    Rule(key="moco.symmetric_keys",
         holds=~K("moco.symmetric_keys") | (K("moco.queue_size") >= K("train.batch_size") * 2),
         why="enqueues both views' keys, 2 x train.batch_size ({train.batch_size}) per step: "
         "moco.queue_size ({moco.queue_size}) must hold at least that (the demo: 4096 for "
         "2 x 512)"),
    Rule(key="data.train_split",
         holds=K("loss.name").not_in(names("label_losses"))
         | ((K("data.train_split") == "train") & (K("data.name") != "stl10")),
         why="{data.train_split!r} of {data.name!r} holds unlabelled images; loss "
         "{loss.name!r} needs a label for every training image"),
    bound("eval.knn_every", 0, note="0 = never"),
    bound("eval.online_probe_lr", 0, low_open=True),
    Rule(key="eval.online_probe", holds=~(K("eval.online_probe") & K("train.compile")),
         why="cannot be combined with train.compile (the probe's backbone features have not "
         "been checked under a compiled encoder)"),
    Rule(key="model.sync_bn", holds=~(K("model.sync_bn") & (K("model.bn_splits") > 1)),
         why="and model.bn_splits > 1 exclude each other (split BN emulates per-GPU BN)"),
)  # fmt: skip
