"""Which requests the async engine takes in: bounded per call, bounded in waiting, none
once it is stopping.

Why it exists: one call of many prompts x a large `n` (25,600 sequences) could occupy the
engine for minutes, and a flood of calls could grow the waiting queue without end; both
hurt every other client. A call (the requests one API call brings, admitted together or
not at all) may carry at most `max_sequences_per_request` sequences, and at most
`max_waiting_requests` requests may wait for their first output; past either the call is
refused before anything is queued, with the numbers. Once the engine is stopping (the
server got SIGTERM) every new call is refused.

A request counts as waiting from its admission until its first output arrives or its
stream ends. Reservations are made and released on the caller's event loop only.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MAX_SEQUENCES_PER_REQUEST = 256
"""The most sequences (prompts x n) one call may ask for."""

DEFAULT_MAX_WAITING_REQUESTS = 1024
"""The most requests that may wait for their first output at once."""


class AdmissionRefused(Exception):
    """A call the engine does not take in now (the subclass says why)."""


class TooManySequencesError(AdmissionRefused, ValueError):
    """The call asks for more sequences than one call may have."""


class EngineBusyError(AdmissionRefused):
    """Too many requests are already waiting; the call may be retried later."""


class EngineStoppingError(AdmissionRefused):
    """The engine is shutting down and takes no new requests."""


@dataclass(frozen=True)
class AdmissionLimits:
    """The bounds on what the engine takes in (see the module docstring)."""

    max_sequences_per_request: int = DEFAULT_MAX_SEQUENCES_PER_REQUEST
    max_waiting_requests: int = DEFAULT_MAX_WAITING_REQUESTS

    def __post_init__(self) -> None:
        for name in ("max_sequences_per_request", "max_waiting_requests"):
            value = getattr(self, name)
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")


class Admission:
    """The requests admitted and still waiting for their first output, against the limits."""

    def __init__(self, limits: AdmissionLimits) -> None:
        self.limits = limits
        self._waiting: set[str] = set()
        self._stopping = False

    @property
    def num_waiting(self) -> int:
        """Requests admitted that have not produced their first output yet."""
        return len(self._waiting)

    @property
    def stopping(self) -> bool:
        return self._stopping

    def reserve(self, request_ids: list[str], num_sequences_each: int) -> None:
        """Admit a call of `request_ids`, each with `num_sequences_each` sequences, or raise
        the `AdmissionRefused` that says why not (nothing reserved then)."""
        if self._stopping:
            raise EngineStoppingError("the server is shutting down and takes no new requests")
        limits = self.limits
        wanted = len(request_ids) * num_sequences_each
        if wanted > limits.max_sequences_per_request:
            raise TooManySequencesError(
                f"the request asks for {wanted} sequences ({len(request_ids)} prompts x "
                f"n={num_sequences_each}), more than the {limits.max_sequences_per_request} "
                "one request may have (--max-sequences-per-request)"
            )
        new = [rid for rid in request_ids if rid not in self._waiting]
        if self.num_waiting + len(new) > limits.max_waiting_requests:
            raise EngineBusyError(
                f"{self.num_waiting} requests are already waiting (at most "
                f"{limits.max_waiting_requests}, --max-waiting-requests); retry later"
            )
        self._waiting.update(new)

    def release(self, request_id: str) -> None:
        """`request_id` produced its first output or ended (no-op when not reserved)."""
        self._waiting.discard(request_id)

    def stop(self) -> None:
        """Refuse every call from now on."""
        self._stopping = True
