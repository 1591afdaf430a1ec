"""Exit codes of every gpubring command (the README lists them)."""

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    TASK_FAILED = 1
    BAD_INPUT = 2
    CANCELLED = 3
    UNREACHABLE = 4
