"""Reading training text and building two-view batches; every bad input has its own message."""

import pytest
import torch
from helpers import hub_style_folder
from transformers import AutoTokenizer

from hf_cse.data import (
    DEMO_CORPUS,
    DataError,
    TwoViewCollator,
    check_enough_rows,
    load_train_dataset,
    read_sentences,
)
from hf_cse.padding import pad_token_rows


def test_txt_drops_blank_lines_and_strips(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("first sentence\n\n   \n  second one  \nthird\n")
    assert read_sentences(path) == ["first sentence", "second one", "third"]


def test_csv_column_and_missing_column(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text("id,sent\n1,hello world\n2,\n3,good bye\n")
    assert read_sentences(path, "sent") == ["hello world", "good bye"]
    with pytest.raises(DataError, match=r"no column 'text'; columns are \['id', 'sent'\]\. Pass text_column NAME\.$"):
        read_sentences(path)


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_a_text_column_given_that_is_not_there_is_said_to_be_the_one_given(tmp_path, kind):
    """A text_column the caller named was answered "Pass text_column NAME." (a .jsonl file's record), or "Set
    text_column to one of them." without saying that the one given is not there."""
    path = tmp_path / f"a.{kind}"
    path.write_text("sentence,id\nhello world,1\n" if kind == "csv" else '{"sentence": "hello world", "id": 1}\n')
    where = r"no column 'text'; columns are \['sentence', 'id'\]" if kind == "csv" else (
        r"line 1 has no field 'text'; its fields are \['id', 'sentence'\]")
    with pytest.raises(DataError, match=rf"a\.{kind}: {where}\. text_column is set to 'text', which is none of them: "
                                        r"set it to the column of sentences\.$"):
        read_sentences(path, "text")


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        read_sentences(tmp_path / "nope.txt")


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_empty_file(tmp_path, content):
    path = tmp_path / "empty.txt"
    path.write_text(content)
    with pytest.raises(DataError, match="contains no sentences"):
        read_sentences(path)


def test_non_utf8_names_the_line(tmp_path):
    path = tmp_path / "latin.txt"
    path.write_bytes("ok line\ncaf\xe9 au lait\n".encode("latin-1"))
    with pytest.raises(DataError, match="line 2 is not valid UTF-8.*iconv"):
        read_sentences(path)


def test_too_few_rows_for_a_batch():
    with pytest.raises(DataError, match="fewer than one global batch of 64"):
        check_enough_rows(10, 64, "x.txt")
    check_enough_rows(64, 64, "x.txt")


def test_both_sources_rejected_and_demo_corpus_default():
    with pytest.raises(DataError, match="either train_file or dataset_name"):
        load_train_dataset("a.txt", "wiki")
    ds = load_train_dataset()
    assert DEMO_CORPUS.is_file() and len(ds) >= 1000
    assert len(set(ds["text"])) == len(ds)  # duplicates would be false negatives


def test_collator_repeats_each_sentence_as_two_views(tiny_bert_dir):
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    feats = [dict(tok(s)) for s in ["the cat", "a dog runs fast in the park"]]
    batch = TwoViewCollator(tok)(feats)
    assert batch["input_ids"].shape[:2] == (2, 2)
    assert torch.equal(batch["input_ids"][:, 0], batch["input_ids"][:, 1])
    assert batch["attention_mask"][0, 0].sum() < batch["attention_mask"][1, 0].sum()  # dynamic padding


@pytest.mark.parametrize("length, words", [
    (2, r"max_seq_length 2 leaves no token for the sentences: the tokenizer adds 2 special token\(s\)"),
    (0, r"max_seq_length must be at least 2 .* got 0\.$"),  # 0 would turn truncation off
    (-1, "max_seq_length must be at least 2"),
    ("32", r"max_seq_length must be an integer, got '32'\.$"),
])
def test_tokenizing_with_a_length_that_cannot_work_is_one_line(tiny_bert_dir, length, words):
    import datasets

    from hf_cse.data import tokenize_dataset, tokenize_pair_dataset

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    rows = datasets.Dataset.from_dict({"text": ["the cat", "a dog"], "positive": ["a cat", "the dog"]})
    for tokenize in (tokenize_dataset, tokenize_pair_dataset):
        with pytest.raises(DataError, match=words) as refused:
            tokenize(rows, tok, length)
        assert "max_seq_length" in refused.value.fields or "leaves no token" in str(refused.value)


@pytest.mark.parametrize("side", ["right", "left"])
def test_padding_equals_the_tokenizers(tiny_bert_dir, side):
    """The collators' own padding gives the tensors of ``tokenizer.pad`` (values, dtypes, keys) on either side: rows of
    different lengths, a mask with a zero, segment ids of a pair, rows without ``token_type_ids``, rows of one token
    id repeated (padded with the tokenizer's pad id, also where it is not 0); and
    leaves to the tokenizer what it does not handle (tensors, a missing mask, an empty row)."""
    bert = AutoTokenizer.from_pretrained(tiny_bert_dir)
    other_pad = AutoTokenizer.from_pretrained(tiny_bert_dir)
    other_pad.pad_token = "[UNK]"  # a pad id other than 0
    texts = ["the cat", "a dog runs in the river", "music", "the old house on the road is red"]
    for tok in (bert, other_pad):
        tok.padding_side = side
        enc = tok(texts)
        plain = [{k: enc[k][i] for k in enc.keys()} for i in range(len(texts))]
        pairs = tok(texts[:2], texts[2:])
        pair = [{k: v[i] for k, v in pairs.items()} for i in range(2)]
        masked = [dict(f) for f in plain]
        masked[1]["attention_mask"] = [1] * (len(masked[1]["input_ids"]) - 1) + [0]
        ids_and_mask = [{k: f[k] for k in ("input_ids", "attention_mask")} for f in plain]
        repeated = [{"input_ids": [7, 7, 7], "attention_mask": [1, 1, 1]}, {"input_ids": [7], "attention_mask": [1]}]
        for features in (plain, pair, masked, ids_and_mask, plain[2:3], repeated):
            want, got = tok.pad(features, padding=True, return_tensors="pt"), pad_token_rows(tok, features)
            assert set(got) == set(want)
            for key in want:
                assert got[key].dtype == want[key].dtype and torch.equal(got[key], want[key]), (tok, key, features)
    bert.padding_side = side
    as_tensors = [{"input_ids": torch.tensor(f["input_ids"])} for f in plain]  # no mask, tensors: the tokenizer's
    assert torch.equal(pad_token_rows(bert, as_tensors)["attention_mask"],
                       bert.pad(as_tensors, padding=True, return_tensors="pt")["attention_mask"])
    empty = [{"input_ids": [], "attention_mask": []}, {"input_ids": [5], "attention_mask": [1]}]
    assert pad_token_rows(bert, empty)["input_ids"].tolist() == bert.pad(empty, padding=True)["input_ids"]


@pytest.mark.parametrize("column, kind", [("label", "int64"), ("meta", "dict")])
def test_a_data_set_column_that_holds_no_text_is_one_line(tmp_path, column, kind):
    """dataset_name (here a local folder laid out as a Hub data set, read as one is): a column of numbers or objects
    failed inside datasets ('int' object has no attribute 'strip') when blank rows were dropped."""
    import json

    hub_style_folder(tmp_path, {"train.jsonl": "".join(json.dumps({"text": f"sentence {i}", "label": i,
                                                                   "meta": {"a": i}}) + "\n" for i in range(4))})
    with pytest.raises(DataError, match=f"column '{column}' holds {kind} values, not sentences; pass text_column"):
        load_train_dataset(dataset_name=str(tmp_path), text_column=column)


@pytest.mark.slow  # data sets saved and read (~2 s)
def test_a_data_set_saved_with_save_to_disk_is_read_as_dataset_name_and_a_folder_as_train_file_is_named(tmp_path):
    """dataset_name DIR of a save_to_disk folder failed after ~30 s with datasets' traceback ("use load_from_disk");
    train_file DIR said the folder "does not exist"."""
    from types import SimpleNamespace

    import datasets

    from hf_cse.streaming import load_training_text

    saved = datasets.Dataset.from_dict({"text": ["a b", "", "c d", "e f"], "label": [0, 1, 2, 3]})
    saved.save_to_disk(str(tmp_path / "saved"))
    datasets.DatasetDict({"train": saved, "dev": saved.select([0])}).save_to_disk(str(tmp_path / "splits"))
    for folder in ("saved", "splits"):
        assert load_train_dataset(dataset_name=str(tmp_path / folder))["text"] == ["a b", "c d", "e f"]
    with pytest.raises(DataError, match=r"holds the splits train, dev, not 'test': save the split"):
        load_train_dataset(dataset_name=str(tmp_path / "splits"), split="test")
    with pytest.raises(DataError, match=r"has no configurations; drop dataset_config_name"):
        load_train_dataset(dataset_name=str(tmp_path / "saved"), dataset_config_name="en")
    with pytest.raises(DataError, match=r"^train_file .*saved is a folder, not a file: pass the folder as "
                                        r"dataset_name"):
        load_train_dataset(train_file=str(tmp_path / "saved"))
    streamed = load_training_text(SimpleNamespace(streaming=True, train_files=None), SimpleNamespace(
        train_file=None, dataset_name=str(tmp_path / "splits"), dataset_config_name=None, text_column=None), seed=0)
    assert [row["text"] for row in streamed] == ["a b", "c d", "e f"]


@pytest.mark.slow  # two data sets loaded (~0.8 s)
def test_rows_left_out_as_empty_are_counted_in_one_line(tmp_path, caplog):
    """14 empty cells of 40 became "sentences=26" without a word (special-token-only rows were counted already)."""
    import logging

    (tmp_path / "cells.csv").write_text('text,label\nhello there,1\n,2\nfoo bar,3\n"",4\n')
    (tmp_path / "rows.jsonl").write_text('{"text": "a b"}\n{"text": null}\n{"text": "c d"}\n')
    with caplog.at_level(logging.INFO, logger="hf_cse.data"):
        assert load_train_dataset(str(tmp_path / "cells.csv"))["text"] == ["hello there", "foo bar"]
        assert load_train_dataset(str(tmp_path / "rows.jsonl"))["text"] == ["a b", "c d"]
    said = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert said == ["cells.csv: left out 2 of 4 rows as empty (blank lines, empty or null cells)",
                        "rows.jsonl: left out 1 of 3 rows as empty (blank lines, empty or null cells)"]


@pytest.mark.slow  # two tokenizations (~0.9 s)
def test_sentences_cut_to_the_same_tokens_are_said(tiny_bert_dir, caplog):
    """max_seq_length 3 made 300 sentences 148 distinct inputs (56 of them "[CLS] the [SEP]") without a word: each
    a false negative of its twins, which the sampler, comparing texts, does not keep apart."""
    import logging

    import datasets
    from transformers import AutoTokenizer

    from hf_cse.data import tokenize_dataset

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    ds = datasets.Dataset.from_dict({"text": [f"the {word} sat on a mat" for word in ("cat", "dog", "fox", "owl")]})
    with caplog.at_level(logging.WARNING, logger="hf_cse.tokenizer_match"):
        tokenize_dataset(ds, tok, max_seq_length=32)
        assert "cuts" not in caplog.text
        tokenize_dataset(ds, tok, max_seq_length=3)
    assert "max_seq_length 3 cuts 4 of 4 training sentences to the same tokens as another sentence" in caplog.text
