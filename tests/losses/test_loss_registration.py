"""What a loss of one's own gets wrong, refused in one line naming the loss and the fix: at registration
(``register_loss``: the class, its hyperparameters' defaults and annotations, its rules) and at its first call (what
``compute`` returns), never a traceback from inside torch or argparse or a silently wrong run."""

from __future__ import annotations

from typing import Literal

import pytest
import torch
import torch.nn.functional as F

from hf_cse.errors import CSEError
from hf_cse.losses import ContrastiveLoss, build_loss, cosine_matrix, loss_defaults, register_loss
from hf_cse.losses import registry as loss_registry
from hf_cse.references import SIMCSE


@pytest.fixture(autouse=True)
def scratch_registry(monkeypatch):
    """Registrations made by a test are dropped after it."""
    monkeypatch.setattr(loss_registry, "_LOSSES", dict(loss_registry._LOSSES))


def _infonce(z1, z2, scale=20.0):
    return F.cross_entropy(cosine_matrix(z1, z2) * scale, torch.arange(len(z1)))


def _loss_class(init=None, compute=None, **attributes):
    """A ContrastiveLoss subclass with the given ``__init__`` / ``compute`` / class attributes."""
    body = {"compute": compute or (lambda self, z1, z2: (_infonce(z1, z2), {})), **attributes}
    if init is not None:
        body["__init__"] = init
    return type("UsersLoss", (ContrastiveLoss,), body)


def test_a_correct_loss_of_ones_own_registers_and_builds():
    @register_loss("users_scaled_infonce")
    class Scaled(ContrastiveLoss):
        hyperparameter_rules = {"scale": "positive"}

        def __init__(self, scale: float = 20.0, mode: Literal["a", "b"] = "a", cap: int | None = None):
            super().__init__()
            self.scale, self.mode, self.cap = scale, mode, cap

        def compute(self, z1, z2):
            return _infonce(z1, z2, self.scale), {"scale": self.scale}

    out = build_loss("users_scaled_infonce", scale=5.0)(torch.randn(4, 3), torch.randn(4, 3))
    assert out.loss.dim() == 0 and out.metrics["scale"] == 5.0
    assert loss_defaults("users_scaled_infonce") == {"scale": 20.0, "mode": "a", "cap": None}
    with pytest.raises(CSEError, match="scale must be a finite number > 0"):
        build_loss("users_scaled_infonce", scale=-1.0)


def _no_super_init(self, scale: float = 20.0):  # noqa: ARG001 - the mistake: nn.Module's set-up never runs
    self.scale = scale


def _no_super_init_with_a_module(self, scale: float = 20.0):  # noqa: ARG001
    self.head = torch.nn.Linear(3, 3)


@pytest.mark.parametrize("init", [_no_super_init, _no_super_init_with_a_module], ids=["number", "module"])
def test_an_init_without_super_init_is_refused_when_built(init):
    """Before, torch's AttributeError ('... has no attribute _backward_hooks') at the first call, or '_parameters'
    when the loss was built."""
    register_loss("users_no_super")(_loss_class(init=init))
    with pytest.raises(CSEError, match=r"^loss 'users_no_super' \(.*UsersLoss\): its __init__ does not call "
                                       r"super\(\).__init__\(\) \(torch.nn.Module's set-up\); call it first"):
        build_loss("users_no_super")


@pytest.mark.parametrize("name", ["", "my loss", 3], ids=["empty", "space", "number"])
def test_a_name_that_is_no_identifier_is_refused(name):
    with pytest.raises(CSEError, match=r"register_loss takes the loss's name.*@register_loss\(\"my_loss\"\)"):
        register_loss(name)


def test_the_decorator_without_its_name_is_refused():
    with pytest.raises(CSEError, match="register_loss takes the loss's name"):
        register_loss(_loss_class())  # @register_loss above the class, the name forgotten


def test_a_name_already_taken_names_the_class_that_holds_it():
    with pytest.raises(CSEError, match=r"loss name 'infonce' is already registered by "
                                       r"hf_cse\.losses\.infonce\.InfoNCELoss; choose another name"):
        register_loss("infonce")(_loss_class())


