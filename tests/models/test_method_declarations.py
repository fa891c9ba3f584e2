"""Methods declare what they need on their model class (hf_cse.models.base.CSEPreTrainedModel) and the framework
reads the declarations, not the method's name: a scratch method registered as a user would is refused pair rows,
the cached mode and streaming in one line naming it, is prepared before its first step and cited on its card; the
three shipped methods declare what they did before."""

from __future__ import annotations

import json
import re

import pytest
from helpers import random_sentences
from transformers import AutoConfig, AutoTokenizer

from hf_cse.cached import IncompatibleOptionsError, check_cached_compatible
from hf_cse.checks import InputError
from hf_cse.cli import train as train_cli
from hf_cse.cli.arguments import StreamingArguments
from hf_cse.cli.preflight import check_pair_training
from hf_cse.data import DataError, PairCollator, TwoViewCollator, tokenize_dataset
from hf_cse.model_card.sections import cited_papers
from hf_cse.models import (
    METHODS,
    CSEConfig,
    CSEPreTrainedModel,
    DiffCSEModel,
    ImSimCSEModel,
    SimCSEModel,
    get_method,
    register_method,
)
from hf_cse.models.diffcse import DiffCSECollator
from hf_cse.references import DIFFCSE, IMSIMCSE, SIMCSE, Paper
from hf_cse.streaming import check_streaming_arguments

#: a paper record of the scratch method (not registered in hf_cse.references: the test leaves the registry alone)
SCRATCH_PAPER = Paper(key="doe2099scratch", name="ScratchCSE", title="A Scratch Method", authors=("Jane Doe",),
                      venue="Nowhere 2099", year=2099, arxiv="9901.00001", code="",
                      bibtex="@inproceedings{doe2099scratch,\n  title = {A Scratch Method}\n}")


class ScratchConfig(CSEConfig):
    model_type = "hf_cse_scratch_test"
    method = "scratch_test"


class ScratchModel(CSEPreTrainedModel):
    """SimCSE's forward, refusing to train unless prepared; it declares "no" to pairs, mini-batches and streams."""

    config_class = ScratchConfig
    references = (SCRATCH_PAPER,)
    takes_pair_rows = False
    why_no_pair_rows = "its views come from one sentence"
    splits_into_minibatches = False
    why_no_minibatch_split = "its forward scores the whole batch"
    streams = False
    why_no_streaming = "it counts the corpus first"
    training_only_parts = ("projection head", "scratch pad")
    training_views = "Each sentence and its scratch copy"
    prepared_with: list = []  # (rows, model in training mode) of each prepare_for_training call

    def prepare_for_training(self, tokenizer, train_dataset, trust_remote_code=False):
        type(self).prepared_with.append((len(train_dataset), "input_ids" in train_dataset.column_names))
        self.prepared = True

    def forward(self, *args, **kwargs):
        if self.training and not getattr(self, "prepared", False):
            raise AssertionError("trained before prepare_for_training ran")
        return super().forward(*args, **kwargs)


@pytest.fixture
def scratch():
    ScratchModel.prepared_with = []
    register_method(ScratchModel)
    yield ScratchModel
    del METHODS["scratch_test"]  # AutoConfig/AutoModel keep it: its model_type is this test's own


def test_registration_is_one_call(scratch):
    import hf_cse

    assert get_method("scratch_test") is scratch
    assert hf_cse.ScratchModel is scratch  # a top-level name too, with no line in hf_cse/__init__.py
    assert AutoConfig.for_model("hf_cse_scratch_test").__class__ is ScratchConfig
    register_method(scratch)  # again: the same class under the same name is fine


def test_the_same_method_defined_again_replaces_its_earlier_definition(scratch):
    """A notebook cell run twice, or importlib.reload of the module: same module and qualified name."""
    again = type("ScratchModel", (CSEPreTrainedModel,), {"config_class": ScratchConfig, "__module__": __name__,
                                                          "__qualname__": ScratchModel.__qualname__})
    assert register_method(again) is again and get_method("scratch_test") is again


