"""STS data readers and scoring: aggregation by hand, empty gold lines, file formats, errors."""

from __future__ import annotations

import numpy as np
import pytest
from eval_helpers import SHARED_SENTEVAL, FakeEncoder, write_toy_senteval
from scipy.stats import rankdata

from hf_cse.evaluation import data as D
from hf_cse.evaluation.runner import parse_tasks
from hf_cse.evaluation.sts import evaluate_sts, format_sts_table, pairwise_cosine, score_sts

# every test reads the evaluation data afresh (hf_cse.evaluation.data caches what it reads)
pytestmark = pytest.mark.usefixtures("fresh_evaluation_data_cache")


def hand_spearman(x, y) -> float:
    rx, ry = rankdata(x), rankdata(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    return float(100 * (rx * ry).sum() / np.sqrt((rx**2).sum() * (ry**2).sum()))


@pytest.fixture
def toy_sts12(tmp_path):
    """STS12 with hand-made subsets of different sizes; sentence 'k-i-a' / 'k-i-b' per pair."""
    folder = tmp_path / "STS" / "STS12-en-test"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(3)
    table, expected = {}, {}
    sizes = {"MSRpar": 7, "MSRvid": 5, "SMTeuroparl": 9, "surprise.OnWN": 6, "surprise.SMTnews": 4}
    for k, (sub, n) in enumerate(sizes.items()):
        inputs, gold, cos, kept = [], [], [], []
        for i in range(n + 1):  # one extra pair whose gold line is empty
            a, b = f"s{k} p{i} first", f"s{k} p{i} second"
            va, vb = rng.normal(size=4), rng.normal(size=4)
            table[a], table[b] = va.astype(np.float32), vb.astype(np.float32)
            inputs.append(f"{a}\t{b}")
            # gold scores on a per-subset offset, so pooled 'all' differs from the subset means (offset + score
            # stays in STS's 0-5 range, which the reader checks)
            score = float(np.round(rng.uniform(0, 1), 2))
            if i == 2:
                gold.append("")  # not scored: must be skipped
                continue
            gold.append(f"{score}")
            kept.append(score + k)
            cos.append(float(va @ vb / np.linalg.norm(va) / np.linalg.norm(vb)))
        # write gold with the subset offset applied (scores are just numbers to Spearman)
        gold = [g if g == "" else f"{float(g) + k}" for g in gold]
        (folder / f"STS.input.{sub}.txt").write_text("\n".join(inputs) + "\n")
        (folder / f"STS.gs.{sub}.txt").write_text("\n".join(gold) + "\n")
        expected[sub] = (np.array(cos), np.array(kept))
    return tmp_path, table, expected


def test_aggregations_match_hand_computation(toy_sts12):
    root, table, expected = toy_sts12
    enc = FakeEncoder(table)
    per = {sub: hand_spearman(c, g) for sub, (c, g) in expected.items()}
    n = {sub: len(g) for sub, (_, g) in expected.items()}
    hand_all = hand_spearman(
        np.concatenate([c for c, _ in expected.values()]), np.concatenate([g for _, g in expected.values()])
    )
    hand_mean = float(np.mean(list(per.values())))
    hand_wmean = float(sum(per[s] * n[s] for s in per) / sum(n.values()))

    got = {
        agg: evaluate_sts(enc, ["STS12"], root, aggregation=agg)["STS12"] for agg in ("all", "wmean", "mean")
    }
    assert got["all"] == pytest.approx(hand_all, abs=1e-9)
    assert got["wmean"] == pytest.approx(hand_wmean, abs=1e-9)
    assert got["mean"] == pytest.approx(hand_mean, abs=1e-9)
    assert len({round(v, 6) for v in got.values()}) == 3, (
        "the three aggregations must differ on this toy task"
    )

    details = evaluate_sts(enc, ["STS12"], root)["details"]["STS12"]
    for sub in expected:
        assert details["subsets"][sub]["n"] == n[sub]  # the empty gold line was skipped
        assert details["subsets"][sub]["spearman"] == pytest.approx(per[sub], abs=1e-9)


def test_empty_gold_lines_are_skipped(toy_sts12):
    root, _, expected = toy_sts12
    data = D.load_sts("STS12", root)
    for sub, pairs in data.items():
        assert len(pairs) == len(expected[sub][1])
        assert all("p2 " not in s for s in pairs.sentences1)


def test_all_subsets_encoded_in_one_call(toy_sts12):
    root, table, _ = toy_sts12
    enc = FakeEncoder(table)
    evaluate_sts(enc, ["STS12"], root)
    assert len(enc.calls) == 1
    assert len(enc.calls[0]) == len(set(enc.calls[0]))


class CallDependentEncoder(FakeEncoder):
    """As an encoder under autocast: each embedding moves a little with the other sentences of its call."""

    def encode(self, sentences):
        sentences = list(sentences)
        jitter = np.random.default_rng(len(sentences)).normal(scale=0.3, size=(len(sentences), self.dim))
        return super().encode(sentences) + jitter.astype(np.float32)


def test_a_task_scores_the_same_whichever_tasks_are_scored_with_it(tmp_path):
    """The trainer scores STS-B and SICK-R dev together; run_eval --tasks STSBenchmark scores STS-B alone."""
    root = write_toy_senteval(tmp_path / "senteval")
    alone = evaluate_sts(CallDependentEncoder(), ["STSBenchmark"], root, mode="dev")
    both = evaluate_sts(CallDependentEncoder(), ["STSBenchmark", "SICKRelatedness"], root, mode="dev")
    assert both["STSBenchmark"] == alone["STSBenchmark"]


def test_stsb_test_scores_the_same_with_or_without_the_sts_years_that_share_its_sentences(tmp_path):
    """run_eval --tasks STSBenchmark vs --tasks sts: STS-B test shares sentences with STS12-16; none of its rows may
    come from another task's call (the run's cache, the kept embeddings the dimensions cut)."""
    from hf_cse.evaluation import evaluate
    from hf_cse.evaluation.dimensions import evaluate_dimensions

    root = write_toy_senteval(tmp_path / "senteval")
    sts12 = (root / "STS" / "STS12-en-test" / "STS.input.MSRpar.txt").read_text().splitlines()
    stsb = root / "STS" / "STSBenchmark" / "sts-test.csv"
    rows = [line.split("\t") for line in stsb.read_text().splitlines()]
    for row, shared in zip(rows[2:], sts12):  # as the real sets: STS-B test holds pairs of STS12-16
        row[5:7] = shared.split("\t")
    stsb.write_text("\n".join("\t".join(row) for row in rows) + "\n")
    scores = {}
    for tasks in (["STSBenchmark"], ["STS12", "STS13", "STSBenchmark", "geometry"]):
        kept: dict = {}
        full, _ = evaluate(CallDependentEncoder(), tasks, data_dir=root, embeddings=kept)
        cut = evaluate_dimensions(CallDependentEncoder(), [4], ["STSBenchmark"], data_dir=root, embeddings=kept)
        scores[len(tasks)] = (full.sts["STSBenchmark"], cut["4"]["sts"]["STSBenchmark"])
    assert scores[4] == scores[1]


def test_stsb_is_tab_separated_without_quoting(tmp_path):
    folder = tmp_path / "STS" / "STSBenchmark"
    folder.mkdir(parents=True)
    lines = [
        'main-news\theadlines\t2015\t0001\t4.200\tHe said "no way .\tShe said " yes .',
        "main-forums\tdeft-forum\t2014\t0002\t0.500\tIt 's   fine .\t' quoted ' text",
        "",
    ]
    (folder / "sts-test.csv").write_text("\n".join(lines))
    pairs = D.load_sts("STSBenchmark", tmp_path, "test")["test"]
    assert pairs.sentences1 == ('He said "no way .', "It 's fine .")  # whitespace joined like SentEval
    assert pairs.sentences2 == ('She said " yes .', "' quoted ' text")
    np.testing.assert_allclose(pairs.scores, [4.2, 0.5])


def test_sick_splits_and_latin1_fallback(tmp_path):
    folder = tmp_path / "SICK"
    folder.mkdir()
    header = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment"
    (folder / "SICK_trial.txt").write_bytes(
        f"{header}\r\n1\tA caf\xe9\tB\t3.5\tNEUTRAL\r\n".encode("latin-1")
    )
    (folder / "SICK_test_annotated.txt").write_text(f"{header}\n7\tx y\tz\t1.0\tNEUTRAL\n8\tu\tv\t4.5\tX\n")
    dev = D.load_sts("SICKRelatedness", tmp_path, "dev")["dev"]
    assert dev.sentences1 == ("A café",) and dev.scores.tolist() == [3.5]
    test = D.load_sts("SICKRelatedness", tmp_path, "test")["test"]
    assert len(test) == 2 and test.scores.tolist() == [1.0, 4.5]


def test_missing_file_error_names_task_and_path(tmp_path):
    (tmp_path / "STS").mkdir()
    with pytest.raises(D.SentEvalDataError) as err:
        D.load_sts("STS13", tmp_path)
    msg = str(err.value)
    assert "STS13" in msg and str(tmp_path / "STS" / "STS13-en-test" / "STS.input.FNWN.txt") in msg
    assert "get_transfer_data.bash" in msg
    assert "pass that data/downstream folder as senteval_data_dir, or read the tasks from the Hugging Face Hub " \
           "(senteval_source hub)." in msg and err.value.fields == ("senteval_data_dir", "senteval_source")
    with pytest.raises(D.SentEvalDataError, match=r"MRPC.*msr_paraphrase_train\.txt"):
        D.load_mrpc(tmp_path)
    with pytest.raises(D.SentEvalDataError, match="does not exist"):
        D.load_sts("STS12", tmp_path / "nowhere")


def test_unknown_names_list_valid_ones(tmp_path):
    with pytest.raises(ValueError, match="Valid tasks: STS12"):
        D.load_sts("STS17", tmp_path)
    with pytest.raises(ValueError, match="aggregation"):
        evaluate_sts(FakeEncoder(), ["STSBenchmark"], tmp_path, aggregation="median")


@pytest.mark.parametrize("typed, meant", [("STSB-typo", "STSBenchmark"), ("sickrr", "SICKRelatedness"),
                                           ("STSBenchmrk", "STSBenchmark"), ("transfr", "transfer")])
def test_a_mistyped_task_is_named_by_its_own_name_not_an_alias(typed, meant):
    """The suggestion is a name the error lists (an alias's task, not the alias: 'stsb' is not in the list)."""
    with pytest.raises(ValueError, match=rf"Unknown task '{typed}' \(did you mean '{meant}'\?\)\. Valid tasks:"):
        parse_tasks(typed)
    assert parse_tasks("STS-B,sick,sst-2") == ["STSBenchmark", "SICKRelatedness", "SST2"]  # aliases are accepted


def test_modes_and_table(tmp_path):
    root = write_toy_senteval(tmp_path / "se")
    enc = FakeEncoder()
    test = evaluate_sts(enc, None, root, mode="test")
    assert [k for k in test if k not in ("details",)] == list(D.STS_TASKS) + ["avg"]
    assert test["avg"] == pytest.approx(np.mean([test[t] for t in D.STS_TASKS]))
    dev = evaluate_sts(enc, None, root, mode="dev")
    assert set(dev) == {"STSBenchmark", "SICKRelatedness", "avg", "details"}
    assert dev["STSBenchmark"] != test["STSBenchmark"]
    table = format_sts_table(test)
    # all seven tasks: the papers' "Avg."; the dev split's two tasks: an average labelled with them
    assert table.splitlines()[0].split() == ["STS12", "STS13", "STS14", "STS15", "STS16", "STS-B", "SICK-R", "STS",
                                             "Avg."]
    assert f"{test['avg']:.2f}" in table
    assert format_sts_table(dev).splitlines()[1].split()[0] == "-"
    assert format_sts_table(dev).splitlines()[0].endswith("Avg (STS-B, SICK-R)")


def test_cosine_matches_normalised_dot():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(5, 7)) * 3, rng.normal(size=(5, 7))
    an, bn = a / np.linalg.norm(a, axis=1, keepdims=True), b / np.linalg.norm(b, axis=1, keepdims=True)
    np.testing.assert_allclose(pairwise_cosine(a, b), (an * bn).sum(1), atol=1e-12)
    assert pairwise_cosine(np.zeros((1, 3)), np.ones((1, 3)))[0] == 0.0  # nan_to_num as SentEval


