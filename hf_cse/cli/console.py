"""What the commands print: one line per stage by default, everything with ``--verbose``.

:func:`setup_console` is called by ``hf-cse-train``, ``hf-cse-eval`` and ``hf-cse-export`` once their flags are parsed.
By default:

* hf_cse's own INFO lines (loggers ``hf_cse.*``, ``run_unsup``, ``run_eval``) on the main process only: the other
  processes of a distributed run check the same flags and data, so their lines would repeat the main one's (the
  final dev line included); they print errors only;
* other libraries print warnings only (sentence-transformers' "Saving model to" INFO lines, for example);
* no progress bars for steps that take a moment (datasets' "Generating train split", the blank-line filter,
  tokenizing; transformers' "Loading weights", "Writing model shards"): the training bar and the encoding bars of
  the evaluation, which last, stay;
* the library notices in :data:`FILTERED_LOG_NOTICES` and :data:`FILTERED_WARNINGS`, which do not concern the user
  (each with the reason it is filtered).

``--verbose`` brings all of it back, hf_cse's DEBUG lines included, on every process.
"""

from __future__ import annotations

import logging
import re
import warnings
from dataclasses import dataclass, field

from .user_modules import import_module_field

#: the loggers of hf_cse's own lines
OWN_LOGGERS = ("hf_cse", "run_unsup", "run_eval")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

#: (logger, message start) of library log records the quiet console drops, and why
FILTERED_LOG_NOTICES = (
    # transformers' Trainer aligns the model config's pad/bos/eos ids with the tokenizer's and says so: the trainer
    # fills in those a method config lacks first (hf_cse.trainer_options.fill_in_special_token_ids), so this comes
    # only where a method config holds ids of its own that differ, which nothing generates text with
    ("transformers.trainer_utils", "The tokenizer has new PAD/BOS/EOS tokens"),
)

#: (message regex, category) of Python warnings the quiet console drops, and why
FILTERED_WARNINGS = (
    # torch's DataLoader on a machine without a GPU: transformers asks for pinned memory by default
    # (dataloader_pin_memory), which only speeds up copies to a GPU; without one torch ignores it and warns each epoch
    (r"'pin_memory' argument is set as true but no accelerator is found", UserWarning),
)


VERBOSE_HELP = ("Print everything: every process's log lines, hf_cse's debug lines, other libraries' INFO lines, "
                "notices and progress bars (by default: one line per stage, from the main process).")


@dataclass
class ConsoleArguments:
    verbose: bool = field(default=False, metadata={"help": VERBOSE_HELP})
    import_module: list[str] = import_module_field()


class _DropNotices(logging.Filter):
    """Drops records whose message starts with one of ``starts``."""

    def __init__(self, starts: tuple[str, ...]):
        super().__init__()
        self.starts = starts

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.starts)


_FILTERS: dict[str, _DropNotices] = {}


def _set_notice_filters(on: bool) -> None:
    by_logger: dict[str, tuple[str, ...]] = {}
    for name, start in FILTERED_LOG_NOTICES:
        by_logger[name] = by_logger.get(name, ()) + (start,)
    for name, starts in by_logger.items():
        target = logging.getLogger(name)
        drop = _FILTERS.setdefault(name, _DropNotices(starts))
        target.addFilter(drop) if on else target.removeFilter(drop)
    for message, category in FILTERED_WARNINGS:
        # filterwarnings replaces an equal entry, so calling this twice leaves one; verbose removes it
        warnings.filterwarnings("ignore", message=message, category=category)
        if not on:
            warnings.filters[:] = [f for f in warnings.filters if not (
                f[0] == "ignore" and f[2] is category and isinstance(f[1], re.Pattern) and f[1].pattern == message)]


def _set_progress_bars(on: bool) -> None:
    """datasets' and transformers' own bars (map, split generation, weight loading, shard writing). Downloads from
    the Hub keep their bars: a download is a wait worth seeing."""
    import datasets
    import huggingface_hub.utils
    import transformers

    if on:
        datasets.enable_progress_bars()
        transformers.utils.logging.enable_progress_bar()
    else:
        datasets.disable_progress_bars()
        transformers.utils.logging.disable_progress_bar()  # which turns off huggingface_hub's bars too:
        huggingface_hub.utils.enable_progress_bars()


def setup_console(verbose: bool = False, main_process: bool = True) -> None:
    """Logging, notices and progress bars of a command (module doc). Safe to call again (tests run several commands
    in one process): each call sets every switch either way."""
    logging.basicConfig(format=LOG_FORMAT, level=logging.INFO)  # no effect when a handler exists (pytest's)
    import transformers

    logging.getLogger().setLevel(logging.INFO if verbose else logging.WARNING)
    own = logging.DEBUG if verbose else logging.INFO if main_process else logging.ERROR
    for name in OWN_LOGGERS:
        logging.getLogger(name).setLevel(own)
    transformers.utils.logging.set_verbosity_warning()  # its INFO lines are load reports of every config file
    _set_notice_filters(not verbose)
    _set_progress_bars(verbose)
