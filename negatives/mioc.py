"""``mioc``: One-Class-SVM-guided mixing of queries with (inlier) queue keys (MiOC).

[0] Jain, Mayet, Hérault, Modzelewski, "One-Class SVM-guided Negative Sampling for Enhanced
    Contrastive Learning" (MiOC), NLDL 2025 (Alg. 1, Eqs. 3-5, Sec. 4.1.1,
    App. A.2-A.3).
Implementation based on [1] https://github.com/DJ-CHB/MiOC-Official/blob/8fa57b6/Code/moco/builder.py
(``forward_mioc``) and ``Code/moco/utils_mioc.py``, re-derived from [0] (Jain et al. 2025, MiOC,
Alg. 1 and Eqs. 3-5).

Each step, after the key forward and before the enqueue:

    f = OneClassSVM(rbf, nu, gamma).fit(cat(q, k)).decision_function        (fit on 2B points)
    O = {n in queue : f(n) > 0}                                              (queue before enqueue)
    S_n: normalize(beta * q_i + (1 - beta) * n_j),  q_i ~ U(batch), n_j ~ U(queue), beta ~ U(0, 0.5)
    S_o: the same with n_j ~ U(O);  M_n: normalize(alpha * n_a + (1 - alpha) * n_b), alpha ~ U(0, 1)

All draws are independent per synthetic point and with replacement. The synthetic points are
detached and *shared* by every query (returned as ``shared``, appended after the queue); they are
never enqueued. Shapes: q, k (B, D) gathered over ranks; queue (K, D); shared (M_n + S_n + S_o, D).

NOTE (deviations and choices, each a config switch):
- Warm-up (``warmup="paper"``, default): for ``warmup_epochs`` only S_n is made, as the paper's
  text says, and no OC-SVM is fitted. ``warmup="code"`` reproduces the official code: M_n
  (``num_synthetic`` points) + S_n (``num_inlier_synthetic`` points) during warm-up.
- Empty O is normal at the default (nu, gamma) = (0.01, 0.01): decision values are O(1e-4), below
  the solver's 1e-3 tolerance (the OC-SVM of Jain et al. 2025, MiOC, Eq. 3, as libsvm solves it).
  The official code crashes there. ``empty_inliers="queue"`` (default) draws those S_o keys from the
  whole queue, keeping the logit count constant and costing no host sync; ``"skip"`` drops S_o for
  that step, which needs one host sync per step to know the shape. Empty steps are counted in the
  diagnostics.
- Ablation (``selection="queue"``; default ``"ocsvm"``): O = the whole queue and no OC-SVM is
  fitted, so S_o is drawn as S_n is. Everything else (sizes, warm-up, beta) is unchanged: the
  difference between the two runs is what the OC-SVM's selection adds.
"""

from __future__ import annotations

import math
import time
from typing import Annotated, Any, Literal, get_args

import torch
import torch.nn.functional as F

from negatives.base import (
    MAX_SYNTHETIC,
    ExtraNegatives,
    NegativeStrategy,
    Step,
    strategies,
)
from negatives.ocsvm.svm import OneClassSVM
from negmine_core import stop as stop_request

Warmup = Literal["paper", "code"]  # warmup: the paper's schedule or the code's
EmptyInliers = Literal["queue", "skip"]  # empty_inliers: what an empty inlier set does
Selection = Literal["ocsvm", "queue"]  # selection: O from the OC-SVM, or the whole queue (ablation)

#: The wall clock one OC-SVM fit may take (a usual fit takes milliseconds); the solver then stops
#: with one warning, as at its iteration cap.
MAX_SOLVE_S = 60.0

#: The largest RBF gamma MiOC takes: on unit vectors the float64 kernel's rounding (|x - y|^2 to
#: about 1e-16) times gamma stays below 1e-6 (gamma=1e300 made the host solver spin on NaN).
MAX_GAMMA = 1e9


