"""What a command's ``--help`` shows: a short usage line, what the command does with an example, then its flags in
sections -- the most used ones with their help, the others of each section by name -- and, for ``hf-cse-train``,
a last line pointing to ``--help_all``, which prints argparse's complete help (transformers' Trainer options
included: over a thousand lines).

A parser's help layout (:func:`help_layout`) is plain JSON data, kept in the parser's description with its flags
(:mod:`.parser_cache`), so that the parser rebuilt from it before torch is imported prints the same help; both are
laid out by :func:`short_help` from the same actions. Nothing heavy is imported here.
"""

from __future__ import annotations

import argparse
import copy
import shutil
import sys
import textwrap
from collections.abc import Iterable

HELP_ALL = "--help_all"
HELP_ALL_HELP = "show every flag, with transformers' full help of its Trainer options, and exit"


class HelpAllAction(argparse.Action):
    """``--help_all``: argparse's complete help (every flag), whatever ``--help`` shows."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):  # noqa: A002
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        sys.stdout.write(full_help(parser))
        parser.exit()


class UnsetDefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's defaults formatter (HfArgumentParser's), less its "(default: None)" and "(default: [])": a flag
    whose default is None or an empty list is unset until given, and its help says what happens then ("Default:
    demo corpus.")."""

    def _get_help_string(self, action):
        unset = action.default is None or action.default == []
        return action.help if unset else super()._get_help_string(action)


def full_help(parser: argparse.ArgumentParser) -> str:
    """argparse's own help of ``parser`` (every flag), whatever its ``format_help`` shows."""
    return type(parser).format_help(parser)


def help_layout(usage: str, description: str, example: str, sections: Iterable[tuple[str, list[str], list[str]]],
                footer: str | None = None) -> dict:
    """What ``--help`` shows: ``usage`` after the program's name, ``description`` and ``example`` (``%(prog)s`` is
    the program's name), then each section ``(title, flags shown with their help, flags only named)`` by
    destination, and ``footer``."""
    return {"usage": usage, "description": description, "example": example,
            "sections": [[title, list(shown), list(named)] for title, shown, named in sections], "footer": footer}


def use_layout(parser: argparse.ArgumentParser, layout: dict | None) -> argparse.ArgumentParser:
    """``parser`` with ``layout`` as its ``--help`` (:func:`short_help`); None leaves argparse's."""
    parser.help_layout = layout
    if layout is not None:
        parser.format_help = lambda: short_help(parser, layout)
    return parser


def add_short_help(parser: argparse.ArgumentParser, layout: dict, help_all: bool = False) -> argparse.ArgumentParser:
    """:func:`use_layout`, with a ``--help_all`` flag printing argparse's complete help, shown in the help where
    ``help_all`` (a command whose ``--help`` shows every flag takes it unlisted, as every command's users type it)."""
    parser.add_argument(HELP_ALL, action=HelpAllAction, help=HELP_ALL_HELP if help_all else argparse.SUPPRESS)
    return use_layout(parser, layout)


def usage_text(parser: argparse.ArgumentParser) -> str:
    """``PROG [options] POSITIONAL...``: the usage line's words (the layout's, else the positionals')."""
    layout = getattr(parser, "help_layout", None)
    if layout:
        return f"{parser.prog} {layout['usage']}"
    positionals = " ".join(a.dest.upper() for a in parser._actions if not a.option_strings)
    return f"{parser.prog} [options]" + (f" {positionals}" if positionals else "")


def _width() -> int:
    return max(shutil.get_terminal_size().columns - 2, 20)  # as argparse's HelpFormatter


def _shown(action: argparse.Action) -> argparse.Action:
    """``action`` without its dashed spellings (``--learning-rate`` of ``--learning_rate``), for the short help."""
    options = [o for o in action.option_strings
               if not (o.startswith("--") and "-" in o[2:] and "--" + o[2:].replace("-", "_") in action.option_strings)]
    if options == action.option_strings:
        return action
    shown = copy.copy(action)
    shown.option_strings = options
    return shown


def _flag(actions: list[argparse.Action]) -> str:
    """The flag of a destination's actions: ``--dest`` if it is one, else the first long option."""
    options = [o for a in actions for o in a.option_strings]
    own = f"--{actions[0].dest}"
    return own if own in options else next((o for o in options if o.startswith("--")), options[0])


