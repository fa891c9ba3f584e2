"""Your own dev data (--eval_file): reading, errors, scoring like STS-B dev, run_unsup / run_eval selection."""

import json

import pytest
from helpers import random_sentences, scored_pairs_file
from transformers import AutoTokenizer

from hf_cse.checks import InputError
from hf_cse.cli import evaluate as eval_cli
from hf_cse.cli import train as train_cli
from hf_cse.evaluation import SentenceEncoder, custom_dev, load_sts
from hf_cse.evaluation.custom_dev import EvalDataArguments, pairs_from_args, read_pair_file
from hf_cse.evaluation.evaluators import PairsEvaluator, STSDevEvaluator
from hf_cse.models import SimCSEModel


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_senteval_stsb_dev_file_by_column_numbers_equals_the_stsb_dev_reader(senteval_dir):
    path = senteval_dir / "STS" / "STSBenchmark" / "sts-dev.csv"
    pairs = read_pair_file(path, "5", "6", "4")
    ref = load_sts("STSBenchmark", str(senteval_dir), "dev")["dev"]
    assert pairs.sentences1 == ref.sentences1 and pairs.sentences2 == ref.sentences2
    assert pairs.scores.tolist() == ref.scores.tolist()


@pytest.mark.slow
def test_pairs_evaluator_scores_like_stsb_dev(tiny_bert_dir, senteval_dir):
    pairs = read_pair_file(senteval_dir / "STS" / "STSBenchmark" / "sts-dev.csv", "5", "6", "4")
    enc = SentenceEncoder(SimCSEModel.from_encoder(str(tiny_bert_dir)), AutoTokenizer.from_pretrained(tiny_bert_dir),
                          show_progress_bar=False)
    mine = PairsEvaluator(pairs, "mydev")(enc)
    ref = STSDevEvaluator(senteval_dir, tasks=("STSBenchmark",))(enc)
    assert set(mine) == {"mydev_spearman"}
    assert mine["mydev_spearman"] == pytest.approx(ref["stsb_spearman"], abs=1e-9)  # same pairs, same encoder


def test_csv_with_header_quotes_and_any_language(tmp_path):
    path = _write(tmp_path / "dev.csv", 'a,b,sim\n"Der Hund, der bellt",Ein Hund bellt,4.5\n猫が寝ている,犬が走る,0.5\n'
                                         '\nx,y,2\n')
    pairs = read_pair_file(path, "a", "b", "sim")
    assert pairs.sentences1 == ("Der Hund, der bellt", "猫が寝ている", "x")
    assert pairs.scores.tolist() == [4.5, 0.5, 2.0]


def test_a_quoted_line_break_in_a_csv_pair_keeps_the_words_apart(tmp_path):
    """A spreadsheet writes a cell with a line break as a quoted field over two lines: the break is a space in the
    sentence, not glued words ("the dog\nbarks" read as "the dogbarks" before)."""
    path = _write(tmp_path / "dev.csv", 'sentence1,sentence2,score\n"the dog\nbarks",a dog barks,4\nx,y,1\nz,w,2\n')
    pairs = read_pair_file(path)
    assert pairs.sentences1 == ("the dog barks", "x", "z") and pairs.scores.tolist() == [4.0, 1.0, 2.0]


