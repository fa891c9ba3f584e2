"""Every input file is read the same careful way (hf_cse.files), for training and evaluation alike: a BOM dropped,
compressed and binary files refused by what they are, .tsv read without CSV quoting, undecodable bytes refused
naming file and line."""

from __future__ import annotations

import gzip
import json
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import fake_checkpoint, random_sentences

from hf_cse.checks import InputError
from hf_cse.cli.output_dir import RUN_RECORD_FILE, prepare_output_dir
from hf_cse.data import DEMO_CORPUS, DataError, load_pair_dataset, load_train_dataset, read_sentences
from hf_cse.evaluation.custom_dev import read_pair_file
from hf_cse.files import content_fingerprint

SENTENCES = random_sentences(12, seed=3)


def test_a_spreadsheet_csv_with_a_bom_reads_its_first_column_by_name(tmp_path):
    path = tmp_path / "train.csv"
    path.write_bytes(("text,label\n" + "".join(f"{s},1\n" for s in SENTENCES)).encode("utf-8-sig"))
    assert read_sentences(path) == SENTENCES
    assert load_train_dataset(str(path))["text"] == SENTENCES
    txt = tmp_path / "train.txt"
    txt.write_bytes("\n".join(SENTENCES).encode("utf-8-sig"))
    assert read_sentences(txt)[0] == SENTENCES[0] and load_train_dataset(str(txt))["text"][0] == SENTENCES[0]


@pytest.mark.parametrize("kind", ["gzip", "zip"])
@pytest.mark.parametrize("name", ["train.txt", "train.csv", "train.jsonl"])
def test_a_compressed_file_is_refused_by_what_it_is_not_its_name(kind, name, tmp_path):
    path = tmp_path / name
    text = "\n".join(SENTENCES).encode()
    if kind == "gzip":
        path.write_bytes(gzip.compress(text))
    else:
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("train.txt", text)
    with pytest.raises(DataError, match=f"is a {kind} file: decompress it first"):
        read_sentences(path)


def test_a_binary_file_is_refused(tmp_path):
    path = tmp_path / "train.txt"
    path.write_bytes("\n".join(SENTENCES).encode("utf-16-le"))  # no byte-order mark: NUL bytes tell
    with pytest.raises(DataError, match="binary file"):
        read_sentences(path)


def test_tsv_is_read_without_csv_quoting(tmp_path):
    """Before: an unmatched quote made eleven lines one "sentence" and the quote characters vanished."""
    rows = [f'"{SENTENCES[0]}'] + SENTENCES[1:11]
    path = tmp_path / "train.tsv"
    path.write_text("text\n" + "\n".join(rows) + "\n")
    assert read_sentences(path) == rows
    assert load_train_dataset(str(path))["text"] == rows
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("text\tpositive\n" + "".join(f'{a}\t"{b}\n' for a, b in zip(rows, SENTENCES[1:])))
    assert load_pair_dataset("positive", str(pairs))["positive"][:2] == [f'"{SENTENCES[1]}', f'"{SENTENCES[2]}']


def test_latin1_is_refused_for_evaluation_as_for_training(tmp_path):
    """Before: --eval_file decoded it with replacement characters and scored it."""
    path = tmp_path / "pairs.tsv"
    path.write_bytes("sentence1\tsentence2\tscore\ncafé au lait\ta drink\t1\ntea\tcoffee\t2\n".encode("latin-1"))
    with pytest.raises(InputError, match=r"eval_file .*pairs.tsv: line 2 is not valid UTF-8"):
        read_pair_file(path)
    path.write_bytes(gzip.compress(b"sentence1\tsentence2\tscore\n"))
    with pytest.raises(InputError, match="is a gzip file: decompress it first"):
        read_pair_file(path)


def test_a_cut_short_run_record_is_one_line_naming_the_file_and_the_fix(tmp_path):
    fake_checkpoint(tmp_path / "checkpoint-1")
    (tmp_path / RUN_RECORD_FILE).write_text(json.dumps({"loss": "infonce"})[:8])
    with pytest.raises(InputError, match=f"{RUN_RECORD_FILE} is not valid JSON.*restore it, or pass "
                                         "--overwrite_output_dir"):
        prepare_output_dir(tmp_path, {"loss": "infonce"})


