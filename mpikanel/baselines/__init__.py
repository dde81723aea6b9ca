"""Baselines the sync models are compared against: Horovod-style allreduce SGD and scikit-learn SGD."""
