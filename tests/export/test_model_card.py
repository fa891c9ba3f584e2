"""Model cards (hf_cse.model_card): papers from the losses' and method models' references, no internal labels,
every objective and hyperparameter, the pieces reused from huggingface_hub and sentence-transformers."""

from __future__ import annotations

import dataclasses
import re

import jinja2
import jinja2.meta
import pytest
from transformers import BertConfig

from hf_cse.encoders import DEFAULT_ENCODER_HUB_ID, packaged_encoder_path
from hf_cse.evaluation.data import STS_TASKS, TRANSFER_TASKS
from hf_cse.losses import available_losses, get_loss_class
from hf_cse.model_card import (
    TEMPLATE,
    card_metadata,
    cited_papers,
    method_fields,
    papers_for,
    render_model_card,
    resolve_base_model,
)
from hf_cse.models import METHODS
from hf_cse.models.config import CSEConfig
from hf_cse.references import DIFFCSE, FOCAL_INFONCE, GS_INFONCE, IMSIMCSE, SIMCSE

TINY_ENCODER = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                          intermediate_size=64, max_position_embeddings=64).to_dict()
EXPORT = {"embedding_dimension": 32, "max_seq_length": 64, "pooling_description": "CLS token",
          "projector_description": "none", "modules": ["Transformer(BertModel)", "Pooling('cls')"]}
INTERNAL_LABELS = re.compile(r"seed 00\d|spec §|\{\{|\}\}")


def config_for(method: str = "simcse", **fields):
    return METHODS[method].config_class(encoder_config=dict(TINY_ENCODER), **fields)


def config_with_loss(loss: str):
    """A SimCSE config whose main objective is ``loss`` (with the off-dropout pass the loss may need)."""
    takes_nodropout = "z_nodropout" in get_loss_class(loss).extra_inputs
    return config_for("simcse", loss=loss, off_dropout=takes_nodropout)


def card(config, **kwargs) -> str:
    return render_model_card(config, model_id="someone/model", export=kwargs.pop("export", EXPORT), **kwargs)


def test_a_model_without_a_head_is_not_said_to_have_left_one_out():
    """projector='none': the card said 'Training-only parts (projection head) are not part of this model'."""
    assert "Training-only parts" not in card(config_for("simcse", projector="none"))
    assert "Training-only parts (projection head) are not part" in card(config_for("simcse"))
    assert "Training-only parts (RTD discriminator and generator)" in card(config_for("diffcse", projector="none"))


def test_a_run_that_kept_the_untrained_encoder_says_so_first():
    """The card of a run whose training did not beat its encoder (the weights saved are the encoder's) said it was
    trained with the method; only a JSON cell of its record said step 0 was kept."""
    dev = {"metric": "stsb_spearman", "before": 42.89, "after": 42.87, "delta": -0.02}
    kept = card(config_for(), training_info={"dev": {**dev, "kept_step": 0}})
    summary = kept.split("\n# ", 1)[1].split("## ", 1)[0]
    assert "the weights here are that encoder's, unchanged" in summary
    assert "The weights saved are the untrained encoder's (step 0, dev 42.89), not the trained model's." in kept
    trained = card(config_for(), training_info={"dev": {**dev, "kept_step": 6}})
    assert "unchanged**" not in trained and "untrained encoder's" not in trained


def test_a_matryoshka_run_that_kept_the_untrained_encoder_does_not_say_its_dimensions_were_trained():
    """The card said the weights were the untrained encoder's and, rows below, that its 8- and 16-dimensional
    prefixes were trained as embeddings of their own and could be served truncated."""
    dev = {"metric": "stsb_spearman", "before": 47.83, "after": 44.53, "delta": -3.3}
    config = config_for(matryoshka_dims=[32, 16, 8], projector="none", lora_r=4)
    export = {**EXPORT, "adapter_description": "trained with LoRA (r=4), merged into these weights",
              "pooling_description": "CLS token, then the trained `mlp` projection head"}

    def details(kept_step):
        text = card(config, export=export, training_info={"dev": {**dev, "kept_step": kept_step}})
        return text.split("## Model details", 1)[1].split("\n## ", 1)[0]

    kept = details(0)
    assert "Matryoshka dimensions | not trained: the training at 32, 16, 8 was discarded" in kept
    assert "truncate_dim" not in kept and "trained with LoRA" not in kept and "the trained `mlp`" not in kept
    trained = details(6)
    assert "Matryoshka dimensions | trained at 32, 16, 8" in trained and "truncate_dim=8" in trained
    assert "trained with LoRA (r=4)" in trained and "the trained `mlp`" in trained