@pytest.mark.parametrize("text, columns, message", [
    ("s1\ts2\tscore\na\tb\t1\n", ("sentence1", "sentence2", "score"), r"dev.tsv: no column 'sentence1'.*s1, s2"),
    ("sentence1\tsentence2\tscore\na\tb\t1\nc\td\thigh\n", None, r"dev.tsv, line 3: score 'high' is not a number"),
    ("sentence1\tsentence2\tscore\na\tb\t1\nc\t \t2\n", None, r"dev.tsv, line 3: empty sentence"),
    ("sentence1\tsentence2\tscore\na\tb\t1\nc\td\n", None, r"dev.tsv, line 3: 2 fields, the header has 3"),
    ("a\tb\t1\nc\td\n", ("0", "1", "2"), r"dev.tsv, line 2: 2 columns, but column 2 \(0-based\) is needed"),
    ("sentence1\tsentence2\tscore\na\tb\t1\nc\td\t1\n", None, r"2 scored pair\(s\) with 1 distinct score"),
    ("", None, r"dev.tsv is empty"),
    ("sentence1\tsentence2\tscore\na\tb\t1\nc\td\t2\textra\n", None,
     r"dev.tsv, line 3: 4 fields, the header has 3\. The file is split on every tab \(no quoting\): fix the row\.$"),
    # an unquoted comma shifted the cells: ("Hello", "said the boy.") scored, the third sentence dropped
    ("score,sentence1,sentence2\n4.5,A man plays.,A man is playing.\n0.5,Hello, said the boy.,Stocks fell.\n",
     ("sentence1", "sentence2", "score"), r"dev.csv, line 3: 4 fields, the header has 3\. Quote fields that hold a "
     r"comma \(\"Hello, said the boy\.\"\), or fix the row\.$"),
])
def test_malformed_files_name_file_and_line(tmp_path, text, columns, message):
    path = _write(tmp_path / ("dev.csv" if "dev.csv" in message else "dev.tsv"), text)
    with pytest.raises(InputError, match=message):
        read_pair_file(path, *(columns or ()))


def test_a_dev_set_too_small_to_rank_models_is_refused_and_a_small_one_is_warned_about(tmp_path, caplog):
    """A dev file of 2 pairs was taken: its Spearman is +-100 whatever the model, and the trainer kept checkpoints on
    it ("dev: before -100.00 -> after -100.00"). 2 pairs are refused; a few are warned about with the noise."""
    import logging

    two = _write(tmp_path / "two.tsv", "sentence1\tsentence2\tscore\na\tb\t1\nc\td\t2\n")
    with pytest.raises(InputError, match=r"two.tsv: 2 scored pair\(s\) with 2 distinct score\(s\); a Spearman "
                                         r"correlation needs at least 3 pairs with different scores .*: add pairs\.$"):
        read_pair_file(two)
    rows = "".join(f"s{i}\tt{i}\t{i % 5}\n" for i in range(26))
    with caplog.at_level(logging.WARNING):
        assert len(read_pair_file(_write(tmp_path / "few.tsv", "sentence1\tsentence2\tscore\n" + rows))) == 26
    assert "few.tsv: 26 scored pairs; a Spearman correlation over so few moves by about 20 points" in caplog.text
    caplog.clear()
    many = "".join(f"s{i}\tt{i}\t{i % 5}\n" for i in range(100))
    read_pair_file(_write(tmp_path / "many.tsv", "sentence1\tsentence2\tscore\n" + many))
    assert "scored pairs" not in caplog.text

def test_numbered_columns_read_rows_of_any_length_that_hold_them(tmp_path):
    """Without a header (SentEval's sts-dev.csv: some rows carry extra fields) a row needs only the columns named."""
    path = _write(tmp_path / "dev.tsv", "x\t4.0\ta\tb\ny\t1.0\tc\td\tsource\textra\nz\t2.0\te\tf\n")
    assert read_pair_file(path, "2", "3", "1").sentences2 == ("b", "d", "f")


