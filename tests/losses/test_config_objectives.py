"""Objectives are data in the configuration: checked by the loss registry when the config is created, converted from
the fields of older configs, saved and reloaded as a list."""

from __future__ import annotations

import json
import logging
from dataclasses import field

import pytest
import torch
from transformers import AutoConfig, AutoModel, BertConfig, BertModel, HfArgumentParser

from hf_cse import said_once
from hf_cse.cli.arguments import (
    config_kwargs_from,
    dcl_arguments_class,
    loss_arguments_class,
    model_arguments_class,
    objectives_from_flags,
)
from hf_cse.losses import ContrastiveLoss, LossOutput, build_loss, loss_hyperparameters, register_loss
from hf_cse.losses import registry as loss_registry
from hf_cse.models import CSEConfig, DiffCSEConfig, ImSimCSEConfig, SimCSEConfig, SimCSEModel
from hf_cse.objectives import ObjectiveSpec, build_objectives, compute_objectives, objective, objective_specs


def _registry_message(name, **hyperparameters) -> str:
    with pytest.raises(ValueError) as err:
        build_loss(name, **hyperparameters)
    return str(err.value)


@pytest.mark.parametrize("kwargs, loss, hyperparameters", [
    ({"loss": "no_such_loss"}, "no_such_loss", {}),
    ({"loss": "gs_infonce", "loss_kwargs": {"temperature": -1.0}}, "gs_infonce", {"temperature": -1.0}),
    ({"loss_kwargs": {"margin": 0.1}}, "infonce", {"margin": 0.1}),
    ({"objectives": [objective("infonce"), objective("dcl", 0.1, normalization="nope")]}, "dcl",
     {"normalization": "nope"}),
])
def test_a_bad_objective_fails_at_construction_with_the_registry_message(kwargs, loss, hyperparameters):
    with pytest.raises(ValueError) as err:
        SimCSEConfig(**kwargs)
    assert str(err.value) == _registry_message(loss, **hyperparameters)


def test_from_encoder_fails_with_the_registry_message(tiny_bert_dir):
    with pytest.raises(ValueError) as err:
        SimCSEModel.from_encoder(str(tiny_bert_dir), loss="focal_infonce", loss_kwargs={"temperature": 0.0})
    assert str(err.value) == _registry_message("focal_infonce", temperature=0.0)


@pytest.mark.parametrize("objectives, message", [
    ([], "non-empty list"),
    ([{"weight": 1.0}], "registry 'loss' name"),
    ([objective("infonce"), {"loss": "dcl", "weight": -0.1}], "weight must be a finite number > 0"),
    ([objective("infonce"), {"loss": "dcl", "scale": 2}], "unknown keys"),
    ([objective("infonce"), objective("dcl", 0.1), objective("dcl", 0.2)], "appear"),
])
def test_malformed_objective_lists_are_refused(objectives, message):
    with pytest.raises(ValueError, match=message):
        CSEConfig(objectives=objectives)


def test_a_loss_name_alone_in_objectives_is_its_entry():
    """objectives=["gs_infonce"] was refused ("must be a dict"); a name alone is read as {"loss": name}."""
    config = CSEConfig(objectives=["gs_infonce", {"loss": "dcl", "weight": 0.1}])
    assert config.objectives == [objective("gs_infonce"), objective("dcl", 0.1)]


@pytest.mark.parametrize("kwargs, message", [
    ({"objectives": [build_loss("gs_infonce", temperature=0.07)]},
     "objectives[0] takes a loss name, not a loss object (GSInfoNCELoss): a model's objectives are configuration "
     "data, saved in config.json; for this one write {'loss': 'gs_infonce', 'hyperparameters': {'temperature': 0.07, "),
    ({"objectives": [{"loss": build_loss("infonce"), "weight": 1.0}]},
     "objectives[0]['loss'] takes a loss name, not a loss object (InfoNCELoss): a model's objectives are "
     "configuration data, saved in config.json; for this one write {'loss': 'infonce', 'weight': 1.0, "
     "'hyperparameters': {'temperature': 0.05, "),
    ({"loss": build_loss("gs_infonce", temperature=0.07)},
     "loss takes a loss name, not a loss object (GSInfoNCELoss): a model's objectives are configuration data, saved "
     "in config.json; for this one write objectives=[{'loss': 'gs_infonce', 'hyperparameters': {'temperature': 0.07, "),
])
def test_a_loss_object_is_refused_with_the_entry_to_write_for_it(kwargs, message):
    """A build_loss object as loss= was refused as "Unknown loss GSInfoNCELoss(...)" with every loss name (the loss
    is known), and in objectives as "must be a dict with a registry 'loss' name": neither said that the config takes
    names, nor what to write for the object."""
    with pytest.raises(ValueError) as refused:
        SimCSEConfig(**kwargs)
    assert str(refused.value).startswith(message), str(refused.value)
    assert "Unknown loss" not in str(refused.value) and "\n" not in str(refused.value)


