"""Speculative decoding: proposing tokens cheaply and verifying them in one forward of the
model, so a decode step can commit several tokens (n-gram prompt lookup today)."""
