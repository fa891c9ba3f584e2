"""The export's error type (the Hub push has its own, :class:`hf_cse.export.hub.HubPushError`)."""

from ..errors import CSEError


class ExportError(CSEError):
    """A model that cannot be exported as asked; the message says why and what to do instead."""
