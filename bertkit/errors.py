"""Errors that describe a problem with the user's input (files, arguments, data), not a bug.

The CLI prints these as one line (`bertkit: error: ...`) with a non-zero exit code and no traceback;
the message names the file, line or field and says what to do.
"""


class BertkitError(Exception):
    """A problem with the user's input, files or arguments."""


class InputFileError(BertkitError):
    """A data file that cannot be read as asked: names the file and, where known, the line."""

    def __init__(self, path, message: str, line: int | None = None):
        self.path, self.line = str(path), line
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")


class ConfigError(BertkitError, ValueError):
    """A config file, override or setting that does not fit the dataclass it configures."""


class CheckpointError(BertkitError):
    """A model folder that is missing, incomplete, corrupt or does not match what it is loaded into."""


class TimeLimitExceeded(BertkitError):
    """Work stopped because it ran past its time limit (a search query, say); retrying may succeed."""


class BertkitWarning(UserWarning):
    """A warning from bertkit (texts truncated, a high [UNK] rate, a model folder missing a part): the message
    names the flag or argument that changes the behaviour. The CLI prints each as one line
    (`bertkit: warning: ...`); Python callers can filter them with `warnings.simplefilter(..., BertkitWarning)`."""
