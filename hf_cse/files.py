"""The one careful reader of the users' input files (training text, CSV/TSV, JSON/JSONL, scored pairs), so that
every file is read the same way for training and evaluation:

* a compressed or binary file (gzip, zip, bzip2, xz, zstd, an image, a PDF; or NUL bytes) is refused by its first
  bytes, whatever its name says ("X is a gzip file: decompress it first");
* a UTF-8 byte-order mark (what spreadsheets write) is dropped;
* bytes that are not UTF-8 are refused naming the file and the line;
* ``.tsv`` files are split on tabs *without* CSV quoting: a sentence that starts with ``"`` keeps it and never
  swallows the lines after it (the ``datasets`` loaders are set up the same way: :data:`TSV_LOADER_ARGS`).

It also fingerprints files by their content, without reading them whole: a training file
(:func:`content_fingerprint`, compared when a run resumes) and a model folder's weights (:func:`weights_fingerprint`,
recorded in ``results.json`` and compared by an export given those results).
"""

from __future__ import annotations

import csv
import hashlib
from collections.abc import Iterable, Iterator
from pathlib import Path

from .checkpoints import read_json
from .checks import InputError, looks_like_local_path
from .errors import CSEError
from .run_files import WEIGHT_FILES

#: file kinds recognised by their first bytes
MAGIC = ((b"\x1f\x8b", "gzip"), (b"PK\x03\x04", "zip"), (b"BZh", "bzip2"), (b"\xfd7zXZ\x00", "xz"),
         (b"(\xb5/\xfd", "zstd"), (b"\x89PNG", "PNG image"), (b"%PDF", "PDF"))
#: keyword arguments of ``datasets.load_dataset("csv", ...)`` that read a .tsv the way :func:`table_records` does
TSV_LOADER_ARGS = {"delimiter": "\t", "quoting": csv.QUOTE_NONE, "encoding": "utf-8-sig"}


def table_loader_args(path) -> dict:
    """Keyword arguments of ``datasets.load_dataset("csv", ...)`` that read ``path`` as :func:`table_records` does: a
    ``.tsv`` split on tabs without quoting (:data:`TSV_LOADER_ARGS`), the BOM dropped, and every cell kept as the
    text it is (``features``: strings, from the header; pandas would guess a type per chunk of rows, failing on a
    column of numbers then words, and read cells such as ``NA`` or ``None`` as missing). Only the named columns are
    read (``usecols``), as :func:`table_records`' readers skip a column without a name: the index ``to_csv()``
    writes (a header ``,text``) or a trailing comma (``text,``), which pandas names ``Unnamed: 0`` where the
    features had no such column (a ``KeyError`` deep in ``datasets``). Column names keep their spaces: see
    :func:`strip_column_names`."""
    import datasets

    args = dict(TSV_LOADER_ARGS) if is_tsv(path) else {"encoding": "utf-8-sig"}
    with open(path, encoding="utf-8-sig", newline="") as fh:
        header = next(csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE) if is_tsv(path) else csv.reader(fh), [])
    named = [name for name in header if name.strip()]
    if named and len(set(named)) == len(named):  # pandas renames repeated names ("text.1"): left to it
        args["usecols"] = named
        args["features"] = datasets.Features({name: datasets.Value("string") for name in named})
    return {**args, "keep_default_na": False}


def strip_column_names(ds, names=None):
    """``ds`` (a ``datasets`` data set, maybe streamed) with its column names stripped of spaces, as
    :func:`table_records` strips them (a header ``id, text`` names the column ``text``). ``names``: the
    columns where ``ds`` does not know them (a stream of a CSV file: those of its first row)."""
    names = list(ds.column_names or names or [])
    renamed = {name: name.strip() for name in names if name != name.strip()}
    return ds.rename_columns(renamed) if renamed else ds


class DataError(CSEError):
    """Training data that cannot be used; the message says what is wrong and how to fix it."""


class FileFormatError(DataError, InputError):
    """An input file that is compressed, binary or not UTF-8 text; the message names the file and the fix."""


def content_fingerprint(path, edge_bytes: int = 1 << 20) -> str:
    """A short fingerprint of a file's content: its size and a hash of its first and last ``edge_bytes`` (reading
    a 100 GB corpus whole would take minutes), so that a run resumed on an edited or replaced file is told."""
    path = Path(path)
    size = path.stat().st_size
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        digest.update(fh.read(edge_bytes))
        if size > edge_bytes:
            fh.seek(max(edge_bytes, size - edge_bytes))
            digest.update(fh.read(edge_bytes))
    return f"{size} bytes, sha256 {digest.hexdigest()[:12]}"


def _module_folders(folder: Path) -> list[str]:
    """The paths inside ``folder`` of a sentence-transformers model's modules (its ``modules.json``; "" for the
    folder itself), or [] where it lists none."""
    modules = read_json(folder / "modules.json")[0]  # unreadable: loading the model says why
    paths = [str(m.get("path") or "") for m in modules if isinstance(m, dict)] if isinstance(modules, list) else []
    return list(dict.fromkeys(p for p in paths if not Path(p).is_absolute() and ".." not in Path(p).parts))


def weights_fingerprint(folder) -> dict[str, str] | None:
    """The weights a local model folder holds, as loading it reads them: each weight file (``WEIGHT_FILES``) by its
    path inside the folder -> :func:`content_fingerprint`. An hf_cse model's (its config.json) or a plain encoder's
    are the folder's own files; a sentence-transformers model's those of its modules (``modules.json``: the
    Transformer's, a Dense layer's). None where ``folder`` is no local folder (a Hub id) or holds no weight file.
    ``results.json`` records it for each model folder scored (``settings["model_weights"]``), so that an export can
    tell results of weights retrained or replaced since."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        return None
    config = read_json(folder / "config.json")[0]
    hf_cse_model = isinstance(config, dict) and str(config.get("model_type", "")).startswith("hf_cse")
    parts = [""] if hf_cse_model else _module_folders(folder) or [""]
    found = {path.relative_to(folder).as_posix(): content_fingerprint(path) for part in parts
             for pattern in WEIGHT_FILES for path in (folder / part).glob(pattern) if path.is_file()}
    return dict(sorted(found.items())) or None


#: what a train_file that names nothing should be
A_SENTENCES_FILE = ("Give a path to a text file with one sentence per line, or a .csv/.tsv/.json/.jsonl file "
                    "with text_column.")


def check_train_file(train_file, field: str = "train_file", wanted: str = A_SENTENCES_FILE) -> Path:
    """``train_file`` names a file (the commands check it before the training stack is imported); ``field``: the
    setting that names it, ``wanted``: what to give instead, where it names nothing."""
    path = Path(train_file)
    if path.is_dir():  # a folder of text files, or a data set save_to_disk wrote, is read as a data set
        raise DataError(f"{field} {path} is a folder, not a file: pass the folder as dataset_name (a folder of text "
                        "files, or a data set Dataset.save_to_disk wrote), or name a file in it.")
    if not path.is_file():
        raise DataError(f"{field} {path} does not exist (or is not a file).{wanted and ' ' + wanted}")
    return path


def local_dataset_folder(dataset_name) -> Path | None:
    """The local folder ``dataset_name`` names, or None for a Hub id; a path to a file and a path that names nothing
    but is plainly a local one (:func:`~hf_cse.checks.looks_like_local_path`: a typo) are refused in one line (the
    commands check it before the training stack is imported)."""
    path = Path(dataset_name).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise DataError(f"dataset_name {dataset_name} is a file, not a folder: give it as train_file, or name the "
                        "folder that holds it.")
    if looks_like_local_path(str(dataset_name)):
        raise DataError(f"dataset_name {dataset_name}: no such folder. Check the path (a Hub data set is named "
                        "name or org/name).")
    return None


def read_text(path, flag: str) -> str:
    """The text of a UTF-8 file (BOM dropped); refuses compressed, binary and undecodable files (see module doc)."""
    path = Path(path)
    return _decoded(path.read_bytes(), path, flag)


#: how much of a file read lazily (streamed, or mixed with others) is checked up front
HEAD_BYTES = 1 << 16


def read_head(path, flag: str) -> str:
    """The text of the whole lines in the first 64 KiB of a file, with :func:`read_text`'s checks on them. Where
    those bytes end inside the first line (a long document, a file without line breaks): the text of that line's
    start, less a character the head's end cuts in two, so that a file is refused for the bytes it holds, not for
    where the head ends (:func:`without_cut_line` leaves that line out)."""
    path = Path(path)
    with path.open("rb") as fh:
        data = fh.read(HEAD_BYTES)
    if len(data) == HEAD_BYTES:  # a character may be cut at the end of the head: check whole lines only
        data = data[:data.rfind(b"\n") + 1] or _whole_characters(data)
    return _decoded(data, path, flag)


def _whole_characters(data: bytes) -> bytes:
    """``data`` less the UTF-8 character its end cuts in two (bytes that are no UTF-8 stay, to be refused)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as err:
        if err.reason == "unexpected end of data" and err.end == len(data):  # the decoder's word for a cut character
            return data[:err.start]
    return data


def without_cut_line(path, text: str) -> str:
    """``text``, :func:`read_head`'s text of ``path``, less a last line that goes on past the head (no whole record,
    row or sentence, so not checked as one)."""
    if text.endswith(("\n", "\r")) or Path(path).stat().st_size < HEAD_BYTES:
        return text
    return text[:max(text.rfind("\n"), text.rfind("\r")) + 1]


def check_text_head(path, flag: str) -> str:
    """:func:`read_text`'s checks on the first 64 KiB of a text file that is read lazily, as a stream or one of
    several mixed files (whose reader would fail deep in ``datasets`` or hand over nonsense): compressed, binary,
    not UTF-8 at its start, or empty. Returns the text of those bytes (whole lines)."""
    text = read_head(path, flag)
    if not text.strip():
        raise DataError(f"{flag} {path} is empty (or starts with blank lines only); give a text file with one "
                        "sentence per line.")
    return text


#: files a user may hold sentences in that are no text, by their first bytes: what they are and how to get text
DOCUMENTS = (
    ((b"[Content_Types].xml", b"docProps/", b"xl/", b"word/", b"mimetypeapplication/vnd.oasis.opendocument"),
     "spreadsheet or document (Excel / OpenDocument)", "save it as CSV UTF-8 (or plain text) and give that"),
    ((b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1",), "legacy Excel / Office file", "save it as CSV UTF-8 and give that"),
    ((b"PAR1",), "Parquet file", "convert it to JSON lines, e.g. pandas.read_parquet(path).to_json('train.jsonl', "
     "orient='records', lines=True), and give that"),
    ((b"ARROW1",), "Arrow file", "convert it to JSON lines (datasets.Dataset.from_file(path).to_json('train.jsonl')) "
     "and give that"),
)
#: byte-order marks of UTF-16 text (Windows' "Unicode"), which holds NUL bytes
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


#: names of Office / OpenDocument files, zips whose first member may have any name
OFFICE_SUFFIXES = (".xlsx", ".xlsm", ".docx", ".ods", ".odt", ".numbers")


def _document_kind(data: bytes, path: Path) -> tuple[str, str] | None:
    """What ``data`` is, by :data:`DOCUMENTS` (a zip by the name of its first member: Office's first is
    ``[Content_Types].xml`` or one under ``docProps/``, ``xl/``, ``word/``; OpenDocument's ``mimetype``)."""
    head = data[:128]
    for marks, kind, fix in DOCUMENTS:
        if any(head.startswith(mark) or (head.startswith(b"PK") and mark in head) for mark in marks):
            return kind, fix
    if data.startswith(b"PK") and path.suffix.lower() in OFFICE_SUFFIXES:
        return DOCUMENTS[0][1:]
    return None


def _decoded(data: bytes, path: Path, flag: str) -> str:
    document = _document_kind(data, path)  # before MAGIC: a spreadsheet is a zip, but "decompress it" is no fix
    if document:
        raise FileFormatError(f"{flag} {path} is a {document[0]}, not text: {document[1]}.")
    if data.startswith(UTF16_BOMS):
        raise FileFormatError(f"{flag} {path} is UTF-16 text: convert it to UTF-8, e.g. `iconv -f utf-16 -t utf-8 "
                              f"{path.name} > fixed{path.suffix}`.")
    for magic, kind in MAGIC:
        if data.startswith(magic):
            fix = "decompress it first" if kind in ("gzip", "zip", "bzip2", "xz", "zstd") else "give a text file"
            raise FileFormatError(f"{flag} {path} is a {kind} file: {fix}.")
    if b"\x00" in data[:65536]:
        raise FileFormatError(f"{flag} {path} is a binary file (it holds NUL bytes; UTF-16?); give UTF-8 text.")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        raise FileFormatError(f"{flag} {path}: line {line} is not valid UTF-8 ({err.reason} at byte {err.start}). "
                              f"Convert the file, e.g. `iconv -f latin1 -t utf-8 {path.name} > fixed{path.suffix}`."
                              ) from None


def is_tsv(path) -> bool:
    return Path(path).suffix.lower() == ".tsv"


#: the longest cell a CSV file may hold (the csv module's default, 131,072 characters, failed mid-stream where
#: pandas had read a long document whole; the tokenizer cuts it anyway)
CSV_FIELD_LIMIT = 2**31 - 1


def _csv_rows(lines: Iterable[str], path, complete: bool) -> Iterator[tuple[int, list[str]]]:
    """A CSV file's rows with the line each starts on; a quoted field left open to the end of a whole file (it would
    swallow every line after it as one cell) and a line the csv module cannot read are refused by their line."""
    csv.field_size_limit(max(csv.field_size_limit(), CSV_FIELD_LIMIT))
    reader = csv.reader(lines)
    start, pending = 1, None  # one row behind: the last one is checked for a quote left open
    try:
        for row in reader:
            if pending is not None:
                yield pending[:2]
            pending, start = (start, row, reader.line_num), reader.line_num + 1
    except csv.Error as err:
        raise DataError(f"{path}: line {start} cannot be read as CSV ({err}). Fix the row.") from None
    if pending is not None:
        first, row, end = pending
        if complete and end > first and row and row[-1].endswith(("\n", "\r")):
            raise DataError(f"{path}: line {first} opens a quoted field that is never closed, so every line after "
                            'it would be one cell. Close the quote (a quote inside a quoted field is written "").')
        yield first, row


def table_records(lines: Iterable[str], path, complete: bool = True) -> tuple[list[str], Iterator[tuple[int, dict]]]:
    """A table's header (its first row, names stripped of spaces) and its data rows, read lazily as
    ``(line number, {column: cell})``; ``lines``: the table's lines (an open file, or ``io.StringIO(text,
    newline="")``), a ``.tsv``'s split on every tab (no quoting), any other file's read as CSV. Blank lines are
    skipped; a row with another number of fields than the header is refused by its line: an unquoted comma in a
    sentence would otherwise shift or cut its cells, and a missing one read as an empty cell. ``complete=False``:
    ``lines`` is a file's start, whose last row may be cut, so not checked. A header naming a column twice is
    refused (which one would be read?)."""
    if is_tsv(path):
        rows = ((number, line.rstrip("\r\n").split("\t")) for number, line in enumerate(lines, 1))
    else:
        rows = _csv_rows(lines, path, complete)
    header = [name.strip() for name in next(rows, (0, []))[1]]
    repeated = next((name for i, name in enumerate(header) if name and name in header[:i]), None)
    if repeated is not None:
        raise DataError(f"{path}: its header names the column {repeated!r} twice; give each column its own name.")
    fix = ("A .tsv is split on every tab (no quoting): fix the row." if is_tsv(path) else
           "Quote fields that hold the delimiter, or fix the row.")

    def checked(number: int, row: list[str]) -> tuple[int, dict]:
        if len(row) != len(header):
            raise DataError(f"{path}: line {number} has {len(row)} fields, the header has {len(header)}. {fix}")
        return number, dict(zip(header, row))

    def records() -> Iterator[tuple[int, dict]]:
        pending = None  # one row behind, so that the last one is known (complete=False leaves it unchecked)
        for number, row in rows:
            if any(cell.strip() for cell in row):
                if pending is not None:
                    yield checked(*pending)
                pending = number, row
        if pending is not None and (complete or len(pending[1]) == len(header)):
            yield checked(*pending)

    return header, records()


def check_enough_rows(num_rows: int, global_batch_size: int, source: str, unit: str = "sentences") -> None:
    if num_rows == 0:
        raise DataError(f"{source} is empty (no {unit}): give it at least one global batch of {global_batch_size}.")
    if num_rows < global_batch_size:
        raise DataError(
            f"{source} has {num_rows} {unit.removesuffix('s') if num_rows == 1 else unit}, fewer than one global "
            f"batch of {global_batch_size} "
            "(per-device batch size x processes). Use more data or a smaller per_device_train_batch_size."
        )
