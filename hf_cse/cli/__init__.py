"""The command line of hf_cse: ``hf-cse-train`` / ``hf-cse-eval`` / ``hf-cse-export``, ``python -m hf_cse
train|eval|export`` and the top-level ``run_unsup.py`` / ``run_eval.py`` all run the ``main`` of a module here.

This sub-package is the script side of the library: argument dataclasses (:mod:`.arguments`), presets, the checks
run before any work (:mod:`.preflight`), the output-folder policy (:mod:`.output_dir`) and the entry points
(:mod:`.train`, :mod:`.evaluate`, :mod:`.export`). The library never imports it.

What every entry point shares is here: one line per foreseeable failure (the traceback behind
``HF_CSE_DEBUG=1``); how their parsers are made and read before anything else (empty path flags, unknown flags) is
:mod:`.parsing`.

    if __name__ == "__main__":
        sys.exit(run_cli(main, "run_unsup.py"))
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ..errors import CSEError, disk_full, network_failure, write_refused
from .flags import flag_terms_in_logs, in_flag_terms, use_parser
from .launch import torchrun_worker
from .stop_signals import Terminated, stop_signals_as_interrupt

DEBUG_ENV = "HF_CSE_DEBUG"


#: the longest error line the commands print (a terminal's five lines: a list of choices or a fix is kept whole)
MAX_LINE = 600
_LONG_PATH = re.compile(r"/(?:[^\s/]+/){2,}[^\s/]+")  # an absolute path of 4 parts or more
#: a quoted path, with the flag or ``name=`` before it: what the line offers to copy (``--resume_from_checkpoint
#: '/runs/out/checkpoint-4'``), kept whole where the line can be shortened elsewhere
_QUOTED_PATH = re.compile(r"(?:(?<![\w-])--\w+ |\b\w+=)?(?<![\w'])'[^'\s]*/[^'\s]*'")


def _quoted_paths(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in _QUOTED_PATH.finditer(text)]


def _shortened_paths(text: str, limit: int, quoted: bool = False) -> str:
    """``text`` with its long paths shortened only as far as needed to fit ``limit``: the path with the longest
    kept end loses one more folder from its middle at a time, down to its root and last two names
    (``/tmp/.../run/out``); quoted paths (:data:`_QUOTED_PATH`) only where ``quoted``."""
    kept_whole = [] if quoted else _quoted_paths(text)
    matches = [m for m in _LONG_PATH.finditer(text) if not any(s <= m.start() < e for s, e in kept_whole)]
    parts = [m.group(0).split("/") for m in matches]
    kept = [len(p) - 2 for p in parts]  # the names kept at each path's end (all but the root: nothing hidden)

    def render() -> str:
        out, at = [], 0
        for m, p, k in zip(matches, parts, kept):
            out += [text[at:m.start()], m.group(0) if k >= len(p) - 2 else "/" + p[1] + "/.../" + "/".join(p[-k:])]
            at = m.end()
        return "".join(out) + text[at:]

    line = render()
    while len(line) > limit and any(k > 2 for k in kept):
        longest = max((i for i, k in enumerate(kept) if k > 2), key=lambda i: len("/".join(parts[i][-kept[i]:])))
        kept[longest] -= 1
        line = render()
    return line


def _brackets(text: str) -> list[tuple[int, int]]:
    """The spans inside the outermost ``(...)`` of ``text`` (where a message quotes another library's error)."""
    spans, depth, start = [], 0, 0
    for at, char in enumerate(text):
        if char == "(":
            depth += 1
            start = at + 1 if depth == 1 else start
        elif char == ")" and depth:
            depth -= 1
            if depth == 0:
                spans.append((start, at))
    return spans


#: what a quoted error of another library shows, and hf_cse's own bracketed lists (settings, names) do not: sentences
#: or an exception's name
_QUOTED_ERROR = re.compile(r"\w[.!?] [A-Z(']|\b[A-Z]\w*(Error|Exception)\b")


def _shortened_quotes(text: str, limit: int, keep: int = 40) -> str:
    """``text`` with its longest bracketed quotes of another library's error (:data:`_QUOTED_ERROR`) cut at their
    end, at a word, only as far as needed to fit ``limit``: hf_cse's own words around them, the problem and its fix,
    stay whole."""
    while len(text) > limit:
        spans = [(start, end) for start, end in _brackets(text)
                 if end - start > keep + 4 and _QUOTED_ERROR.search(text[start:end])]
        if not spans:
            break
        start, end = max(spans, key=lambda span: span[1] - span[0])
        inner = text[start:end]
        cut = inner[:max(keep, len(inner) - (len(text) - limit) - 4)]
        cut = cut[:cut.rfind(" ")] if " " in cut[keep // 2:] else cut
        text = f"{text[:start]}{cut.rstrip(' ,;:')} ...{text[end:]}"
    return text


def _middle_cut(text: str, limit: int, kept: list[tuple[int, int]]) -> str | None:
    """``text`` in ``limit`` characters, a part of it replaced by `` ... ``: its middle (the start says what failed,
    the end what to do), or the nearest part beside the ``kept`` spans, which it never cuts; widened to whole words
    beside those; None where none is."""
    cut = len(text) - (limit - 5)
    head = (limit - 5) * 2 // 3
    for start in sorted({head, *(s - cut for s, _ in kept), *(e for _, e in kept)}, key=lambda at: abs(at - head)):
        end = start + cut
        if 0 <= start and end < len(text) and not any(start < e and s < end for s, e in kept):
            before = max([e for _, e in kept if e <= start], default=0)
            after = min([s for s, _ in kept if s >= end], default=len(text))
            space = text.rfind(" ", before, start + 1)
            start = space if space > before else start
            space = text.find(" ", end, after)
            end = space + 1 if space != -1 else end
            return f"{text[:start].rstrip()} ... {text[end:].lstrip()}"
    return None


def fit_line(text: str, limit: int = MAX_LINE) -> str:
    """``text`` in at most ``limit`` characters: long paths shortened (:func:`_shortened_paths`), then long quotes
    in brackets (:func:`_shortened_quotes`) where that is enough, else its middle cut out (the start says what
    failed, the end what to do). A quoted path (the checkpoint to resume from) is kept whole, cut around, unless
    nothing else can go."""
    if len(text) <= limit:
        return text
    text = _shortened_paths(text, limit)
    quotes_cut = _shortened_quotes(text, limit)
    if len(quotes_cut) <= limit:
        return quotes_cut
    around = _middle_cut(text, limit, _quoted_paths(text))
    if around is not None:
        return around
    text = _shortened_paths(text, limit, quoted=True)
    return text if len(text) <= limit else _middle_cut(text, limit, []) or text[:limit]


def _close_progress_bars() -> None:
    """Close the progress bars still open, so that none is redrawn below the error line (tqdm redraws an open
    bar when the process exits)."""
    tqdm = sys.modules.get("tqdm")
    for bar in list(getattr(getattr(tqdm, "tqdm", None), "_instances", None) or []):
        bar.close()
    sys.stdout.flush()


# Failures a user can cause and fix: the library's own errors (hf_cse.errors). Other exceptions are bugs and keep
# their traceback.
FORESEEABLE: tuple[type[BaseException], ...] = (CSEError,)


#: the fix of hard negatives given to a loss without a use for them (:func:`~.train_facts.check_pair_flags`)
NEGATIVES_ADVICE = "Drop --negative_column or pick one of those losses."


def flag_advice(err: BaseException) -> str:
    """The flags to change for an error a loss raised in its own terms (:mod:`hf_cse.losses.errors`); "" otherwise."""
    errors = sys.modules.get("hf_cse.losses.errors")
    if errors is None:  # no loss was imported, so none raised
        return ""
    from ..losses.base import NO_DROPOUT_INPUT  # loaded with the losses' errors: no import cost here

    if isinstance(err, errors.MissingInputsError) and NO_DROPOUT_INPUT in err.missing:
        return "Use --method imsimcse (or --off_dropout) so the model provides them."
    if isinstance(err, errors.HardNegativesNotTakenError):
        return NEGATIVES_ADVICE
    return ""


#: how long a process other than the main one waits, on an error every process raises, for the main process to print
#: it and end (the launcher then stops this one), before it prints the line itself
OTHER_PROCESS_WAIT_S = 30.0


def is_main_process() -> bool:
    """Whether this is the main process of its launch (torchrun and accelerate set ``RANK``; MPI launchers their own
    rank): it alone prints an error that every process raises alike."""
    for name in ("RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK"):
        if os.environ.get(name, "0").strip() not in ("", "0"):
            return False
    return True


def run_cli(main: Callable[[], int | None], prog: str) -> int:
    """Run ``main()``; a foreseeable failure becomes ``prog: error: <one line>`` on stderr and exit code 1 (with the
    flags to change where a loss said what is wrong in its own terms: :func:`flag_advice`).

    Ctrl-C (``KeyboardInterrupt``) is one line too, with exit code 130 (128 + SIGINT, as a shell reports it), and so
    is SIGTERM, with 143 (:mod:`.stop_signals`); under several processes the main process alone prints it (the others
    are stopped with it, or by the launcher after one failed with a line of its own).
    A foreseeable failure is a :class:`~hf_cse.errors.CSEError`; its message names fields as the Python API does,
    and is printed with the flags that set them (:func:`hf_cse.cli.flags.in_flag_terms`). Any other exception is a
    bug and keeps its traceback; set ``HF_CSE_DEBUG=1`` to get the traceback of a ``CSEError`` too. Under several
    processes an error every process raises alike (:func:`hf_cse.errors.raised_on_every_process`) is printed by the
    main process alone, and a collective failing because another process ended (:func:`another_process_ended`) is one
    line too. A process of a launch (in a process group) ends in here, with the exit code, rather than returning it
    (:func:`hf_cse.distributed.leave_process_group_process`).
    """
    with stop_signals_as_interrupt() as ending:  # a launcher's SIGTERM right after Ctrl-C must not cut the line short
        code = _run_cli(main, prog)
        ending(code)  # the line is said: a stop from now on ends the process quietly (.stop_signals)
        if "torch.distributed" in sys.modules:  # a process of a launch ends here (why: leave_process_group_process)
            from ..distributed import leave_process_group_process

            leave_process_group_process(code)
    return code


#: what the running command says it keeps when interrupted (set by the command once it knows: :func:`say_when_stopped`)
_kept: list[Callable[[], str]] = []
KEPT_BY_DEFAULT = "what was saved so far is kept."


def say_when_stopped(kept: Callable[[], str]) -> None:
    """``kept()`` is said after "interrupted (Ctrl-C); " (or the SIGTERM line) if the command is stopped from now on:
    what it actually keeps (hf-cse-train: its last complete checkpoint, or that it saves none)."""
    _kept[:] = [kept]


def _kept_line() -> str:
    try:
        return _kept[0]() if _kept else KEPT_BY_DEFAULT
    except Exception:  # noqa: BLE001 - the line must be printed, whatever the folder looks like now
        return KEPT_BY_DEFAULT


def say_line(line: str) -> None:
    """Print the command's last line; in a process torchrun started (``accelerate launch`` with several processes)
    also into its error file, so that the launcher's closing "Root Cause" box shows the line rather than "<N/A>"."""
    print(line, file=sys.stderr)
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if error_file and torchrun_worker():  # (a command a worker starts inherits the worker's file)
        try:
            Path(error_file).write_text(json.dumps({"message": line, "timestamp": int(time.time())}),
                                        encoding="utf-8")
        except OSError:
            pass  # the line is printed: the launcher's box is a courtesy


def _run_cli(main: Callable[[], int | None], prog: str) -> int:
    use_parser(())  # no flags known until the command reads its parser (parsing.refuse_unknown_flags)
    _kept.clear()
    try:
        with flag_terms_in_logs():
            return int(main() or 0)
    except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM: one line and the shell's code for the signal
        if os.environ.get(DEBUG_ENV):
            raise
        _close_progress_bars()
        # one line for the run, from the main process: Ctrl-C reaches every process of a launch; a scheduler's SIGTERM
        # too, and a launcher's reaches the others after one failed (with its own line, or the main process's)
        if isinstance(stop, Terminated):
            if is_main_process():
                say_line(f"{prog}: stopped (SIGTERM, from a launcher, a job scheduler or kill); {_kept_line()}")
            return 143
        if is_main_process():
            say_line(f"{prog}: interrupted (Ctrl-C); {_kept_line()}")
        return 130
    except FORESEEABLE as err:
        if os.environ.get(DEBUG_ENV):
            raise
        if getattr(err, "on_every_process", False) and not is_main_process():
            # the main process prints the same line and ends, and the launcher then stops this one: one line for the
            # run. Ending first would have the launcher stop the main process before its line (when it lags); a main
            # process still running after the wait did not raise it after all, and the line is printed here.
            stopped = _wait_for_main_process()
            if stopped is not None:
                return stopped
        advice = flag_advice(err)
        prefix, suffix = f"{prog}: error: ", f" ({DEBUG_ENV}=1 shows the traceback)"
        room = MAX_LINE - len(prefix) - (len(advice) + 1 if advice else 0)
        message = fit_line(in_flag_terms(" ".join(str(err).split()), err.fields) or type(err).__name__, room)
        if len(message) + len(suffix) > room:  # the fix matters more than the hint: it goes when there is no room
            suffix = ""
        _close_progress_bars()
        say_line(f"{prefix}{message}{' ' + advice if advice else ''}{suffix}")
        return 1
    except Exception as err:  # noqa: BLE001 - three failures that are not bugs; any other is re-raised with its trace
        if os.environ.get(DEBUG_ENV):
            raise
        if isinstance(err, RuntimeError) and another_process_ended(err):
            _close_progress_bars()
            say_line(f"{prog}: error: another process of this run ended (killed, or its own error above); "
                     f"{_kept_line()}")
            return 1
        full = disk_full(err)
        if full is not None:
            _close_progress_bars()
            reason = fit_line(f"{type(full).__name__}: {' '.join(str(full).split())}", 160)
            say_line(f"{prog}: error: the disk is full, or a file could not be written whole ({reason}). Free space, "
                     f"or write to a folder on another disk; {_kept_line()}")
            return 1
        refused = write_refused(err)
        if refused is not None:
            _close_progress_bars()
            reason = fit_line(f"{type(refused[0]).__name__}: {' '.join(str(refused[0]).split())}", 300)
            say_line(f"{prog}: error: the save could not write its files ({reason}): {refused[1]}; {_kept_line()}")
            return 1
        failed = network_failure(err)
        if failed is None:
            raise
        _close_progress_bars()
        reason = fit_line(f"{type(failed).__name__}: {' '.join(str(failed).split())}", 120)
        say_line(f"{prog}: error: the Hugging Face Hub could not be reached ({reason}). Check the network, or name "
                 f"local folders (HF_HUB_OFFLINE=1 then skips the Hub); {_kept_line()}")
        return 1


def _wait_for_main_process() -> int | None:
    """Wait :data:`OTHER_PROCESS_WAIT_S` on a process other than the main one, for the main process to print an error
    every process raised and end. None after the wait; the shell's exit code for the signal when the launcher stopped
    this one meanwhile (its SIGTERM once the main process ended with that line, or a Ctrl-C): this one then says
    nothing, for the run's line was said (not a Ctrl-C that never came)."""
    try:
        time.sleep(OTHER_PROCESS_WAIT_S)
    except KeyboardInterrupt as stop:
        return 143 if isinstance(stop, Terminated) else 130
    return None


#: what torch.distributed's gloo backend says when another process of the run went away mid-collective
_PEER_GONE = ("Connection closed by peer", "Connection reset by peer")


def another_process_ended(err: BaseException) -> bool:
    """Whether ``err`` is a collective failing because another process of a multi-process launch ended (killed with
    SIGKILL, out of memory, or stopped on its own error): a traceback of this process would only bury that."""
    launched = os.environ.get("WORLD_SIZE", "1").strip() not in ("", "1")
    return launched and isinstance(err, RuntimeError) and any(text in str(err) for text in _PEER_GONE)
