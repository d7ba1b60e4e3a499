"""ctxsim's benchmarks, outside the package: ``python -m benchmarks`` (``make bench``)."""
