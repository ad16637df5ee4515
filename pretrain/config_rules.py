"""The config's value rules as data: :func:`pretrain.config.validate` runs them in order, and
``scripts/gen_config_docs.py`` lists them (a key's own bounds beside it, the rules that read
several keys under "Rules across keys"), so the page and the check cannot disagree.

A :class:`Rule` names the key it reports and its message, a template in which ``{section.key}``
is that key's value and ``{batch_losses}``-style names are the registries' lists (:class:`Facts`).
A rule on one key holds by a predicate; :func:`bound` states a numeric bound once, its predicate
and its message ("must lie in [0, 1]") made from the same numbers. A rule across keys holds by its
condition ``when``, a Python expression over the config's sections (``loss.symmetric``) and the
registries' lists: the one statement of it, evaluated here and printed as it is on the page. A
failed rule raises ``config key 'KEY' = VALUE <message>`` (exit 2).
"""

from __future__ import annotations

import string
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pretrain.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class Facts:
    """What rules read besides the config: the chosen loss and strategy classes, and the names
    of the registered losses and strategies that have each rule flag (for the messages)."""

    loss: Any  # the loss class of loss.name
    strategy: Any  # the strategy class of negatives.name
    names: dict[str, tuple[str, ...]] = field(default_factory=dict)  # {"batch_losses": (...)}


def facts(loss_name: str, strategy_name: str) -> Facts:
    """The :class:`Facts` of a config's loss and strategy (from the registries)."""
    return Facts(loss=_losses().get(loss_name), strategy=_strategies().get(strategy_name),
                 names=registry_names())  # fmt: skip


def registry_names() -> dict[str, tuple[str, ...]]:
    """The registries' names by rule flag, as the rules name them."""
    losses, strategies = _losses(), _strategies()
    flagged = {  # name: (registry, class attribute, the value that puts a name in the list)
        "batch_losses": (losses, "batch_layout", True),
        "queue_optional": (losses, "can_drop_queue", True),
        "label_losses": (losses, "needs_labels", True),
        "support_losses": (losses, "extra_views", True),
        "queue_replacing": (strategies, "replaces_queue", True),
        "per_query_strategies": (strategies, "symmetric_ok", False),
    }
    return {
        key: tuple(
            n
            for n in reg.names()  # a name claimed twice: refused only where it is used
            if not reg.problem(n) and bool(getattr(reg.get(n), flag)) == value
        )
        for key, (reg, flag, value) in flagged.items()
    }


def _losses() -> Any:
    from pretrain.losses import registry  # the registries import torch; config stays light

    return registry


def _strategies() -> Any:
    from negatives.registry import strategies

    return strategies


def check_loss_kwargs(cfg: Any, loss_cls: Any) -> None:
    """``loss.kwargs``: the loss's own constructor arguments (not those the trainer fills in from
    other keys, ``Loss.from_config``), plus the kappa head's two weights with a kappa head."""
    from pretrain.losses import KAPPA_KWARGS
    from pretrain.losses import registry as losses_registry

    own = dict(cfg.loss.kwargs)
    for key in own:
        if key in loss_cls.from_config:
            raise ConfigError(
                f"config key 'loss.kwargs.{key}': loss {cfg.loss.name!r} takes {key} from "
                f"{loss_cls.from_config[key]}, not from loss.kwargs; set that instead"
            )
    for key in KAPPA_KWARGS:
        if key in own:
            if cfg.model.kappa_hidden <= 0:
                raise ConfigError(
                    f"config key 'loss.kwargs.{key}' is set but the model has no kappa head "
                    "(set model.kappa_hidden, e.g. 512)"
                )
            own.pop(key)
    try:
        losses_registry.check_kwargs(cfg.loss.name, own)
    except ValueError as e:
        raise ConfigError(f"config key 'loss.kwargs': {e}") from None


Predicate = Callable[[Any, Facts], bool]