def test_a_matryoshka_card_cites_its_paper_and_says_where_the_trained_prefixes_stop():
    """The card cited SimCSE only, and, with the full width left out of matryoshka_dims, served all 32 values as
    the trained embedding: the training log alone said the values past 16 got no training signal."""
    narrow = card(config_for(matryoshka_dims=[16, 8], projector="none"), export=EXPORT)
    assert EXPORT["embedding_dimension"] == 32
    assert ("The coordinates past the first 16 were given no training signal (the full 32 were not among the "
            "dimensions trained), yet the model serves all 32 by default: load it with `truncate_dim=16`") in narrow
    assert "@inproceedings{kusupati2022matryoshka" in narrow and "Kusupati et al., NeurIPS 2022" in narrow
    whole = card(config_for(matryoshka_dims=[32, 8], projector="none"), export=EXPORT)
    assert "no training signal" not in whole and "kusupati2022matryoshka" in whole
    assert "kusupati2022matryoshka" not in card(config_for(), export=EXPORT)


def test_a_card_made_for_a_folder_says_to_load_it_from_the_folder(tmp_path, monkeypatch):
    """A card rendered without a Hub repo said "Download from the Hub" above SentenceTransformer("/a/local/path")."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "outputs").mkdir()
    for folder in (str(tmp_path / "st"), "outputs/st", "./st"):
        text = render_model_card(config_for(), model_id=folder, export=EXPORT)
        assert "Download from the" not in text and "# Load it from its folder" in text, folder
    assert "# Download from the 🤗 Hub" in card(config_for())  # someone/model


# --------------------------------------------------------------------------------------------- papers
@pytest.mark.parametrize("loss", available_losses())
def test_every_loss_card_cites_its_paper_and_no_internal_label(loss):
    text = card(config_with_loss(loss))
    assert not INTERNAL_LABELS.search(text), INTERNAL_LABELS.search(text).group()
    paper = get_loss_class(loss).references[0]
    assert paper.title in text and f"https://arxiv.org/abs/{paper.arxiv}" in text and paper.bibtex in text
    assert f"loss `{loss}`" in text


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_card_cites_its_papers_first_and_no_internal_label(method):
    text = card(config_for(method))
    assert not INTERNAL_LABELS.search(text), INTERNAL_LABELS.search(text).group()
    own = METHODS[method].references[0]
    assert text.split("\n# ", 1)[1].startswith(f"{own.name} sentence embeddings")  # the title names the method
    citations = text.split("## Citation", 1)[1]
    positions = [citations.index(paper.bibtex) for paper in METHODS[method].references]
    assert positions == sorted(positions)  # the method's paper first, the pipeline it builds on after


def test_papers_are_ordered_defining_one_first_and_cited_once():
    assert cited_papers("simcse", ["infonce"]) == [SIMCSE]
    assert cited_papers("simcse", ["gs_infonce"]) == [GS_INFONCE, SIMCSE]
    assert cited_papers("imsimcse", ["off_dropout_infonce", "dcl"]) == [IMSIMCSE, SIMCSE]
    assert cited_papers("diffcse", ["focal_infonce"]) == [DIFFCSE, FOCAL_INFONCE, SIMCSE]
    assert cited_papers("simcse", ["infonce", "dcl"]) == [SIMCSE, IMSIMCSE]
    # a loss this installation does not know is skipped, not an error (a saved model must still get a card)
    assert cited_papers("simcse", ["not_a_registered_loss"]) == [SIMCSE]
    assert papers_for(config_for("imsimcse")) == [IMSIMCSE, SIMCSE]


# --------------------------------------------------------------------------------------------- objectives
def test_every_objective_is_listed_with_its_weight_and_every_hyperparameter():
    text = card(config_for("imsimcse"))
    method = text.split("### Method", 1)[1].split("### Training data", 1)[0]
    assert "loss `off_dropout_infonce` with weight 1" in method and "loss `dcl` with weight 0.1" in method
    assert "dimension-wise contrastive loss" in method  # the loss's own one-line description
    for row in ("| `m` | 0.9 |", "| `temperature` | 0.05 |", "| `m_placement` |",  # given, then a default
                "| `temperature` | 5 |", "| `normalization` | code |", "| `eps` |"):  # DCL's
        assert row in method, row
    # the objectives are not repeated as raw config fields in the hyperparameter table
    assert not re.search(r"\| `(loss|loss_kwargs|dcl_weight|dcl_temperature|dcl_normalization|objectives)` \|", text)


def test_field_meaning_comes_from_the_field_help_metadata():
    class HelpedConfig(CSEConfig):
        model_type = "hf_cse_test_helped"
        knob: float = dataclasses.field(default=0.5, metadata={"help": "how far the knob | is turned"})

    fields = method_fields(HelpedConfig(encoder_config=dict(TINY_ENCODER)))
    assert fields["knob"] == (0.5, "how far the knob | is turned")
    assert fields["pooler_type"][0] == "cls"
    help_of_pooler = next(f for f in dataclasses.fields(CSEConfig) if f.name == "pooler_type").metadata.get("help")
    assert fields["pooler_type"][1] == (help_of_pooler or "pooler_type")  # no help: the bare name
    assert not {"loss", "loss_kwargs", "objectives", "encoder_config", "method"} & set(fields)
    text = card(HelpedConfig(encoder_config=dict(TINY_ENCODER)))
    assert "| `knob` | 0.5 | how far the knob \\| is turned |" in text  # a "|" in the help must not split the row


# --------------------------------------------------------------------------------------------- rendering
def test_the_template_gets_every_variable_it_uses(monkeypatch):
    """jinja renders an unknown variable as empty text: every variable of the template must be passed."""
    from huggingface_hub import ModelCard

    seen = {}
    original = ModelCard.from_template.__func__

    def spy(cls, card_data, template_path=None, template_str=None, **kwargs):
        seen.update(kwargs, card_data=card_data)
        return original(cls, card_data, template_path=template_path, template_str=template_str, **kwargs)

    monkeypatch.setattr(ModelCard, "from_template", classmethod(spy))
    card(config_for())
    used = jinja2.meta.find_undeclared_variables(jinja2.Environment().parse(TEMPLATE.read_text(encoding="utf-8")))
    assert used and used <= set(seen), used - set(seen)


def test_usage_snippet_and_versions_come_from_sentence_transformers():
    import sentence_transformers

    text = card(config_for())
    assert 'model = SentenceTransformer("someone/model")' in text
    assert "# [3, 32]" in text  # three example sentences, the export's dimension
    assert f"| sentence-transformers | {sentence_transformers.__version__} |" in text and "| hf_cse |" in text
    widget = card_metadata(text)["widget"][0]
    snippet = text.split("```python", 1)[1].split("```", 1)[0]
    for sentence in [widget["source_sentence"], *widget["sentences"]]:
        assert repr(sentence) in snippet  # the Hub widget shows the snippet's sentences


def test_usage_snippet_shows_similarities_when_the_exported_model_is_given(tiny_bert_dir):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    transformer = Transformer(str(tiny_bert_dir))
    model = SentenceTransformer(modules=[transformer, Pooling(32, pooling_mode="cls")], device="cpu")
    text = card(config_for(), export={**EXPORT, "model": model})
    snippet = text.split("```python", 1)[1].split("```", 1)[0]
    assert "print(similarities)" in snippet and "# tensor([[1.0000," in snippet  # each sentence with itself


def test_scores_go_to_tables_with_display_headers_and_to_the_model_index():
    scores = {task: 60.0 + i for i, task in enumerate(STS_TASKS + TRANSFER_TASKS)}
    text = card(config_for(), eval_results={**scores, "avg": 63.0})
    assert "| STS12 | STS13 | STS14 | STS15 | STS16 | STS-B | SICK-R | STS Avg. |" in text
    index = card_metadata(text)["model-index"][0]
    assert index["name"] == "someone/model"
    got = {r["dataset"]["name"]: r["metrics"][0]["value"] for r in index["results"]}
    assert got == {(t if t in STS_TASKS else f"SentEval {t}"): v for t, v in scores.items()}


def test_training_curves_section_only_when_recorded():
    assert "### Training curves" not in card(config_for())
    text = card(config_for(), training_info={"training_curves": "training_curves.png"})
    assert "### Training curves" in text and "](training_curves.png)" in text


# --------------------------------------------------------------------------------------------- base model
def test_resolve_base_model(tmp_path):
    assert resolve_base_model(None) is None
    assert resolve_base_model("bert-base-uncased", local=False) == "bert-base-uncased"
    assert resolve_base_model("princeton-nlp/unsup-simcse-bert-base-uncased", local=False) == \
        "princeton-nlp/unsup-simcse-bert-base-uncased"
    assert resolve_base_model(str(tmp_path)) is None  # a local folder has no Hub id
    snapshot = tmp_path / "models--org--encoder" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    assert resolve_base_model(str(snapshot)) == "org/encoder"
    if packaged_encoder_path() is not None:
        assert resolve_base_model(packaged_encoder_path()) == DEFAULT_ENCODER_HUB_ID


def test_a_local_encoder_is_never_read_as_a_hub_id(tmp_path, monkeypatch):
    """A run trained from models/stbert and exported from another folder put base_model: models/stbert and a
    huggingface.co link on its card: the relative path no longer resolved and looked like org/name."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "cache"))  # an empty Hub cache
    monkeypatch.chdir(tmp_path)
    assert resolve_base_model("models/stbert", local=True) is None
    assert resolve_base_model(str(tmp_path / "gone" / "stbert"), local=True) is None
    # an older record (no base_encoder_local): relative, not here, not in the Hub cache: it cannot be told
    assert resolve_base_model("models/stbert") is None
    text = card(config_for(base_encoder="models/stbert"))
    assert "base_model" not in card_metadata(text) and "huggingface.co/models/stbert" not in text
    assert "an encoder recorded as `models/stbert` (a folder relative to where training ran, or a Hub id" in text
    # ... unless this machine's Hub cache holds the repo it names
    snapshot = tmp_path / "cache" / "models--models--stbert" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (tmp_path / "cache" / "models--models--stbert" / "refs").mkdir()
    (tmp_path / "cache" / "models--models--stbert" / "refs" / "main").write_text("abc")
    assert resolve_base_model("models/stbert") == "models/stbert"
    assert card_metadata(card(config_for(base_encoder="models/stbert")))["base_model"] == "models/stbert"