def mix(a: torch.Tensor, b: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """normalize(w * a + (1 - w) * b) row-wise, computed as b + w (a - b) (``torch.lerp``, one
    kernel): a, b (M, D), weight (M,)."""
    return F.normalize(torch.lerp(b, a, weight[:, None]), dim=1)


def sample_mask(mask: torch.Tensor, fallback: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``len(fallback)`` indices drawn uniformly with replacement from the True entries of
    ``mask`` (K,), without a host sync; where the mask is empty, ``fallback`` (indices the caller
    drew from all K entries) instead. Written into ``fallback``.

    The r-th True entry, r = floor(u c) + 1 with u ~ U[0, 1) and c True entries, is the first
    position whose running count exceeds u c (float32 counts, exact up to 2^24 entries). It is
    always a position < K: u <= 1 - 2^-24 (torch's float32 ``rand`` on a CPU and on CUDA), and
    for every integer 1 <= c <= 2^24 the float32 product u c rounds below c (tested).

    Returns ``fallback`` and the number of True entries (0-dim float32 tensor).
    """
    if mask.numel() > 1 << 24:
        raise ValueError(f"sample_mask counts in float32: at most 2^24 entries, got {mask.numel()}")
    csum = mask.cumsum(0, dtype=torch.float32)  # (K,) running count of True entries
    count = csum[-1]
    u = torch.rand(len(fallback), device=mask.device).mul_(count)  # in [0, c)
    inside = torch.searchsorted(csum, u, right=True)
    return torch.where(count > 0, inside, fallback, out=fallback), count


@strategies.register("mioc")
class MiOC(NegativeStrategy):
    """MiOC synthetic negatives guided by a One-Class SVM fitted on the batch.

    Args:
        num_synthetic: |S_n|, query-queue mixtures (paper: 1024).
        num_inlier_synthetic: |S_o|, query-inlier mixtures (paper: 512).
        num_queue_mix: |M_n|, queue-queue mixtures added after warm-up (Table A.3 variant; 0 = off).
        nu: OC-SVM nu (paper: 0.01; best in App. A.2: 0.1).
        gamma: RBF gamma (paper: 0.01; best: 0.1).
        tol: solver stopping tolerance (libsvm/scikit-learn default 1e-3).
        solver: ``libsvm`` (scikit-learn's path, as the paper) or ``exact``.
        backend: ``torch`` (on the embeddings' device), ``sklearn`` or ``thundersvm``.
        loop: the torch backend's solver loop (:class:`negatives.ocsvm.svm.OneClassSVM`): ``auto``
            (``triton`` on CUDA, falling back to ``device`` with a warning where Triton cannot
            run; ``host`` on a CPU), ``triton``, ``device`` or ``host``. The metrics record the
            loop that ran (``neg_ocsvm_path``).
        warmup_epochs: epochs before the OC-SVM is used (paper: 10).
        warmup: ``paper`` (S_n only) or ``code`` (M_n + S_n, the official implementation).
        empty_inliers: ``queue`` or ``skip`` (see the module NOTE).
        selection: ``ocsvm`` (O = {n : f(n) > 0}, the paper) or ``queue`` (the ablation: O = the
            whole queue, no OC-SVM fitted).
        beta_max: beta ~ U(0, beta_max), the query's weight (paper: 0.5).
    """

    syncs_why = (
        "the OC-SVM's Gram matrix, fit and scoring (with the inlier mask) are three Triton "
        "launches (`negatives/ocsvm/kernels_triton.py`, `negatives/ocsvm/smo_triton.py`); the S_o "
        "draw is fixed-shape tensor ops; nothing is read on the host (CPU default: see below)"
    )
    why_not_capturable = (
        "its Triton OC-SVM fit made no host sync on an H200 (empty_inliers 'skip' still "
        "syncs once) but was never captured in a CUDA graph on a GPU; refused until it is "
        "measured there"
    )
    contract_kwargs = {
        "num_synthetic": 16,
        "num_inlier_synthetic": 8,
        "nu": 0.1,
        "gamma": 0.1,
        "warmup_epochs": 0,
    }
    zero_kwargs = {"num_synthetic": 0, "num_inlier_synthetic": 0, "warmup_epochs": 0.0}

    needs_global_batch = True

    def __init__(
        self,
        *,
        num_synthetic: int = 1024,
        num_inlier_synthetic: int = 512,
        num_queue_mix: int = 0,
        nu: Annotated[float, "must lie in (0, 1) for MiOC"] = 0.01,
        gamma: float = 0.01,
        tol: float = 1e-3,
        solver: str = "libsvm",
        backend: str = "torch",
        loop: str = "auto",
        warmup_epochs: Annotated[float, "must be a finite number >= 0"] = 10.0,
        warmup: Warmup = "paper",
        empty_inliers: EmptyInliers = "queue",
        selection: Selection = "ocsvm",
        beta_max: Annotated[float, "must lie in [0, 1]"] = 0.5,
    ) -> None:
        super().__init__()
        for name, value in (
            ("num_synthetic", num_synthetic),
            ("num_queue_mix", num_queue_mix),
            ("num_inlier_synthetic", num_inlier_synthetic),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a non-negative int, got {value!r}")
            if value > MAX_SYNTHETIC:
                raise ValueError(
                    f"{name} must be at most {MAX_SYNTHETIC} (synthetic points per query and "
                    f"step; the paper uses 1024 or fewer), got {value}"
                )
        if warmup not in get_args(Warmup):
            raise ValueError(f"warmup must be 'paper' or 'code', got {warmup!r}")
        if empty_inliers not in get_args(EmptyInliers):
            raise ValueError(f"empty_inliers must be 'queue' or 'skip', got {empty_inliers!r}")
        if selection not in get_args(Selection):
            raise ValueError(
                f"selection must be 'ocsvm' (the paper) or 'queue' (the ablation, O = the whole "
                f"queue), got {selection!r}"
            )
        if not 0.0 <= beta_max <= 1.0:
            raise ValueError(f"beta_max must lie in [0, 1], got {beta_max}")
        if not 0 <= warmup_epochs < math.inf:
            raise ValueError(f"warmup_epochs must be a finite number >= 0, got {warmup_epochs}")
        if isinstance(gamma, (int, float)) and gamma > MAX_GAMMA:
            raise ValueError(
                f"gamma must be at most {MAX_GAMMA:g} for MiOC, got {gamma:g}: its points are "
                "unit vectors, and above that the rounding of their squared distance (about "
                "1e-16) times gamma makes the RBF kernel wrong, then overflow, and the solver "
                "spins on NaN (the paper uses 0.01)"
            )
        if isinstance(nu, (int, float)) and not isinstance(nu, bool) and not 0 < nu <= 1:
            raise ValueError(  # the range MiOC takes (OneClassSVM's own message says (0, 1])
                f"nu must lie in (0, 1) for MiOC, got {nu}: the share of points the one-class SVM "
                "may call outliers (the paper uses 0.01)"
            )
        if nu == 1:  # OneClassSVM takes (0, 1], but every fit it is given would fail at once
            raise ValueError(
                "nu must lie in (0, 1) for MiOC, got 1: at nu = 1 every alpha sits at its bound "
                "and the solver finds no finite rho (the paper uses 0.01)"
            )
        self.svm = OneClassSVM(
            nu=nu,
            gamma=gamma,
            kernel="rbf",
            tol=tol,
            solver=solver,
            backend=backend,
            loop=loop,
            max_seconds=MAX_SOLVE_S,
            should_stop=stop_request.requested,
        )  # validates nu, gamma, solver, loop; a preemption's signal stops a long solve
        self.num_synthetic, self.num_inlier_synthetic = num_synthetic, num_inlier_synthetic
        self.num_queue_mix, self.warmup_epochs, self.warmup = num_queue_mix, warmup_epochs, warmup
        self.empty_inliers, self.beta_max, self.tol = empty_inliers, beta_max, tol
        self.selection = selection
        self.register_buffer("empty_steps", torch.zeros((), dtype=torch.long))  # in checkpoints
        self.register_buffer("nonfinite_steps", torch.zeros((), dtype=torch.long), persistent=False)
        self._stats: dict[str, torch.Tensor | float] = {}
        self._latest: dict = {}  # what the latest step left for diagnostics()

    def check_sizes(self, queue_size: int, batch_size: int) -> None:
        """Called once at setup: the OC-SVM is fitted on the 2 x ``batch_size`` queries and keys of
        the global batch, so its Triton fit's per-device constants are built now (and again at
        ``.to()``), not in the first training step. The ablation (``selection="queue"``) fits
        none."""
        if self.selection == "ocsvm":
            self._fit_size = 2 * batch_size
            self.svm.prepare(self.empty_steps.device, self._fit_size)

    def _apply(self, fn: Any, recurse: bool = True) -> MiOC:
        """``nn.Module._apply`` (``.to()``, ...), then the OC-SVM's constants on the new device."""
        super()._apply(fn, recurse)
        if getattr(self, "_fit_size", None):
            self.svm.prepare(self.empty_steps.device, self._fit_size)
        return self

    def queue_mix(self, queue: torch.Tensor, size: int) -> torch.Tensor:
        """M_n: normalize(alpha n_a + (1 - alpha) n_b), alpha ~ U(0, 1)."""
        a, b = (torch.randint(queue.shape[0], (size,), device=queue.device) for _ in range(2))
        return mix(queue[a], queue[b], torch.rand(size, device=queue.device, dtype=queue.dtype))

    @torch.no_grad()
    def negatives(self, step: Step) -> ExtraNegatives:
        q, k, labels = step.detached()
        queue_labels, epoch = step.queue_labels, step.ctx.epoch
        q, queue = q.float(), step.queue.detach().float()
        K, B, dev = queue.shape[0], q.shape[0], q.device
        warm, code, latest = epoch < self.warmup_epochs, self.warmup == "code", {}
        m_n = None
        if warm and code:
            m_n = self.queue_mix(queue, self.num_synthetic)
        elif not warm and self.num_queue_mix:
            m_n = self.queue_mix(queue, self.num_queue_mix)
        s_n = self.num_inlier_synthetic if warm and code else self.num_synthetic
        s_o = 0 if warm else self.num_inlier_synthetic
        # (i, j, beta) of S_n then S_o, drawn at once: S_n and S_o are mixed as one set (the
        # same rule), with no concatenation. S_o's keys are then redrawn from O where O is not
        # empty (else they stay draws from the whole queue).
        n = s_n + s_o
        i = torch.randint(B, (n,), device=dev)
        j = torch.randint(K, (n,), device=dev)
        beta = torch.empty(n, dtype=q.dtype, device=dev).uniform_(0.0, self.beta_max)
        used = s_n
        if not warm and self.selection == "queue":  # ablation: S_o keys stay whole-queue draws
            used += s_o
            latest.update(inliers=K, queue_size=K)
        elif not warm:
            points = torch.empty(2 * B, q.shape[1], dtype=torch.float64, device=dev)
            inlier = self.fit_inliers(torch.cat([q, k.detach()], out=points), queue, latest)
            n_o = sample_mask(inlier, j[s_n:])[1]
            self.empty_steps += n_o == 0
            if self.empty_inliers == "queue" or bool(n_o > 0):  # "skip": one host sync per step
                used += s_o
            latest.update(inliers=n_o, queue_size=K)
        i, j = i[:used], j[:used]
        s = mix(q[i], queue[j], beta[:used])
        sets = {"m_n": m_n} if m_n is not None else {}
        sets.update(s_n=s[:s_n], **({"s_o": s[s_n:]} if used > s_n else {}))
        # Statistics for diagnostics() (logging steps only), from what this step leaves behind;
        # the queue's mean and labels are read now, before the enqueue overwrites them.
        latest.update(q=q, queue_mean=queue.mean(0), sets=sets)
        if labels is not None:
            latest.update(labels=labels, i=i, y_n=queue_labels[j])
        self._latest = latest
        parts = [t for t in (m_n, s) if t is not None and t.numel()]
        return ExtraNegatives(
            shared=(torch.cat(parts) if len(parts) > 1 else parts[0]) if parts else None
        )

    def fit_inliers(
        self, points: torch.Tensor, queue: torch.Tensor, latest: dict | None = None
    ) -> torch.Tensor:
        """Fit the OC-SVM on ``points`` (2B, D); return the mask f(queue) > 0 (K,).

        On CUDA the Gram matrix, the fit and the scoring are three Triton launches and nothing here
        reads the device: the solver's statistics stay device tensors, and non-finite points
        (whose loss is non-finite too) give NaN decision values, no inliers, and a count that
        :meth:`bad_input` names when the trainer's finite check stops the run. On the CPU host
        loop they raise at once.
        ``latest``: where the fit time and the decision values are kept for the diagnostics.
        """
        tic = time.perf_counter()
        self.svm.fit(points)
        f, inlier = self.svm.score(queue)  # (K,) float64, f > 0
        self.nonfinite_steps += self.svm.nonfinite_
        if latest is not None:
            latest.update(fit_time_s=time.perf_counter() - tic, f=f)  # launch time on CUDA
        return inlier

    def bad_input(self) -> str:
        """Why the loss may have become non-finite, for the trainer's error (reads the device:
        call it only when stopping)."""
        steps = int(self.nonfinite_steps)
        if not steps:
            return ""
        return (
            f"MiOC: the OC-SVM's input embeddings cat(q, k) were non-finite (NaN or inf) at "
            f"{steps} step(s) since the last start. "
        )

    def diagnostics(self) -> dict[str, torch.Tensor | float | str]:
        """Statistics of the latest step, computed here (logging steps only) from what it left:
        the OC-SVM's fit (time, solver statistics, ``within_tolerance``: the fraction of |f| <
        tol), the inlier count and fraction, the mean q·n over the queue and each synthetic set
        (``qn_*``: (mean q)·(mean n), O(D)), the fraction of synthetic points mixing a query with
        a key of its class (``false_negative_fraction``) and the steps with an empty O. A value
        a step did not produce keeps the one of the latest logged step that did."""
        latest, st = self._latest, self._stats
        if "f" in latest:
            st.update(fit_time_s=latest["fit_time_s"], **self.svm.fit_stats())
            st["within_tolerance"] = (latest["f"].abs() < self.tol).float().mean()
        if "inliers" in latest:
            n_o = latest["inliers"]
            st.update(inliers=n_o, inlier_fraction=n_o / latest["queue_size"])
        if "q" in latest:
            q_mean = latest["q"].mean(0)
            st["qn_queue"] = q_mean @ latest["queue_mean"]
            for name, points in latest["sets"].items():
                if points.numel():
                    st[f"qn_{name}"] = q_mean @ points.mean(0)
        if "labels" in latest:
            y_q, y_n = latest["labels"][latest["i"]], latest["y_n"]
            st["false_negative_fraction"] = ((y_q == y_n) & (y_q >= 0)).float().mean()
        if self.svm.path_:  # the loop of the latest fit (a fallback shows here)
            st["ocsvm_path"] = self.svm.path_
        return {**st, "empty_inlier_steps": self.empty_steps}
