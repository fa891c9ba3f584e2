"""Contract of the loss library: registry, validation, invariances and numerical safety of every loss."""

from __future__ import annotations

import inspect
import math
import re
import textwrap
import typing

import pytest
import torch

from hf_cse.losses import available_losses, build_loss, get_loss_class, loss_hyperparameters
from hf_cse.losses.base import LossOutput

ALL = available_losses()
EXPECTED = {
    "infonce": {"temperature"},
    "gs_infonce": {"temperature", "num_noise", "lam", "noise_std"},
    "focal_infonce": {"temperature", "m"},
    "off_dropout_infonce": {"temperature", "m", "m_placement"},
    "dcl": {"temperature", "normalization"},
    "paradigm": {"temperature", "m", "r", "gd", "weight", "symmetric", "reduction"},
    "arccon": {"temperature", "u"},
    "mpt": {"margin"},
    "met": {"margin"},
    "align_uniform_mhe": {"nu"},
    "align_uniform_mhs": {"nu"},
    "barlow_twins": {"nu", "surrogate"},
    "vicreg": {"nu", "surrogate"},
    "m_mhe": {"m", "temperature", "r", "symmetric", "gd_reference"},
    "m_mhs": {"m", "r", "symmetric", "gd_reference", "neighbor_view"},
    "m_barlow": {"m", "temperature", "r", "symmetric", "gd_reference"},
    "m_vicreg": {"m", "temperature", "r", "symmetric", "gd_reference", "weight_norm"},
}
#: losses that only see cosine similarities / l2-normalised vectors (DCL standardises dimensions instead)
NOT_ROW_SCALE_INVARIANT = {"dcl"}


