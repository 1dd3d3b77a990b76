"""The engine: requests in, one batched step at a time, outputs out (intake, scheduling,
the step loop, metrics and the async front)."""
