"""The OC-SVM's host and device loops stop at a wall-clock cap or, in a long solve, at a stop
request, each with one warning per object, and the state they stop in is libsvm's at that
iteration (scikit-learn with ``max_iter`` = the iterations done). A MiOC run whose solver spins
(as gamma=1e300 once made it) stops on SIGTERM and checkpoints as any preemption does."""

from __future__ import annotations

import os
import signal
import time
import warnings
from types import SimpleNamespace

import pytest
import torch
from sklearn.svm import OneClassSVM as SkOneClassSVM

from negatives.ocsvm import limits, smo
from negatives.ocsvm.svm import OneClassSVM
from pretrain.engine import checkpoint
from pretrain.testing.fakedata import embeddings
from tests.helpers.paths import ROOT
from tests.helpers.troubleshooting_quotes import assert_documented

# 1,167 iterations on the host loop, which polls between chunks of at most n = 300 of them
SETTING = {"nu": 0.5, "gamma": 10.0, "tol": 1e-6}


def fake_clock(monkeypatch, step: float) -> None:
    """Each read of the solver's clock is ``step`` seconds after the one before."""
    now = iter(range(10**9))
    monkeypatch.setattr(limits, "time", SimpleNamespace(perf_counter=lambda: next(now) * step))


def same_as_sklearn_stopped_there(ours: OneClassSVM, X: torch.Tensor) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scikit-learn's own max_iter warning
        sk = SkOneClassSVM(kernel="rbf", max_iter=ours.n_iter_, **SETTING).fit(X.numpy())
    assert ours.n_iter_ == sk.n_iter_
    assert torch.equal(ours.support_, torch.from_numpy(sk.support_).long())
    torch.testing.assert_close(ours.dual_coef_, torch.from_numpy(sk.dual_coef_), rtol=0, atol=1e-12)
    torch.testing.assert_close(ours.offset_, torch.from_numpy(sk.offset_), rtol=0, atol=1e-12)


def full_iterations(X: torch.Tensor) -> int:
    return OneClassSVM(loop="host", **SETTING).fit(X).n_iter_


@pytest.mark.parametrize("loop", ["host", "device"])
def test_the_time_cap_stops_the_solver_with_one_warning(monkeypatch, loop):
    X = embeddings(300, 10, seed=0)[0].double()
    full = full_iterations(X)
    fake_clock(monkeypatch, 1.0)
    svm = OneClassSVM(loop=loop, max_seconds=2.5, **SETTING)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(2):  # a refit every step warns once
            svm.fit(X)
            assert svm.fit_status_ == 1 and svm.stopped_by_ == "max_seconds"
            assert 0 < svm.n_iter_ < full
    messages = [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)]
    assert messages == [
        f"OneClassSVM stopped after max_seconds=2.5 s at iteration {svm.n_iter_}, before the "
        "solver's stopping rule: the fit is the solver's state then (warned once)"
    ]
    assert_documented(messages[0])
    same_as_sklearn_stopped_there(svm, X)


def test_the_iteration_cap_warns_once_over_refits():
    X = embeddings(300, 10, seed=0)[0].double()
    svm = OneClassSVM(loop="host", max_iter=50, **SETTING)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(3):
            svm.fit(X)
    assert [str(w.message) for w in seen] == ["OneClassSVM stopped at max_iter=50"]
    assert_documented(str(seen[0].message))
    same_as_sklearn_stopped_there(svm, X)


def test_a_stop_request_cuts_a_long_solve_short_and_a_short_one_not(monkeypatch):
    X = embeddings(300, 10, seed=0)[0].double()
    full = full_iterations(X)
    asked = []
    svm = OneClassSVM(loop="host", should_stop=lambda: asked.append(1) or True, **SETTING)
    svm.fit(X)  # well under a second: the request is not read, the fit is the whole solve
    assert (svm.n_iter_, svm.fit_status_, asked) == (full, 0, [])

    fake_clock(monkeypatch, 0.4)  # the request is read from the poll 1 s into the solve
    with pytest.warns(RuntimeWarning, match="a stop was requested") as seen:
        svm.fit(X)
    assert str(seen[0].message) == (
        f"OneClassSVM stopped at iteration {svm.n_iter_}: a stop was requested (SIGTERM, SIGUSR2 "
        "or Ctrl-C) during a long solve; the fit is the solver's state then (warned once)"
    )
    assert_documented(str(seen[0].message))
    assert svm.fit_status_ == 1 and svm.stopped_by_ == "stop" and asked == [1]
    assert 0 < svm.n_iter_ < full
    same_as_sklearn_stopped_there(svm, X)


