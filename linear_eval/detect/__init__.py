"""OOD and anomaly detection on frozen features: metrics (AUROC, AUPR, FPR@TPR), normality scores
(``scores``), the detectors by name (``detectors``) and the one-class / ID-vs-OOD protocols
(``protocols``)."""