def test_registration_refuses_a_no_without_its_reason_and_a_taken_name(scratch):
    class Silent(ScratchModel):
        why_no_pair_rows = ""

    with pytest.raises(ValueError, match="Silent sets takes_pair_rows = False: give the reason in why_no_pair_rows"):
        register_method(Silent)

    class Imposter(SimCSEModel):
        pass

    with pytest.raises(ValueError, match="method 'simcse' is already registered"):
        register_method(Imposter)

    class Untyped(CSEConfig):
        model_type = "scratch_untyped"
        method = "untyped"

    with pytest.raises(ValueError, match="model_type.*starting with 'hf_cse'"):
        register_method(type("UntypedModel", (CSEPreTrainedModel,), {"config_class": Untyped}))
    assert "untyped" not in METHODS

    class Hijack(CSEConfig):  # another method under SimCSE's model_type: AutoModel would load one as the other
        model_type = SimCSEModel.config_class.model_type
        method = "hijack"

    with pytest.raises(ValueError, match=f"model_type '{Hijack.model_type}' is already method 'simcse''s \\(its saved "
                                         "models would load as this one\\); give Hijack a model_type of its own"):
        register_method(type("HijackModel", (CSEPreTrainedModel,), {"config_class": Hijack}))
    assert "hijack" not in METHODS and get_method("simcse") is SimCSEModel
    with pytest.raises(ValueError, match="Unknown method 'simcsee'; did you mean 'simcse'"):
        get_method("simcsee")


def test_pair_rows_are_refused_in_one_line_naming_the_method(scratch):
    with pytest.raises(DataError) as err:
        check_pair_training("scratch_test", "infonce", "positive", None)
    others = " or ".join(name for name, cls in METHODS.items() if cls.takes_pair_rows)  # simcse or imsimcse, ...
    assert str(err.value) == ("--pair_column does not work with --method scratch_test (its views come from one "
                              f"sentence); use --method {others} for pair data.")


def test_the_cached_mode_and_streaming_are_refused_naming_the_method(scratch):
    with pytest.raises(IncompatibleOptionsError, match=r"incompatible with method='scratch_test': its forward scores "
                                                       r"the whole batch\. Drop cached_minibatch_size"):
        check_cached_compatible(ScratchConfig(), 4)
    data = type("Data", (), {"pair_column": None, "train_file": None, "dataset_name": None, "text_column": None})()
    with pytest.raises(DataError, match=r"streaming=True does not work with method='scratch_test' \(it counts the "
                                        r"corpus first\); drop streaming=True"):
        check_streaming_arguments(StreamingArguments(streaming=True), data, 2, "scratch_test")


def _train_args(encoder, train_file, out, *extra):
    return ["--model_name_or_path", str(encoder), "--train_file", str(train_file), "--max_steps", "2",
            "--per_device_train_batch_size", "4", "--output_dir", str(out), "--use_cpu", "--disable_tqdm", "true",
            "--method", "scratch_test", *extra]


def test_the_command_line_refuses_cached_mode_before_loading(scratch, tiny_bert_dir, tmp_path):
    corpus = tmp_path / "train.txt"
    corpus.write_text("\n".join(random_sentences(16)) + "\n")
    with pytest.raises(IncompatibleOptionsError, match="method='scratch_test'"):
        train_cli.train_from_args(_train_args(tiny_bert_dir, corpus, tmp_path / "out", "--cached_minibatch_size",
                                              "2"))
    assert not (tmp_path / "out").exists() and not scratch.prepared_with


def test_a_registered_method_is_prepared_trained_and_cited(scratch, tiny_bert_dir, tmp_path):
    corpus = tmp_path / "train.txt"
    corpus.write_text("\n".join(random_sentences(16)) + "\n")
    out = tmp_path / "out"
    train_cli.train_from_args(_train_args(tiny_bert_dir, corpus, out))
    assert scratch.prepared_with == [(16, True)]  # once, with the tokenized rows, before the first step (forward)
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 2
    assert json.loads((out / "config.json").read_text())["model_type"] == "hf_cse_scratch_test"
    card = (out / "sentence-transformers" / "README.md").read_text()
    assert "**ScratchCSE**" in card and SCRATCH_PAPER.title in card  # its paper leads the card
    assert "Each sentence and its scratch copy are encoded in one forward pass (SimCSE); the other" in card
    assert "Training-only parts (projection head and scratch pad)" in card
    assert cited_papers("scratch_test", ["gs_infonce"])[0] is SCRATCH_PAPER
    assert cited_papers("scratch_test", ["infonce"]) == [SCRATCH_PAPER, SIMCSE]  # the pipeline it builds on last


