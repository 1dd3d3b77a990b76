"""Turning checkpoint tensors (or random ones) into the artifact's parameters on the device."""