def test_content_fingerprint_tells_an_edit_at_either_end_of_a_large_file(tmp_path):
    path = tmp_path / "corpus.txt"
    body = b"a sentence of the corpus.\n" * 200_000  # 5.2 MB: read at its two ends only
    path.write_bytes(body)
    first = content_fingerprint(path)
    assert first == content_fingerprint(path) and first.startswith(f"{len(body)} bytes, sha256 ")
    for edited in (b"A" + body[1:], body[:-2] + b"!\n", body + b"one more.\n"):
        path.write_bytes(edited)
        assert content_fingerprint(path) != first


MISLAID = {
    "train.txt": ("".join(json.dumps({"text": s, "id": i}) + "\n" for i, s in enumerate(SENTENCES)),
                  r"holds JSON objects .*read as plain text: the JSON itself would be trained on\. Name it \.jsonl"),
    "train.ndjson": ("".join(json.dumps({"text": s}) + "\n" for s in SENTENCES), r"Name it \.jsonl"),
    "semicolons.csv": ("id;text\n" + "".join(f"{i};{s}\n" for i, s in enumerate(SENTENCES)),
                       r"header 'id;text' is one column with semicolons in it.*Save it comma-separated\."),
    # no header: its first sentence was taken for the column's name and never trained on
    "headless.csv": ("".join(f"{s}\n" for s in SENTENCES),
                     r"headless\.csv: the header '.*' reads like a sentence .*add a header line \(e\.g\. text\), "
                     r"or, one sentence per line, name the file \.txt\.$"),
    "tabs.csv": ("id\ttext\n" + "".join(f"{i}\t{s}\n" for i, s in enumerate(SENTENCES)),
                 r"one column with tabs in it.*Save it comma-separated or name it \.tsv\."),
    # id<TAB>sentence or sentence<TAB>label named .txt: the ids / labels and the tabs would be trained on
    "ids.txt": ("".join(f"{i + 17}\t{s}\n" for i, s in enumerate(SENTENCES)),
                rf"ids\.txt: each of its first 12 lines holds 1 tab \(the first: '17' \| '{SENTENCES[0][:16]}"
                r".*columns, which a \.txt trains on whole\. Use a \.tsv with a header and text_column, or keep the "
                r"sentences \(cut -f2 ids\.txt\); tabs inside sentences: a \.jsonl\.$"),
    "labels.txt": ("".join(f"{s}\t{i % 2}\tneutral\n" for i, s in enumerate(SENTENCES)),
                   r"holds 2 tabs \(the first: .* \| '0' \| 'neutral'\).*cut -f1 labels\.txt"),
    # a CSV table saved as .txt: its header and ids were trained on as sentences
    "table.txt": ("id,sentence\n" + "".join(f'{i},"{s}, it says"\n' for i, s in enumerate(SENTENCES)),
                  r"table\.txt: its first line 'id,sentence' is a CSV header and the lines after it have 2 "
                  r"comma-separated fields each, but a \.txt is read as plain text.*Name it \.csv"),
}


@pytest.mark.parametrize("name", MISLAID)
def test_a_file_laid_out_otherwise_than_its_name_says_is_refused_not_trained_on_whole_lines(name, tmp_path):
    """JSON lines named .txt, or a .csv separated by semicolons or tabs, would train on every raw line (braces,
    field names, ids and all): refused naming the fix, read whole or streamed (its start is checked)."""
    from types import SimpleNamespace

    from hf_cse.streaming import check_streaming_arguments

    content, message = MISLAID[name]
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(DataError, match=message):
        read_sentences(path)
    streamed = SimpleNamespace(streaming=True, train_files=None, train_weights=None)
    with pytest.raises(DataError, match=message):
        check_streaming_arguments(streamed, SimpleNamespace(train_file=str(path), dataset_name=None,
                                                            pair_column=None, text_column=None), 4, "simcse")


def test_pair_data_separated_by_semicolons_is_named_so(tmp_path):
    path = tmp_path / "pairs.csv"
    path.write_text("text;positive\n" + "".join(f"{s};{s} again\n" for s in SENTENCES))
    with pytest.raises(DataError, match="one column with semicolons in it"):  # "no column 'text'" before
        load_pair_dataset("positive", str(path))