@pytest.mark.slow
def test_from_encoder_records_a_relative_local_encoder_as_an_absolute_path(tiny_bert_dir, tmp_path, monkeypatch):
    import shutil

    from hf_cse.models import SimCSEModel

    shutil.copytree(tiny_bert_dir, tmp_path / "models" / "stbert")
    monkeypatch.chdir(tmp_path)
    config = SimCSEModel.from_encoder("models/stbert").config
    assert (config.base_encoder, config.base_encoder_local) == (str(tmp_path / "models" / "stbert"), True)
    monkeypatch.chdir(tmp_path / "models")  # exported from another folder
    text = card(config)
    assert "base_model" not in card_metadata(text) and "huggingface.co" not in text.split("## Model details")[1]
    assert "a local encoder (`stbert`)" in text


def test_loss_summary_is_the_docstring_line_without_its_reference(monkeypatch):
    from hf_cse.losses import ContrastiveLoss, registry
    from hf_cse.model_card.sections import loss_summary

    class Smoothed(ContrastiveLoss):
        """``a (b) + c`` of two views, smoothed (Some paper, eq. 3).

        More text that stays in the docstring."""

    class Plain(ContrastiveLoss):
        """Dimension-wise loss over features (Some paper, eq. 5)."""

    monkeypatch.setitem(registry._LOSSES, "smoothed_for_test", Smoothed)
    monkeypatch.setitem(registry._LOSSES, "plain_for_test", Plain)
    assert loss_summary("smoothed_for_test") == "`a (b) + c` of two views, smoothed"  # code spans stay whole
    assert loss_summary("plain_for_test") == "dimension-wise loss over features"  # continues a card sentence
    assert loss_summary("not_a_registered_loss") == ""


