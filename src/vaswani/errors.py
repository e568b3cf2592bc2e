"""Exceptions that the CLI turns into one-line messages.

Every error a user can cause by bad input (a file, a flag, a config field) is a
``VaswaniError``; anything else is a bug and keeps its traceback.
"""


class VaswaniError(Exception):
    """Base class of the errors caused by the user's input."""


class ConfigError(VaswaniError, ValueError):
    """A config field has an unknown name, a wrong type or an impossible value."""


class DataError(VaswaniError, ValueError):
    """An input file is missing, empty, not UTF-8, or otherwise unusable."""


class RunDirError(VaswaniError):
    """A directory is not a vaswani run directory, or is an incomplete one."""
