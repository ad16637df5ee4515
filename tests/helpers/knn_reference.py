"""Weighted cosine kNN (Wu et al. 2018, Eq. 4, as the MoCo CIFAR demo uses it), re-derived in
numpy loops: the reference the monitor's kNN is checked against."""

from __future__ import annotations

import numpy as np


def np_votes(bank: np.ndarray, bank_y: np.ndarray, test: np.ndarray, k: int, t: float, c: int):
    """InstDisc vote: the k most cosine-similar bank rows vote exp(sim / T) for their class."""
    bank = bank / np.linalg.norm(bank, axis=1, keepdims=True)
    test = test / np.linalg.norm(test, axis=1, keepdims=True)
    sim = test @ bank.T
    k = min(k, len(bank))
    votes = np.zeros((len(test), c))
    for i, row in enumerate(sim):
        top = np.argsort(-row)[:k]
        np.add.at(votes[i], bank_y[top], np.exp(row[top] / t))
    return votes


def np_knn(bank: np.ndarray, bank_y: np.ndarray, test: np.ndarray, k: int, t: float, c: int):
    return np_votes(bank, bank_y, test, k, t, c).argmax(axis=1)
