"""The contract kit (``pretrain.testing``, installed with negmine) fails deliberately broken
plugins, each with a message naming the class, the attribute or hook, and what to change: a
strategy that calls ``.item()`` while declaring 0 syncs, a loss with ~3x plain MoCo's ops and no
budget, a strategy returning (N, S, D + 1), a loss that ignores ``extra``, and the rest of the
checks' faults. The classes here are unregistered (as a plugin's are in its own tests): the kit
registers each for its run only."""

from __future__ import annotations

import math
import random
import re
from fractions import Fraction

import pytest
import torch
import torch.nn.functional as F

import negatives
from negatives import ExtraNegatives, NegativeStrategy, Step
from negmine_core.contract.messages import fail
from pretrain import losses
from pretrain.losses import InfoNCE, Loss, info_nce, moco_logits
from pretrain.testing import ContractError, check_loss, check_strategy, syncs
from pretrain.testing.ops import check_bound
from tests.helpers.late_faults import GradAfterEight, NaNEveryFifth
from tests.helpers.troubleshooting_quotes import assert_documented


class Syncs(NegativeStrategy):
    """Declares no host sync (the default) but reads the device every step."""

    def negatives(self, s: Step) -> ExtraNegatives:
        if s.emb.k.sum().item() > 1e9:  # a host sync
            pass
        return ExtraNegatives()


class Heavy(InfoNCE):
    """InfoNCE plus ~2x plain MoCo's step in needless elementwise ops, no ops_budget."""

    def forward(self, s: Step) -> torch.Tensor:
        q = s.emb.q
        for _ in range(280):  # each: one op forward, one backward
            q = q * 1.0
        return info_nce(moco_logits(q, s.emb.k, s.queue, self.temperature, s.extra.shared,
                                    s.extra.per_query))  # fmt: skip


class Declared(Heavy):
    """The same cost, declared on the class."""

    ops_budget = 2.5


class Wide(NegativeStrategy):
    """Per-query negatives one wider than the embeddings: (N, S, D + 1)."""

    @torch.no_grad()
    def negatives(self, s: Step) -> ExtraNegatives:
        n, d = s.emb.q.shape
        return ExtraNegatives(per_query=F.normalize(torch.ones(n, 2, d + 1), dim=-1))


class Deaf(Loss):
    """Plain MoCo's InfoNCE that drops the strategy's negatives."""

    batch_layout = False

    def forward(self, s: Step) -> torch.Tensor:
        return info_nce(moco_logits(s.emb.q, s.emb.k, s.queue, self.temperature))


class NaNs(NegativeStrategy):
    """Non-finite shared negatives."""

    @torch.no_grad()
    def negatives(self, s: Step) -> ExtraNegatives:
        return ExtraNegatives(shared=torch.full_like(s.emb.k[:2], float("nan")))


class Dice(NegativeStrategy):
    """Draws from Python's random, not the torch RNG: not seeded by torch.manual_seed."""

    @torch.no_grad()
    def negatives(self, s: Step) -> ExtraNegatives:
        shift = random.random()  # a continuous draw: two runs differ with probability 1
        return ExtraNegatives(shared=F.normalize(s.emb.k[:1] + shift, dim=1))


class Attached(NegativeStrategy):
    """Returns negatives built from the queue with their gradient."""

    def negatives(self, s: Step) -> ExtraNegatives:
        return ExtraNegatives(shared=F.normalize(s.queue[:3] * 2, dim=1))


class Capturing(NegativeStrategy):
    """Declares one sync and capturable = True."""

    syncs_per_step = 1
    syncs_why = "one .item()"
    capturable = True


class VerifiedUncapturable(NegativeStrategy):
    """Declares its captured step verified on a GPU, but not capturable."""

    capture_verified = True


class VerifiedAsText(NegativeStrategy):
    capturable = True
    capture_verified = "yes"  # type: ignore[assignment]


class DeclaredSync(Syncs):
    """The same one host read per step, declared on the class."""

    syncs_per_step = 1
    syncs_why = "one .item() per step (a test strategy)"


