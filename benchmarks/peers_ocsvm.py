"""benchmarks/peers.py's ocsvm part: negmine's OneClassSVM beside scikit-learn's and
thundersvm-cpu's (benchmarks/ocsvm.py's wrappers), fit and scoring timed apart, and the decisions'
agreement with scikit-learn's on held-out points."""

from __future__ import annotations

import statistics

import torch

from benchmarks.ocsvm import GAMMA, NU, Sklearn, ThunderSVM, Torch, timed_ms
from pretrain.testing.fakedata import embeddings

HELD_OUT = 4096  # held-out points scored (queue-like: half near the centres, half uniform)


def implementations(device: str) -> list:
    impls = [Sklearn(), Torch("cpu")]
    try:
        import thundersvm  # noqa: F401

        impls.append(ThunderSVM())
    except ImportError:
        print("peers: thundersvm-cpu is not installed: its rows are left out", flush=True)
    if device == "cuda":
        impls.append(Torch("cuda"))
    return impls


def agreement(impl: object, model: object, sk_sign: torch.Tensor, Q: torch.Tensor) -> float:
    scores = torch.as_tensor(impl.score(model, Q)).detach().float().cpu().reshape(-1)
    return 100.0 * (torch.sign(scores) == sk_sign).float().mean().item()


def compare(sizes: list[int], device: str, repeats: int) -> tuple[list[str], list[str]]:
    """Rows of the table (and summary rows): per n and implementation, the median fit and scoring
    ms over interleaved repeats (rotated order), the SV count and the agreement with sklearn."""
    impls = implementations(device)
    lines = [f"OC-SVM, (nu, gamma) = ({NU}, {GAMMA}), d 128 (benchmarks/ocsvm.py's clustered "
             f"embeddings); scoring: {HELD_OUT} held-out points; agreement: the share of "
             "held-out points whose decision has scikit-learn's sign", "",
             "| n fit | implementation | n_SV | fit ms | score ms | agreement % | fit vs "
             "scikit-learn |", "|" + "---|" * 7]  # fmt: skip
    summary = []
    for n in sizes:
        X, Q = embeddings(n, HELD_OUT, seed=n)
        data = {i.name: (X.to(i.device), Q.to(i.device)) for i in impls}
        models = {i.name: i.fit(data[i.name][0]) for i in impls}  # + warm-up
        times = {(i.name, w): [] for i in impls for w in ("fit", "score")}
        for r in range(max(1, repeats * 256 // n)):
            for i in impls[r % len(impls) :] + impls[: r % len(impls)]:
                Xd, Qd = data[i.name]
                times[i.name, "fit"].append(timed_ms(i.sync, i.fit, Xd))
                times[i.name, "score"].append(timed_ms(i.sync, i.score, models[i.name], Qd))
        sk = models["scikit-learn"]
        sk_sign = torch.sign(torch.as_tensor(sk.decision_function(Q.numpy())).float())
        sk_fit = statistics.median(times["scikit-learn", "fit"])
        for i in impls:
            fit = statistics.median(times[i.name, "fit"])
            score = statistics.median(times[i.name, "score"])
            agree = agreement(i, models[i.name], sk_sign, data[i.name][1])
            n_sv = len(models[i.name].support_)
            lines.append(f"| {n} | {i.name} | {n_sv} | {fit:.2f} | {score:.2f} | {agree:.2f} | "
                         f"{sk_fit / fit:.2f}x |")  # fmt: skip
            print(f"peers: {lines[-1]}", flush=True)
            if i.name.startswith("torch"):
                summary.append(f"| peers OC-SVM {i.name} n {n}: fit ms, vs scikit-learn | "
                               f"{fit:.2f}, {sk_fit / fit:.2f}x |")  # fmt: skip
    lines.append("")
    return lines, summary
