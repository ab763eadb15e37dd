"""Exit codes of ``specdeploy profile``: how the operator tells permanent from transient.

A profiling Job that fails deterministically (the model does not exist, the
smallest batch does not fit, the arguments are wrong) fails the same way on
every retry and wastes GPU time: the operator reads the exit code and the
termination message and does not retry. Everything else exits 1 and may be
retried by the Job's backoff.

=====  =====================  ==============================================
code   name                   meaning
=====  =====================  ==============================================
0      OK                     profile written
1      TRANSIENT              unexpected or transient error; retrying may help
2      INVALID_ARGUMENTS      bad flags or values (argparse's convention)
3      MODEL_NOT_FOUND        target or draft model (or its revision) missing
4      OUT_OF_MEMORY          the smallest batch size does not fit
5      DATASET_UNAVAILABLE    dataset package not installed, file missing/bad
6      BACKEND_UNAVAILABLE    the engine cannot be loaded (vLLM not importable)
7      OUTPUT_REJECTED        the API refused the write (RBAC, missing CRD)
=====  =====================  ==============================================
"""

from __future__ import annotations

from enum import IntEnum


class DeterministicFailure(RuntimeError):
    """A failure that will happen again on retry (model missing, OOM at the
    smallest batch, invalid arguments): the Job must not be retried."""

    def __init__(self, reason: str, *, exit_code: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.exit_code = exit_code


class ExitCode(IntEnum):
    """The documented exit codes (module docstring)."""

    OK = 0
    TRANSIENT = 1
    INVALID_ARGUMENTS = 2
    MODEL_NOT_FOUND = 3
    OUT_OF_MEMORY = 4
    DATASET_UNAVAILABLE = 5
    BACKEND_UNAVAILABLE = 6
    OUTPUT_REJECTED = 7


DETERMINISTIC: frozenset[ExitCode] = frozenset(ExitCode) - {ExitCode.OK, ExitCode.TRANSIENT}
"""Codes after which a retry would fail the same way."""


def failure(code: ExitCode, reason: str) -> DeterministicFailure:
    """A DeterministicFailure with one of the documented codes."""
    if code not in DETERMINISTIC:
        raise ValueError(f"{code.name} is not a deterministic failure")
    return DeterministicFailure(reason, exit_code=int(code))


def invalid_arguments(reason: str) -> DeterministicFailure:
    """Bad flags or values: fix the Job's command, do not retry it."""
    return failure(ExitCode.INVALID_ARGUMENTS, reason)


def model_not_found(reason: str) -> DeterministicFailure:
    """The target or draft model (or revision) cannot be found."""
    return failure(ExitCode.MODEL_NOT_FOUND, reason)


def out_of_memory(reason: str) -> DeterministicFailure:
    """Out of memory; fatal only at the smallest batch size (the search drops larger ones)."""
    return failure(ExitCode.OUT_OF_MEMORY, reason)


def backend_unavailable(reason: str) -> DeterministicFailure:
    """The engine cannot be loaded in this image (e.g. vLLM not importable)."""
    return failure(ExitCode.BACKEND_UNAVAILABLE, reason)


def output_rejected(reason: str) -> DeterministicFailure:
    """The Kubernetes API refused the profile for a reason a retry cannot fix."""
    return failure(ExitCode.OUTPUT_REJECTED, reason)


def is_out_of_memory(err: DeterministicFailure) -> bool:
    """Whether ``err`` says the batch did not fit."""
    return err.exit_code == ExitCode.OUT_OF_MEMORY