class OverDeclared(DeclaredSync):
    """One host read per step, two declared."""

    syncs_per_step = 2


class BadCount(NegativeStrategy):
    syncs_per_step = "0"  # type: ignore[assignment]


class NegativeCount(NegativeStrategy):
    syncs_per_step = -1


class ParameterBank(NegativeStrategy):
    """Returns its learnable bank itself: an nn.Parameter (requires grad, no grad_fn)."""

    def setup(self, ctx) -> None:
        self.bank = torch.nn.Parameter(F.normalize(torch.ones(4, ctx.dim), dim=1))

    def negatives(self, s: Step) -> ExtraNegatives:
        return ExtraNegatives(shared=self.bank)


class OneNaNRow(NegativeStrategy):
    """Three unit rows, the middle one NaN."""

    @torch.no_grad()
    def negatives(self, s: Step) -> ExtraNegatives:
        shared = s.emb.k[:3].clone()
        shared[1] = float("nan")
        return ExtraNegatives(shared=shared)


class PerQueryDice(NegativeStrategy):
    """Seeded shared negatives, per-query ones from Python's random."""

    @torch.no_grad()
    def negatives(self, s: Step) -> ExtraNegatives:
        per_query = F.normalize(s.emb.q.unsqueeze(1) + random.random(), dim=-1)
        return ExtraNegatives(shared=s.emb.k[:1], per_query=per_query)


class ToHost(NegativeStrategy):
    """Copies the keys to the host every step (``.to("cpu")``: a blocking copy on a GPU)."""

    def negatives(self, s: Step) -> ExtraNegatives:
        s.emb.k.to("cpu")
        return ExtraNegatives()


