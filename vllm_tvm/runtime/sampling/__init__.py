"""Sampling: the request's parameters, the host sampler, logits left on the device and the
compiled device sampler."""