@pytest.mark.parametrize("name, content", [
    ("braces.txt", "{a set} of words\n{b} and more\n"),  # braces, not JSON objects
    ("one_column.csv", "text\nwords; and a semicolon\nmore words\n"),  # the separator is text here
    ("commas.csv", "id;x,text\n1;a,some words\n"),  # several columns: read as the header says
    ("commas.txt", "Well,yes\nNo, he said.\nYes, she said, twice.\n"),  # no header: a sentence, then rows of 2, 3
    ("header_only.txt", "First,Second\nFirst, and second.\nIt has no comma\n"),  # a line of one field
])
def test_text_that_only_looks_mislaid_is_read(name, content, tmp_path):
    path = tmp_path / name
    path.write_text(content)
    assert read_sentences(path)


WIKI = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "unsup" / "wiki_sentences.txt"


@pytest.mark.parametrize("name, content", [
    ("occasional.txt", "".join(f"{s}\n" if i % 4 else f"{s}\tand a tab\n" for i, s in enumerate(SENTENCES))),
    ("uneven.txt", "".join(f"{s}{chr(9) * (i % 3 + 1)}more\n" for i, s in enumerate(SENTENCES))),  # 1, 2, 3 tabs
    ("indented.txt", "".join(f"\t{s}\t\n" for s in SENTENCES)),  # tabs at the ends are stripped off anyway
    ("demo", None), ("wiki", None),
])
def test_sentences_with_a_tab_here_and_there_are_no_columns(name, content, tmp_path):
    """Only a head whose every line holds the same number of tabs is taken for columns: sentence corpora pass,
    whole (read_sentences) and streamed (their first 64 KiB)."""
    from types import SimpleNamespace

    from hf_cse.streaming import check_streaming_arguments

    if name == "wiki" and not WIKI.is_file():
        pytest.skip(f"shared corpus not found at {WIKI}")
    path = {"demo": DEMO_CORPUS, "wiki": WIKI}.get(name, tmp_path / name)
    if content is not None:
        path.write_text(content)
        assert len(read_sentences(path)) == len(SENTENCES)
    elif name == "demo":
        assert read_sentences(path)
    streamed = SimpleNamespace(streaming=True, train_files=None, train_weights=None)
    check_streaming_arguments(streamed, SimpleNamespace(train_file=str(path), dataset_name=None, pair_column=None,
                                                        text_column=None), 4, "simcse")


def _zip_with(path, first_member: str):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(first_member, "<x/>")
    return path


@pytest.mark.parametrize("name, content, message", [
    ("book.xlsx", lambda p: _zip_with(p, "docProps/app.xml"), r"is a spreadsheet or document .*save it as CSV UTF-8"),
    ("renamed.csv", lambda p: _zip_with(p, "[Content_Types].xml"), r"is a spreadsheet or document"),
    ("book.ods", lambda p: _zip_with(p, "mimetype"), r"is a spreadsheet or document"),
    ("old.xls", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(64), r"is a legacy Excel / Office file"),
    ("data.parquet", b"PAR1" + bytes(64) + b"PAR1", r"is a Parquet file, not text: convert it to JSON lines"),
    ("notepad.txt", "one sentence\ntwo sentences\n".encode("utf-16"), r"is UTF-16 text: convert it to UTF-8"),
])
def test_a_document_or_other_encoding_is_named_with_its_fix(name, content, message, tmp_path):
    """A spreadsheet is a zip, but 'decompress it first' is no fix; a Parquet or UTF-16 file was 'binary (NUL
    bytes)'. Each is named for what it is, with the way to a text file."""
    path = tmp_path / name
    if callable(content):
        content(path)
    else:
        path.write_bytes(content)
    with pytest.raises(DataError, match=message):
        read_sentences(path)