class EverySeventh(NegativeStrategy):
    """A ``.item()`` on every 7th call of its hook only."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def negatives(self, s: Step) -> ExtraNegatives:
        self.calls += 1
        if self.calls % 7 == 0 and s.emb.k.sum().item() > 1e9:  # a host sync, every 7th call
            pass
        return ExtraNegatives()


class SyncsOnce(NegativeStrategy):
    """Reads the device once, lazily, at its first call (a sync of step 0 only)."""

    def __init__(self) -> None:
        super().__init__()
        self.scale: float | None = None

    def negatives(self, s: Step) -> ExtraNegatives:
        if self.scale is None:
            self.scale = float(s.emb.k.norm())
        return ExtraNegatives()


class PerRow(NegativeStrategy):
    """Each key as a negative, copied in a Python loop over the rows: one op per row."""

    @torch.no_grad()
    def negatives(self, s: Step) -> ExtraNegatives:
        return ExtraNegatives(
            shared=torch.stack([s.emb.k[i] * 1.0 for i in range(s.emb.k.shape[0])])
        )


class SharedOnly(Loss):
    """Plain MoCo's InfoNCE with the strategy's shared negatives; drops the per-query ones."""

    batch_layout = False

    def forward(self, s: Step) -> torch.Tensor:
        return info_nce(moco_logits(s.emb.q, s.emb.k, s.queue, self.temperature, s.extra.shared))


def failure(check, cls, **kwargs) -> str:
    with pytest.raises(ContractError) as e:
        check(cls, **kwargs)
    return str(e.value)


def test_a_strategy_that_syncs_while_declaring_none_fails_naming_syncs_per_step():
    msg = failure(check_strategy, Syncs)
    assert msg.startswith("infonce/kit_syncs: 1 host syncs per step, declared 0: "), msg
    assert f"strategy 'kit_syncs' ({__name__}.Syncs.syncs_per_step) = 0" in msg, msg
    assert "test_contract_kit.py:" in msg and "declare the count in syncs_per_step" in msg, msg
    assert "kit_syncs" not in negatives.list_strategies()  # registered for the run only
    assert "name" not in vars(Syncs)


def test_a_loss_with_three_times_the_ops_and_no_budget_fails_naming_the_budget():
    msg = failure(check_loss, Heavy)
    assert msg.startswith(f"loss 'kit_heavy' ({__name__}.Heavy.forward()): "), msg
    n, base = map(int, re.search(r": (\d+) aten ops per training step on digits_moco, more than "
                                 r"\+15% over plain MoCo's (\d+) ", msg).groups())  # fmt: skip
    assert n > 2.9 * base, (n, base)
    assert f"declare its cost on the class: Heavy.ops_budget = {(n - base) / base:.2f}" in msg
    assert "kit_heavy" not in losses.list_losses()


def test_a_declared_budget_lets_a_heavier_loss_pass_and_the_report_shows_the_counts():
    report = check_loss(Declared)
    assert report.budget == 2.5 and report.ops > 2.9 * report.plain_moco > 0
    assert report.syncs_per_step == 0
    assert f"({report.ops - report.plain_moco:+d}" not in report.line()  # a percentage, not ops
    assert re.search(r"\d+ aten ops per step \(\+\d+\.\d% over plain MoCo's \d+; budget \+250%\)",
                     report.line()), report.line()  # fmt: skip


def test_a_loop_over_rows_fails_on_its_growth_with_the_batch_not_its_cost_at_16():
    """Within +15 % at batch 16, but one op per row: counted at batches 16 and 32, the growth
    extrapolated to 512 fails, advising to vectorise, not a larger ops_budget."""
    from pretrain.testing.ops import plain_moco

    msg = failure(check_strategy, PerRow)
    found = re.search(r"grow with the batch: (\d+) at batch 16, (\d+) at batch 32 on digits_moco "
                      r"\(plain MoCo's: (\d+), (\d+)\), so about (\d+) at batch 512, \+(\d+)% over "
                      r"plain MoCo's (\d+), more than \+15% \(the default\): vectorise its "
                      r"negatives\(\) / transform_batch\(\) \(batched tensor ops, no Python loop "
                      r"over rows or samples\)", msg)  # fmt: skip
    assert msg.startswith(f"strategy 'kit_perrow' ({__name__}.PerRow.negatives()): its aten ops "
                          "per training step"), msg  # fmt: skip
    assert found, msg
    n16, n32, b16, b32, n512, pct, b512 = map(int, found.groups())
    assert (b16, b32) == (plain_moco("digits_moco", 16), plain_moco("digits_moco", 32))
    assert n16 <= 1.15 * b16 and b16 == b32 == b512  # passes at one batch; plain MoCo's is flat
    assert n32 - n16 == 16  # the loop's one op per row, 16 rows more
    assert n512 == n16 + (n32 - n16) * (512 - 16) // 16 and pct == round(100 * (n512 - b512) / b512)
    assert "ops_budget =" not in msg and "declare its cost" not in msg


def test_a_strategy_returning_one_column_too_many_fails_naming_the_hook_and_shape():
    msg = failure(check_strategy, Wide, counts=False)
    assert msg == (f"strategy 'Wide' ({__name__}.Wide.negatives()): returned per_query "
                   "(8, 2, 17); expected (N, S, D) = (8, S, 16): return per_query as "
                   "(N, S, D) = (8, S, 16), rows of q's width"), msg  # fmt: skip


def test_a_loss_that_ignores_the_extra_negatives_fails_naming_extra():
    msg = failure(check_loss, Deaf, counts=False)
    assert msg.startswith(f"loss 'Deaf' ({__name__}.Deaf.forward()): its value is the same "
                          "with and without the strategy's extra negatives (extra.shared): "
                          "use s.extra.shared and s.extra.per_query"), msg  # fmt: skip


@pytest.mark.parametrize(
    ("cls", "member", "what"),
    [
        (NaNs, "negatives()", "returned non-finite shared (NaN or inf)"),
        (Dice, "negatives()", "two runs under torch.manual_seed(0) differ in shared"),
        (Attached, "negatives()", "returned shared that carries a gradient"),
        (Capturing, "capturable", "is True while syncs_per_step = 1"),
        (VerifiedUncapturable, "capture_verified", "is True while capturable = False"),
        (VerifiedAsText, "capture_verified", "is 'yes'"),
        (BadCount, "syncs_per_step", "is '0'"),
        (NegativeCount, "syncs_per_step", "is -1"),
        (ParameterBank, "negatives()", "returned shared that carries a gradient"),
        (OneNaNRow, "negatives()", "returned non-finite shared (NaN or inf)"),
        (PerQueryDice, "negatives()", "two runs under torch.manual_seed(0) differ in per_query"),
        (
            GradAfterEight,
            "negatives()",
            "returned shared that carries a gradient at s.ctx.global_step 8 (s.ctx.epoch 2)",
        ),
        (
            NaNEveryFifth,
            "negatives()",
            "returned non-finite shared (NaN or inf) at s.ctx.global_step 9 (s.ctx.epoch 2.0625)",
        ),
    ],
)
def test_each_fault_names_the_class_and_the_member(cls, member, what):
    msg = failure(check_strategy, cls, counts=False)
    assert msg.startswith(f"strategy '{cls.__name__}' ({cls.__module__}.{cls.__name__}.{member}): "
                          f"{what}: "), msg  # fmt: skip


def test_capture_verified_without_capturable_is_quoted_in_troubleshooting():
    heading = "`capture_verified` (a step verified under CUDA-graph capture)"
    assert_documented(failure(check_strategy, VerifiedUncapturable, counts=False), heading)


def scaled(factor: float) -> type:
    """A strategy returning the keys times ``factor`` (rows of norm ``factor``)."""

    def negatives(self, s: Step) -> ExtraNegatives:
        return ExtraNegatives(shared=s.emb.k * factor)

    return type("Scaled", (NegativeStrategy,), {"negatives": negatives})


def test_unit_norm_is_held_to_one_part_in_ten_thousand():
    """The tolerance (1e-4 in float32, negmine_core.contract.checks.UNIT_TOLERANCE): rows off by
    1e-3 are refused, naming how far; rows off by 1e-6 (float32 rounding) pass."""
    msg = failure(check_strategy, scaled(1 + 1e-3), counts=False)
    assert re.search(r"\.Scaled\.negatives\(\)\): returned shared whose rows are not unit norm "
                     r"\(off by 0\.001\): normalise them", msg), msg  # fmt: skip
    check_strategy(scaled(1 + 1e-6), counts=False)


def test_a_loss_that_ignores_the_per_query_negatives_fails_naming_per_query():
    msg = failure(check_loss, SharedOnly, counts=False)
    assert msg.startswith(f"loss 'SharedOnly' ({__name__}.SharedOnly.forward()): its value is the "
                          "same with and without the strategy's extra negatives "
                          "(extra.per_query): "), msg  # fmt: skip


def test_a_copy_to_the_host_by_to_cpu_is_a_sync():
    msg = failure(syncs.check_syncs, ToHost)
    assert msg.startswith("infonce/kit_tohost: 1 host syncs per step, declared 0: "), msg
    assert "host_copy: " in msg and "test_contract_kit.py:" in msg, msg


def test_a_sync_on_every_seventh_call_only_is_found():
    """Four training steps show no sync; the kit's 35 calls of the hook (s.ctx.global_step 0 to 31
    and three far steps) show the calls that sync."""
    msg = failure(syncs.check_syncs, EverySeventh)
    assert msg.startswith(f"strategy 'EverySeventh' ({__name__}.EverySeventh.syncs_per_step) "
                          "= 0: host syncs per call of its negatives() and transform_batch() "
                          "differ between calls: 1 at s.ctx.global_step 6, 1 at "
                          "s.ctx.global_step 13, 1 at s.ctx.global_step 20, 1 at "
                          "s.ctx.global_step 27, 1 at s.ctx.global_step "
                          "100000, 0 at the other 30 of 35 calls; measured at: item: "
                          ), msg  # fmt: skip


def test_a_sync_at_the_first_step_only_is_named_at_step_0():
    msg = failure(syncs.check_syncs, SyncsOnce)
    assert msg.startswith("infonce/kit_syncsonce step 0: 1 host syncs, declared 0: "), msg
    assert "build per-device constants at construction or .to()" in msg, msg


def test_the_message_form_is_class_member_what_and_fix():
    assert str(fail(Wide, "symmetric_ok", "is x", "declare y")) == (
        f"strategy 'Wide' ({__name__}.Wide.symmetric_ok): is x: declare y"
    )


def test_a_loss_must_be_a_loss_subclass():
    with pytest.raises(ContractError, match="is not a pretrain.losses.base.Loss subclass"):
        check_loss(int)


def built_in(registry) -> list[str]:
    """The registry's own names (an installed plugin is checked by its own tests)."""
    return [name for name in registry.names() if not registry.origin(name)]