@dataclass(frozen=True, kw_only=True)
class Rule:
    """One check of the config.

    Args:
        key: the dotted key the error names (and whose value it shows).
        why: the message after ``config key 'KEY' = VALUE``, a template (see the module doc).
        holds: a rule on ``key`` alone: ``(cfg, facts) -> bool``, False is the error.
        when: a rule across keys: its condition, a Python expression over the config's sections
            and the registries' lists (``{batch_losses}``), evaluated by :meth:`error` and
            printed by the configuration reference.
    """

    key: str
    why: str
    holds: Predicate | None = None
    when: str = ""

    def value(self, cfg: Any) -> Any:
        section, name = self.key.split(".")
        return getattr(getattr(cfg, section), name)

    def condition(self, names: dict[str, tuple[str, ...]]) -> str:
        """``when`` with the registries' lists written out as tuples."""
        return self.when.format(**{k: repr(v) for k, v in names.items()})

    def error(self, cfg: Any, facts: Facts) -> str | None:
        """None if the rule holds, else the full message."""
        if self.holds is not None:
            ok = self.holds(cfg, facts)
        else:
            scope = {f: getattr(cfg, f) for f in SECTIONS}
            ok = eval(self.condition(facts.names), {"__builtins__": {}}, scope)  # noqa: S307
        if ok:
            return None
        message = _Fill(cfg, facts.names).format(self.why)
        return f"config key {self.key!r} = {self.value(cfg)!r} {message}"


SECTIONS = ("data", "model", "moco", "train", "eval", "loss", "negatives")


class _Fill(string.Formatter):
    """``{section.key}`` (with ``!r``) from the config, ``{name}`` from the registries' lists."""

    def __init__(self, cfg: Any, names: dict[str, tuple[str, ...]]) -> None:
        self.cfg, self.names = cfg, names

    def get_field(self, field_name: str, args: Any, kwargs: Any) -> tuple[Any, str]:
        if field_name in self.names:
            return ", ".join(self.names[field_name]), field_name
        obj = self.cfg
        for part in field_name.split("."):
            obj = getattr(obj, part)
        return obj, field_name


def bound(
    key: str,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
    note: str = "",
) -> Rule:
    """``key`` within [low, high] (an end ``None`` is unbounded, ``*_open`` excludes it): the
    predicate and the message from the same two numbers."""

    def holds(cfg: Any, _: Facts) -> bool:
        section, name = key.split(".")
        v = getattr(getattr(cfg, section), name)
        above = low is None or (v > low if low_open else v >= low)
        below = high is None or (v < high if high_open else v <= high)
        return above and below

    if low is not None and high is not None:
        why = f"must lie in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    elif low == 0 and low_open:
        why = "must be positive"
    elif low is not None:
        why = f"must be {'above' if low_open else '>='} {low:g}"
    else:
        why = f"must be {'below' if high_open else '<='} {high:g}"
    return Rule(key=key, holds=holds, why=why + (f" ({note})" if note else ""))


def _whole_or_fraction(subset: float) -> bool:
    return subset == 0 or 0 < subset < 1 or (subset >= 1 and subset == int(subset))