def test_a_paper_without_published_code_gets_no_empty_code_link():
    from hf_cse.model_card.sections import method_section

    no_code = dataclasses.replace(SIMCSE, code="")
    text = method_section(config_for("simcse"), [no_code])
    assert "[code]" not in text and f"([paper]({SIMCSE.url}))" in text
    assert f"[code]({SIMCSE.code})" in method_section(config_for("simcse"), [SIMCSE])


@pytest.mark.parametrize("mode, split", [(None, "test"), ("test", "test"), ("fast", "test"), ("dev", "validation")])
def test_the_model_index_names_the_split_the_results_scored(mode, split):
    """run_eval.py --mode dev scores STS-B's and SICK-R's dev sets: the model-index says so (was always test)."""
    settings = {"settings": {"mode": mode}} if mode else {}
    text = card(config_for(), eval_results={"STSBenchmark": 61.0, "SICKRelatedness": 62.0, **settings})
    results = card_metadata(text)["model-index"][0]["results"]
    assert [r["dataset"]["split"] for r in results] == [split, split]


ALL_SCORES = {task: 60.0 + i for i, task in enumerate(STS_TASKS + TRANSFER_TASKS)}


@pytest.mark.parametrize("settings, left_out, said", [
    ({"sts_aggregation": "mean"}, STS_TASKS[:5],
     "STS12, STS13, STS14, STS15, STS16: the mean of the Spearman correlations of the year's subsets "
     "(`sts_aggregation` = mean), not one correlation over all of the year's pairs as the papers report; so not in "
     "the Hub metadata (`model-index`)."),
    ({"sts_aggregation": "wmean"}, STS_TASKS[:5], "subsets, weighted by their pairs (`sts_aggregation` = wmean)"),
    ({"mode": "fast"}, TRANSFER_TASKS,
     "MR, CR, SUBJ, MPQA, SST, TREC, MRPC: test accuracy, the fast 5-fold classifier (SimCSE's fasttest), not the "
     "papers' (`mode` = fast); so not in the Hub metadata (`model-index`)."),
    ({"mode": "dev"}, TRANSFER_TASKS, "dev accuracy, the fast 5-fold classifier (`mode` = dev)"),
    ({"mrpc_features": "full"}, ("MRPC",), "MRPC: the classifier saw the pair features `[u, v, |u - v|, u * v]`"),
], ids=["sts-mean", "sts-wmean", "fast", "dev", "mrpc-full"])
def test_scores_measured_otherwise_than_the_papers_are_said_so_and_left_out_of_the_model_index(settings, left_out,
                                                                                                said):
    """The model-index names a score by data set and metric only: STS12-16 as subset means (sts_aggregation mean /
    wmean), transfer accuracies of the fast classifier (mode fast, dev) and MRPC on other features were published
    as the papers' numbers. They are left out of it, and the card's text says how they were measured."""
    text = card(config_for(), eval_results={**ALL_SCORES, "settings": settings})
    index = card_metadata(text)["model-index"][0]["results"]
    published = {r["dataset"]["name"].removeprefix("SentEval ") for r in index}
    assert published == set(ALL_SCORES) - set(left_out)
    assert said in " ".join(text.split())
    papers = card(config_for(), eval_results={**ALL_SCORES, "settings": {"mode": "test", "sts_aggregation": "all",
                                                                         "mrpc_features": "senteval"}})
    assert len(card_metadata(papers)["model-index"][0]["results"]) == len(ALL_SCORES)
    assert "not in the Hub metadata" not in papers and "the papers' 10-fold classifier" in papers