@pytest.mark.parametrize("name", built_in(negatives.strategies))
def test_every_registered_strategy_passes_the_kit(name):
    """The built-ins through the same kit a plugin's own tests run; their counts run in
    test_step_syncs.py / test_step_ops.py through the kit's steps, against the pins."""
    check_strategy(negatives.strategies.get(name), counts=False)


@pytest.mark.parametrize("name", built_in(losses.registry))
def test_every_registered_loss_passes_the_kit(name):
    check_loss(losses.registry.get(name), counts=False)


class LocalDraws(NegativeStrategy):
    """Draws per-query negatives from the local rows with the shared seed: under DDP every rank
    repeats the same draws (declares ddp_check, so the kit runs 2 gloo ranks)."""

    ddp_check = True

    @torch.no_grad()
    def negatives(self, s: Step) -> ExtraNegatives:
        idx = torch.randint(s.queue.shape[0], (s.emb.q.shape[0], 2))
        return ExtraNegatives(per_query=s.queue[idx].clone())


def test_two_gloo_ranks_must_see_what_one_process_sees():
    """modified_mochi draws for the global batch and keeps its rows: 2 ranks equal one process;
    a strategy that draws for its local rows only fails, naming ddp_check."""
    from pretrain.testing.ddp import check_ranks

    check_ranks(negatives.strategies.get("modified_mochi"))
    msg = failure(check_strategy, LocalDraws, counts=False)
    head = f"strategy 'LocalDraws' ({__name__}.LocalDraws.negatives()): rank 1 of 2 (gloo) "
    tail = "batch (ddp_check = True): under DDP draw for the global batch"
    assert msg.startswith(head + "returns other per_query than one process with the global " + tail)


