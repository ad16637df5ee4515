"""The One-Class SVM: the scikit-learn-style API (svm), the host SMO (smo), the Triton SMO
(smo_triton) and kernels (kernels_triton); imports nothing of the project outside itself
(scikit-learn and thundersvm only as wrapped backends)."""

from negatives.ocsvm.svm import OneClassSVM

__all__ = ["OneClassSVM"]