def short_help(parser: argparse.ArgumentParser, layout: dict) -> str:
    """The help ``layout`` describes, laid out by the parser's own formatter (help column, wrapping, defaults)."""
    prog, width = parser.prog, _width()
    by_dest: dict[str, list[argparse.Action]] = {}
    for action in parser._actions:
        by_dest.setdefault(action.dest, []).append(action)
    lines = [f"usage: {prog} {layout['usage']}", ""]
    lines += textwrap.wrap(layout["description"].replace("%(prog)s", prog), width) + [""]
    if layout.get("example"):
        lines += ["example:", "  " + layout["example"].replace("%(prog)s", prog), ""]
    formatter = parser.formatter_class(prog=prog)
    for title, shown, named in layout["sections"]:
        formatter.start_section(title)
        formatter.add_arguments([_shown(a) for dest in shown for a in by_dest.get(dest, [])])
        names = [_flag(by_dest[dest]) for dest in named if dest in by_dest]
        if names:
            formatter.add_text(("also: " if shown else "") + ", ".join(names))
        formatter.end_section()
    text = "\n".join(lines) + "\n" + formatter.format_help()
    if layout.get("footer"):
        text += "\n" + "\n".join(textwrap.wrap(layout["footer"].replace("%(prog)s", prog), width)) + "\n"
    return text


#: hf-cse-train's flags shown with their help in ``--help`` (the others of hf_cse are named in their section)
TRAIN_SHOWN = ("method", "preset", "model_name_or_path", "config", "pooler_type", "train_file", "dataset_name",
               "text_column", "pair_column", "negative_column", "max_seq_length", "max_train_samples", "loss",
               "temperature", "dcl_weight", "eval_file", "senteval_data_dir", "precision", "verbose")
#: the Trainer's flags ``--help`` shows (transformers' TrainingArguments), with hf_cse's --overwrite_output_dir
TRAIN_COMMON = ("output_dir", "overwrite_output_dir", "per_device_train_batch_size", "gradient_accumulation_steps",
                "learning_rate", "num_train_epochs", "max_steps", "seed", "logging_steps", "eval_strategy",
                "eval_steps", "save_strategy", "save_steps", "save_total_limit", "load_best_model_at_end",
                "metric_for_best_model", "report_to", "resume_from_checkpoint")
TRAIN_DESCRIPTION = (
    "Train a sentence encoder with a contrastive method (--method: SimCSE and its successors) and loss (--loss). With "
    "no flag it trains the packaged all-MiniLM-L6-v2 for one epoch on a small demo corpus; --preset takes a paper's "
    "settings, --train_file or --dataset_name your data. It writes the model, its sentence-transformers export and "
    "training_info.json to --output_dir.")


def train_layout(groups: Iterable[tuple[str, list[str]]], trainer: list[str]) -> dict:
    """hf-cse-train's ``--help``: hf_cse's ``groups`` of flags (title, destinations), :data:`TRAIN_SHOWN` with their
    help and the others named, then :data:`TRAIN_COMMON` of the Trainer's flags (destinations ``trainer``) and how
    many more ``--help_all`` shows."""
    sections = [(title, sorted((d for d in dests if d in TRAIN_SHOWN), key=TRAIN_SHOWN.index),
                 [d for d in dests if d not in TRAIN_SHOWN]) for title, dests in groups]
    sections.append(("common Trainer options", list(TRAIN_COMMON), []))
    more = len(set(trainer) - set(TRAIN_COMMON))
    return help_layout(
        "[options]", TRAIN_DESCRIPTION, "%(prog)s --loss gs_infonce   # the demo corpus, the default encoder",
        sections, footer=f"{more} more options of transformers' Trainer (optimizer, scheduler, precision, logging, "
                         f"Hub, distributed): %(prog)s {HELP_ALL} lists every flag with its full help.")


def all_flags_layout(parser: argparse.ArgumentParser, description: str, example: str) -> dict:
    """A ``--help`` of every flag of ``parser`` (hf-cse-eval's, hf-cse-export's: all hf_cse's own), under the short
    usage line, ``description`` and ``example``."""
    dests = list(dict.fromkeys(a.dest for a in parser._actions))
    positionals = [a.dest for a in parser._actions if not a.option_strings]
    usage = " ".join(["[options]", *(d.upper() for d in positionals)])
    sections = [("positional arguments", positionals, [])] if positionals else []
    sections.append(("options", [d for d in dests if d not in positionals], []))
    return help_layout(usage, description, example, sections)


EVAL_DESCRIPTION = (
    "Score sentence embeddings as the SimCSE-family papers do: SentEval's STS and transfer tasks, MTEB tasks, your own "
    "scored pairs (--eval_file) and the embeddings' geometry, for one model or several (hf_cse checkpoints, "
    "sentence-transformers models, plain Hugging Face encoders). It writes results.json, results.md and plots to "
    "--output_dir.")
EVAL_EXAMPLE = "%(prog)s --senteval_data_dir ../shared/data/senteval --tasks sts,transfer"
EXPORT_EXAMPLE = "%(prog)s outputs/simcse-gs_infonce outputs/simcse-gs_infonce-st"
