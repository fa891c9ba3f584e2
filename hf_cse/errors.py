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

from collections.abc import Iterable, Iterator
from contextlib import contextmanager


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



def raised_on_every_process(err: BaseException) -> BaseException:
    """Mark ``err`` as raised alike by every process of a multi-process run (each checked the same input, or the main
    process's outcome was handed to all): the command line prints it once, from the main process. Returns ``err``."""
    err.on_every_process = True  # type: ignore[attr-defined]
    return err


@contextmanager
def same_on_every_process() -> Iterator[None]:
    """A :class:`CSEError` raised in the block is marked :func:`raised_on_every_process`: the block checks what every
    process reads alike (the same arguments, files and folders)."""
    try:
        yield
    except CSEError as err:
        raise raised_on_every_process(err)
