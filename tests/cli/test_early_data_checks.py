"""Data mistakes the file or the command line alone show are refused before torch is imported
(:func:`hf_cse.cli.entry_points.check_command_line`), in the very line the command's own later check says: an
``--eval_file`` the trainer could not score, pair data that cannot train, a small sentences file without enough
sentences, ``--max_train_samples 0``. Each was refused only 7-20 s in, once the training stack had loaded."""

from __future__ import annotations

import copy
import json

import pytest

from hf_cse.checks import InputError
from hf_cse.cli import entry_points, parser_cache, train
from hf_cse.cli.preflight import check_pair_training
from hf_cse.data import load_pair_dataset, read_sentences
from hf_cse.errors import CSEError
from hf_cse.evaluation.custom_dev import read_pair_file
from hf_cse.files import DataError


@pytest.fixture(scope="module")
def early_check():
    """``check_command_line("train", ...)`` as a command's start makes it: from the parser's description, with the
    facts it holds."""
    parser = train.argument_parser()
    described = json.loads(json.dumps(parser_cache.describe(parser, entry_points.train_facts())))

    def check(argv: list[str]) -> None:
        entry_points.check_command_line("train", copy.deepcopy(parser_cache.rebuild(described)), argv)

    return check


SCORE_HEADER = "sentence1,sentence2,score\n"
EVAL_FILE_MISTAKES = {  # name: content, columns typed
    "columns.csv": ("s1,s2,label\na,b,1\nc,d,2\ne,f,3\n", []),
    "nan.csv": (SCORE_HEADER + "a,b,1\nc,d,nan\ne,f,3\n", []),
    "inf.csv": (SCORE_HEADER + "a,b,1\nc,d,inf\ne,f,3\n", []),
    "word.csv": (SCORE_HEADER + "a,b,1\nc,d,high\ne,f,3\n", []),
    "empty.csv": (SCORE_HEADER + "a,b,1\nc,,2\ne,f,3\n", []),
    "constant.csv": (SCORE_HEADER + "a,b,2\nc,d,2\ne,f,2\n", []),
    "one.csv": (SCORE_HEADER + "a,b,1\n", []),
    "two.csv": (SCORE_HEADER + "a,b,1\nc,d,2\n", []),
    "same.csv": (SCORE_HEADER + "a,a,1\nc,c,2\ne,e,3\n", []),
    "mixed.csv": (SCORE_HEADER + "a,b,1\nc,d,2\ne,f,3\n", ["--eval_sentence1_column", "0"]),
    "blank.csv": ("", []),
}


@pytest.mark.parametrize("name", EVAL_FILE_MISTAKES)
def test_an_eval_file_the_trainer_could_not_score_is_refused_before_torch_as_its_reader_refuses_it(
        early_check, name, tmp_path):
    """A wrong column, a score that is no number, an empty sentence, too few or constant scores were refused 7-18 s
    in, once the training stack had loaded."""
    content, flags = EVAL_FILE_MISTAKES[name]
    path = tmp_path / name
    path.write_text(content)
    columns = {"sentence1": flags[1]} if flags else {}
    with pytest.raises(InputError) as by_reader:
        read_pair_file(path, columns.get("sentence1", "sentence1"))
    with pytest.raises(InputError) as early:
        early_check(["--eval_file", str(path), *flags, "--output_dir", str(tmp_path / "out")])
    assert str(early.value) == str(by_reader.value)


def test_a_good_eval_file_passes_and_a_config_file_leaves_it_to_the_command(early_check, tmp_path):
    path = tmp_path / "dev.csv"
    path.write_text(SCORE_HEADER + "a,b,1\nc,d,2\ne,f,3\n")
    early_check(["--eval_file", str(path), "--output_dir", str(tmp_path / "out")])
    path.write_text("s1,s2,label\na,b,1\nc,d,2\ne,f,3\n")  # the file may name the columns
    early_check(["--eval_file", str(path), "--config", str(tmp_path / "run.json")])


PAIRS = "text,positive,negative\n" + "".join(f"sentence {i},positive {i},negative {i}\n" for i in range(8))