RULES: tuple[Rule, ...] = (
    bound("moco.queue_size", 0, low_open=True),
    bound("moco.momentum", 0, 1),
    bound("moco.temperature", 1e-3, low_open=True),
    bound("train.epochs", 0, low_open=True),
    bound("train.batch_size", 2),
    bound("train.base_lr", 0, low_open=True),
    bound("train.lr_base_batch", 0, low_open=True,
          note="the lr is base_lr * batch_size / lr_base_batch"),
    Rule(key="train.lr_milestones",
         holds=lambda c, f: all(m >= 1 for m in c.train.lr_milestones)
         and list(c.train.lr_milestones) == sorted(set(c.train.lr_milestones)),
         why="must be increasing epochs >= 1 (the lr is multiplied by 0.1 from each)"),
    bound("train.weight_decay", 0),
    bound("train.sgd_momentum", 0, 1, high_open=True),
    Rule(key="train.warmup_epochs", when="0 <= train.warmup_epochs < train.epochs",
         why="must lie in [0, train.epochs)"),
    bound("train.log_every", 0, low_open=True),
    Rule(key="train.lr_first_epoch",
         when="train.lr_first_epoch in (0, 1) and (train.lr_first_epoch == 0 or "
         "train.warmup_epochs == 0)",
         why="must be 0 or 1 (1 only without train.warmup_epochs)"),
    bound("train.ckpt_every", 0, low_open=True),
    bound("train.dist_timeout_min", 0, low_open=True),
    bound("train.threads", 0, note="0 = automatic"),
    bound("model.bn_splits", 1),
    Rule(key="model.bn_splits", when="train.batch_size % model.bn_splits == 0",
         why="must divide train.batch_size ({train.batch_size})"),
    Rule(key="data.crop_scale",
         holds=lambda c, f: 0 < c.data.crop_scale[0] <= c.data.crop_scale[1] <= 1,
         why="must be (low, high) with 0 < low <= high <= 1"),
    bound("eval.knn_k", 0, low_open=True),
    bound("eval.knn_temperature", 0, low_open=True,
          note="the votes are weighted by exp(similarity / T)"),
    bound("eval.batch_size", 0, low_open=True),
    bound("data.image_size", 0, low_open=True),
    bound("data.hflip_prob", 0, 1),
    bound("data.grayscale_prob", 0, 1),
    bound("data.jitter_prob", 0, 1),
    bound("data.blur_prob", 0, 1),
    bound("data.jitter_strength", 0, 2, note="ColorJitter's hue, strength / 4, is at most 0.5"),
    bound("data.eval_resize", 0, low_open=True),
    Rule(key="data.std", holds=lambda c, f: all(s > 0 for s in c.data.std),
         why="must be positive (images are divided by it)"),
    bound("model.width", 0, low_open=True),
    bound("model.dim", 0, low_open=True),
    Rule(key="data.support_views",
         when="data.support_views == 0 or (data.support_views > 0 and data.augment_on == "
         "'device')",
         why="must be 0, or positive with data.augment_on=device (the support crops are batched "
         "in stage 2 like the two views)"),
    Rule(key="data.support_views", when="data.support_views > 0 or loss.name not in "
         "{support_losses}",
         why="must be positive for loss.name={loss.name!r} (its false negatives are found "
         "through the support views; the official count is 8)"),
    Rule(key="data.augment_compile",
         when="not data.augment_compile or data.augment_on == 'device'",
         why="compiles stage 2, which only data.augment_on=device has; set it false for workers"),
    bound("train.max_steps", 0, note="0 = no limit"),
    bound("data.num_workers", -1, note="-1 = automatic"),
    Rule(key="data.decode_on",
         when="data.decode_on != 'device' or (data.augment_on == 'device' and data.name in "
         "('imagefolder', 'imagenet100') and data.affine_degrees == 0 and "
         "data.affine_translate == 0)",
         why="needs image files (data.name imagefolder or imagenet100), data.augment_on=device "
         "and no RandomAffine (data.affine_degrees = data.affine_translate = 0); use auto or "
         "cpu"),
    Rule(key="data.resident",
         when="data.resident != 'device' or (data.augment_on == 'device' and data.decode_on != "
         "'device')",
         why="needs data.augment_on=device (the two-stage augmentation) and data.decode_on auto "
         "or cpu; use auto or off"),
    Rule(key="data.subset", holds=lambda c, f: _whole_or_fraction(c.data.subset),
         why="must be 0 (all), a fraction in (0, 1) or a whole number of images per class"),
    bound("model.kappa_hidden", 0, note="0 = no head"),
    Rule(key="data.in_classes",
         holds=lambda c, f: all(x >= 0 for x in c.data.in_classes)
         and len(set(c.data.in_classes)) == len(c.data.in_classes),
         why="must be distinct non-negative class indices"),
    Rule(key="loss.symmetric", when="not loss.symmetric or loss.name in {batch_losses}",
         why="needs a batch loss ({batch_losses}); {loss.name} has its own layout"),
    Rule(key="loss.contrast_queue", when="loss.contrast_queue or loss.name in {queue_optional}",
         why="can be turned off for {queue_optional} only"),
    Rule(key="loss.contrast_queue",
         when="not (negatives.name in {queue_replacing} and loss.contrast_queue)",
         why="must be false with negatives {negatives.name!r}: its negatives replace the queue "
         "(use loss.name nt_xent, or another of {queue_optional}, with "
         "loss.contrast_queue=false)"),
    Rule(key="loss.symmetric",
         when="not loss.symmetric or negatives.name not in {per_query_strategies}",
         why="cannot be combined with negatives {negatives.name!r}: its per-query negatives "
         "belong to the first view's queries only"),
    Rule(key="data.train_split",
         when="loss.name not in {label_losses} or (data.train_split == 'train' and data.name != "
         "'stl10')",
         why="{data.train_split!r} of {data.name!r} holds unlabelled images; loss "
         "{loss.name!r} needs a label for every training image"),
    bound("eval.knn_every", 0, note="0 = never"),
    bound("eval.online_probe_lr", 0, low_open=True),
    Rule(key="eval.online_probe", when="not (eval.online_probe and train.compile)",
         why="cannot be combined with train.compile (the probe reads the backbone through a "
         "hook)"),
    Rule(key="model.sync_bn", when="not (model.sync_bn and model.bn_splits > 1)",
         why="and model.bn_splits > 1 exclude each other (split BN emulates per-GPU BN)"),
    Rule(key="model.bn_splits", when="train.batch_size // model.bn_splits >= 2",
         why="leaves fewer than 2 images per BatchNorm split"),
)  # fmt: skip
