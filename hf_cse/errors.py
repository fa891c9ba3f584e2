"""The root of hf_cse's errors: every error the library raises for input it cannot use is a :class:`CSEError`.

A message speaks in the library's own terms: the names of the fields and arguments as a Python caller writes them
(``cached_minibatch_size``, ``per_device_train_batch_size``), never a command-line flag. ``fields`` lists the fields
the error is about, so that a caller can point at them: the command line (``hf_cse.cli.run_cli``) rewrites each
into its command-line flag (``--cached_minibatch_size``) and prints the message as one line. An exception that is not a
``CSEError`` is a bug, and the command line shows its traceback.

    raise CSEError("cached_minibatch_size 48 does not divide the batch of 64; pick a divisor.",
                   fields=("cached_minibatch_size",))
"""

from __future__ import annotations

from collections.abc import Iterable


class CSEError(ValueError):
    """Input hf_cse cannot use; the message names the problem and the fix, in the terms of the Python API.

    A ``ValueError``, so that callers catching ``ValueError`` see every hf_cse error. ``fields`` are the names
    (arguments, dataclass fields) the message is about, as written in it.
    """

    #: a class attribute too, so that subclasses with another ``__init__`` (``OSError``'s) still have it
    fields: tuple[str, ...] = ()

    def __init__(self, *args, fields: Iterable[str] = ()):
        super().__init__(*args)
        self.fields = tuple(fields)


class PathNotFoundError(CSEError, FileNotFoundError):
    """A file or folder the caller named does not exist (or is not what was asked for); a ``FileNotFoundError`` too."""