def test_score_sts_dedups_across_tasks():
    pairs = D.STSPairs(("x", "y", "x"), ("y", "z", "z"), np.array([1.0, 2.0, 3.0]))
    enc = FakeEncoder()
    res = score_sts(enc.encode, {"STSBenchmark": {"test": pairs}, "SICKRelatedness": {"test": pairs}})
    assert sorted(enc.calls[0]) == ["x", "y", "z"]
    assert res["STSBenchmark"] == res["SICKRelatedness"]


@pytest.mark.skipif(
    not SHARED_SENTEVAL.is_dir(), reason=f"shared SentEval data not found at {SHARED_SENTEVAL}"
)
def test_shared_data_sizes():
    sizes = {t: sum(len(p) for p in D.load_sts(t, SHARED_SENTEVAL).values()) for t in D.STS_TASKS}
    assert sizes == {
        "STS12": 3108,
        "STS13": 1500,
        "STS14": 3750,
        "STS15": 3000,
        "STS16": 1186,
        "STSBenchmark": 1379,
        "SICKRelatedness": 4927,
    }
    assert len(D.load_sts("STSBenchmark", SHARED_SENTEVAL, "dev")["dev"]) == 1500
    assert tuple(D.load_sts("STS13", SHARED_SENTEVAL)) == ("FNWN", "headlines", "OnWN")  # no SMT
    trec = D.load_trec(SHARED_SENTEVAL)  # Latin-1 file
    assert len(trec["train"].sentences) == 5452 and len(trec["test"].sentences) == 500


