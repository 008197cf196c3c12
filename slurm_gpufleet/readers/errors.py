"""The one error every report reader raises; apart from the readers so that importing it (as every hook
does) loads no parser."""


class ReportError(ValueError):
    """The input holds no nvidia-smi report we can read."""