def test_flag_errors(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        pairs_from_args(EvalDataArguments(eval_file=str(tmp_path / "missing.csv")))
    with pytest.raises(InputError, match="not both"):
        pairs_from_args(EvalDataArguments(eval_file="a.csv", eval_dataset_name="x/y"))
    with pytest.raises(InputError, match="all names .* or all 0-based numbers"):
        read_pair_file(_write(tmp_path / "d.tsv", "a\tb\t1\n"), "0", "sentence2", "2")
    with pytest.raises(InputError, match="offline"):  # the tests run with HF_HUB_OFFLINE=1
        pairs_from_args(EvalDataArguments(eval_dataset_name="someone/not-cached-pairs"))
    assert pairs_from_args(EvalDataArguments()) is None




def test_pairs_of_one_sentence_and_itself_are_refused_before_any_model_loads(tiny_bert_dir, tmp_path, capsys):
    """--eval_sentence2_column naming the first sentence's column: every cosine is 1 up to rounding, and the
    Spearman over them was reported (0.00 on a tiny BERT) as the model's score."""
    dev = _write(tmp_path / "dev.csv", "sentence1,sentence2,score\na man plays,a man is playing,4.5\n"
                                       "a dog runs,the cat eats,0.5\nthe car is red,a red car,4\n")
    with pytest.raises(InputError, match="the two sentences of every pair are the same"):
        read_pair_file(dev, "sentence1", "sentence1", "score")
    assert eval_cli.main(["--model_name_or_path", str(tiny_bert_dir), "--tasks", "none", "--eval_file", str(dev),
                          "--eval_sentence2_column", "sentence1", "--output_dir", str(tmp_path / "ev")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--eval_sentence1_column and --eval_sentence2_column must name" in err
    assert not (tmp_path / "ev" / "results.json").exists()
    assert len(read_pair_file(dev)) == 3  # the two columns: read as before


@pytest.mark.slow
def test_run_unsup_selects_checkpoints_on_the_eval_file(tiny_bert_dir, tmp_path, monkeypatch):
    reads = []
    monkeypatch.setattr(custom_dev, "read_pair_file", lambda *a, **k: reads.append(a) or read_pair_file(*a, **k))
    train = _write(tmp_path / "train.txt", "\n".join(random_sentences(32)) + "\n")
    out = tmp_path / "out"
    dev = scored_pairs_file(tmp_path / "mydev.tsv", 20, 5, seed=5)
    train_cli.train_from_args(["--model_name_or_path", str(tiny_bert_dir), "--train_file", str(train), "--max_steps",
                    "4",
                    "--per_device_train_batch_size", "8", "--output_dir", str(out), "--use_cpu", "--disable_tqdm",
                    "true", "--eval_file", str(dev), "--eval_name", "mine", "--eval_strategy",
                    "steps", "--eval_steps", "2", "--save_strategy", "steps", "--save_steps", "2",
                    "--metric_for_best_model", "mine_spearman", "--load_best_model_at_end", "true"])
    state = json.loads((out / "trainer_state.json").read_text())
    evals = [h for h in state["log_history"] if "eval_mine_spearman" in h]
    # step 0: the untrained score, the run's "dev: before"; the selected checkpoint was scored at its step, so it is
    # not scored again after training (its logged score is the run's "dev: after")
    assert [h["step"] for h in evals] == [0, 2, 4]
    best = max(evals[1:3], key=lambda h: h["eval_mine_spearman"])  # checkpoints exist at steps 2 and 4
    assert state["best_global_step"] == best["step"] and state["best_metric"] == best["eval_mine_spearman"]
    assert len(reads) == 1  # read once, in the checks; the trainer scores the pairs read there
    info = json.loads((out / "training_info.json").read_text())
    assert info["dev"]["after"] == pytest.approx(best["eval_mine_spearman"])


def test_run_unsup_rejects_a_malformed_eval_file_before_loading_a_model(tiny_bert_dir, tmp_path, monkeypatch):
    from hf_cse.models import SimCSEModel

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded before the eval file was checked")

    monkeypatch.setattr(SimCSEModel, "from_encoder", no_model)
    bad = _write(tmp_path / "bad.tsv", "sentence1\tsentence2\tscore\na\tb\tx\n")
    with pytest.raises(InputError, match="bad.tsv, line 2"):
        train_cli.train_from_args(["--model_name_or_path", str(tiny_bert_dir), "--eval_file", str(bad),
                        "--output_dir", str(tmp_path / "o")])


def test_run_eval_scores_the_eval_file(tiny_bert_dir, tmp_path):
    dev = scored_pairs_file(tmp_path / "mydev.tsv", 20, 5, seed=5)
    out = tmp_path / "ev"
    assert eval_cli.main(["--model_name_or_path", str(tiny_bert_dir), "--tasks", "none", "--eval_file",
                          str(dev), "--eval_name", "mine", "--output_dir", str(out),
                          "--disable_tqdm", "true", "--device", "cpu"]) == 0
    results = json.loads((out / "results.json").read_text())
    own = results["own_data"]
    assert own["pairs"] == 20 and -100 <= own["mine_spearman"] <= 100
    assert f"{own['mine_spearman']:.2f}" in (out / "results.md").read_text()


def test_run_eval_with_nothing_to_evaluate_says_so(tmp_path, capsys):
    assert eval_cli.main(["--tasks", "none", "--output_dir", str(tmp_path)]) == 1
    assert "leaves nothing to evaluate" in capsys.readouterr().err
