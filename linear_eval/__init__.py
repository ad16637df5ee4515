"""negmine evaluation: frozen-backbone features, weighted kNN and linear probes.

Evaluators are functions on feature tensors; only :mod:`linear_eval.features` touches models and
datasets.
"""
