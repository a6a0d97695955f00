"""User-facing errors: the CLI prints these as one line and exits non-zero, never a traceback."""


class NmtError(Exception):
    """A mistake the user can fix (bad path, bad option, bad data). Message is one line."""


class ConfigError(NmtError):
    """An unknown or invalid configuration key/value."""


class CheckpointError(NmtError):
    """A checkpoint that is missing, truncated, corrupt or of another version."""


def first_line(error: BaseException | str, limit: int = 300) -> str:
    """The first line of an exception's (or a library message's) text, for one-line errors; the
    exception's type name when it has no text."""
    text = str(error).strip()
    if not text:
        return type(error).__name__ if isinstance(error, BaseException) else "unknown error"
    return text.splitlines()[0][:limit]