@pytest.mark.parametrize("flags, content", [
    (["--pair_column", "nope"], PAIRS),  # a column the file lacks (14 s before)
    (["--pair_column", "positive"], "text,positive\na,b\nc,\n"),  # an empty positive (15 s)
    (["--pair_column", "positive"], "text,positive\na,a\nc,c\n"),  # the anchor's copy
    (["--pair_column", "text"], PAIRS),  # the anchor's own column
])
def test_pair_rows_that_cannot_train_are_refused_before_torch_as_their_reader_refuses_them(
        early_check, flags, content, tmp_path):
    path = tmp_path / "pairs.csv"
    path.write_text(content)
    with pytest.raises(DataError) as by_reader:
        load_pair_dataset(flags[1], str(path))
    with pytest.raises(DataError) as early:
        early_check(["--train_file", str(path), *flags])
    assert str(early.value) == str(by_reader.value)


def test_pair_data_that_is_no_table_is_refused_before_torch(early_check, tmp_path):
    """--pair_column with a .jsonl file was refused 20 s in."""
    path = tmp_path / "pairs.jsonl"
    path.write_text('{"text": "a", "positive": "b"}\n')
    with pytest.raises(DataError, match=r"^pair_column needs a \.csv or \.tsv file with named columns; got "
                                        r"pairs\.jsonl\.$"):
        early_check(["--train_file", str(path), "--pair_column", "positive"])


@pytest.mark.parametrize("flags, as_the_command", [
    # a method whose views are edits of one sentence (7 s before)
    (["--pair_column", "positive", "--method", "diffcse"], ("diffcse", "infonce", "positive", None, None)),
    (["--pair_column", "positive", "--method", "esimcse"], ("esimcse", "infonce", "positive", None, None)),
    # hard negatives for a loss without them (16 s)
    (["--pair_column", "positive", "--negative_column", "negative", "--loss", "dcl"],
     ("simcse", "dcl", "positive", "negative", None)),
    (["--negative_column", "negative"], ("simcse", "infonce", None, "negative", None)),
    (["--hard_negative_weight", "0.5"], ("simcse", "infonce", None, None, 0.5)),  # no hard negatives to weigh (19 s)
])
def test_pair_settings_that_cannot_train_are_refused_before_torch_as_the_command_refuses_them(
        early_check, flags, as_the_command, tmp_path):
    path = tmp_path / "pairs.csv"
    path.write_text(PAIRS)
    with pytest.raises(CSEError) as by_command:
        check_pair_training(*as_the_command)
    with pytest.raises(CSEError) as early:
        early_check(["--train_file", str(path), *flags])
    assert str(early.value) == str(by_command.value)
    early_check(["--train_file", str(path), "--pair_column", "positive", "--negative_column", "negative",
                 "--hard_negative_weight", "0.5"])  # triplets, for a loss that takes them


@pytest.mark.parametrize("name, content, flags", [
    ("header.csv", "text\n", []),  # a header and no rows (10 s before)
    ("numbers.csv", "text\n" + "".join(f"{i}\n" for i in range(20)), []),  # a column of numbers (8 s)
    ("ids.csv", "id,text\n" + "".join(f"{i},sentence {i}\n" for i in range(20)), ["--text_column", "id"]),
    ("numbers.txt", "".join(f"{i}\n" for i in range(20)), []),
])
def test_a_small_sentences_file_without_sentences_is_refused_before_torch_as_its_reader_refuses_it(
        early_check, name, content, flags, tmp_path):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(DataError) as by_reader:
        read_sentences(path, flags[1] if flags else None)
    with pytest.raises(DataError) as early:
        early_check(["--train_file", str(path), *flags])
    assert str(early.value) == str(by_reader.value)


@pytest.mark.parametrize("name, content", [
    ("one.csv", "text\na sentence\n"), ("one.tsv", "id\ttext\n1\ta sentence\n"),
    ("one.jsonl", '{"text": "a sentence"}\n'), ("one.json", '[{"text": "a sentence"}]\n'),
])
def test_a_small_table_or_json_file_is_counted_against_one_global_batch_before_torch(early_check, name, content,
                                                                                     tmp_path, monkeypatch):
    """Only a .txt file was counted before torch: one sentence of any other kind against a batch of 8 was refused
    7-17 s in."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(DataError, match=rf"^{path} has 1 sentence, fewer than one global batch of 8 "):
        early_check(["--train_file", str(path), "--per_device_train_batch_size", "8"])
    early_check(["--train_file", str(path), "--per_device_train_batch_size", "1"])


def test_max_train_samples_0_is_refused_before_torch(early_check, tmp_path):
    """Refused 14 s in, once the training stack had loaded."""
    with pytest.raises(InputError, match=r"^--max_train_samples must be at least 1, got 0\.$"):
        early_check(["--max_train_samples", "0", "--output_dir", str(tmp_path / "out")])
    early_check(["--max_train_samples", "1", "--output_dir", str(tmp_path / "out")])