def test_legacy_keywords_become_objectives_and_to_dict_writes_only_the_list():
    config = SimCSEConfig(loss="gs_infonce", loss_kwargs={"temperature": 0.07}, dcl_weight=0.2, dcl_temperature=4.0)
    assert config.objectives == [objective("gs_infonce", temperature=0.07),
                                 objective("dcl", 0.2, temperature=4.0, normalization="code")]
    saved = config.to_dict()
    assert saved["objectives"] == config.objectives
    assert not {"loss", "loss_kwargs", "dcl_weight", "dcl_temperature", "dcl_normalization"} & saved.keys()
    # the old names stay readable, derived from the list (there is no second stored copy)
    assert (config.loss, config.loss_kwargs, config.dcl_weight, config.dcl_temperature) == (
        "gs_infonce", {"temperature": 0.07}, 0.2, 4.0)
    with pytest.raises(AttributeError):
        config.loss = "infonce"
    assert SimCSEConfig(dcl_weight=0.0).objectives == [objective("infonce")]
    assert ImSimCSEConfig(dcl_weight=0.0).objectives == [objective("off_dropout_infonce", temperature=0.05, m=0.9)]
    for weight in (-1.0, float("inf"), float("nan"), "0.1"):  # inf was stored, NaN dropped the objective unsaid
        with pytest.raises(ValueError, match="dcl_weight must be a finite number >= 0"):
            SimCSEConfig(dcl_weight=weight)


def test_dcl_is_an_ordinary_second_objective():
    config = SimCSEConfig(objectives=[objective("infonce", temperature=0.05),
                                      objective("dcl", 0.1, temperature=5.0, normalization="code")])
    assert objective_specs(config) == [
        ObjectiveSpec("contrastive", "infonce", 1.0, {"temperature": 0.05}),
        ObjectiveSpec("dcl", "dcl", 0.1, {"temperature": 5.0, "normalization": "code"}),
    ]
    torch.manual_seed(0)
    z1, z2 = torch.randn(6, 8, dtype=torch.float64), torch.randn(6, 8, dtype=torch.float64)
    total, metrics = compute_objectives(build_objectives(config), {"z1": z1, "z2": z2})
    infonce = build_loss("infonce", temperature=0.05)(z1, z2).loss
    dcl = build_loss("dcl", temperature=5.0, normalization="code")(z1, z2).loss
    torch.testing.assert_close(total, infonce + 0.1 * dcl)  # float64: exact up to rounding
    assert {"contrastive_loss", "dcl_loss"} <= metrics.keys()


def test_imsimcse_differs_only_in_its_default_objectives_and_off_dropout():
    ims, base = ImSimCSEConfig(), SimCSEConfig()
    assert ims.objectives == [objective("off_dropout_infonce", temperature=0.05, m=0.9),
                              objective("dcl", 0.1, temperature=5.0, normalization="code")]
    assert ims.off_dropout and not base.off_dropout
    same = {k for k in ims.to_dict() if k not in ("objectives", "off_dropout", "model_type", "method")}
    assert {k: ims.to_dict()[k] for k in same} == {k: base.to_dict()[k] for k in same}


def test_objectives_round_trip_through_save_and_load(tiny_bert_dir, tmp_path):
    model = SimCSEModel.from_encoder(str(tiny_bert_dir), objectives=[
        objective("focal_infonce", temperature=0.07, m=0.3), objective("dcl", 0.25, normalization="paper")])
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["objectives"] == model.config.objectives and "loss" not in saved
    reloaded = AutoModel.from_pretrained(tmp_path)
    assert objective_specs(reloaded.config) == objective_specs(model.config)


