"""Texts that spell a missing value (pandas' ``NaN``, ``None``, ``null``...): a notable share of them is an export's
missing values, left out as empty cells are, with one warning; a few of them are sentences."""

import json
import logging
from types import SimpleNamespace

import pytest

from hf_cse.data import DataError, read_sentences

SENTENCES = [f"the {word} sat on the mat" for word in ("cat", "dog", "bird", "cow", "fox", "owl", "ant", "bee")]


def test_a_csv_column_half_nan_leaves_them_out_with_one_warning(tmp_path, caplog):
    """A column exported with NaN for its missing cells trained on 'NaN' as a sentence (rc 0); the only hint was the
    no-duplicates warning naming 'NaN' as the most frequent text."""
    path = tmp_path / "train.csv"
    path.write_text("text,id\n" + "".join(f"{text},{i}\n" for i, text in enumerate(
        [s for sentence in SENTENCES for s in (sentence, "NaN")])))
    with caplog.at_level(logging.WARNING, logger="hf_cse.data"):
        assert read_sentences(path) == SENTENCES
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == 1 and said[0].startswith(
        f"{path}: 8 of the 16 values of column 'text' are 'NaN', which is how pandas writes a missing value, not a "
        "sentence: they are left out, as empty cells are. Drop those rows, or save missing values as empty cells")


def test_a_few_markers_are_sentences_and_several_kinds_are_named_with_their_counts(tmp_path, caplog):
    path = tmp_path / "train.txt"
    path.write_text("\n".join([*SENTENCES * 3, "NA", "None"]) + "\n")  # 2 of 26: below the share and the rows
    with caplog.at_level(logging.WARNING, logger="hf_cse.data"):
        assert read_sentences(path)[-2:] == ["NA", "None"]
    assert not caplog.records
    path.write_text("\n".join([*SENTENCES, "None", "null", "None", "None", " NULL "]) + "\n")
    with caplog.at_level(logging.WARNING, logger="hf_cse.data"):
        assert read_sentences(path) == SENTENCES
    assert "5 of the 13 lines are 'None' (3), 'null' (1), 'NULL' (1), which is how pandas" in caplog.text


def test_a_column_of_markers_only_is_refused(tmp_path):
    """All 'NaN' cells counted as numbers ("holds only numbers"), and all 'None' trained on."""
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps({"text": text, "label": 1}) + "\n" for text in ["NaN", "None", "nan"] * 2))
    with pytest.raises(DataError, match=r"train\.jsonl: all its 6 values of column 'text' are missing values as "
                                        r"pandas writes them \('NaN' \(2\), 'None' \(2\), 'nan' \(2\)\), not "
                                        r"sentences; pass text_column NAME of the sentence column\.$"):
        read_sentences(path)


@pytest.mark.slow  # files and a saved data set read, whole and streamed (~2 s)
@pytest.mark.parametrize("kind", ["csv", "tsv", "jsonl", "txt", "saved"])
def test_markers_are_left_out_of_the_training_set_whatever_it_is_read_from(tmp_path, kind, caplog):
    """'NaN' rows were in the training set, read whole or streamed, from a file or a data set."""
    import datasets

    from hf_cse.streaming import load_training_text

    texts = [s for sentence in SENTENCES for s in (sentence, " nan")]
    path = tmp_path / f"train.{kind}"
    if kind in ("csv", "tsv"):
        path.write_text("text\n" + "".join(f"{text}\n" for text in texts))
    elif kind == "jsonl":
        path.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))
    elif kind == "txt":
        path.write_text("".join(f"{text}\n" for text in texts))
    else:
        datasets.Dataset.from_dict({"text": texts}).save_to_disk(str(path))
    named = {"dataset_name": str(path), "train_file": None} if kind == "saved" else {"train_file": str(path),
                                                                                      "dataset_name": None}
    for streaming in (False, True):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="hf_cse.data"):
            ds = load_training_text(SimpleNamespace(streaming=streaming, train_files=None), SimpleNamespace(
                dataset_config_name=None, text_column=None, **named), seed=0)
            assert list(ds["text"] if not streaming else (row["text"] for row in ds)) == SENTENCES
        assert "8 of the " + "first " * streaming + "16 " in caplog.text and "are 'nan', which is" in caplog.text
