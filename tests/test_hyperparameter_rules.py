"""A loss's numeric hyperparameters keep the rules it declares (hf_cse/hyperparameter_rules.py): checked when the loss
is built, before its own ``__init__`` runs, and the same rules the command line checks before torch is imported."""

from __future__ import annotations

import math
import re

import pytest

from hf_cse.errors import CSEError
from hf_cse.hyperparameter_rules import RULES, check_rule, field_rules
from hf_cse.losses import available_losses, build_loss, get_loss_class
from hf_cse.losses.base import ContrastiveLoss


@pytest.mark.parametrize("rule, good, bad", [
    ("positive", [1e-9, 3], [0, -1, math.nan, math.inf, True, "1"]),
    ("non_negative", [0, 2.5], [-1e-9, math.nan, False]),
    ("finite", [-3, 0, 7.5], [math.inf, -math.inf, math.nan, None]),
    ("degrees", [0, 179.9], [180, -1, math.nan]),
    ("count", [None, 0, 12], [-1, 1.5, True]),
    ("size", [0, 160], [None, -1, 1.0, True]),
    ("fraction", [0, 0.999], [1, -0.1, math.nan]),
    ("open_fraction", [0.15], [0, 1, math.inf]),
    ("unit_interval", [0, 1], [1.01, -1e-9, None]),
    ("edit_share", [0.15, 1], [0, 1.01, math.nan]),
    ("temperature", [1e-4, 0.05, 5, 1e6], [1e-30, 0, -0.05, math.inf, True]),
    ("gap_margin", [-1.995, 0, 0.5], [-2, -3, math.nan]),
    ("log_weight", [-65504, 0, 65504], [65505, math.inf]),
    ("template", ['This sentence of "{sentence}" means{mask}.', '"{sentence}" in one word:"', "{sentence} x}"],
     ["no placeholder", "{sentence} {sentence} {mask}", "{sentence}{mask}{mask}", "{sentence} {x}", None, 3]),
])
def test_each_rule_keeps_what_it_says(rule, good, bad):
    for value in good:
        check_rule("l", "p", value, rule)
    for value in bad:
        with pytest.raises(CSEError, match="^" + re.escape(f"l: p must be {RULES[rule][0]}, got {value!r}.") + "$"):
            check_rule("l", "p", value, rule)


def test_every_registered_loss_declares_rules_of_its_own_hyperparameters_and_keeps_them():
    for name in available_losses():
        cls = get_loss_class(name)  # a rule names an argument of the loss or of a parent it inherits the rule from
        taken = {n for c in cls.__mro__ if issubclass(c, ContrastiveLoss) for n in c.hyperparameters()}
        assert set(cls.hyperparameter_rules) <= taken, name
    with pytest.raises(CSEError, match=r"^infonce: temperature must be a number >= 0\.0001 \(.*\), got 0\.$"):
        build_loss("infonce", temperature=0)
    with pytest.raises(CSEError, match=r"^m_mhe: m must be a finite number > -2 .*, got nan\.$"):  # the parent's
        build_loss("m_mhe", m=math.nan)
    assert build_loss("gs_infonce", num_noise=None).num_noise is None  # None: not set, where it is the default
    # every softmax temperature keeps the same rule: 1e-30 trained on a loss of 6e28, 1e-300 divided by zero
    assert {name: get_loss_class(name).hyperparameter_rules["temperature"] for name in available_losses()
            if "temperature" in get_loss_class(name).hyperparameters()} == \
        dict.fromkeys([name for name in available_losses() if "temperature" in get_loss_class(name).hyperparameters()],
                      "temperature")


def test_a_subclass_adds_to_its_parents_rules_and_an_unknown_rule_is_refused_when_declared():
    class Parent(ContrastiveLoss):
        name = "parent"
        hyperparameter_rules = {"a": "positive"}

        def __init__(self, a: float = 1.0):
            super().__init__()
            self.a = a

    class Child(Parent):
        name = "child"
        hyperparameter_rules = {"b": "finite"}

        def __init__(self, a: float = 1.0, b: float = 0.0):
            super().__init__(a)
            self.b = b

    assert Child.hyperparameter_rules == {"a": "positive", "b": "finite"}
    with pytest.raises(CSEError, match="child: a must be a finite number > 0, got -1"):
        Child(a=-1)
    with pytest.raises(TypeError, match="unknown rules"):
        type("Bad", (ContrastiveLoss,), {"hyperparameter_rules": {"a": "big"}})


def test_a_methods_config_checks_the_rules_of_its_fields_naming_the_method_for_its_own():
    """A method's settings declare their rules as the losses do (``metadata["rule"]``), so that the command line can
    check the values typed before torch (tests/cli/test_cli_start.py); the config checks them when it is built."""
    from dataclasses import dataclass, field

    from hf_cse.models.diffcse import DiffCSEConfig
    from hf_cse.models.esimcse import ESimCSEConfig
    from hf_cse.models.simcse import SimCSEConfig

    with pytest.raises(CSEError, match=r"^esimcse: queue_size must be an integer >= 0, got -3\.$") as err:
        ESimCSEConfig(queue_size=-3)
    assert err.value.fields == ("queue_size",)
    for ratio in (1.5, 0.0):  # 0 edited nothing, and the discriminator learnt that nothing is ever replaced
        with pytest.raises(CSEError, match=rf"^diffcse: masking_ratio must be a number in \(0, 1\] \(0 edits no "
                                           rf"token\), got {ratio}\.$"):
            DiffCSEConfig(masking_ratio=ratio)
    with pytest.raises(CSEError, match=r"^dropout must be a number in \[0, 1\), got 1\.0\.$"):  # every method's
        SimCSEConfig(dropout=1.0)
    assert SimCSEConfig(dropout=None).dropout is None  # None: not set (the encoder's own)
    assert field_rules(ESimCSEConfig)["queue_size"] == "size"

    @dataclass
    class Bad:
        a: float = field(default=0.0, metadata={"rule": "big"})

    with pytest.raises(TypeError, match=r"unknown field rules \['big'\]"):
        field_rules(Bad)


