"""dataset_name of a local folder (what the refusal of a folder given as train_file recommends): its files are train
files, each checked and read as one train_file is; a path that names nothing, a file, a folder without the split
and one of mixed kinds are refused in one line (hf_cse.data_sources)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from helpers import random_sentences

from hf_cse.data import DataError, load_pair_dataset, load_train_dataset
from hf_cse.files import local_dataset_folder
from hf_cse.streaming import check_streaming_arguments, load_training_text

STREAMED = SimpleNamespace(streaming=True, train_files=None, train_weights=None)


def _data_args(**fields):
    return SimpleNamespace(**{"train_file": None, "dataset_name": None, "dataset_config_name": None,
                              "text_column": None, "pair_column": None, **fields})


def _folder(tmp_path, files: dict[str, str | bytes]):
    folder = tmp_path / "corpus"
    folder.mkdir()
    for name, content in files.items():
        (folder / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    return folder


@pytest.mark.parametrize("content", [
    "".join(f"{i}\tsentence number {i} here\n" for i in range(20)),  # id<TAB>sentence: columns
    "".join('{"text": "sentence %d"}\n' % i for i in range(10)),  # JSON lines named .txt
    b"caf\xe9 au lait\nna\xefve idea\nthe cat sat\n",  # Latin-1
], ids=["tab_columns", "json_in_txt", "latin1"])
def test_a_folders_file_gets_the_checks_of_a_train_file(tmp_path, content):
    """The id<TAB>sentence lines, the JSON and the Latin-1 text were trained on as sentences (exit 0); the same file
    as train_file is refused. Now the folder's file is refused in the same words, read whole or streamed, named as a
    file of the folder given (it was 'dataset_name <the file>', as if the file were the value given)."""
    folder = _folder(tmp_path, {"part1.txt": content})
    path = folder / "part1.txt"
    with pytest.raises(DataError) as as_file:
        load_train_dataset(train_file=str(path))
    said = str(as_file.value).replace(f"train_file {path}", f"dataset_name {folder}: its train file {path}")
    with pytest.raises(DataError) as whole:
        load_train_dataset(dataset_name=str(folder))
    assert str(whole.value) == said
    with pytest.raises(DataError) as streamed:  # the file's start, before any of it streams
        check_streaming_arguments(STREAMED, _data_args(dataset_name=str(folder)), 10, "simcse")
    assert str(streamed.value) == said


@pytest.mark.slow  # five small data sets read (~2 s)
def test_every_train_file_of_a_folder_is_read_whatever_its_kind(tmp_path):
    """A folder of a .txt (8 sentences) and a .csv (4) trained on the .csv alone ("sentences=4", exit 0): datasets
    reads the most common kind of a folder only. Each is read as a train_file now, read whole or streamed."""
    sentences = random_sentences(12)
    folder = _folder(tmp_path, {"a.txt": "\n".join(sentences[:8]) + "\n",
                                "b.csv": "id,text\n" + "".join(f"{i},{s}\n" for i, s in enumerate(sentences[8:]))})
    assert load_train_dataset(dataset_name=str(folder))["text"] == sentences
    args = _data_args(dataset_name=str(folder))
    check_streaming_arguments(STREAMED, args, 10, "simcse")
    assert [row["text"] for row in load_training_text(STREAMED, args, seed=0)] == sentences
    unstreamed = SimpleNamespace(streaming=False, train_files=None, train_weights=None)
    assert load_training_text(unstreamed, args, seed=0)["text"] == sentences
    # a split named by its files: the train files only
    (folder / "a.txt").rename(folder / "train.txt")
    (folder / "b.csv").rename(folder / "dev.csv")
    assert load_train_dataset(dataset_name=str(folder))["text"] == sentences[:8]


@pytest.mark.slow  # a folder read whole and streamed (~1 s)
def test_one_text_column_reads_a_folder_that_mixes_plain_text_and_records(tmp_path):
    """A folder of train.txt and a train.jsonl whose field is 'sentence' had no way through: without text_column the
    .jsonl was refused ('no field text; pass text_column'), with it the .txt ('read as plain text: drop
    text_column'). The column is the records' now, and the plain text file is read as lines."""
    sentences = random_sentences(12)
    folder = _folder(tmp_path, {"train.txt": "\n".join(sentences[:8]) + "\n",
                                "train.jsonl": "".join(f'{{"sentence": "{s}"}}\n' for s in sentences[8:])})
    with pytest.raises(DataError, match=r"train\.jsonl: line 1 has no field 'text'; its fields are \['sentence'\]"):
        load_train_dataset(dataset_name=str(folder))
    in_file_order = sentences[8:] + sentences[:8]  # train.jsonl, then train.txt
    assert load_train_dataset(dataset_name=str(folder), text_column="sentence")["text"] == in_file_order
    args = _data_args(dataset_name=str(folder), text_column="sentence")
    check_streaming_arguments(STREAMED, args, 10, "simcse")
    assert [row["text"] for row in load_training_text(STREAMED, args, seed=0)] == in_file_order
    (folder / "train.txt").write_text("\n\n")  # streamed, an empty file was named as the value given
    with pytest.raises(DataError, match=f"^dataset_name {folder}: its train file {folder / 'train.txt'} is empty"):
        check_streaming_arguments(STREAMED, args, 10, "simcse")
    (folder / "train.jsonl").unlink()  # plain text only: a text column names nothing there
    with pytest.raises(DataError, match=r"text_column sentence was given, but .*train\.txt is read as plain text"):
        load_train_dataset(dataset_name=str(folder), text_column="sentence")


@pytest.mark.parametrize("files, message", [
    ({"sentences_test.txt": "a b\nc d\n"},
     r"^dataset_name .*corpus has no 'train' split: datasets splits a folder by its file names, and these make 'test' "
     r"\(test: sentences_test.txt\)\. Name the training files train.txt, train-00000.txt, \.\.\. \(or put them in a "
     r"folder train/\), or give them as train_file / train_files\.$"),
    ({}, r"^dataset_name .*corpus holds no data files: give a folder of \.txt/\.csv/\.tsv/\.json/\.jsonl files"),
    ({"a.txt": "a b\n", "b.parquet": b"PAR1"},
     r"holds train files \(a.txt\) and data files of other kinds \(b.parquet\) in its 'train' split"),
], ids=["no_train_split", "empty", "parquet_beside"])
def test_a_folder_that_cannot_be_read_as_train_files_is_one_line(tmp_path, files, message):
    """A folder of sentences_test.txt failed with datasets' ValueError 'Unknown split "train"' (a traceback)."""
    folder = _folder(tmp_path, files)
    with pytest.raises(DataError, match=message):
        load_train_dataset(dataset_name=str(folder))
    with pytest.raises(DataError, match=message):
        check_streaming_arguments(STREAMED, _data_args(dataset_name=str(folder)), 10, "simcse")


def test_a_local_path_that_names_no_folder_is_one_line_and_a_hub_id_is_left_to_the_hub(tmp_path):
    """A mistyped folder and a file failed with datasets' 'Couldn't find any data file' after a 16-frame traceback."""
    (tmp_path / "corpus.txt").write_text("a b\n")
    for name, message in ((tmp_path / "missing", "missing: no such folder. Check the path"),
                          ("./missing", r"^dataset_name \./missing: no such folder"),
                          (tmp_path / "corpus.txt", "corpus.txt is a file, not a folder: give it as train_file")):
        with pytest.raises(DataError, match=message):
            load_train_dataset(dataset_name=str(name))
        with pytest.raises(DataError, match=message):
            load_pair_dataset("positive", dataset_name=str(name))
    assert local_dataset_folder("org/no_such_data") is None  # a Hub id: the Hub is asked (and refusals say so)
    assert local_dataset_folder(str(tmp_path)) == tmp_path


def test_pair_rows_from_a_folder_of_mixed_kinds_are_refused(tmp_path):
    """Pair rows are read by datasets, one reader for a folder (its most common kind): the rest was left out."""
    folder = _folder(tmp_path, {"a.csv": "text,positive\na b,c d\n", "b.jsonl": '{"text": "e", "positive": "f"}\n'})
    with pytest.raises(DataError, match=r"holds files of several kinds in its 'train' split \(a.csv \(CSV\), "
                                        r"b.jsonl \(JSON\)\), which datasets reads as one kind"):
        load_pair_dataset("positive", dataset_name=str(folder))


@pytest.mark.slow  # data sets saved, read and streamed (~1 s)
def test_a_saved_data_set_without_rows_is_one_line_read_or_streamed(tmp_path):
    """A save_to_disk folder of 0 rows as dataset_name (streamed too) ended in datasets' 56-line traceback
    (table.py to_blocks(tables[0]): IndexError); one whose files hold 0 rows failed streamed ("Unable to shard")."""
    import datasets

    kind = datasets.Features({"text": datasets.Value("string")})
    datasets.Dataset.from_dict({"text": []}, features=kind).save_to_disk(str(tmp_path / "none"))
    filled = datasets.Dataset.from_dict({"text": ["a b", "c d"]})
    filled.filter(lambda row: False).save_to_disk(str(tmp_path / "filtered"))
    datasets.DatasetDict({"train": filled, "dev": filled.select([])}).save_to_disk(str(tmp_path / "splits"))
    for folder in ("none", "filtered"):
        for streaming in (False, True):
            with pytest.raises(DataError, match=rf"^dataset_name .*{folder} is empty \(0 rows\): "
                                                r"Dataset.save_to_disk wrote a data set without rows\."):
                load_training_text(SimpleNamespace(streaming=streaming, train_files=None),
                                   _data_args(dataset_name=str(tmp_path / folder)), seed=0)
    with pytest.raises(DataError, match=r"^dataset_name .*splits is empty \(0 rows in its 'dev' split\)"):
        load_train_dataset(dataset_name=str(tmp_path / "splits"), split="dev")
    assert load_train_dataset(dataset_name=str(tmp_path / "splits"))["text"] == ["a b", "c d"]  # dev not read


def test_files_of_a_folder_in_no_split_are_named_in_one_warning(tmp_path, caplog):
    """A folder of train.txt and more.jsonl trained on train.txt alone: datasets puts more.jsonl in no split once
    another file's name names one, and it was left out without a word."""
    import logging

    sentences = random_sentences(12)
    folder = _folder(tmp_path, {"train.txt": "\n".join(sentences[:8]) + "\n", ".notes.txt": "hidden\n",
                                "more.jsonl": "".join('{"text": "%s"}\n' % s for s in sentences[8:])})
    with caplog.at_level(logging.WARNING, logger="hf_cse.data"):
        assert load_train_dataset(dataset_name=str(folder))["text"] == sentences[:8]
        load_train_dataset(dataset_name=str(folder))  # said once
    assert [r.getMessage() for r in caplog.records] == [
        f"dataset_name {folder}: more.jsonl is in no split and left out: once a file's name names a split "
        "(train.txt), datasets reads only the files so named. To train on it, name it train-<name> (e.g. "
        "train-more.jsonl) or put it in a folder train/; else move it out of the folder."]
    caplog.clear()
    (folder / "more.jsonl").rename(folder / "train-more.jsonl")  # the fix the warning names
    with caplog.at_level(logging.WARNING, logger="hf_cse.data"):
        assert sorted(load_train_dataset(dataset_name=str(folder))["text"]) == sorted(sentences)
    assert not caplog.records
