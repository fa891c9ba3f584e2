"""A new user's first look at the commands (hf_cse.cli.help): ``--help`` is a short usage line, what the command does
with an example, hf_cse's flags and the Trainer's most used ones, and a pointer to ``--help_all`` (every flag); the
parser rebuilt from its description (the fast path, before torch) shows the same. argparse's own errors are one
line, ``PROG: error: ...``, exit code 2, with the closest choice where one is close."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import package_methods
from transformers import TrainingArguments

from hf_cse.checks import InputError
from hf_cse.cli import entry_points, evaluate, export, parser_cache, train
from hf_cse.cli.help import TRAIN_COMMON, full_help
from hf_cse.cli.parsing import closest_choice, refuse_unknown_flags

REPO = Path(__file__).resolve().parents[2]
MAX_LINES = 250
HF_CSE_FLAGS = ("--method", "--preset", "--model_name_or_path", "--config", "--pooler_type", "--train_file",
                "--pair_column", "--max_seq_length", "--loss", "--temperature", "--dcl_weight", "--eval_file",
                "--senteval_data_dir", "--precision")


@pytest.fixture(scope="module")
def parsers():
    """hf-cse-train's own parser and the one rebuilt from its description (what the fast path reads)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "argv", ["hf-cse-train"])  # the program name argparse shows
        own = train.argument_parser()
        return own, parser_cache.rebuild(json.loads(json.dumps(parser_cache.describe(own))))