@pytest.mark.parametrize("loss, param", [("mpt", "margin"), ("met", "margin"), ("paradigm", "m"), ("m_mhe", "m")])
def test_a_margin_no_gap_can_reach_is_refused(loss, param):
    """A gap of cosines (or unit distances) is never below -2: at or below it the hinge or gate never opens and
    the run trained nothing (a review: --loss mpt --margin -3 ran to the end, warned only after it)."""
    with pytest.raises(CSEError, match=rf"^{loss}: {param} must be a finite number > -2 .*, got -2"):
        build_loss(loss, **{param: -2.0}, **({"gd_reference": "cross"} if loss == "m_mhe" else {}))
    build_loss(loss, **{param: -1.5}, **({"gd_reference": "cross"} if loss == "m_mhe" else {}))


@pytest.mark.parametrize("loss", ["m_mhe", "m_mhs", "m_barlow", "m_vicreg"])
def test_a_self_gated_objective_needs_a_positive_margin(loss):
    """Their code's GD gap, 1 - max_k h_i.h_k, is never below 0: m <= 0 trained nothing, without a word."""
    with pytest.raises(CSEError, match=rf"^{loss}: m must be > 0 with gd_reference 'self', got 0"):
        build_loss(loss, m=0.0)
    assert build_loss(loss, m=0.0, gd_reference="cross").m == 0.0


@pytest.mark.parametrize("loss", ["infonce", "focal_infonce", "gs_infonce"])
def test_a_hard_negative_log_weight_half_precision_cannot_hold_is_refused(loss):
    """1e39 stopped inside torch ("value cannot be converted to type float without overflow")."""
    with pytest.raises(CSEError, match=rf"^{loss}: hard_negative_weight must be a finite number in \[-65504, 65504\]"):
        build_loss(loss, hard_negative_weight=1e39)
    assert build_loss(loss, hard_negative_weight=-65504).hard_negative_weight == -65504


def test_a_need_on_a_setting_the_loss_or_config_lacks_is_refused_where_it_is_declared():
    from dataclasses import dataclass, field

    from hf_cse.hyperparameter_rules import field_needs
    from hf_cse.losses import registry

    class NeedsGhost(ContrastiveLoss):
        name = "needs_ghost"
        hyperparameter_needs = {"a": [("ghost", ">", 0)]}

        def __init__(self, a: float = 1.0):
            super().__init__()
            self.a = a

        def compute(self, z1, z2):
            return (z1 * z2).sum(), {}

    with pytest.raises(CSEError, match="the need 'a' -> \\('ghost', '>', 0\\) names a setting it does not have"):
        registry.check_loss_class("needs_ghost", NeedsGhost)

    @dataclass
    class Config:
        on: bool = False
        level: float = field(default=1.0, metadata={"needs": [("on", "is", True)]})

    with pytest.raises(TypeError, match="a test not in"):
        field_needs(Config)


def test_numpy_scalars_are_taken_as_the_numbers_they_hold():
    """A sweep's np.float32 temperature was refused ("must be a finite number > 0, got np.float32(0.05)") and an
    np.int64 count too, while np.float64 passed and was stored as NumPy's: a config holds Python numbers."""
    import json

    import numpy as np

    from hf_cse.models import SimCSEConfig
    from hf_cse.objectives import objective

    loss = build_loss("gs_infonce", temperature=np.float32(0.05), num_noise=np.int64(4))
    assert type(loss.temperature) is float and type(loss.num_noise) is int and loss.num_noise == 4
    assert type(get_loss_class("infonce")(np.float64(0.1)).temperature) is float  # positional too
    for config in (SimCSEConfig(objectives=[objective("infonce", temperature=np.float32(0.05))]),
                   SimCSEConfig(loss_kwargs={"temperature": np.float32(0.05)})):
        [main] = json.loads(config.to_json_string())["objectives"]
        assert main["hyperparameters"] == {"temperature": float(np.float32(0.05))}
    with pytest.raises(CSEError, match=r"temperature must be a number >= 0\.0001 .*, got 0\.0\.$"):
        build_loss("infonce", temperature=np.float32(0))  # judged as the number it holds
    # the DCL weight, an objective's weight and a method's numeric field too (a review found them refused)
    from hf_cse.models.diffcse import DiffCSEConfig
    from hf_cse.objectives import normalise_objectives

    assert SimCSEConfig(dcl_weight=np.float32(0.5)).objectives[1]["weight"] == 0.5
    assert SimCSEConfig(dcl_weight=np.int64(0)).objectives == [objective("infonce")]
    assert normalise_objectives([{"loss": "infonce", "weight": np.float32(2.0)}])[0]["weight"] == 2.0
    assert type(DiffCSEConfig(masking_ratio=np.float32(0.5)).masking_ratio) is float