def test_a_saved_model_whose_loss_is_not_registered_still_loads_for_inference(tiny_bert_dir, tmp_path, caplog,
                                                                               monkeypatch):
    @register_loss("hf_cse_test_users_loss")
    class UsersLoss(ContrastiveLoss):
        def __init__(self, temperature: float = 0.1):
            super().__init__()
            self.temperature = temperature

        def forward(self, z1, z2):
            return LossOutput((z1 - z2).pow(2).mean())

    try:
        model = SimCSEModel.from_encoder(str(tiny_bert_dir), loss="hf_cse_test_users_loss",
                                         loss_kwargs={"temperature": 0.2})
        model.save_pretrained(tmp_path)
    finally:
        loss_registry._LOSSES.pop("hf_cse_test_users_loss")
    monkeypatch.setattr(said_once, "_SAID", set())  # what earlier tests said does not count
    with caplog.at_level(logging.WARNING):
        reloaded = AutoModel.from_pretrained(tmp_path)
        AutoConfig.from_pretrained(tmp_path)  # its config read again (sentence-transformers' loader does)
    assert caplog.text.count("not registered") == 1  # one warning, not one per reading
    assert reloaded.config.loss == "hf_cse_test_users_loss"
    with pytest.raises(ValueError, match="Unknown loss 'hf_cse_test_users_loss'"):  # training it needs the loss
        build_objectives(reloaded.config)
    with pytest.raises(ValueError, match="Unknown loss"):  # a new config is still checked strictly
        SimCSEConfig(loss="hf_cse_test_users_loss")


# ----------------------------------------------------------------------------------------------- command line
def _parse(argv, config_classes=None):
    parser = HfArgumentParser((model_arguments_class(config_classes), loss_arguments_class(), dcl_arguments_class()))
    return parser, parser.parse_args_into_dataclasses(argv)


def test_a_new_config_field_is_a_flag_with_its_help_and_its_method():
    class WithExtraConfig(SimCSEConfig):
        model_type = "hf_cse_test_extra"
        extra_margin: float = field(default=0.25, metadata={"help": "a margin only this test's method has"})

    classes = {"simcse": SimCSEConfig, "extra": WithExtraConfig}
    parser, (model_args, *_) = _parse(["--method", "extra", "--extra_margin", "0.5", "--pooler_type", "avg"], classes)
    given = config_kwargs_from("extra", model_args, classes)
    assert (given["extra_margin"], given["pooler_type"]) == (0.5, "avg")
    help_text = " ".join(parser.format_help().split())
    assert "--extra_margin" in help_text and "A margin only this test's method has. (--method extra only)" in help_text
    with pytest.raises(ValueError, match="--extra_margin only applies to --method extra"):
        config_kwargs_from("simcse", model_args, classes)


def test_config_field_flags_are_typed_from_the_fields():
    parser, (model_args, *_) = _parse(["--projector", "linear", "--mlp_only_train", "false", "--dropout", "0.2"])
    given = config_kwargs_from("simcse", model_args)
    assert (given["projector"], given["mlp_only_train"], given["dropout"]) == ("linear", False, 0.2)
    for method, config_cls in {"simcse": SimCSEConfig, "imsimcse": ImSimCSEConfig, "diffcse": DiffCSEConfig}.items():
        nothing_given = config_kwargs_from(method, _parse(["--method", method])[1][0])
        assert config_cls(**nothing_given).to_dict() == config_cls().to_dict()  # the method's own defaults
    assert "--no_mlp_only_train" in parser.format_help()  # a field defaulting to true gets its --no_ form
    assert config_kwargs_from("simcse", _parse(["--no_fast_dropout"])[1][0])["fast_dropout"] is False
    with pytest.raises(SystemExit):  # a Literal field is a choice of the parser
        parser.parse_args_into_dataclasses(["--pooler_type", "maximum"])
    with pytest.raises(ValueError, match="--lambda_rtd only applies to --method diffcse"):
        config_kwargs_from("simcse", _parse(["--lambda_rtd", "0.1"])[1][0])


def test_loss_and_dcl_flags_build_the_objectives():
    _, (_, loss_args, dcl_args) = _parse(["--temperature", "0.07"])
    assert objectives_from_flags(SimCSEConfig().objectives, "gs_infonce", loss_args, dcl_args) == [
        objective("gs_infonce", temperature=0.07)]
    # imsimcse: its own m = 0.9 and DCL kept unless a flag overrides them
    _, (_, loss_args, dcl_args) = _parse(["--temperature", "0.1", "--dcl_temperature", "4"])
    assert objectives_from_flags(ImSimCSEConfig().objectives, "off_dropout_infonce", loss_args, dcl_args) == [
        objective("off_dropout_infonce", temperature=0.1, m=0.9),
        objective("dcl", 0.1, temperature=4.0, normalization="code")]
    _, (_, loss_args, dcl_args) = _parse(["--dcl_weight", "0"])
    assert objectives_from_flags(ImSimCSEConfig().objectives, "infonce", loss_args, dcl_args) == [objective("infonce")]
    _, (_, loss_args, dcl_args) = _parse(["--dcl_weight", "0.3", "--dcl_normalization", "paper"])
    assert objectives_from_flags(SimCSEConfig().objectives, "infonce", loss_args, dcl_args) == [
        objective("infonce"), objective("dcl", 0.3, temperature=5.0, normalization="paper")]


