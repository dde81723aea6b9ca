"""Exceptions that mpikanel reports to users as one-line errors."""


class InputError(ValueError):
    """Bad user input (file, flag value, data content); the CLI prints it and exits with code 2."""


class TrainingError(RuntimeError):
    """Training itself failed (for example parameters became NaN/inf)."""


class CheckpointError(TrainingError):
    """A checkpoint could not be written (disk full, no permission, ...): names the file, no traceback."""


class NothingLeft(Exception):
    """A resumed run whose checkpoint has already done all of its budget: nothing to train (the CLI
    prints the message and exits 0)."""


class Interrupted(Exception):
    """A stop signal (its number in `signum`) ended the run before training began, with nothing to
    checkpoint; the CLI says so and aborts every rank with 128 + signum."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum
