"""SentEval files are validated row by row: a malformed row fails with one SentEvalDataError naming the file and
the line (never read with shifted columns, scored as nan, or an IndexError); SentEval's own rules for empty gold
lines (STS12-16) and empty sentences (MR/CR/SUBJ/MPQA) are kept; the real shared data reads cleanly."""

from __future__ import annotations

from pathlib import Path

import pytest
from eval_helpers import write_toy_senteval

from hf_cse.evaluation import data as D

STSB = "STS/STSBenchmark/sts-test.csv"
SICK = "SICK/SICK_test_annotated.txt"
STS12_INPUT = "STS/STS12-en-test/STS.input.MSRpar.txt"
STS12_GOLD = "STS/STS12-en-test/STS.gs.MSRpar.txt"
SST = "SST/binary/sentiment-test"
MRPC = "MRPC/msr_paraphrase_test.txt"
TREC = "TREC/TREC_10.label"


@pytest.fixture
def toy(tmp_path):
    D.clear_cache()
    yield write_toy_senteval(tmp_path / "senteval")
    D.clear_cache()


def edit_line(path: Path, index: int, change) -> int:
    """Replace line ``index`` (0-based) of ``path`` with ``change(line)``; returns its 1-based line number."""
    lines = path.read_text(encoding="latin-1").split("\n")
    lines[index] = change(lines[index])
    path.write_text("\n".join(lines), encoding="latin-1")
    return index + 1


def set_column(i: int, value: str):
    def change(line: str) -> str:
        cols = line.split("\t")
        cols[i] = value
        return "\t".join(cols)

    return change


def load(task: str, root: Path):
    if task in D.STS_TASKS:
        return D.load_sts(task, root, "test")
    return {"SST2": D.load_sst2, "MRPC": D.load_mrpc, "TREC": D.load_trec}[task](root)


MALFORMED = {
    "stsb-extra-column": ("STSBenchmark", STSB, 3, lambda s: s + "\textra", r"7 tab-separated columns .*found 8"),
    "stsb-column-inserted": ("STSBenchmark", STSB, 3, set_column(3, "0003\t96"), r"expected 7 .*found 8"),
    "stsb-too-few-columns": ("STSBenchmark", STSB, 3, lambda s: "\t".join(s.split("\t")[:5]), r"found 5"),
    "stsb-no-tab": ("STSBenchmark", STSB, 3, lambda s: s.replace("\t", " "), r"found 1"),
    "stsb-non-numeric": ("STSBenchmark", STSB, 3, set_column(4, "abc"), r"gold score 'abc' is not a number"),
    "stsb-nan": ("STSBenchmark", STSB, 3, set_column(4, "nan"), r"gold score 'nan' is not a finite number"),
    "stsb-above-5": ("STSBenchmark", STSB, 3, set_column(4, "7.5"), r"gold score 7.5 is outside .*range 0-5"),
    "stsb-negative": ("STSBenchmark", STSB, 3, set_column(4, "-1"), r"gold score -1 is outside .*range 0-5"),
    "stsb-empty-sentence": ("STSBenchmark", STSB, 3, set_column(5, "  "), r"sentence1 is empty"),
    "sick-below-1": ("SICKRelatedness", SICK, 2, set_column(3, "0.5"), r"gold score 0.5 is outside .*range 1-5"),
    "sick-non-numeric": ("SICKRelatedness", SICK, 2, set_column(3, "abc"), r"'abc' is not a number"),
    "sick-extra-column": ("SICKRelatedness", SICK, 2, lambda s: s + "\tx", r"expected 5 .*found 6"),
    "sts12-input-no-tab": ("STS12", STS12_INPUT, 2, lambda s: s.replace("\t", " "), r"expected 2 .*found 1"),
    "sts12-gold-not-a-number": ("STS12", STS12_GOLD, 2, lambda s: "x", r"gold score 'x' is not a number"),
    "sts12-gold-inf": ("STS12", STS12_GOLD, 2, lambda s: "inf", r"not a finite number"),
    "sst-label-2": ("SST2", SST, 1, set_column(1, "2"), r"label '2' is not one of 0, 1"),
    "sst-no-tab": ("SST2", SST, 1, lambda s: s.replace("\t", ""), r"expected 2 .*found 1"),
    "mrpc-label-x": ("MRPC", MRPC, 2, set_column(0, "x"), r"label 'x' is not one of 0, 1"),
    "mrpc-empty-sentence": ("MRPC", MRPC, 2, set_column(4, ""), r"#2 String is empty"),
    "trec-unknown-class": ("TREC", TREC, 1, lambda s: "FOO" + s[s.index(":"):], r"label 'FOO' is not one of ABBR"),
    "trec-no-colon": ("TREC", TREC, 1, lambda s: s.replace(":", " "), r"found no ':'"),
    "trec-no-question": ("TREC", TREC, 1, lambda s: s.split(" ")[0], r"question is empty"),
}


