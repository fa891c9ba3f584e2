"""Scores per embedding dimension (run_eval.py --truncate_dims, hf_cse.evaluation.dimensions)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from eval_helpers import FakeEncoder, write_toy_senteval
from helpers import scored_pairs_file

from hf_cse.checks import InputError
from hf_cse.cli import evaluate as eval_cli
from hf_cse.evaluation import EvalResults, evaluate_sts
from hf_cse.evaluation.dimensions import TruncatedEncoder, evaluate_dimensions
from hf_cse.evaluation.report import markdown_report
from hf_cse.number_lists import parse_truncate_dims


class _Cut:
    """A fake encoder whose vectors are another's cut to ``dim`` by hand (the reference)."""

    def __init__(self, encoder, dim):
        self.encoder, self.dim = encoder, dim

    def encode(self, sentences):
        return self.encoder.encode(sentences)[:, :self.dim]


def test_each_dimension_scores_the_cut_embeddings_and_encodes_once(tmp_path):
    data = write_toy_senteval(tmp_path / "senteval")
    fake = FakeEncoder(dim=8)
    by_dim = evaluate_dimensions(fake, [6, 3], ["STSBenchmark", "SICKRelatedness"], data_dir=str(data))
    reference = FakeEncoder(dim=8)
    for d in (6, 3):
        want = evaluate_sts(_Cut(reference, d), ["STSBenchmark", "SICKRelatedness"], str(data))
        assert by_dim[str(d)]["sts"] == pytest.approx({k: want[k] for k in ("STSBenchmark", "SICKRelatedness")})
        assert by_dim[str(d)]["avg"] == pytest.approx(want["avg"])
    texts = [t for call in fake.calls for t in call]
    assert len(texts) == len(set(texts))  # one encoding per sentence for all dimensions
    assert by_dim["6"]["sts"] != by_dim["3"]["sts"]


def test_truncated_encoder_and_bad_lists():
    fake = FakeEncoder(dim=8)
    cut = TruncatedEncoder(fake, 3)
    assert cut.encode(["a b", "c"]).shape == (2, 3)
    np.testing.assert_array_equal(cut.encode(["c"])[0], fake.vector("c")[:3])
    assert parse_truncate_dims("64,256,128") == [256, 128, 64]
    assert parse_truncate_dims(" 64 256, 128 ") == parse_truncate_dims([64, 256, 128]) == [256, 128, 64]
    assert parse_truncate_dims(None) == []
    for bad in ("64,x", "0", "8,8"):
        with pytest.raises(InputError, match="truncate_dims"):
            parse_truncate_dims(bad)
    for empty in ("", ",", " ", " , ", []):  # were taken as no sizes: an evaluation without the cut scores asked for
        with pytest.raises(InputError, match=r"^truncate_dims .* names no dimension; give one or more distinct "
                                             r"dimensions >= 1, e\.g\. 256,128,64, or leave it out"):
            parse_truncate_dims(empty)
    with pytest.raises(InputError, match="have 8 dimensions"):
        TruncatedEncoder(fake, 16).encode(["a"])