def test_a_hyperparameter_named_weight_is_the_losss_not_the_objectives():
    """The paradigm loss's negative weighting is called weight: --loss paradigm --weight hardest stopped with
    "objective() got multiple values for argument 'weight'"."""
    _, (_, loss_args, dcl_args) = _parse(["--weight", "hardest"])
    objectives = objectives_from_flags(SimCSEConfig().objectives, "paradigm", loss_args, dcl_args)
    assert objectives == [{"loss": "paradigm", "weight": 1.0, "hyperparameters": {"weight": "hardest"}}]
    config = SimCSEConfig(objectives=objectives)
    assert config.objectives == objectives and build_objectives(config)[0].loss.weight == "hardest"


def test_dcl_as_the_main_loss_and_as_the_auxiliary_one_is_refused():
    """--loss dcl --dcl_weight 0.1 trained DCL twice without a word: the repeat check compared the metric names,
    and the main objective's is 'contrastive'."""
    _, (_, loss_args, dcl_args) = _parse(["--dcl_weight", "0.1"])
    with pytest.raises(ValueError, match="the main loss is dcl, and dcl_weight 0.1 would add the dcl objective a "
                                         "second time"):
        objectives_from_flags(SimCSEConfig().objectives, "dcl", loss_args, dcl_args)
    with pytest.raises(ValueError, match=r"dcl_weight 0.1 \(the method's own\) would add"):
        objectives_from_flags(ImSimCSEConfig().objectives, "dcl", *_parse([])[1][1:])
    # a model saved so before this refusal still loads
    assert SimCSEConfig(objectives=[objective("dcl"), objective("dcl", 0.1)]).objectives[1]["weight"] == 0.1


def test_dcl_flags_come_from_the_dcl_loss_and_temperature_no_longer_claims_dcl():
    assert set(dcl_arguments_class().__dataclass_fields__) == {"dcl_weight"} | {
        f"dcl_{name}" for name in loss_hyperparameters("dcl")}
    help_text = loss_arguments_class().__dataclass_fields__["temperature"].metadata["help"]
    main_users = help_text.split(" (their defaults)")[0]
    assert "infonce 0.05" in main_users and "dcl" not in main_users
    assert "--dcl_temperature" in help_text


# ----------------------------------------------------------------------------------------------- encoder sub-config
def test_encoder_config_is_a_sub_configuration_saved_as_a_dict(tiny_bert_dir, tmp_path):
    model = SimCSEModel.from_encoder(str(tiny_bert_dir), dropout=0.25)
    assert isinstance(model.config.encoder_config, BertConfig) and "encoder_config" in SimCSEConfig.sub_configs
    # the dropout override reaches the encoder; the sub-configuration keeps the encoder's own value
    assert model.encoder.config.hidden_dropout_prob == 0.25 and model.config.encoder_config.hidden_dropout_prob == 0.1
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())["encoder_config"]
    assert saved["model_type"] == "bert" and saved["hidden_size"] == model.config.hidden_size
    reloaded = AutoModel.from_pretrained(tmp_path)
    assert isinstance(reloaded.config.encoder_config, BertConfig)
    assert reloaded.encoder.config.hidden_dropout_prob == 0.25


def test_from_encoder_wraps_the_loaded_encoder_without_building_another(tiny_bert_dir, monkeypatch):
    import hf_cse.models.base as base_module

    monkeypatch.setattr(base_module, "build_encoder", lambda config: pytest.fail("a second encoder was built"))
    model = SimCSEModel.from_encoder(str(tiny_bert_dir))
    pretrained = BertModel.from_pretrained(tiny_bert_dir, add_pooling_layer=False)
    assert model.encoder.config._name_or_path == str(tiny_bert_dir)
    for name, tensor in pretrained.state_dict().items():  # the checkpoint's weights, not re-initialised
        assert torch.equal(model.encoder.state_dict()[name], tensor), name
    assert model.training and model.encoder.training  # a fresh model is in training mode, as any new nn.Module
