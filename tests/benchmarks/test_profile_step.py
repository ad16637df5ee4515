"""benchmarks/profile_step.py's captured mode and its GPU-busy share, on a CPU (no capture here):
``--capture`` is parsed and refused on a CPU before anything is built (exit 2, a documented
message), the trainer's refusals are passed on, the device's work is told from the profiler's
annotations, and the busy share is the union of the work's intervals per step over the wall time
per step (re-derived here on a microsecond grid)."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
import torch

from benchmarks import profile_step
from pretrain import config
from tests.helpers.troubleshooting_quotes import assert_documented

HEADING = "`benchmarks/profile_step.py --capture` (the captured step's profile)"
CUDA, CPU = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU


class Event:
    """A stand-in for torch.profiler's ``FunctionEvent`` (``prof.events()``): what is read."""

    def __init__(self, kind: str, start_us: float, end_us: float, device=CUDA):
        self.device_type = device
        self.time_range = SimpleNamespace(start=start_us, end=end_us)
        self.is_user_annotation = kind in ("user_annotation", "gpu_user_annotation")


def grid_busy_us(spans: list[tuple[float, float]], horizon: int) -> int:
    """Microseconds of ``[0, horizon)`` covered by at least one span: the reference."""
    return sum(any(a <= t < b for a, b in spans) for t in range(horizon))


def steps_events() -> list[Event]:
    """Two 100 µs steps: each a ``negmine.step`` range (on the CPU and its device-side copy,
    spanning the step's kernels), kernels on two streams overlapping, a copy, a set, a gap, and the
    CPU's runtime calls."""
    out = []
    for t0 in (0, 100):
        out += [Event("user_annotation", t0, t0 + 100, CPU),
                Event("gpu_user_annotation", t0 + 5, t0 + 95, CUDA),
                Event("cuda_runtime", t0, t0 + 3, CPU),
                Event("kernel", t0 + 5, t0 + 40, CUDA),
                Event("kernel", t0 + 30, t0 + 50, CUDA),  # a second stream, overlapping
                Event("gpu_memcpy", t0 + 60, t0 + 70, CUDA),
                Event("gpu_memset", t0 + 80, t0 + 85, CUDA),
                Event("kernel", t0 + 90, t0 + 90, CUDA)]  # fmt: skip
    return out


def test_the_device_work_is_kernels_copies_and_sets_not_the_annotations():
    """The device's work: the kernels, copies and sets; not the GPU-side range of a
    ``record_function`` (it spans the step's kernels, gaps included), nor the CPU's events."""
    spans = profile_step.device_spans(steps_events())
    want = [(t0 + a, t0 + b) for t0 in (0, 100) for a, b in ((5, 40), (30, 50), (60, 70),
                                                            (80, 85))]  # fmt: skip
    assert sorted(spans) == sorted(want)


def test_the_busy_share_is_the_union_of_the_work_per_step_over_the_wall_per_step():
    spans = profile_step.device_spans(steps_events())
    busy, share = profile_step.busy_share(spans, steps=2, wall_us=100.0)
    covered = grid_busy_us(spans, 200)  # 45 + 10 + 5 = 60 µs a step
    assert busy == pytest.approx(covered / 2) and covered == 120
    assert share == pytest.approx(covered / 2 / 100.0)
    # with the annotation's range counted (what the union read before), the step is all busy
    every = [(e.time_range.start, e.time_range.end) for e in steps_events()
             if e.device_type == CUDA and e.time_range.end > e.time_range.start]  # fmt: skip
    assert grid_busy_us(every, 200) / 2 / 100.0 == pytest.approx(0.9)
    odd = [(20.0, 30.0), (0.0, 12.0), (3.0, 7.0), (40.0, 41.0), (39.0, 45.0), (60.0, 60.0)]
    covered = grid_busy_us(odd, 80)  # unsorted, nested, empty
    assert profile_step.busy_share(odd, 3, 20.0) == pytest.approx((covered / 3, covered / 60))


def test_the_tables_quote_each_steps_busy_share():
    """The GPU-busy table and the summary rows: each mode's busy ms, its share of the profiled
    step and of the unprofiled step, from the measured figures."""
    got = {"eager": {"wall_us": 50_000.0, "busy_us": 11_000.0, "share": 0.22, "step_ms": 38.0,
                     "bare_ms": 30.0, "per_cat": dict.fromkeys(profile_step.CATEGORIES, 0.0),
                     "total": 11_000.0, "steps": 5},
           "captured": {"wall_us": 12_000.0, "busy_us": 10_800.0, "share": 0.9, "step_ms": 12.5,
                        "bare_ms": None}}  # fmt: skip
    rows = profile_step.busy_rows(got, 20)
    captured = next(r for r in rows if r.startswith("| captured"))
    cells = [c.strip() for c in captured.strip("|").split("|")]
    assert cells[1:] == ["12.00", "10.80", "90.0 %", "12.50", f"{100 * 10.8 / 12.5:.1f} %"]
    summary = "".join(profile_step.summary_rows("c.yaml", got, 30.0, cuda=True))
    assert (
        "| profile c.yaml captured: step ms (unprofiled), bare model's step ms | 12.5, 30.0 |"
        in (summary)
    )
    assert ("| profile c.yaml captured: GPU busy ms per step, share of the profiled step, of the "
            "unprofiled step | 10.80, 90 %, 86 % |") in summary  # fmt: skip
    assert "| profile c.yaml: GPU busy ms per step, share of the profiled step, of the " in summary
    got["captured"]["busy_us"] = got["captured"]["share"] = None  # no device work recorded
    assert "| no device work recorded | - | - |" in "".join(profile_step.busy_rows(got, 20))


@pytest.mark.parametrize("capture", ["on", "both"])
def test_capture_on_a_cpu_exits_2_before_anything_is_built(capture, tmp_path, monkeypatch, capsys):
    results = tmp_path / "results.md"
    argv = ["profile_step.py", "--device", "cpu", "--quick", "--capture", capture, "--results",
            str(results)]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setattr(profile_step, "build", lambda *a, **k: pytest.fail("built"))
    with pytest.raises(SystemExit) as stop:
        profile_step.main()
    assert stop.value.code == 2 and not results.exists()
    message = capsys.readouterr().err.strip().splitlines()[-1].removeprefix(
        "profile_step.py: error: ")  # fmt: skip
    assert message == (f"--capture {capture}: the captured step (train.cuda_graphs) needs CUDA "
                       "(the device is cpu); leave --capture out (off)")  # fmt: skip
    assert_documented(message, HEADING)


def test_capture_takes_off_on_or_both(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["profile_step.py", "--capture", "yes"])
    with pytest.raises(SystemExit) as stop:
        profile_step.main()
    assert stop.value.code == 2
    assert "--capture: invalid choice: 'yes' (choose from" in capsys.readouterr().err


def test_a_step_the_trainer_does_not_capture_is_refused_with_its_reason():
    """On CUDA the trainer's own refusals (pretrain.engine.cuda_graphs.refusal) are passed on:
    MiOC is not capturable; cifar10_moco's step is; off never asks."""
    mioc = profile_step.capture_refusal(config.load("cifar10_mioc.yaml"), "both", "cuda")
    assert mioc.startswith("--capture both: train.cuda_graphs refuses it: strategy 'mioc' ")
    assert_documented(mioc, HEADING)
    assert profile_step.capture_refusal(config.load("cifar10_moco.yaml"), "on", "cuda") is None
    assert profile_step.capture_refusal(config.load("cifar10_mioc.yaml"), "off", "cpu") is None