def test_the_same_class_defined_again_replaces_its_earlier_definition():
    """A notebook cell run twice, or importlib.reload of the module: same module and qualified name."""
    first = register_loss("users_redefined")(_loss_class())
    again = register_loss("users_redefined")(_loss_class(hyperparameter_rules={}))
    assert first is not again and loss_registry.get_loss_class("users_redefined") is again


def test_one_class_under_two_names_is_refused():
    cls = register_loss("users_first")(_loss_class())
    with pytest.raises(CSEError, match="already registered as 'users_first'; a class has one name"):
        register_loss("users_second")(cls)
    assert cls.name == "users_first"


def test_a_class_that_is_no_contrastive_loss_is_refused():
    class Plain(torch.nn.Module):
        def forward(self, z1, z2):
            return _infonce(z1, z2)

    with pytest.raises(CSEError, match="'users_plain'.*a loss is a subclass of hf_cse.losses.ContrastiveLoss"):
        register_loss("users_plain")(Plain)


def test_a_class_without_its_own_compute_is_refused_and_one_inheriting_it_is_not():
    """Before, it registered and trained until its first step, which ended in a bare NotImplementedError."""
    bare = type("Bare", (ContrastiveLoss,), {})
    with pytest.raises(CSEError, match=r"^loss 'users_bare' \(.*Bare\): it does not implement compute\(self, z1, "
                                       r"z2\) -> \(loss, metrics\)"):
        register_loss("users_bare")(bare)
    assert "users_bare" not in loss_registry.available_losses()
    register_loss("users_inherits")(type("Inherits", (_loss_class(),), {}))


def _init(signature_source: str):
    """An ``__init__`` with the given parameters (after self), storing each."""
    namespace = {"ContrastiveLoss": ContrastiveLoss, "Literal": Literal}
    exec(f"def __init__(self, {signature_source}):\n    ContrastiveLoss.__init__(self)\n", namespace)  # noqa: S102
    return namespace["__init__"]


@pytest.mark.parametrize("params, fragment", [
    ("scale=20.0", "hyperparameter 'scale' has no annotation; annotate it (float, int, bool or a typing.Literal"),
    ("scale: float", "hyperparameter 'scale' has no default; give it one"),
    ("weights: list[float] = (1.0,)", "hyperparameter 'weights' is annotated list[float]; use float, int, bool"),
    ("path: str = 'x'", "hyperparameter 'path' is annotated str; use float, int, bool or a typing.Literal"),
    ("mode: Literal['a', 1] = 'a'", "hyperparameter 'mode' is annotated Literal"),
    ("mode: Literal['a', 'b'] = 'c'", "the default 'c' of hyperparameter 'mode' is not one of its Literal values"),
    ("temperature: int = 1", "hyperparameter 'temperature' is int here but float in arccon, dcl, focal_infonce and"),
], ids=["no-annotation", "no-default", "list", "str", "literal-of-int", "literal-default", "type-differs"])
def test_a_hyperparameter_the_registry_cannot_serve_is_refused_at_registration(params, fragment):
    with pytest.raises(CSEError, match="^loss 'users_bad' .*: " + fragment.replace("(", r"\(").replace("[", r"\[")):
        register_loss("users_bad")(_loss_class(init=_init(params)))
    assert "users_bad" not in loss_registry.available_losses()


@pytest.mark.parametrize("references", [SIMCSE, [SIMCSE], ("gao2021simcse",)], ids=["paper", "list", "key"])
def test_references_that_are_not_a_tuple_of_papers_are_refused(references):
    with pytest.raises(CSEError, match=r"references must be a tuple of hf_cse.references.Paper records.*"
                                       r"`references = \(SIMCSE,\)`"):
        register_loss("users_cited")(_loss_class(references=references))


def test_a_loss_of_ones_own_may_cite_no_paper():
    register_loss("users_uncited")(_loss_class(references=()))  # unpublished: the card cites the pipeline only


