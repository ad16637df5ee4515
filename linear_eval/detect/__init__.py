"""OOD and anomaly detection on frozen features: metrics (AUROC, AUPR, FPR@TPR), normality scores
(``scores``), the detectors by name (``detectors``), the one-class / ID-vs-OOD protocols
(``protocols``) and OpenOOD v1.5's benchmark (``openood``)."""