def test_the_evaluation_settings_name_the_precision_the_embeddings_were_computed_in():
    text = card(config_for(), eval_results={"STSBenchmark": 61.0, "settings": {"mode": "test", "precision": "bf16"}})
    assert "Evaluation settings (`run_eval.py`): mode = test, precision = bf16." in text


def mteb_facts(dataset="mteb/stsbenchmark-sts", subsets=("default",)):
    """details["mteb"][task] as run_eval.py records it (hf_cse.evaluation.mteb_tasks.score_facts)."""
    return {"file": "/home/me/ev/mteb/task.json", "main_score": "cosine_spearman", "task_type": "STS",
            "dataset": dataset, "revision": "b0fddb5", "splits": ["test"], "subsets": list(subsets)}


def test_mteb_and_own_pairs_scores_are_shown_as_what_they_are():
    """run_eval.py's "mteb" and "own_data" (--tasks mteb:..., --eval_file) never reached the card: only top-level
    numbers did. Each is shown labelled (MTEB's main score and its data; the user's file by its name, not the
    machine's path); the model-index holds an MTEB score only where its metric and public data can be named."""
    results = {"STSBenchmark": 61.0, "mteb": {"STSBenchmark": 80.5, "SentEvalSTSB": 31.4, "STS22": 55.0,
                                              "OldTask": 40.0},
               "own_data": {"custom_spearman": 33.1, "pairs": 15, "source": "/home/me/data/pairs.tsv"},
               "details": {"mteb": {"STSBenchmark": mteb_facts(), "SentEvalSTSB": mteb_facts(dataset="local"),
                                    "STS22": mteb_facts("mteb/sts22-crosslingual-sts", ("en", "de", "es")),
                                    "OldTask": {"file": "x.json", "main_score": "cosine_spearman"}}}}
    text = card(config_for(), eval_results=results)
    assert "| STSBenchmark | `cosine_spearman` | `mteb/stsbenchmark-sts`, test | 80.50 |" in text
    assert ("| SentEvalSTSB | `cosine_spearman` | scored pairs of the user's own under MTEB's task definition (not "
            "MTEB's data) | 31.40 |") in text
    assert ("| STS22 | `cosine_spearman` | `mteb/sts22-crosslingual-sts`, test, mean over its 3 subsets | 55.00 |"
            in text)
    assert ("Not in the Hub metadata (`model-index`): SentEvalSTSB (local data); STS22 (a mean over 3 subsets); "
            "OldTask (its data set was not recorded).") in text
    assert "| `custom` | file `pairs.tsv` | 15 | 33.10 |" in text and "/home/me" not in text
    index = card_metadata(text)["model-index"][0]["results"]
    assert [r["dataset"]["name"] for r in index] == ["STSBenchmark", "MTEB STSBenchmark"]
    mteb = index[1]
    assert mteb["task"]["type"] == "STS" and mteb["metrics"][0]["type"] == "cosine_spearman"
    assert mteb["metrics"][0]["value"] == 80.5
    assert {k: mteb["dataset"].get(k) for k in ("type", "config", "split", "revision")} == {
        "type": "mteb/stsbenchmark-sts", "config": "default", "split": "test", "revision": "b0fddb5"}