def test_hub_source_code_path_with_a_stub(monkeypatch):
    """The Hub path (``source="hub"``) with ``datasets.load_dataset`` stubbed (no network in tests)."""
    import datasets

    calls = []

    def fake_load(repo, config=None, split=None):
        calls.append((repo, split))
        if repo == "RobZamp/sick":
            return datasets.Dataset.from_dict(
                {"sentence_A": ["a  b", "c"], "sentence_B": ["d", "e f"], "relatedness_score": [1.0, 4.5]}
            )
        if repo == "CogComp/trec":
            return datasets.Dataset.from_dict({"text": ["What ?", "Who is it ?"], "coarse_label": [5, 3]})
        return datasets.Dataset.from_dict(
            {"sentence1": ["x y", "z"], "sentence2": ["u", "v w"], "score": [0.5, 3]}
        )

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    sts12 = D.load_sts("STS12", source="hub")
    assert list(sts12) == ["all"] and sts12["all"].sentences1 == ("x y", "z")
    assert D.load_sts("STSBenchmark", source="hub", split="dev")["dev"].scores.tolist() == [0.5, 3.0]
    assert ("mteb/stsbenchmark-sts", "validation") in calls
    sick = D.load_sts("SICKRelatedness", source="hub", split="test")["test"]
    assert sick.sentences1 == ("a b", "c") and sick.scores.tolist() == [1.0, 4.5]
    trec = D.load_trec(source="hub")
    assert trec["train"].labels.tolist() == [5, 3]  # sorted by length like SentEval
    res = evaluate_sts(FakeEncoder(), ["STS12", "STSBenchmark"], source="hub")
    assert set(res) == {"STS12", "STSBenchmark", "avg", "details"}


