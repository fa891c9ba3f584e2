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

import difflib
import errno
import re
import sys
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
        data = sys.modules.get("torch.utils.data")
        if self.fields and data is not None and data.get_worker_info() is not None:
            # torch re-raises a loader worker's error from its type and traceback text alone: the fields ride in a
            # note, which the traceback prints after the message (read back by unwrapped_from_worker)
            self.add_note(_FIELDS_NOTE + ",".join(self.fields))


#: how a message tells the user to import the module that registers their own loss or method (the commands print
#: the flag as --import_module: hf_cse.cli.flags)
IMPORT_THE_MODULE = "import that module first (on the command line: import_module MODULE)"


class PathNotFoundError(CSEError, FileNotFoundError):
    """A file or folder the caller named does not exist (or is not what was asked for); a ``FileNotFoundError`` too."""


_FIELDS_NOTE = "hf_cse fields: "

#: how torch's DataLoader re-raises the error of a worker process (or of its pin-memory thread) in the main process: an
#: exception of the same type made from one message, this heading and the worker's whole traceback, whose last line
#: is the original message (``torch.utils.data._utils.ExceptionWrapper.reraise``)
_WORKER_HEADING = re.compile(r"Caught (\w+) [^\n]*\.\nOriginal Traceback \(most recent call last\):\n")


def unwrapped_from_worker(err: CSEError) -> CSEError:
    """``err`` as it was raised, where torch's DataLoader re-raised it from a worker process (``dataloader_num_workers``
    > 0): a new error of its type with the original message (one line again, not a traceback squeezed into one),
    caused by ``err`` (``HF_CSE_DEBUG=1`` shows the worker's traceback), with the original's ``fields`` (read from
    the note :class:`CSEError` adds in a worker). ``err`` itself otherwise."""
    text = str(err)
    heading = _WORKER_HEADING.match(text)
    if heading is None or heading.group(1) != type(err).__name__:
        return err
    cls = type(err)
    name = cls.__qualname__ if cls.__module__ in ("__main__", "builtins") else f"{cls.__module__}.{cls.__qualname__}"
    at = text.rfind(f"\n{name}: ")  # the last exception of the traceback (after any it was raised from)
    if at < heading.end() - 1:
        return err
    message, _, note = text[at + len(name) + 3:].strip().rpartition("\n" + _FIELDS_NOTE)
    original = cls(message.strip() if message else note)
    if message:
        original.fields = tuple(note.split(","))
    original.__cause__ = err
    return original


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


#: exception classes of the HTTP clients huggingface_hub uses (httpx / httpx2 / requests), by name: a failed
#: connection or a timeout, which none of them derives from OSError
_NETWORK_CLASSES = {"TransportError", "ConnectError", "ConnectTimeout", "ReadTimeout", "TimeoutException",
                    "NetworkError", "RequestException", "ConnectionError"}


def error_chain(err: BaseException | None) -> Iterator[BaseException]:
    """``err``, then each error it was raised from or while handling (its ``__cause__``, else its ``__context__``),
    each once."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        yield err
        err = err.__cause__ or err.__context__


def network_failure(err: BaseException) -> BaseException | None:
    """The error in ``err``'s chain (:func:`error_chain`) that says the network failed (no connection, a timeout,
    the Hub unreachable), or None. ``OSError``s count when they are connection errors or timeouts, and
    transformers' "couldn't connect" ``OSError``."""
    for err in error_chain(err):
        names = {cls.__name__ for cls in type(err).__mro__}
        client = type(err).__module__.split(".")[0] in ("httpx", "httpx2", "requests", "urllib3")
        if (client and names & _NETWORK_CLASSES) or isinstance(err, (ConnectionError, TimeoutError)) \
                or "couldn't connect to" in str(err):
            return err
    return None


#: how a write that ran out of disk space is reported: the OS (errno ENOSPC / EDQUOT, as text where a library
#: wraps it: safetensors' "os error 28") and torch's zip writer, whose short write shows as a position mismatch
_DISK_FULL_TEXTS = ("No space left on device", "Disk quota exceeded", "PytorchStreamWriter failed writing")


def disk_full(err: BaseException) -> BaseException | None:
    """The error in ``err``'s chain that says a write ran out of disk space (or was cut short: torch's
    ``unexpected pos`` of its zip writer), or None."""
    for err in error_chain(err):
        text = str(err)
        short_write = "inline_container" in text and "unexpected pos" in text
        if (isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT)) \
                or any(t in text for t in _DISK_FULL_TEXTS) or short_write:
            return err
    return None


#: what a save does where its write is refused on a disk with room, by the OSError's errno: a read-only file system, a
#: folder without write permission, a file or folder where the save puts another
_WRITE_REFUSED = {errno.EROFS: "remount its file system read-write (or copy the folder to one that is)",
                  errno.EACCES: "make the folder writable for you (its permissions)",
                  errno.EPERM: "make the folder writable for you (its permissions)",
                  errno.EEXIST: "move aside what takes that path",
                  errno.ENOTDIR: "move aside the file that takes a folder's path",
                  errno.EISDIR: "move aside the folder that takes a file's path"}


@contextmanager
def saving_files() -> Iterator[None]:
    """An error raised in the block is marked as a save's: a save's refused write (:func:`write_refused`) rather than
    one that reads, whose errno can be the same."""
    try:
        yield
    except Exception as err:
        err.raised_while_saving = True  # type: ignore[attr-defined]
        raise


def write_refused(err: BaseException) -> tuple[OSError, str] | None:
    """The error in ``err``'s chain that says a save (:func:`saving_files`) could not write where it writes, on a disk
    with room (:data:`_WRITE_REFUSED`; a full disk is :func:`disk_full`), and what to do; or None."""
    chain = list(error_chain(err))
    refused = next((e for e in chain if isinstance(e, OSError) and e.errno in _WRITE_REFUSED), None)
    saving = any(getattr(e, "raised_while_saving", False) for e in chain)
    return (refused, _WRITE_REFUSED[refused.errno]) if saving and refused is not None else None


#: what users write for a setting, by the name hf_cse (and transformers) gives it: the closest spelling is often
#: another setting (``lr`` is closest to LoRA's ``r``)
COMMON_NAMES = {"lr": "learning_rate", "bs": "per_device_train_batch_size", "batch_size": "per_device_train_batch_size",
                "epochs": "num_train_epochs", "num_epochs": "num_train_epochs", "steps": "max_steps",
                "wd": "weight_decay", "model": "model_name_or_path", "model_name": "model_name_or_path",
                "max_length": "max_seq_length", "max_len": "max_seq_length", "seq_len": "max_seq_length",
                "temp": "temperature", "tau": "temperature", "warmup": "warmup_steps",
                "grad_accum": "gradient_accumulation_steps", "output": "output_dir", "out": "output_dir"}


def usual_name(name: str, names: Iterable[str]) -> str | None:
    """The one of ``names`` that ``name``, a usual shorthand (:data:`COMMON_NAMES`), stands for, or None. Flags
    (``--lr``) are matched with their dashes."""
    dashes = name[:len(name) - len(name.lstrip("-"))]
    meant = COMMON_NAMES.get(name[len(dashes):].replace("-", "_"))
    return dashes + meant if meant is not None and dashes + meant in set(names) else None


def closest_name(name: str, names: Iterable[str]) -> str | None:
    """The one of ``names`` a mistyped ``name`` most likely meant (a usual shorthand's setting first), or None."""
    names = list(names)
    return usual_name(name, names) or next(iter(difflib.get_close_matches(name, names, n=1)), None)