def test_a_sigterm_during_a_spinning_solve_checkpoints_as_a_preemption(tmp_path, monkeypatch):
    """The host solver made to spin (no iteration ever done, as on a NaN kernel): SIGTERM sets
    the stop request, the solve returns, the step ends, and the run saves a checkpoint at that
    step and exits 0. Without the poll the solve would spin on (here: fail after 60 s)."""
    from pretrain.runtime import checkpoint_io
    from tests.helpers.inproc import pretrain
    from tests.helpers.runs import SUBSET_RUN

    spun: list[float] = []

    def spin(self, s, steps, eps):
        if not spun:
            spun.append(time.monotonic())
            os.kill(os.getpid(), signal.SIGTERM)
        assert time.monotonic() - spun[0] < 60, "the solver never polled the stop request"
        return 0, False  # no progress, no convergence

    monkeypatch.setattr(smo.HostOps, "run", spin)
    out = tmp_path / "run"
    with pytest.warns(RuntimeWarning, match="a stop was requested"):
        done = pretrain("--cfg", "digits_mioc.yaml", f"out_dir={out}", *SUBSET_RUN,
                        "train.epochs=1", "negatives.kwargs.warmup_epochs=0")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "SIGTERM: checkpoint saved at epoch 1 step 1/" in done.stdout, done.stdout
    assert checkpoint_io.load(out / "checkpoints" / "last.pt")["global_step"] == 1


def mioc_svm() -> OneClassSVM:
    """MiOC's own solver (its wall-clock cap and stop request) on the host loop at SETTING."""
    from negatives.mioc import MiOC

    return MiOC(loop="host", **SETTING).svm


def test_a_stop_request_lasts_one_run_so_later_solves_in_the_process_converge(monkeypatch):
    """R04: a stop signal cuts the run's long solve short; once the run has left its signal
    handlers (StopSignals), a solve in the same process runs to the stopping rule again, and a
    request left over from before a run does not reach into it."""
    from negmine_core import stop as stop_request

    X = embeddings(300, 10, seed=0)[0].double()
    full = full_iterations(X)
    fake_clock(monkeypatch, 0.4)  # the request is read from the poll 1 s into the solve
    svm = mioc_svm()
    with checkpoint.StopSignals():
        os.kill(os.getpid(), signal.SIGUSR2)  # the run's handler sets the request
        time.sleep(0.01)  # (Python runs the handler between bytecodes)
        with pytest.warns(RuntimeWarning, match="a stop was requested"):
            svm.fit(X)
        assert svm.stopped_by_ == "stop" and 0 < svm.n_iter_ < full
    svm.fit(X)  # the run is over: the request with it
    assert (svm.n_iter_, svm.fit_status_, svm.stopped_by_) == (full, 0, "")
    stop_request.request()  # left over from before the next run
    with checkpoint.StopSignals():
        svm.fit(X)
        assert (svm.n_iter_, svm.fit_status_, svm.stopped_by_) == (full, 0, "")
    assert not stop_request.requested()


def test_miocs_solve_cap_is_the_documented_60_s_and_stops_a_fit(monkeypatch):
    """L04: MiOC's wall-clock cap per fit is the one docs/troubleshooting.md states, and a fit
    whose clock passes it stops there with the warning quoting it; a fit that stays under it
    runs to the stopping rule."""
    import re

    from negatives import mioc

    page = (ROOT / "docs" / "troubleshooting.md").read_text()
    documented = float(re.search(r"\(MiOC: (\d+) s a fit,", page).group(1))
    assert mioc.MAX_SOLVE_S == documented == 60
    X = embeddings(300, 10, seed=0)[0].double()
    full = full_iterations(X)
    svm = mioc_svm()
    fake_clock(monkeypatch, 0.001)  # a fit of well under 60 s on this clock
    svm.fit(X)
    assert (svm.n_iter_, svm.stopped_by_) == (full, "")
    fake_clock(monkeypatch, 20.0)  # 20 s a read: polls at 20, 40, 60 s
    with pytest.warns(RuntimeWarning, match=r"max_seconds=60 s at iteration") as seen:
        svm.fit(X)
    assert svm.stopped_by_ == "max_seconds" and 0 < svm.n_iter_ < full, str(seen[0].message)