def test_dev_mode_with_only_sts12_to_16_is_refused_before_anything_is_encoded(tmp_path):
    """It wrote a results file without a score and exited 0 (the years have no dev split and were skipped)."""
    from hf_cse.errors import CSEError
    from hf_cse.evaluation.runner import evaluate

    root = write_toy_senteval(tmp_path / "se")
    enc = FakeEncoder()
    with pytest.raises(CSEError, match=r"^mode='dev' scores dev splits, and STS12, STS16 have none .*use mode='test'"):
        evaluate(enc, ["STS12", "STS16"], root, mode="dev")
    assert enc.calls == []
    assert evaluate(enc, ["STS12", "STSBenchmark"], root, mode="dev")[0].to_dict()["STSBenchmark"] is not None


def test_the_results_say_where_they_were_computed(tmp_path):
    """Scores move in the last digits with the device and the libraries (82.03485 on an H100, 82.03247 on a CPU for
    one model): a results file said neither."""
    import torch
    import transformers

    from hf_cse import __version__
    from hf_cse.evaluation.runner import evaluate

    enc = FakeEncoder()
    enc.device = torch.device("cpu")
    settings = evaluate(enc, ["STSBenchmark"], write_toy_senteval(tmp_path / "se"))[0].settings
    assert settings["environment"] == {"device": "cpu", "hf_cse": __version__, "torch": torch.__version__,
                                       "transformers": transformers.__version__}
