"""Sampling: the request's parameters, the host sampler and the compiled device sampler."""
