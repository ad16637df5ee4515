"""negmine evaluation of frozen pretrained encoders, one room per concern:

- :mod:`linear_eval.inputs`: features in: checkpoints, the datasets evaluators read, corruptions,
  the feature cache and the per-checkpoint session (the only room that touches models and data).
- :mod:`linear_eval.classify`: classification on features: kNN, linear probes (SGD, L-BFGS),
  limited labels, transfer.
- :mod:`linear_eval.detect`: OOD / anomaly detection: metrics, normality scores, named detectors
  and the one-class / ID-vs-OOD protocols.
- :mod:`linear_eval.records`: statistics (bootstrap intervals, tests) and the summaries every
  JSON record is made of.
- :mod:`linear_eval.report`: figures and ``report.md``.
- :mod:`linear_eval.cli`: the ``python -m linear_eval`` subcommands.

Evaluators are functions on feature tensors; imports point from ``cli`` down to ``inputs``.
"""