@pytest.mark.parametrize("content, found", [
    (b"abc\ndefghijklmnop\nq\xe9r\n", (3, "not valid UTF-8 (invalid continuation byte)")),
    (b"good\na line longer than a block \xff", (2, "not valid UTF-8 (invalid start byte)")),
    (b'\xef\xbb\xbf{"a": 1}\n{"b": "caf\xc3\xa9"}\n', None),  # a BOM, and UTF-8 across a block's end
    (b"", None),
])
def test_the_first_unreadable_line_is_found_across_blocks(content, found, tmp_path, monkeypatch):
    """A stream's reader says neither file nor line: hf_cse reads the file again, in blocks (7 bytes here), to
    name the line."""
    from hf_cse import text_files

    monkeypatch.setattr(text_files, "SCAN_BYTES", 7)
    path = tmp_path / "f"
    path.write_bytes(content)
    assert text_files.find_unreadable_line(path) == found


LONG_DOCUMENT = "这是一个很长的中文句子。" * 2500  # 90,000 bytes of UTF-8: longer than the 64 KiB head


@pytest.mark.parametrize("name, first", [
    ("long.txt", LONG_DOCUMENT),
    ("long.jsonl", json.dumps({"text": LONG_DOCUMENT}, ensure_ascii=False)),
    ("ascii.jsonl", json.dumps({"text": "a long document " * 5000})),
], ids=["utf8.txt", "utf8.jsonl", "ascii.jsonl"])
def test_a_first_line_longer_than_the_head_is_not_refused_for_where_the_head_ends(name, first, tmp_path):
    """The head's 64 KiB ended inside the first line: a character cut in two was refused as "not valid UTF-8" (with
    an iconv -f latin1 fix that would garble the file), a record cut short as "not valid JSON"."""
    from hf_cse.sentence_files import check_sentences_file_start
    from hf_cse.streaming import _check_start

    path = tmp_path / name
    rows = SENTENCES if path.suffix == ".txt" else [json.dumps({"text": s}) for s in SENTENCES]
    path.write_text("\n".join([first, *rows]) + "\n", encoding="utf-8")
    check_sentences_file_start(path, None)
    _check_start(path, "train_files", None)
    assert read_sentences(path)[1:] == SENTENCES


def test_bad_bytes_in_a_first_line_longer_than_the_head_are_still_refused(tmp_path):
    from hf_cse.sentence_files import check_sentences_file_start

    path = tmp_path / "long.txt"
    path.write_bytes(b"caf\xe9 " + LONG_DOCUMENT.encode() + b"\n" + "\n".join(SENTENCES).encode())
    with pytest.raises(DataError, match=r"line 1 is not valid UTF-8 \(invalid continuation byte at byte 3\)"):
        check_sentences_file_start(path, None)


NAMELESS_COLUMN = {"pandas_index": (",text", "{i},{s}"), "trailing_comma": ("text,", "{s},"),
                   "tsv_index": ("\ttext", "{i}\t{s}")}


def _nameless_column_table(kind, folder):
    header, row = NAMELESS_COLUMN[kind]
    path = folder / ("train.tsv" if "\t" in header else "train.csv")
    path.write_text("\n".join([header, *(row.format(i=i, s=s) for i, s in enumerate(SENTENCES))]) + "\n")
    return path


@pytest.mark.parametrize("kind", NAMELESS_COLUMN)
def test_a_table_with_a_column_without_a_name_trains_on_its_text_column(kind, tmp_path):
    """pandas' to_csv() writes its index as a column without a name (",text"); a header with a trailing comma has one
    at its end. The streamed reader skips such a column; the in-memory one crashed in datasets (KeyError 'Field ""
    does not exist in schema', a 24-frame traceback)."""
    assert load_train_dataset(str(_nameless_column_table(kind, tmp_path)))["text"] == SENTENCES


@pytest.mark.slow
def test_a_table_with_a_column_without_a_name_mixes_in_memory_as_streamed(tmp_path):
    from hf_cse.cli.arguments import StreamingArguments
    from hf_cse.streaming import load_training_text

    path = _nameless_column_table("pandas_index", tmp_path)
    other = tmp_path / "other.txt"
    other.write_text("\n".join(SENTENCES) + "\n")
    for streaming in (False, True):
        mixed = load_training_text(StreamingArguments(streaming=streaming, train_files=[str(path), str(other)]),
                                   SimpleNamespace(text_column=None), seed=0)
        assert {row["text"] for row in mixed} == set(SENTENCES)  # no index, no empty cell of the nameless column
