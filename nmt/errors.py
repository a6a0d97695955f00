"""User-facing errors: the CLI prints these as one line and exits non-zero, never a traceback."""


class NmtError(Exception):
    """A mistake the user can fix (bad path, bad option, bad data). Message is one line."""


class ConfigError(NmtError):
    """An unknown or invalid configuration key/value."""


class CheckpointError(NmtError):
    """A checkpoint that is missing, truncated, corrupt or of another version."""