def test_results_of_mteb_tasks_and_own_pairs_only_are_shown():
    """Results without a SentEval task (run_eval.py --tasks mteb:... --eval_file ...) said no results were
    attached; a Hub data set of pairs is named with the configuration and split scored."""
    command = {"eval_dataset_name": "me/pairs", "eval_dataset_config_name": None, "eval_dataset_split": "validation"}
    text = card(config_for(), eval_results={
        "mteb": {"SentEvalSTSB": 31.4}, "details": {"mteb": {"SentEvalSTSB": mteb_facts(dataset="local")}},
        "own_data": {"mine_spearman": 33.1, "pairs": 15, "source": "me/pairs"}, "settings": {"command": command}})
    assert "No evaluation results" not in text and "| SentEvalSTSB | `cosine_spearman` |" in text
    assert "| `mine` | data set `me/pairs`, split validation | 15 | 33.10 |" in text
    assert "model-index" not in card_metadata(text)


def test_the_dev_score_after_training_names_the_step_it_was_scored_at():
    """With load_best_model_at_end the score is the best checkpoint's (step 3 of 8), not 'after the last' step."""
    dev = {"metric": "stsb_spearman", "before": 41.35, "after": 45.0, "delta": 3.65, "kept_step": 3}
    text = card(config_for(), training_info={"dev": dev})
    assert "went from 41.35 before the first step to 45.00 at step 3, whose weights were saved" in text
    assert "after the last" not in text
    assert text.count("41.35") == 1  # said in words, not again as a record under "Other training information"


