"""negmine evaluation of frozen pretrained encoders, one room per concern:

- :mod:`linear_eval.inputs`: features in: checkpoints, the datasets evaluators read, corruptions,
  the feature cache and the per-checkpoint session (the only room that touches models and data).
- :mod:`linear_eval.classify`: classification on features: kNN, linear probes (SGD, L-BFGS),
  limited labels, transfer, the embedding's geometry (t-SNE, cluster indices, nearest-neighbour
  margins) and kappa as a confidence.
- :mod:`linear_eval.detect`: OOD / anomaly detection: metrics, normality scores, named detectors
  and the one-class / ID-vs-OOD protocols.
- :mod:`linear_eval.records`: metrics (AUROC, AUPR, FPR95), statistics (bootstrap intervals,
  tests), the summaries every JSON record is made of, and a run's training records.
- :mod:`linear_eval.report`: figures and ``report.md``: it draws what the rooms below computed.
- :mod:`linear_eval.cli`: the ``python -m linear_eval`` subcommands.

Evaluators are functions on feature tensors. Imports point one way, ``cli`` > ``report`` >
``classify`` | ``detect`` > ``inputs`` > ``records`` (the import-linter contract ``linear_eval`` in
pyproject.toml).
"""