# ------------------------------------------------------------------------------------ the shipped methods
SHIPPED = {
    # method: (takes_pair_rows, splits_into_minibatches, streams, training_only_parts)
    "simcse": (True, True, True, ("projection head",)),
    "imsimcse": (True, True, True, ("projection head",)),
    "diffcse": (False, False, False, ("projection head", "RTD discriminator", "generator")),
}


@pytest.mark.parametrize("method", sorted(SHIPPED))
def test_shipped_methods_declare_what_they_did_before(method):
    cls = METHODS[method]
    assert cls.method_name() == method
    assert (cls.takes_pair_rows, cls.splits_into_minibatches, cls.streams, cls.training_only_parts) == SHIPPED[method]
    assert cls.training_views == "Two dropout views of every sentence"
    assert cls.builds_on == (SIMCSE,) and cls.references[0].name.lower().startswith(method)  # its own paper first


def test_shipped_methods_keep_their_refusals_and_citations():
    assert list(METHODS)[:3] == ["simcse", "imsimcse", "diffcse"]  # the order the pair refusal names them in
    with pytest.raises(DataError, match=r"--method diffcse \(its second view is an edit of the same sentence\); "
                                        r"use --method simcse or imsimcse"):
        check_pair_training("diffcse", "infonce", "positive", None)
    check_pair_training("imsimcse", "infonce", "positive", None)
    assert cited_papers("diffcse", ["infonce"]) == [DIFFCSE, SIMCSE]
    assert cited_papers("imsimcse", ["off_dropout_infonce"]) == [IMSIMCSE, SIMCSE]
    assert cited_papers("simcse", ["gs_infonce"])[-1] is SIMCSE


def test_shipped_collators(tiny_bert_dir):
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    for cls in (SimCSEModel, ImSimCSEModel):
        config = cls.config_class()
        assert type(cls.collator(tok, config)) is TwoViewCollator
        assert type(cls.pair_collator(tok, config)) is PairCollator
    assert type(DiffCSEModel.collator(tok, DiffCSEModel.config_class())) is DiffCSECollator


def test_diffcse_checks_its_generator_early_and_attaches_it_when_prepared(tiny_bert_dir, caplog):
    with pytest.raises(InputError, match="generator_name_or_path /no/such/mlm: no such folder"):
        DiffCSEModel.check_before_loading(DiffCSEModel.config_class(generator_name_or_path="/no/such/mlm"))
    DiffCSEModel.check_before_loading(DiffCSEModel.config_class())  # unigram: nothing to load
    SimCSEModel.check_before_loading(SimCSEModel.config_class())
    model = DiffCSEModel.from_encoder(str(tiny_bert_dir))
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    from datasets import Dataset

    rows = tokenize_dataset(Dataset.from_dict({"text": random_sentences(8)}), tok, 16)
    with caplog.at_level("WARNING"):
        model.prepare_for_training(tok, rows)
    assert model.generator is not None and model.config.generator_name_or_path == "unigram"
    assert "DEPARTS FROM THE PAPER" in caplog.text


def test_a_checkpoint_of_a_method_not_registered_here_names_it_and_the_fix(tmp_path):
    """Export and evaluation of a user's method's checkpoint without its module: one line (before, transformers said
    the architecture was unknown and advised upgrading it)."""
    from hf_cse.evaluation.encoder import SentenceEncoder
    from hf_cse.export.checkpoint import load_model

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "hf_cse_users_unseen", "method": "unseen"}))
    import numpy
    from safetensors.numpy import save_file  # its weights are there: only its config is read
    save_file({"w": numpy.zeros(1, "float32")}, str(tmp_path / "model.safetensors"))
    line = (f"{tmp_path} holds a model of the hf_cse method 'unseen' (model_type 'hf_cse_users_unseen'), which is "
            "not registered in this process: import the module that registers it first")
    for load in (load_model, SentenceEncoder.from_pretrained):
        with pytest.raises(ValueError, match=re.escape(line + " (on the command line: import_module MODULE).")):
            load(str(tmp_path))