@pytest.mark.parametrize("dev_denoising, period", [(True, True), (False, True), (True, False), (False, False)])
def test_a_dev_score_of_another_embedding_than_the_one_shipped_is_said(dev_denoising, period):
    """PromptBERT's trainer chooses its checkpoint on denoised dev embeddings of the sentences as written (the authors'
    trainer); the model ships the test-time embedding, not denoised, each sentence ended with a period (their
    evaluation): run_eval --mode dev on it gives another figure."""
    dev = {"metric": "stsb_spearman", "before": 21.34, "after": 25.0, "delta": 3.66, "kept_step": 2}
    text = card(config_for("promptbert", dev_template_denoising=dev_denoising, test_sentence_period=period),
                training_info={"dev": dev})
    assert ("the trainer chose its checkpoint by the dev scores of the template-denoised embedding, and this model's "
            "embedding is not denoised" in text) is dev_denoising
    assert ("training scored each dev sentence as written, and this model ends a sentence without final punctuation "
            "with a period" in text) is period
    # the note names the Python API (it named a command-line flag, which a library module does not)
    assert ("So its dev scores (`hf_cse.evaluation.evaluate(..., mode=\"dev\")`) are another figure than training's"
            in text) is (dev_denoising or period)
    assert "went from 21.34 before the first step" in text


def test_diffcse_s_card_names_its_rtd_objective_and_its_generator():
    """The card's objective listed only the contrastive loss; DiffCSE trains RTD beside it, and a unigram generator
    departs from the paper (said in the log, and now on the card)."""
    text = card(config_for("diffcse", lambda_rtd=0.005, generator_name_or_path="unigram"))
    assert ("* `rtd`: replaced-token detection (DiffCSE's conditional ELECTRA objective) with weight 0.005" in text
            and "with 30% of them masked (unigram replacements counted on the training corpus: this departs" in text)
    named = card(config_for("diffcse", generator_name_or_path="/models/distilbert-base-uncased"))
    assert "the generator `distilbert-base-uncased` replaced" in named and "this departs" not in named
    assert "`rtd`" not in card(config_for("simcse"))


def test_a_run_shorter_than_an_epoch_says_how_many_training_sentences_it_saw():
    text = card(config_for(), training_info={"data": {"num_sentences": 1241}, "train_metrics": {"epoch": 0.158}})
    assert "| Training sentences | 1,241 (the run trained 0.158 of an epoch: about 196 of them) |" in text
    whole = card(config_for(), training_info={"data": {"num_sentences": 1241}, "train_metrics": {"epoch": 2.0}})
    assert "| Training sentences | 1,241 |" in whole