def test_a_rule_for_an_argument_the_loss_does_not_take_is_refused():
    cls = _loss_class(init=_init("temperature: float = 0.05"), hyperparameter_rules={"temprature": "positive"})
    with pytest.raises(CSEError, match=r"hyperparameter_rules names \['temprature'\], which __init__ does not take; "
                                       "its hyperparameters: temperature"):
        register_loss("users_misspelt_rule")(cls)


def test_rules_inherited_from_a_parent_loss_are_not_refused():
    parent = _loss_class(init=_init("temperature: float = 0.05"), hyperparameter_rules={"temperature": "positive"})
    child = type("Child", (parent,), {"__init__": _init("m: float = 0.3")})
    register_loss("users_child")(child)


# --------------------------------------------------------------------------------------------- what compute returns


@pytest.mark.parametrize("compute, fragment", [
    (lambda self, z1, z2: (F.cross_entropy(cosine_matrix(z1, z2), torch.arange(len(z1)), reduction="none"), {}),
     r"its loss is a torch.float32 tensor of shape \(6,\). Reduce it to one number"),
    (lambda self, z1, z2: _infonce(z1, z2), r"got Tensor of shape \(\). Return `loss, \{\}`"),
    (lambda self, z1, z2: (_infonce(z1, z2).item(), {}), "its loss is [0-9.]+. Reduce it to one number"),
    (lambda self, z1, z2: (torch.tensor(1), {}), "its loss is a torch.int64 tensor"),
    (lambda self, z1, z2: (_infonce(z1, z2), None), r"its metrics are NoneType. Return `loss, \{\}`"),
    (lambda self, z1, z2: (_infonce(z1, z2), {"norms": z1.norm(dim=1)}), r"metric 'norms' is shape \(6,\)"),
    (lambda self, z1, z2: (_infonce(z1, z2) * float("nan"), {}), "compute returned a nan loss from finite inputs"),
    (lambda self, z1, z2: (_infonce(z1, z2).detach(), {}), "detached from z1, z2"),
], ids=["per-anchor", "no-tuple", "python-float", "int-tensor", "metrics-none", "metric-vector", "nan", "detached"])
def test_what_compute_returns_is_checked_at_the_first_call(compute, fragment):
    loss_fn = register_loss("users_wrong_output")(_loss_class(compute=compute))()
    z1, z2 = torch.randn(6, 4, requires_grad=True), torch.randn(6, 4, requires_grad=True)
    with pytest.raises(CSEError, match="^users_wrong_output: .*" + fragment):
        loss_fn(z1, z2)


def test_a_loss_without_gradient_is_fine_where_none_is_asked_for():
    loss_fn = register_loss("users_eval_loss")(_loss_class())()
    with torch.no_grad():
        assert loss_fn(torch.randn(4, 3, requires_grad=True), torch.randn(4, 3)).loss.dim() == 0


def test_a_missing_extra_input_says_where_it_comes_from():
    def compute(self, z1, z2, z_foo):
        return _infonce(z1, z2), {}

    loss_fn = register_loss("users_needs_foo")(_loss_class(extra_inputs=("z_foo",), compute=compute))()
    with pytest.raises(CSEError, match=r"users_needs_foo: needs the extra input\(s\) \['z_foo'\] \(its "
                                       "extra_inputs\\) as keyword arguments beside z1, z2; in training the model's "
                                       "forward makes them"):
        loss_fn(torch.randn(4, 3), torch.randn(4, 3))
    assert loss_fn(torch.randn(4, 3), torch.randn(4, 3), z_foo=torch.randn(4, 3)).loss.dim() == 0


def test_an_input_given_as_none_is_no_input_to_the_contract_check():
    z1, z2 = torch.randn(4, 8), torch.randn(4, 8)  # no gradient wanted: the detached-loss check looks at every input
    out = build_loss("infonce")(z1, z2, z_neg=None)
    assert out.loss.dim() == 0 and torch.isfinite(out.loss)