@pytest.mark.parametrize("case", MALFORMED, ids=list(MALFORMED))
def test_malformed_row_names_file_and_line(case, toy):
    task, rel, index, change, message = MALFORMED[case]
    lineno = edit_line(toy / rel, index, change)
    with pytest.raises(D.SentEvalDataError, match=message) as err:
        load(task, toy)
    text = str(err.value)
    assert f"{toy / rel}, line {lineno}:" in text
    assert "\n" not in text  # one line
    assert isinstance(err.value, ValueError)  # malformed data is a ValueError (missing files: FileNotFoundError)


def test_sts_year_with_gold_and_input_of_different_length(toy):
    gold = toy / STS12_GOLD
    gold.write_text("\n".join(gold.read_text().split("\n")[:-3]) + "\n")
    with pytest.raises(D.SentEvalDataError, match=r"12 sentence pairs in .* but 10 gold lines in ") as err:
        D.load_sts("STS12", toy)
    assert str(toy / STS12_GOLD) in str(err.value)


def test_empty_binary_file_is_an_error(toy):
    (toy / "MR" / "rt-polarity.neg").write_text("\n\n")
    with pytest.raises(D.SentEvalDataError, match=r"rt-polarity\.neg holds no sentence"):
        D.load_binary("MR", toy)


def test_unscored_sts_pairs_are_dropped_like_senteval(toy):
    """STS12-16: a pair with an empty gold line is not scored (SentEval's protocol), and its sentences are not
    checked, since SentEval never encodes them; the toy data leave line 1 of every gold file empty."""
    inp = toy / STS12_INPUT
    first = inp.read_text().split("\n")[0]
    edit_line(inp, 0, lambda s: "\t")  # an unscored pair with two empty sentences
    pairs = D.load_sts("STS12", toy)["MSRpar"]
    assert len(pairs) == 11  # 12 pairs, line 1 unscored
    assert first.split("\t")[0] not in pairs.sentences1
    assert all(s.strip() for s in pairs.sentences1 + pairs.sentences2)


def test_empty_lines_of_binary_tasks_stay_samples_like_senteval(toy):
    """MR/CR/SUBJ/MPQA: SentEval reads every line, empty ones included (the real CR and MPQA files have some), so
    the sample counts match the papers' (CR: 3,775)."""
    pos = toy / "CR" / "custrev.pos"
    before = len(D.load_binary("CR", toy).labels)
    D.clear_cache()
    pos.write_text(pos.read_text(encoding="latin-1") + " \n", encoding="latin-1")
    data = D.load_binary("CR", toy)
    assert len(data.labels) == before + 1
    assert data.sentences[0] == ""  # sorted by length: the empty sample comes first


@pytest.mark.slow
def test_the_shared_senteval_data_reads_without_errors(senteval_dir):
    """Every file of the real data passes the checks, with SentEval's sample counts."""
    D.clear_cache()
    sizes = {t: sum(len(p) for p in D.load_sts(t, senteval_dir).values()) for t in D.STS_YEARS}
    assert sizes == {"STS12": 3108, "STS13": 1500, "STS14": 3750, "STS15": 3000, "STS16": 1186}
    for task, split, n in (("STSBenchmark", "test", 1379), ("STSBenchmark", "train", 5749),
                           ("SICKRelatedness", "test", 4927), ("SICKRelatedness", "dev", 500)):
        assert len(D.load_sts(task, senteval_dir, split)[split]) == n
    assert {t: len(D.load_binary(t, senteval_dir).labels) for t in ("MR", "CR", "SUBJ", "MPQA")} == {
        "MR": 10662, "CR": 3775, "SUBJ": 10000, "MPQA": 10606}
    assert {k: len(v.labels) for k, v in D.load_sst2(senteval_dir).items()} == {"train": 67349, "dev": 872,
                                                                               "test": 1821}
    assert {k: len(v.labels) for k, v in D.load_trec(senteval_dir).items()} == {"train": 5452, "test": 500}
    assert {k: len(v.labels) for k, v in D.load_mrpc(senteval_dir).items()} == {"train": 4076, "test": 1725}
    D.clear_cache()