@pytest.fixture(autouse=True)
def _width(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr(sys, "argv", ["hf-cse-train"])


def _help_of(parser, flag: str, capsys) -> str:
    with pytest.raises(SystemExit) as end:
        parser.parse_args([flag])
    assert end.value.code == 0
    return capsys.readouterr().out


def test_help_is_short_says_what_the_command_does_and_points_to_help_all(parsers, capsys):
    own, _ = parsers
    text = _help_of(own, "--help", capsys)
    lines = text.splitlines()
    assert lines[0] == "usage: hf-cse-train [options]" and lines[1] == ""
    assert text.index("Train a sentence encoder") < text.index("example:\n  hf-cse-train --loss gs_infonce")
    assert len(lines) < MAX_LINES, len(lines)
    shown = [line.split()[0] for line in lines if line.startswith("  --")]  # flags shown with their help
    assert set(HF_CSE_FLAGS) <= set(shown) and {f"--{name}" for name in TRAIN_COMMON} <= set(shown)
    assert "--adam_beta2" not in text and "--lambda_rtd" in text  # a Trainer flag left out; hf_cse's named
    assert not any(line.startswith("  --learning-rate") for line in lines)  # no dashed twin of a flag
    footer = " ".join(text.split("\n\n")[-1].split())  # the last paragraph: how many Trainer flags are left out
    trainer = {f.name for f in dataclasses.fields(TrainingArguments) if f.init}
    left_out = trainer & {action.dest for action in own._actions} - set(TRAIN_COMMON)
    assert int(footer.split()[0]) == len(left_out) > 50
    assert footer.endswith("hf-cse-train --help_all lists every flag with its full help.")


def test_help_all_is_argparse_s_complete_help(parsers, capsys):
    own, _ = parsers
    text = _help_of(own, "--help_all", capsys)
    assert text == full_help(own) and text.startswith("usage: hf-cse-train [-h]")
    for action in own._actions:  # every flag, the Trainer's included
        assert all(option in text for option in action.option_strings), action.option_strings
    assert "--adam_beta2 ADAM_BETA2" in text and len(text.splitlines()) > 4 * MAX_LINES


@pytest.mark.parametrize("flag", ["--help", "--help_all"])
def test_help_names_set_defaults_and_leaves_out_unset_ones(parsers, flag, capsys):
    """An unset flag's help says what happens then ("Default: demo corpus."); "(default: None)" said nothing."""
    for parser in parsers:
        text = " ".join(_help_of(parser, flag, capsys).split())
        assert "(default: None)" not in text
        assert "Default: demo corpus." in text and "(default: simcse)" in text  # a set default is still shown
    assert "(default: None)" not in " ".join(full_help(evaluate.argument_parser()).split())  # every flag of run_eval


@pytest.mark.parametrize("flag", ["--help", "--help_all"])
def test_the_best_metrics_help_says_what_hf_cse_selects_by(parsers, flag, capsys):
    """transformers' help of --metric_for_best_model said it defaults to 'loss', a score no contrastive run logs;
    the help says the dev scores a run logs, and which one selects where none is given."""
    for parser in parsers:
        text = " ".join(_help_of(parser, flag, capsys).split())
        own = text[text.rindex("METRIC_FOR_BEST_MODEL"):]  # its help: after the flag (and its twin), not the usage
        own = own[:own.index(" --")]
        assert "Defaults to 'loss'" not in text
        assert "stsb_spearman" in own and "<eval_name>_spearman" in own and "Not set: the run's first dev score" in own


@pytest.mark.parametrize("width", ["60", "80", "200"])
def test_the_fast_path_shows_the_same_help(parsers, width, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", width)
    own, rebuilt = parsers
    for flag in ("--help", "--help_all"):
        assert _help_of(rebuilt, flag, capsys) == _help_of(own, flag, capsys)


@pytest.mark.parametrize("command, build", [("eval", evaluate.argument_parser), ("export", export.build_parser)])
def test_eval_and_export_help_start_short_with_an_example(command, build, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", [f"hf-cse-{command}"])
    own = build()
    text = _help_of(own, "--help", capsys)
    usage = "[options] CHECKPOINT OUT_DIR" if command == "export" else "[options]"
    assert text.startswith(f"usage: hf-cse-{command} {usage}\n\n")
    assert f"example:\n  hf-cse-{command} " in text and len(text.splitlines()) < MAX_LINES
    assert all(option in text for action in own._actions for option in action.option_strings
               if not option[2:].count("-") and option != "--help_all")  # every flag, without dashed twins
    assert "--help_all" not in text  # taken, not listed: --help shows every flag already
    assert _help_of(own, "--help_all", capsys).startswith(f"usage: hf-cse-{command} [-h]")
    rebuilt = parser_cache.rebuild(json.loads(json.dumps(parser_cache.describe(own))))
    assert _help_of(rebuilt, "--help", capsys) == text


def _error(parser, argv, capsys) -> list[str]:
    with pytest.raises(SystemExit) as end:
        parser.parse_args(argv)
    out = capsys.readouterr()
    assert end.value.code == 2 and out.out == ""
    return out.err.splitlines()


@pytest.mark.parametrize("argv, line", [
    (["--method", "simsce"], "hf-cse-train: error: argument --method: invalid choice: 'simsce'; did you mean "
                             f"'simcse'? (choose from {', '.join(map(repr, package_methods()))})"),
    (["--pooler_type", "xyz"], "hf-cse-train: error: argument --pooler_type: invalid choice: 'xyz' (choose from "
                               "'cls', 'cls_before_pooler', 'avg', 'avg_first_last', 'avg_top2', 'max', 'last')"),
    (["--learning_rate", "abc"], "hf-cse-train: error: argument --learning_rate: invalid float value: 'abc'"),
    (["--max_steps"], "hf-cse-train: error: argument --max_steps: expected one argument (give it a value; one that "
                      "starts with '-' reads as a flag: write --max_steps=VALUE)"),
])
def test_argparse_errors_are_one_line_on_either_path(parsers, argv, line, capsys):
    for parser in parsers:
        assert _error(parser, argv, capsys) == [line]


@pytest.mark.parametrize("argv, line", [
    (["--max_step", "20"], "unknown flag --max_step; did you mean --max_steps?"),  # argparse read it as --max_steps
    (["--temp", "0.1"], "unknown flag --temp; did you mean --temperature?"),  # argparse: "ambiguous option"
    (["--lr", "1e-5"], "unknown flag --lr; did you mean --learning_rate?"),  # a usual shorthand
    (["--lambd", "0.3"], "unknown flag --lambd; did you mean --lam?"),  # the start of --lambda_rtd, closest to --lam
])
def test_a_flags_prefix_is_an_unknown_flag_named_with_the_closest_on_either_path(parsers, argv, line):
    """No abbreviations (allow_abbrev=False): argparse took --max_step 20 for --max_steps silently, while README
    promises a misspelt flag gets the closest one named."""
    for parser in parsers:
        assert parser.allow_abbrev is False
        assert parser.parse_known_args(argv)[1] == argv  # left unknown, not read as a flag it starts
        with pytest.raises(InputError) as refused:
            refuse_unknown_flags(parser, argv)
        assert str(refused.value) == line


def test_every_commands_parser_takes_no_abbreviation(capsys):
    for command in entry_points.MODULES:
        own = entry_points.build_parser(command)
        rebuilt = parser_cache.rebuild(json.loads(json.dumps(parser_cache.describe(own))))
        assert own.allow_abbrev is False and rebuilt.allow_abbrev is False


def test_a_value_read_as_a_flag_names_the_equals_form(capsys):
    """--matryoshka_weights -1,1 said only 'expected one argument': argparse reads '-1,1' as a flag."""
    for parser in (train.argument_parser(), parser_cache.rebuild(parser_cache.describe(train.argument_parser()))):
        assert _error(parser, ["--matryoshka_weights", "-1,1"], capsys) == [
            "hf-cse-train: error: argument --matryoshka_weights: expected one argument (give it a value; one that "
            "starts with '-' reads as a flag: write --matryoshka_weights=VALUE)"]


def test_a_missing_positional_names_the_usage(capsys, monkeypatch):
    for parser in (export.build_parser(), parser_cache.rebuild(parser_cache.describe(export.build_parser()))):
        assert _error(parser, ["ckpt"], capsys) == [
            "hf-cse-export: error: the following arguments are required: out_dir "
            "(usage: hf-cse-export [options] CHECKPOINT OUT_DIR)"]


@pytest.mark.parametrize("message, want", [
    ("argument --m: invalid choice: 'avgg' (choose from 'avg', 'cls')",  # Python <= 3.12.7 quotes the choices
     "argument --m: invalid choice: 'avgg'; did you mean 'avg'? (choose from 'avg', 'cls')"),
    ("argument --m: invalid choice: 'avgg' (choose from avg, cls)",  # later versions do not
     "argument --m: invalid choice: 'avgg'; did you mean 'avg'? (choose from avg, cls)"),
    ("argument --m: invalid choice: 'zzz' (choose from 'avg', 'cls')", None),  # nothing close
    ("argument --n: invalid int value: 'avg'", None),
    # sentence-transformers' names of a pooling (a review: --pooler_type mean named no choice)
    ("argument --pooler_type: invalid choice: 'mean' (choose from 'cls', 'avg', 'last')",
     "argument --pooler_type: invalid choice: 'mean'; did you mean 'avg'? (choose from 'cls', 'avg', 'last')"),
    ("argument --pooler: invalid choice: 'lasttoken' (choose from cls, avg, last)",
     "argument --pooler: invalid choice: 'lasttoken'; did you mean 'last'? (choose from cls, avg, last)"),
    ("argument --x: invalid choice: 'mean' (choose from 'a', 'b')", None),  # an alias of no choice offered
])
def test_the_closest_choice_is_named(message, want):
    assert closest_choice(message) == (want or message)


def test_the_pooler_aliases_are_sentence_transformers_modes_and_the_library_names_them_too():
    """The command line's aliases (kept free of torch) say what the library's map of sentence-transformers' pooling
    modes says; the library's refusal of an unknown pooler names the same."""
    from hf_cse.cli.parsing import CHOICE_ALIASES
    from hf_cse.models.pooling import POOLER_OF_ST_MODE, POOLERS, check_pooler

    assert CHOICE_ALIASES == {mode: name for mode, name in POOLER_OF_ST_MODE.items() if mode not in POOLERS}
    with pytest.raises(ValueError, match=r"^Unknown pooler 'mean' \(sentence-transformers' 'mean' is 'avg' here\)"):
        check_pooler("mean")


def test_an_unknown_preset_is_the_same_line_on_either_path(parsers, capsys):
    _, rebuilt = parsers
    with pytest.raises(SystemExit) as fast:
        entry_points.VALUE_CHECKS["train"](rebuilt, ["--preset", "simcse"])
    fast_err = capsys.readouterr().err
    with pytest.raises(SystemExit) as slow:
        train.parse_args(["--preset", "simcse"])
    assert (fast.value.code, slow.value.code) == (2, 2)
    assert fast_err == capsys.readouterr().err
    assert fast_err.startswith("hf-cse-train: error: unknown --preset 'simcse'; did you mean 'simcse_bert'? presets:")
    assert fast_err.count("\n") == 1


@pytest.mark.slow  # subprocesses, each importing the training stack where it must
@pytest.mark.parametrize("argv, words", [
    (["train", "--method", "simsce"], ["argument --method: invalid choice: 'simsce'", "did you mean 'simcse'?",
                                       "'esimcse'"]),
    (["train", "--preset", "nope"], ["unknown --preset 'nope'; presets: ", "simcse_bert"]),
    (["eval", "--pooler", "xyz"], ["argument --pooler: invalid choice: 'xyz'", "'cls_before_pooler'"]),
    (["export", "ckpt", "out", "--backend", "onx"], ["argument --backend: invalid choice: 'onx'",
                                                     "did you mean 'onnx'?"]),
])
def test_a_command_s_argparse_error_is_one_line_and_exit_code_2(argv, words, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "HF_CSE_CACHE": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "hf_cse", *argv], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600, env=env)
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"hf-cse-{argv[0]}: error: ") and all(word in lines[0] for word in words), lines[0]


def test_a_loss_hyperparameters_help_says_its_losses_defaults_meaning_and_rule():
    """Every loss flag read "Hyperparameter of the --loss X." alone: no default, no meaning, no valid range."""
    helps = {a.dest: a.help for a in train.argument_parser()._actions}
    assert helps["noise_std"].startswith("Hyperparameter of the --loss gs_infonce (default 1.0). sigma of the "
                                         "Gaussian")  # its own docstring's Args entry
    assert helps["noise_std"].endswith("Must be a finite number > 0.")
    assert "--loss arccon 0.05, focal_infonce 0.07, gs_infonce 0.05" in helps["temperature"]
    assert ("Must be a number >= 0.0001 (the papers sweep 0.01 to 50; a smaller one makes the softmax a hard maximum). "
            "The DCL objective of --dcl_weight") in helps["temperature"]
    assert helps["u"].endswith("Must be an angle in degrees in [0, 180).")
    # several losses: what it is in each, from their docstrings' Args (a base class's: ModifiedObjective's m)
    assert helps["m"].endswith("(their defaults). focal_infonce: hardness margin on negatives; m_barlow, m_mhe, "
                               "m_mhs, m_vicreg, paradigm: GD margin; off_dropout_infonce: positive/negative "
                               "trade-off.")
    assert "infonce, off_dropout_infonce: tau; m_barlow" in helps["temperature"]


def test_a_rule_that_lets_none_through_is_said_as_the_flag_is_typed():
    """None cannot be typed: --num_noise's help says to leave the flag out (it said "Must be None or an integer"),
    while the Python-side refusal keeps the rule's own words."""
    from hf_cse.errors import CSEError
    from hf_cse.hyperparameter_rules import check_rule

    helps = {a.dest: a.help for a in train.argument_parser()._actions}
    assert helps["num_noise"].endswith("Must be an integer >= 0, or left out (None).")
    assert "None or an integer" not in helps["num_noise"]
    with pytest.raises(CSEError, match=r"gs_infonce: num_noise must be None or an integer >= 0, got -1\."):
        check_rule("gs_infonce", "num_noise", -1, "count")


@pytest.mark.parametrize("flag", ["--off_dropout", "--normalize", "--tf32"])
def test_an_optional_boolean_flag_takes_the_bare_form_on_either_path(parsers, flag):
    """A ``bool | None`` field's flag (not set = the method's or encoder's own) takes the bare form as every other
    boolean flag does: the messages and README write ``--off_dropout`` / ``--normalize`` bare (argparse said
    "expected one argument"); true / false still work, and leaving it out leaves it unset."""
    dest = flag[2:]
    for parser in parsers:
        read = lambda *argv: getattr(parser.parse_known_args(list(argv))[0], dest)  # noqa: E731
        assert (read(), read(flag), read(flag, "false"), read(flag, "true")) in [(None, True, False, True),
                                                                                 (None, True, "false", "true")]
    own = parsers[0]
    assert [getattr(own.parse_args([flag, *value]), dest) for value in ([], ["false"], ["true"])] == [True, False, True]
    assert f"{flag} [{dest.upper()}]" in full_help(own)


def test_an_optional_boolean_flag_of_the_evaluation_takes_the_bare_form_too():
    parser = evaluate.argument_parser()
    optional = [a for a in parser._actions if getattr(a.type, "__name__", "") == "string_to_bool"]
    assert optional and all(a.nargs == "?" and a.const is True for a in optional)


def test_a_loss_hyperparameters_help_is_plain_text_not_the_docstrings_markup():
    helps = {a.dest: a.help for a in train.argument_parser()._actions if a.dest in loss_hyperparameters_of_all()}
    assert helps["m_placement"].endswith('(default \'positive_logit\'). "positive_logit" (code, default) or '
                                         '"negative_sum" (paper eq. 3).')
    assert helps["weight"].endswith('("softmax" at temperature tau; "hardest": one-hot on the hardest negative, '
                                    "MPT's).") and "angular margin in degrees" in helps["u"]
    assert not [name for name, text in helps.items() if "``" in text or ":func:" in text or "**" in text]


def test_every_loss_hyperparameter_flag_says_what_it_is():
    """Beyond its losses and defaults, each flag's help says what the hyperparameter is: the loss docstrings' Args
    entries start with that, not with a pointer into the rest of the docstring (which --help does not show)."""
    import re

    helps = {a.dest: a.help for a in train.argument_parser()._actions if a.dest in loss_hyperparameters_of_all()}
    said = {name: re.sub(r"^Hyperparameter of the --loss .*?\((default .*?|their defaults)\)\.", "", text).strip()
            for name, text in helps.items()}
    assert not [name for name, text in said.items() if not text or text.startswith(("Must be", "The DCL"))]
    assert not [name for name, text in helps.items() if "see above" in text]
    assert "met: the hinge's margin m on the distance gap" in helps["margin"]


def loss_hyperparameters_of_all() -> set[str]:
    from hf_cse.losses import available_losses, loss_hyperparameters

    return {name for loss in available_losses() for name in loss_hyperparameters(loss)}