@pytest.mark.parametrize("empty", ["", ",", " "])
def test_run_eval_refuses_truncate_dims_that_name_no_dimension(empty, tmp_path, capsys):
    """``--truncate_dims ''`` ran the evaluation without the cut scores asked for; now one line, before any model."""
    out = tmp_path / "ev"
    assert eval_cli.main(["--truncate_dims", empty, "--tasks", "STSB", "--output_dir", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"hf-cse-eval: error: --truncate_dims {empty!r} names no dimension; "
                                               "give one or more distinct dimensions >= 1, e.g. 256,128,64, or leave "
                                               "it out to score the full embeddings only.")
    assert not out.exists()


def test_the_record_keeps_the_dimensions_and_results_md_tables_them():
    record = EvalResults(model="m", sts={"STSBenchmark": 80.0}, sts_avg=80.0, settings={"embedding_dim": 32},
                         dimensions={"16": {"sts": {"STSBenchmark": 78.5}, "avg": 78.5},
                                     "8": {"sts": {"STSBenchmark": 70.25}, "avg": 70.25}})
    again = EvalResults.from_dict(json.loads(json.dumps(record.to_dict())))
    assert again.dimensions == record.dimensions and not again.extra
    md = markdown_report([again])
    table = md.split("## Score by embedding dimension")[1]
    assert "| 32 (full) | 80.00 |" in table and "| 16 | 78.50 |" in table and "| 8 | 70.25 |" in table
    # the full size asked for as a dimension is the full row again: one row
    record.dimensions["32"] = {"sts": {"STSBenchmark": 80.0}, "avg": 80.0}
    table = markdown_report([record]).split("## Score by embedding dimension")[1]
    assert table.count("| 32") == 1 and "| 16 | 78.50 |" in table


def test_the_printout_shows_the_scores_by_dimension_as_results_md_does():
    """run_eval --truncate_dims printed the full-size table only: the cut scores were in results.json alone."""
    from hf_cse.evaluation import summary_text

    record = EvalResults(model="m", sts={"STSBenchmark": 80.0}, sts_avg=80.0, settings={"embedding_dim": 32},
                         mteb={"MyPairs": 61.5}, dimensions={"16": {"sts": {"STSBenchmark": 78.5}, "avg": 78.5,
                                                                    "mteb": {"MyPairs": 60.0}},
                                                             "8": {"sts": {"STSBenchmark": 70.125}, "avg": 70.125,
                                                                   "mteb": {"MyPairs": 52.25}}})
    lines = summary_text(record).splitlines()
    at = lines.index(next(line for line in lines if line.startswith("dimension")))
    assert lines[at].split() == ["dimension", "STS-B", "Avg", "(STS-B)", "MTEB", "MyPairs"]
    assert [row.split() for row in lines[at + 1:]] == [["32", "(full)", "80.00", "80.00", "61.50"],
                                                       ["16", "78.50", "78.50", "60.00"],
                                                       ["8", "70.12", "70.12", "52.25"]]
    md = markdown_report([record])
    assert "| 8 | 70.12 | 70.12 | 52.25 |" in md  # the same numbers, rounded the same


@pytest.mark.slow
def test_run_eval_scores_sts_and_mteb_per_dimension(tiny_bert_dir, tmp_path, monkeypatch):
    from hf_cse.evaluation.mteb_tasks import LocalSTSTask

    pytest.importorskip("mteb")
    data = write_toy_senteval(tmp_path / "senteval")
    pairs = scored_pairs_file(tmp_path / "pairs.tsv", 15, 4, seed=7)
    monkeypatch.setattr(eval_cli, "get_mteb_tasks", lambda names: [LocalSTSTask.from_file(pairs, name=n)
                                                                   for n in names])
    out = tmp_path / "ev"
    assert eval_cli.main(["--model_name_or_path", str(tiny_bert_dir), "--tasks", "STSBenchmark,mteb:MyPairs",
                          "--senteval_data_dir", str(data), "--truncate_dims", "16,8", "--output_dir", str(out),
                          "--disable_tqdm", "true", "--device", "cpu"]) == 0
    result = json.loads((out / "results.json").read_text())
    assert result["settings"]["embedding_dim"] == 32
    assert set(result["dimensions"]) == {"16", "8"}
    for d in ("16", "8"):
        assert set(result["dimensions"][d]) == {"sts", "avg", "mteb"}
        assert Path(out / "mteb" / f"dim_{d}" / "MyPairs.json").is_file()
    assert result["dimensions"]["8"]["sts"]["STSBenchmark"] != result["STSBenchmark"]
    assert (out / "score_by_dimension.png").is_file()
    assert "## Score by embedding dimension" in (out / "results.md").read_text()


def test_dimensions_beyond_the_embedding_and_nothing_to_score_are_one_line(tiny_bert_dir, tmp_path, capsys,
                                                                          monkeypatch):
    data = write_toy_senteval(tmp_path / "senteval")
    monkeypatch.setattr(eval_cli.SentenceEncoder, "from_pretrained",
                        lambda *args, **kwargs: pytest.fail("the model was loaded to find its width"))
    assert eval_cli.main(["--model_name_or_path", str(tiny_bert_dir), "--tasks", "STSBenchmark",
                          "--senteval_data_dir", str(data), "--truncate_dims", "64", "--output_dir",
                          str(tmp_path / "a"), "--disable_tqdm", "true", "--device", "cpu"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "32-dimensional" in err[0] and "--truncate_dims [64]" in err[0]
    assert not (tmp_path / "a" / "results.json").exists()
    assert eval_cli.main(["--tasks", "MR", "--senteval_data_dir", str(data), "--truncate_dims", "8",
                          "--output_dir", str(tmp_path / "b")]) == 1
    assert "names none" in capsys.readouterr().err


def _wide_bert(tiny_bert_dir, folder: Path) -> Path:
    from transformers import AutoTokenizer, BertConfig, BertModel

    BertModel(BertConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                         vocab_size=AutoTokenizer.from_pretrained(tiny_bert_dir).vocab_size)).save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_bert_dir).save_pretrained(folder)
    return folder


@pytest.mark.slow
def test_dimensions_beyond_a_later_model_are_refused_before_any_model_is_scored(tiny_bert_dir, tmp_path, capsys,
                                                                                 monkeypatch):
    """The width of the second model was found only once the first was scored and written (hours of a real run's
    work, which the rerun with other dimensions then scored again): it is read from its config.json up front."""
    wide = _wide_bert(tiny_bert_dir, tmp_path / "wide")
    data = write_toy_senteval(tmp_path / "senteval")
    monkeypatch.setattr(eval_cli.SentenceEncoder, "from_pretrained",
                        lambda *args, **kwargs: pytest.fail("a model was loaded before the dimensions were checked"))
    out = tmp_path / "out"
    assert eval_cli.main(["--model_name_or_path", f"{wide},{tiny_bert_dir}", "--tasks", "STSBenchmark",
                          "--senteval_data_dir", str(data), "--truncate_dims", "48", "--output_dir", str(out),
                          "--disable_tqdm", "true", "--device", "cpu"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"hf-cse-eval: error: --truncate_dims [48]: --model_name_or_path "
                                               f"{tiny_bert_dir} gives 32-dimensional embeddings (config.json); "
                                               "choose dimensions up to 32.")
    assert not out.exists()


@pytest.mark.slow
def test_dimensions_beyond_a_later_model_say_how_to_rerun(tiny_bert_dir, tmp_path, capsys, monkeypatch):
    """Where the files do not give the width (a Hub model), it is measured once the model is loaded: met at the second
    model, the refusal told to choose other dimensions; the rerun with them was then refused as another evaluation's
    partial results ("rerun that command to finish it", which can never finish)."""
    from hf_cse.cli import eval_checks

    monkeypatch.setattr(eval_checks, "embedding_width", lambda *args, **kwargs: None)
    wide = _wide_bert(tiny_bert_dir, tmp_path / "wide")
    data = write_toy_senteval(tmp_path / "senteval")
    out = tmp_path / "out"
    assert eval_cli.main(["--model_name_or_path", f"{wide},{tiny_bert_dir}", "--tasks", "STSBenchmark",
                          "--senteval_data_dir", str(data), "--truncate_dims", "48", "--output_dir", str(out),
                          "--disable_tqdm", "true", "--device", "cpu"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--truncate_dims [48]" in err and "32-dimensional" in err
    assert "rerun with dimensions every model gives and --overwrite_output_dir, or into another --output_dir" in err
    assert (out / "results.json").is_file()  # the wide model's scores
    assert eval_cli.main(["--model_name_or_path", f"{wide},{tiny_bert_dir}", "--tasks", "STSBenchmark",
                          "--senteval_data_dir", str(data), "--truncate_dims", "16", "--output_dir", str(out),
                          "--disable_tqdm", "true", "--device", "cpu", "--overwrite_output_dir"]) == 0


# ------------------------------------------------------------------------ one encoding for the full size and the cuts
def _expected_spearman(vectors, pairs_by_subset, dim: int | None = None) -> float:
    """Spearman x 100 of the cosine of every pair against its gold score, the cut vectors normalised by the cosine
    itself (scipy and numpy only; not hf_cse's scorer)."""
    from scipy.stats import spearmanr

    cosines, gold = [], []
    for pairs in pairs_by_subset.values():
        for a, b in zip(pairs.sentences1, pairs.sentences2):
            u, v = (np.asarray(vectors[s], np.float64)[:dim] for s in (a, b))
            cosines.append(u @ v / (np.linalg.norm(u) * np.linalg.norm(v)))
        gold += list(pairs.scores)
    return float(spearmanr(cosines, gold)[0] * 100)


def test_the_full_size_and_every_dimension_encode_each_sentence_once(tmp_path):
    from hf_cse.evaluation import evaluate
    from hf_cse.evaluation.data import load_sts

    data = write_toy_senteval(tmp_path / "senteval")
    tasks = ["STSBenchmark", "SICKRelatedness"]
    fake, kept = FakeEncoder(dim=8), {}
    full, _ = evaluate(fake, tasks, data_dir=str(data), embeddings=kept)
    by_dim = evaluate_dimensions(fake, [6, 3], tasks, data_dir=str(data), embeddings=kept)
    texts = [t for call in fake.calls for t in call]
    # the full-size calls alone (one per task); the cuts reuse them
    assert len(fake.calls) == len(tasks) and len(texts) == len(set(texts))
    reference = FakeEncoder(dim=8)
    for task in tasks:
        pairs = load_sts(task, str(data), "test")
        vectors = {s: reference.vector(s) for p in pairs.values() for s in p.sentences1 + p.sentences2}
        assert full.sts[task] == pytest.approx(_expected_spearman(vectors, pairs), abs=1e-9)
        for d in (6, 3):
            assert by_dim[str(d)]["sts"][task] == pytest.approx(_expected_spearman(vectors, pairs, d), abs=1e-9)


@pytest.mark.slow
def test_run_eval_encodes_the_sentences_once_for_every_dimension(tiny_bert_dir, tmp_path, monkeypatch):
    """run_eval.py --truncate_dims on a tiny BERT: each sentence of the STS and MTEB tasks goes through the encoder
    once, and the scores are those of its embeddings, full and cut (computed here with scipy)."""
    pytest.importorskip("mteb")
    from hf_cse.evaluation.custom_dev import read_pair_file
    from hf_cse.evaluation.data import load_sts
    from hf_cse.evaluation.encoder import SentenceEncoder
    from hf_cse.evaluation.mteb_tasks import LocalSTSTask

    data = write_toy_senteval(tmp_path / "senteval")
    pairs_file = scored_pairs_file(tmp_path / "pairs.tsv", 15, 4, seed=7)
    monkeypatch.setattr(eval_cli, "get_mteb_tasks", lambda names: [LocalSTSTask.from_file(pairs_file, name=n)
                                                                   for n in names])
    encode, encoded = SentenceEncoder.encode, []

    def counted(self, sentences, *args, **kwargs):
        encoded.extend(sentences)
        return encode(self, sentences, *args, **kwargs)

    monkeypatch.setattr(SentenceEncoder, "encode", counted)
    out = tmp_path / "ev"
    assert eval_cli.main(["--model_name_or_path", str(tiny_bert_dir), "--tasks",
                          "STSBenchmark,SICKRelatedness,mteb:MyPairs", "--senteval_data_dir", str(data),
                          "--truncate_dims", "16,8", "--output_dir", str(out), "--disable_tqdm", "true",
                          "--device", "cpu", "--precision", "fp32"]) == 0  # bf16's rounding depends on the batch
    sets = {task: load_sts(task, str(data), "test") for task in ("STSBenchmark", "SICKRelatedness")}
    sets["MyPairs"] = {"test": read_pair_file(pairs_file, "sentence1", "sentence2", "score")}
    sentences = {s for pairs in sets.values() for p in pairs.values() for s in p.sentences1 + p.sentences2}
    assert encoded[0] == "a" and len(encoded) - 1 == len(sentences)  # the width probe, then each sentence once
    assert set(encoded[1:]) == sentences

    monkeypatch.setattr(SentenceEncoder, "encode", encode)
    model = SentenceEncoder.from_pretrained(str(tiny_bert_dir), device="cpu", show_progress_bar=False,
                                            precision="fp32")
    vectors = dict(zip(sorted(sentences), model.encode(sorted(sentences))))
    result = json.loads((out / "results.json").read_text())
    for task, pairs in sets.items():
        full = result["mteb"][task] if task == "MyPairs" else result[task]
        assert full == pytest.approx(_expected_spearman(vectors, pairs), abs=1e-6), task
        for d in ("16", "8"):
            cut = result["dimensions"][d]["mteb" if task == "MyPairs" else "sts"][task]
            assert cut == pytest.approx(_expected_spearman(vectors, pairs, int(d)), abs=1e-6), (task, d)


# ------------------------------------------------------------------------ the width, read from a folder's files
def _st_folder(folder: Path, *modules: tuple[str, dict | None]) -> Path:
    """A sentence-transformers folder's JSON files: a Transformer at the root (a BERT config of hidden size 32), then
    ``modules`` as (type, config.json)."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 32}))
    listed = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]
    for i, (kind, config) in enumerate(modules, 1):
        listed.append({"idx": i, "name": str(i), "path": f"{i}_{kind}", "type": f"sentence_transformers.models.{kind}"})
        (folder / f"{i}_{kind}").mkdir()
        (folder / f"{i}_{kind}" / "config.json").write_text(json.dumps(config or {}))
    (folder / "modules.json").write_text(json.dumps(listed))
    return folder


def test_the_embedding_width_is_read_from_the_folders_files(tmp_path):
    from hf_cse.encoders import embedding_width

    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text(json.dumps({"model_type": "distilbert", "dim": 24}))  # DistilBERT's name
    assert embedding_width(str(plain)) == (24, "config.json")
    method = tmp_path / "method"
    method.mkdir()
    (method / "config.json").write_text(json.dumps({"model_type": "hf_cse_simcse",
                                                    "encoder_config": {"model_type": "gpt2", "n_embd": 40}}))
    assert embedding_width(str(method)) == (40, "config.json")
    mean = _st_folder(tmp_path / "mean", ("Pooling", {"embedding_dimension": 32, "pooling_mode": "mean"}),
                      ("Normalize", None))
    assert embedding_width(str(mean)) == (32, "1_Pooling/config.json embedding_dimension")
    legacy = _st_folder(tmp_path / "legacy", ("Pooling", {"word_embedding_dimension": 32,
                                                          "pooling_mode_cls_token": True,
                                                          "pooling_mode_mean_tokens": False}))
    assert embedding_width(str(legacy)) == (32, "1_Pooling/config.json word_embedding_dimension")
    dense = _st_folder(tmp_path / "dense", ("Pooling", {"embedding_dimension": 32, "pooling_mode": ["mean", "max"]}),
                       ("Dense", {"in_features": 64, "out_features": 8}), ("Normalize", None))
    assert embedding_width(str(dense)) == (8, "2_Dense/config.json out_features")
    assert embedding_width(str(dense), own_modules=False) == (32, "config.json")  # a pooler of hf_cse's
    # not told for sure: modes joined (a multiple of the width), a module of its own, a Hub id
    joined = _st_folder(tmp_path / "joined", ("Pooling", {"embedding_dimension": 32, "pooling_mode": ["cls", "max"]}))
    own = _st_folder(tmp_path / "own", ("Pooling", {"embedding_dimension": 32, "pooling_mode": "mean"}),
                     ("PromptPooling", {}))
    for unknown in (joined, own, "org/some-model"):
        assert embedding_width(str(unknown)) is None


@pytest.mark.slow
def test_the_width_read_is_the_one_sentence_transformers_gives(tiny_bert_dir, tmp_path, capsys, monkeypatch):
    """On folders sentence-transformers saved itself (its Pooling and Dense configs as it writes them): the width read
    is the embeddings' width, and --truncate_dims beyond it is refused before the model is loaded."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense, Normalize, Pooling, Transformer

    from hf_cse.encoders import embedding_width

    word = Transformer(str(tiny_bert_dir))
    for name, modules in (("mean", [Pooling(32, pooling_mode="mean")]),
                          ("dense", [Pooling(32, pooling_mode=["mean", "max"]), Dense(64, 8), Normalize()])):
        st = SentenceTransformer(modules=[word, *modules], device="cpu")
        st.save(str(tmp_path / name))
        assert embedding_width(str(tmp_path / name))[0] == st.encode(["a b"]).shape[1]
    monkeypatch.setattr(eval_cli.SentenceEncoder, "from_pretrained",
                        lambda *args, **kwargs: pytest.fail("the model was loaded to find its width"))
    data = write_toy_senteval(tmp_path / "senteval")
    assert eval_cli.main(["--model_name_or_path", str(tmp_path / "dense"), "--tasks", "STSBenchmark",
                          "--senteval_data_dir", str(data), "--truncate_dims", "16",
                          "--output_dir", str(tmp_path / "out"), "--disable_tqdm", "true", "--device", "cpu"]) == 1
    assert "--truncate_dims [16]: --model_name_or_path" in capsys.readouterr().err