def _inputs(name, n=6, d=8, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    z1 = torch.randn(n, d, generator=g, dtype=dtype)
    z2 = z1 + 0.5 * torch.randn(n, d, generator=g, dtype=dtype)
    zbar = z1 + 0.1 * torch.randn(n, d, generator=g, dtype=dtype)
    return z1, z2, zbar


def _call(loss_fn, z1, z2, zbar=None) -> LossOutput:
    if "z_nodropout" in loss_fn.extra_inputs:
        return loss_fn(z1, z2, z_nodropout=zbar)
    return loss_fn(z1, z2)


def _seeded(loss_fn, seed=123):
    if hasattr(loss_fn, "generator"):
        loss_fn.generator = torch.Generator().manual_seed(seed)
    return loss_fn


# ------------------------------------------------------------------ registry and hyperparameters


def test_every_contract_loss_is_registered():
    assert set(EXPECTED) <= set(ALL), sorted(set(EXPECTED) - set(ALL))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_contract_hyperparameter_names(name):
    assert EXPECTED[name] <= set(loss_hyperparameters(name)), name


@pytest.mark.parametrize("name", ALL)
def test_hyperparameters_are_simple_annotated_keywords_with_defaults(name):
    # a choice argument is a typing.Literal of strings (its one list of valid values), never a plain str
    allowed = {"float", "int", "bool", "int | None"}
    hints = typing.get_type_hints(get_loss_class(name).__init__)
    for pname, p in loss_hyperparameters(name).items():
        assert p.default is not inspect.Parameter.empty, f"{name}.{pname} has no default"
        choices = typing.get_args(hints[pname]) if typing.get_origin(hints[pname]) is typing.Literal else ()
        is_choice = bool(choices) and all(isinstance(c, str) for c in choices) and p.default in choices
        assert p.annotation in allowed or is_choice, f"{name}.{pname}: annotation {p.annotation!r}"
    loss_fn = build_loss(name)  # defaults construct
    assert loss_fn.name == name
    assert loss_fn.__doc__ and "Example" in loss_fn.__doc__


@pytest.mark.parametrize("name", ALL)
def test_the_docstring_example_runs_on_a_batch_and_gives_a_finite_loss(name):
    """The docstring's ``Example::`` block runs as written, given two views (and the no-dropout view)."""
    found = re.search(r"Example::\n\n((?:    .*\n|\n)+)", inspect.getdoc(get_loss_class(name)) + "\n")
    assert found, f"{name}: no indented code block after 'Example::'"
    g = torch.Generator().manual_seed(0)
    z1, z2, zbar = (torch.randn(8, 16, generator=g) for _ in range(3))
    scope = {"build_loss": build_loss, "torch": torch, "z1": z1.requires_grad_(), "z2": z2, "zbar": zbar}
    exec(textwrap.dedent(found.group(1)), scope)  # noqa: S102 - the library's own docstring
    result = scope.get("out", scope.get("loss"))
    loss = result.loss if isinstance(result, LossOutput) else result
    assert isinstance(loss, torch.Tensor) and loss.dim() == 0 and torch.isfinite(loss), (name, result)


@pytest.mark.parametrize("name", ALL)
def test_choice_arguments_reject_other_values_listing_the_literal_choices(name):
    hints = typing.get_type_hints(get_loss_class(name).__init__)
    choice_params = {k: typing.get_args(hints[k]) for k in loss_hyperparameters(name)
                     if typing.get_origin(hints[k]) is typing.Literal}
    for pname, choices in choice_params.items():
        for value in choices:  # every listed value constructs
            build_loss(name, **{pname: value})
        with pytest.raises(ValueError) as e:
            build_loss(name, **{pname: "no_such_choice"})
        assert all(repr(c) in str(e.value) for c in choices), str(e.value)


def test_build_loss_unknown_name_lists_available():
    with pytest.raises(ValueError) as e:
        build_loss("simclr")
    assert "simclr" in str(e.value) and "focal_infonce" in str(e.value) and "m_vicreg" in str(e.value)


def test_build_loss_unknown_hyperparameter_lists_valid_ones():
    with pytest.raises(ValueError) as e:
        build_loss("focal_infonce", temperature=0.07, margin=0.3)
    msg = str(e.value)
    assert "margin" in msg and "temperature" in msg and "m" in msg.split("Valid hyperparameters:")[1]


@pytest.mark.parametrize(
    "name,kwargs,fragment",
    [
        ("infonce", {"temperature": 0.0}, "temperature"),
        ("focal_infonce", {"temperature": -1.0}, "temperature"),
        ("gs_infonce", {"num_noise": -1}, "num_noise"),
        ("gs_infonce", {"lam": -0.5}, "lam"),
        ("gs_infonce", {"noise_std": 0.0}, "noise_std"),
        ("off_dropout_infonce", {"m": 0.0}, "m must"),
        ("off_dropout_infonce", {"m_placement": "denominator"}, "'positive_logit', 'negative_sum'"),
        ("dcl", {"normalization": "bn"}, "'code', 'paper'"),
        ("dcl", {"temperature": float("nan")}, "temperature"),
        ("paradigm", {"gd": "soft"}, "'indicator', 'none'"),
        ("paradigm", {"weight": "uniform"}, "'softmax', 'hardest'"),
        ("paradigm", {"reduction": "sum"}, "'active_entry_mean', 'anchor_mean'"),
        ("arccon", {"u": -5.0}, "degrees"),
        ("mpt", {"margin": float("inf")}, "margin"),
        ("m_mhe", {"gd_reference": "other"}, "'cross', 'self'"),
        ("m_mhs", {"neighbor_view": "cross"}, "'same', 'other'"),
        ("m_vicreg", {"weight_norm": "row"}, "'global', 'per_anchor'"),
        ("barlow_twins", {"nu": -1.0}, "nu"),
        ("paradigm", {"symmetric": "yes"}, "symmetric"),
    ],
)
def test_invalid_hyperparameter_values_raise_clear_errors(name, kwargs, fragment):
    with pytest.raises(ValueError) as e:
        build_loss(name, **kwargs)
    assert fragment in str(e.value) and name in str(e.value)


# ------------------------------------------------------------------ input checks


@pytest.mark.parametrize("name", ALL)
def test_rejects_batch_of_one(name):
    z1, z2, zbar = _inputs(name, n=1)
    with pytest.raises(ValueError, match="at least 2"):
        _call(build_loss(name), z1, z2, zbar)


@pytest.mark.parametrize("name", ALL)
def test_rejects_shape_mismatch(name):
    z1, z2, zbar = _inputs(name)
    with pytest.raises(ValueError, match="same shape"):
        _call(build_loss(name), z1, z2[:, :-1], zbar)


@pytest.mark.parametrize("name", ALL)
def test_rejects_non_finite_input(name):
    z1, z2, zbar = _inputs(name)
    z2 = z2.clone()
    z2[1, 2] = float("nan")
    with pytest.raises(ValueError, match="NaN or Inf"):
        _call(build_loss(name), z1, z2, zbar)


def test_rejects_non_2d_input():
    with pytest.raises(ValueError, match="2-D"):
        build_loss("infonce")(torch.randn(2, 3, 4), torch.randn(2, 3, 4))


def test_off_dropout_requires_z_nodropout():
    z1, z2, zbar = _inputs("off_dropout_infonce")
    loss_fn = build_loss("off_dropout_infonce")
    with pytest.raises(ValueError, match="z_nodropout"):
        loss_fn(z1, z2)
    with pytest.raises(ValueError, match="z_nodropout must have the shape"):
        loss_fn(z1, z2, z_nodropout=zbar[:-1])
    bad = zbar.clone()
    bad[0, 0] = float("inf")
    with pytest.raises(ValueError, match="z_nodropout contains NaN"):
        loss_fn(z1, z2, z_nodropout=bad)


def test_input_errors_are_typed_carry_the_facts_and_name_no_command_line_flag():
    from hf_cse.losses.errors import BatchTooSmallError, HardNegativesNotTakenError, MissingInputsError

    z1, z2, zbar = _inputs("off_dropout_infonce")
    with pytest.raises(BatchTooSmallError) as small:
        build_loss("infonce")(z1[:1], z2[:1])
    with pytest.raises(MissingInputsError) as missing:
        build_loss("off_dropout_infonce")(z1, z2)
    with pytest.raises(HardNegativesNotTakenError) as negatives:
        build_loss("mpt")(z1, z2, z_neg=zbar)
    assert (small.value.loss_name, small.value.min_batch, small.value.got) == ("infonce", 2, 1)
    assert small.value.fields == ("per_device_train_batch_size",) and "per_device_train_batch_size" in str(small.value)
    assert missing.value.missing == ("z_nodropout",)
    assert negatives.value.loss_name == "mpt" and "infonce" in negatives.value.takers
    assert "mpt" not in negatives.value.takers
    for err in (small.value, missing.value, negatives.value):
        assert isinstance(err, ValueError) and "--" not in str(err), str(err)


def test_unexpected_extra_input_is_rejected():
    z1, z2, zbar = _inputs("infonce")
    # the inputs it does take are named (it said "it takes []" though infonce takes hard negatives and a queue)
    with pytest.raises(ValueError, match=r"unexpected inputs \['z_nodropout'\]; besides z1 and z2 it takes "
                                         r"\['z_neg', 'z_queue'\]\.$"):
        build_loss("infonce")(z1, z2, z_nodropout=zbar)
    with pytest.raises(ValueError, match="besides z1 and z2 it takes none"):
        build_loss("mpt")(z1, z2, z_nodropout=zbar)


# ------------------------------------------------------------------ output contract


@pytest.mark.parametrize("name", ALL)
def test_output_contract_and_gradients(name):
    z1, z2, zbar = _inputs(name, dtype=torch.float32)
    z1.requires_grad_(True)
    z2.requires_grad_(True)
    zbar.requires_grad_(True)
    out = _call(_seeded(build_loss(name)), z1, z2, zbar)
    assert isinstance(out, LossOutput)
    assert out.loss.dim() == 0 and torch.isfinite(out.loss)
    assert out.loss.dtype == torch.float32
    # metrics: detached 0-d tensors (read on the host only at logging steps) or host floats
    for key, value in out.metrics.items():
        if isinstance(value, torch.Tensor):
            assert value.dim() == 0 and not value.requires_grad, (key, value)
            value = value.item()
        assert isinstance(value, float) and math.isfinite(value), (key, value)
    for k in ("pos_cos", "neg_cos", "gd_active", "hardest_weight"):
        assert k in out.metrics
    out.loss.backward()
    assert z1.grad is not None and z1.grad.abs().sum() > 0, "no gradient reaches the anchors"
    assert torch.isfinite(z1.grad).all()


# ------------------------------------------------------------------ invariances


@pytest.mark.parametrize("name", [n for n in ALL if n not in NOT_ROW_SCALE_INVARIANT])
def test_row_rescaling_invariance(name):
    z1, z2, zbar = _inputs(name)
    g = torch.Generator().manual_seed(7)
    a = lambda: torch.rand(z1.shape[0], 1, generator=g, dtype=z1.dtype) * 5 + 0.1  # noqa: E731
    ref = _call(_seeded(build_loss(name)), z1, z2, zbar).loss
    got = _call(_seeded(build_loss(name)), a() * z1, a() * z2, a() * zbar).loss
    torch.testing.assert_close(got, ref, rtol=1e-9, atol=1e-9)


def test_dcl_is_not_row_scale_invariant():
    z1, z2, _ = _inputs("dcl")
    scale = torch.linspace(0.2, 3.0, z1.shape[0], dtype=z1.dtype)[:, None]
    loss_fn = build_loss("dcl")
    assert abs(loss_fn(scale * z1, z2).loss.item() - loss_fn(z1, z2).loss.item()) > 1e-4


@pytest.mark.parametrize("name", ALL)
def test_joint_permutation_invariance(name):
    z1, z2, zbar = _inputs(name, n=7)
    perm = torch.tensor([3, 0, 6, 1, 5, 2, 4])
    ref = _call(_seeded(build_loss(name)), z1, z2, zbar).loss
    got = _call(_seeded(build_loss(name)), z1[perm], z2[perm], zbar[perm]).loss
    torch.testing.assert_close(got, ref, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", ALL)
def test_view_pairing_matters(name):
    """Sanity check that the invariance test is not vacuous: permuting only one view changes the loss."""
    z1, z2, zbar = _inputs(name, n=7)
    perm = torch.tensor([3, 0, 6, 1, 5, 2, 4])
    ref = _call(_seeded(build_loss(name)), z1, z2, zbar).loss
    got = _call(_seeded(build_loss(name)), z1, z2[perm], zbar).loss
    assert abs(got.item() - ref.item()) > 1e-6


# ------------------------------------------------------------------ numerical safety


def _low_temperature(name):
    hp = loss_hyperparameters(name)
    return build_loss(name, temperature=0.01) if "temperature" in hp else build_loss(name)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", ALL)
def test_low_precision_inputs_low_temperature_are_finite(name, dtype):
    z1, z2, zbar = (t.to(dtype) for t in _inputs(name, n=16, d=32, dtype=torch.float32))
    z1.requires_grad_(True)
    z2.requires_grad_(True)
    zbar.requires_grad_(True)
    out = _call(_seeded(_low_temperature(name)), z1, z2, zbar)
    assert out.loss.dtype == torch.float32, "losses must compute in fp32 for half inputs"
    assert torch.isfinite(out.loss)
    out.loss.backward()
    assert torch.isfinite(z1.grad.float()).all() and torch.isfinite(z2.grad.float()).all()


@pytest.mark.parametrize("case", ["identical_views", "opposite_views", "duplicate_rows"])
@pytest.mark.parametrize("name", ALL)
def test_no_nan_at_cos_plus_minus_one_or_zero_distance(name, case):
    z1, _, _ = _inputs(name, n=6, d=8, dtype=torch.float32)
    if case == "duplicate_rows":
        z1 = torch.cat([z1[:3], z1[:3]])  # duplicate sentences: within-view distance 0
    z1 = z1.clone().requires_grad_(True)
    z2 = -z1 if case == "opposite_views" else z1
    out = _call(_seeded(build_loss(name)), z1, z2, z1)
    assert torch.isfinite(out.loss), out.loss
    out.loss.backward()
    assert torch.isfinite(z1.grad).all(), z1.grad