def test_a_strategys_declared_sync_count_is_what_it_is_held_to():
    """Every built-in declares 0, so only a strategy declaring another count shows that the
    declaration is read: one read per step declared 1 passes (step 0 too), declared 2 fails."""
    got = syncs.check_syncs(DeclaredSync)
    assert got["counts"] and set(got["counts"]) == {1} and got["first"]["count"] == 1, got
    msg = failure(syncs.check_syncs, OverDeclared)
    assert re.match(r"infonce/\S+: 1 host syncs per step, declared 2: ", msg), msg
    assert f"({__name__}.OverDeclared.syncs_per_step) = 2" in msg, msg


@pytest.mark.parametrize("budget", [None, 2.5])
@pytest.mark.parametrize("base", [271, 618])
def test_the_op_bound_holds_exactly_at_its_edge(budget, base):
    """Plain MoCo's ``base`` ops plus the budget (+15 % undeclared), rounded down, passes; one
    op more fails naming the budget (the edge from exact fractions, not the kit's floats)."""
    cls = type("Edge", (InfoNCE,), {"ops_budget": budget, "__doc__": "An op-bound probe."})
    allowed = Fraction("0.15") if budget is None else Fraction(str(budget))
    edge = math.floor(base * (1 + allowed))
    check_bound("loss", "edge", cls, "digits_moco", edge, base)
    with pytest.raises(ContractError, match=rf"{edge + 1} aten ops per training step on "
                       rf"digits_moco, more than \+\d+% over plain MoCo's {base} \(at most "
                       rf"{edge}, "):  # fmt: skip
        check_bound("loss", "edge", cls, "digits_moco", edge + 1, base)
