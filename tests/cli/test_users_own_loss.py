"""A loss of the user's own package on the command line: a script that imports its module and starts the command
(``hf_cse.cli.entry_points.train``, as ``run_unsup.py`` does) gets the loss's flags, its rules and one-line refusals,
and hf_cse's parser descriptions are neither used nor written for it; so does a module named by ``--import_module``
(hf_cse/cli/user_modules.py), with one-line refusals from every command."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from helpers import random_sentences

from hf_cse.cli import entry_points
from hf_cse.cli import train as _train  # noqa: F401 - imported before the scratch losses register, as a script may
from hf_cse.losses import ContrastiveLoss, cosine_matrix, register_loss
from hf_cse.losses import registry as loss_registry
from hf_cse.models import CSEPreTrainedModel


class ModelBuilt(Exception):
    """Raised instead of loading the encoder: every check of the command passed."""


@pytest.fixture
def start(monkeypatch, tmp_path, tiny_bert_dir):
    """``entry_points.train`` up to the model (its config is kept), with a scratch loss registry and parser cache."""
    monkeypatch.setattr(loss_registry, "_LOSSES", dict(loss_registry._LOSSES))
    monkeypatch.setenv("HF_CSE_CACHE", str(tmp_path / "cache"))

    def refuse(cls, name_or_path, **config_kwargs):
        raise ModelBuilt(cls.config_class(**config_kwargs))

    monkeypatch.setattr(CSEPreTrainedModel, "from_encoder", classmethod(refuse))
    train_file = tmp_path / "train.txt"
    train_file.write_text("\n".join(random_sentences(24)) + "\n")

    def run(*flags):
        return entry_points.train(["--model_name_or_path", str(tiny_bert_dir), "--train_file", str(train_file),
                                   "--max_steps", "1", "--per_device_train_batch_size", "8", "--use_cpu",
                                   "--output_dir", str(tmp_path / "out"), *flags])

    return run


def _register(name, **hyperparameters):
    """A loss of the caller's own (its module is this test's, outside hf_cse) with the given float arguments."""
    params = ", ".join(f"{k}: float = {v}" for k, v in hyperparameters.items())
    namespace = {"ContrastiveLoss": ContrastiveLoss}
    exec(f"def __init__(self, {params}):\n    ContrastiveLoss.__init__(self)\n"  # noqa: S102 - a typed signature
         + "".join(f"    self.{k} = {k}\n" for k in hyperparameters), namespace)
    body = {"__init__": namespace["__init__"], "__module__": __name__, "hyperparameter_rules": {
        k: "positive" for k in hyperparameters},
        "compute": lambda self, z1, z2: (F.cross_entropy(cosine_matrix(z1, z2) * 20, torch.arange(len(z1))), {})}
    return register_loss(name)(type("UsersLoss", (ContrastiveLoss,), body))


def test_a_script_registering_its_own_loss_gets_its_flags_at_the_commands_start(start, tmp_path):
    _register("users_scaled_infonce", scale=20.0)
    with pytest.raises(ModelBuilt) as built:
        start("--loss", "users_scaled_infonce", "--scale", "5")
    assert built.value.args[0].objectives[0] == {"loss": "users_scaled_infonce", "weight": 1.0,
                                                  "hyperparameters": {"scale": 5.0}}
    assert not (tmp_path / "cache").exists()  # no description of hf_cse's parser with the caller's flags in it


def test_the_help_offers_it_even_where_the_command_was_imported_first(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(loss_registry, "_LOSSES", dict(loss_registry._LOSSES))
    monkeypatch.setenv("HF_CSE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "2000")  # one line per flag
    _register("users_scaled_infonce", scale=20.0)
    with pytest.raises(SystemExit):
        entry_points.train(["--help"])
    lines = capsys.readouterr().out.splitlines()
    assert any(line.strip().startswith("--loss LOSS") and "users_scaled_infonce" in line for line in lines)
    assert any("--scale" in line.replace(",", " ").split() for line in lines)  # named in the loss section
    with pytest.raises(SystemExit):
        entry_points.train(["--help_all"])
    lines = capsys.readouterr().out.splitlines()
    assert any(line.strip().startswith("--scale SCALE") for line in lines)  # with its help


def test_its_rules_and_unknown_flags_are_one_line(start, capsys):
    _register("users_scaled_infonce", scale=20.0)
    assert start("--loss", "users_scaled_infonce", "--scale", "-1") == 1
    assert "error: users_scaled_infonce: --scale must be a finite number > 0, got -1.0" in capsys.readouterr().err
    assert start("--loss", "infonce", "--scale", "2") == 1
    assert "error: --loss infonce does not take --scale" in capsys.readouterr().err


def test_a_hyperparameter_named_like_a_flag_is_refused_in_one_line(start, capsys):
    _register("users_clash", learning_rate=0.1)
    assert start("--loss", "users_clash") == 1
    err = capsys.readouterr().err
    assert ("error: --loss users_clash (test_users_own_loss.UsersLoss) has a hyperparameter 'learning_rate', but "
            "--learning_rate is already a flag: rename the hyperparameter in the loss's __init__.") in err
    assert "Traceback" not in err


def test_a_script_registering_its_own_method_gets_its_flags_at_the_commands_start(start, monkeypatch, tmp_path):
    from dataclasses import field

    from hf_cse import models
    from hf_cse.models.simcse import SimCSEConfig, SimCSEModel

    monkeypatch.setattr(models, "METHODS", dict(models.METHODS))

    class SpicyConfig(SimCSEConfig):
        model_type = "hf_cse_test_users_spicy"
        method = "users_spicy"
        spice: float = field(default=0.5, metadata={"help": "how spicy the views are"})

    class SpicyModel(SimCSEModel):
        config_class = SpicyConfig

    SpicyModel.__module__ = SpicyConfig.__module__ = __name__
    models.register_method(SpicyModel)
    with pytest.raises(ModelBuilt) as built:
        start("--method", "users_spicy", "--spice", "0.7")
    assert (built.value.args[0].method, built.value.args[0].spice) == ("users_spicy", 0.7)
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("field_name, what", [("seed", "a flag"), ("temperature", "a loss hyperparameter ("),
                                              ("train_file", "a flag")])
def test_a_method_field_named_like_a_flag_is_refused_in_one_line_naming_the_method(start, monkeypatch, capsys,
                                                                                   field_name, what):
    """Before, ``seed`` ended in argparse's traceback and ``temperature`` was blamed on a shipped loss."""
    from dataclasses import field

    from hf_cse import models
    from hf_cse.models.simcse import SimCSEConfig, SimCSEModel

    monkeypatch.setattr(models, "METHODS", dict(models.METHODS))
    namespace = {"SimCSEConfig": SimCSEConfig, "field": field, "__name__": __name__}
    exec("class ClashConfig(SimCSEConfig):\n    model_type = 'hf_cse_test_clash'\n    method = 'clash'\n"  # noqa: S102
         f"    {field_name}: float = field(default=0.5, metadata={{'help': 'a field'}})\n", namespace)
    config = namespace["ClashConfig"]
    models.register_method(type("ClashModel", (SimCSEModel,), {"config_class": config, "__module__": __name__}))
    assert start("--method", "clash") == 1
    err = capsys.readouterr().err
    assert (f"error: method clash (test_users_own_loss.ClashConfig) has a config field {field_name!r}, but "
            f"--{field_name} is already {what}") in err and "rename the field." in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("hyperparameter", [["--alpha", "1.5"], ["--t", "3"], ["--alpha=1.5"]])
def test_a_loss_whose_module_was_not_imported_is_named_before_its_flags(start, capsys, tmp_path, hyperparameter):
    """Forgetting import_module: the loss is unknown, not its hyperparameters' flags (an unknown or an ambiguous
    flag, before), on the fast path, the command's own and from a --config file."""
    from hf_cse.cli import parser_cache, run_config

    line = "Unknown loss 'users_unseen'"
    assert start("--loss", "users_unseen", *hyperparameter) == 1
    assert line in capsys.readouterr().err
    assert _train.main(["--loss=users_unseen", *hyperparameter, "--output_dir", str(tmp_path / "o")]) == 1
    assert line in capsys.readouterr().err
    with pytest.raises(ValueError, match=line):
        cached = parser_cache.rebuild(parser_cache.describe(_train.argument_parser(), entry_points.train_facts()))
        entry_points.check_command_line("train", cached, ["--loss", "users_unseen", *hyperparameter])
    description = tmp_path / "run.json"
    description.write_text('{"loss": "users_unseen", "alpha": 1.5}')
    with pytest.raises(ValueError, match=f"--config {description}: {line}"):
        run_config.read_run_config(str(description), _train.argument_parser())


# ------------------------------------------------------------------ --import_module: a module named by the flag

USERS_MODULE = '''
import torch
import torch.nn.functional as F

from hf_cse.losses import ContrastiveLoss, cosine_matrix, register_loss


@register_loss("{name}")
class UsersFileLoss(ContrastiveLoss):
    hyperparameter_rules = {{"scale": "positive"}}

    def __init__(self, scale: float = 20.0):
        super().__init__()
        self.scale = scale

    def compute(self, z1, z2):
        return F.cross_entropy(cosine_matrix(z1, z2) * self.scale, torch.arange(len(z1), device=z1.device)), {{}}
'''


@pytest.fixture
def modules_forgotten(monkeypatch):
    """The modules a test imports are forgotten after it (the loss registry is the ``start`` fixture's scratch copy)."""
    import sys

    from hf_cse.cli import user_modules

    before = set(sys.modules)
    monkeypatch.setattr(user_modules, "_LOADED", {})
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield
    for name in set(sys.modules) - before:
        del sys.modules[name]


@pytest.mark.parametrize("how", ["file", "name"])
def test_import_module_registers_the_users_loss_for_the_command(start, tmp_path, monkeypatch, modules_forgotten,
                                                                how):
    """``--import_module my_losses.py`` (or ``my_losses``, importable from the current folder) is imported before the
    command reads its flags: its loss is ``--loss`` with its hyperparameter as a flag, as for a script of one's own."""
    stem = f"users_losses_{how}"
    (tmp_path / f"{stem}.py").write_text(USERS_MODULE.format(name=f"users_{how}_infonce"))
    monkeypatch.chdir(tmp_path)
    value = str(tmp_path / f"{stem}.py") if how == "file" else stem
    with pytest.raises(ModelBuilt) as built:
        start("--import_module", value, "--loss", f"users_{how}_infonce", "--scale", "5")
    assert built.value.args[0].objectives[0] == {"loss": f"users_{how}_infonce", "weight": 1.0,
                                                  "hyperparameters": {"scale": 5.0}}
    record = json.loads((tmp_path / "out" / "hf_cse_run.json").read_text())
    assert record["user_modules"] == [value]  # a file by its whole path: a rerun from another folder finds it
    assert not (tmp_path / "cache").exists()  # the parser was built with the user's flags, not written down


@pytest.mark.parametrize("command", ["train", "evaluate", "export"])
def test_import_module_refusals_are_one_line(tmp_path, capsys, monkeypatch, modules_forgotten, command):
    """A module that is not there, or that fails while it is imported, is one line naming it (and where it failed),
    from each command."""
    (tmp_path / "broken_users_module.py").write_text("import os\nvalue = 1 / 0\n")
    monkeypatch.chdir(tmp_path)
    args = {"train": ["--output_dir", str(tmp_path / "out")], "evaluate": [],
            "export": [str(tmp_path / "run"), str(tmp_path / "exported")]}[command]
    run = getattr(entry_points, command)
    assert run([*args, "--import_module", "no_such_users_module"]) == 1
    err = capsys.readouterr().err
    assert "--import_module 'no_such_users_module': no such module" in err and len(err.strip().splitlines()) == 1
    assert run([*args, "--import_module=broken_users_module.py"]) == 1
    err = capsys.readouterr().err
    assert (f"--import_module 'broken_users_module.py' failed while it was imported at "
            f"{tmp_path / 'broken_users_module.py'}:2: ZeroDivisionError: division by zero. Fix the module." in err)
    (tmp_path / "typo_users_module.py").write_text("import os\ndef f(:\n")
    assert run([*args, "--import_module", "typo_users_module.py"]) == 1  # where the compiler stopped, not hf_cse
    assert (f"failed while it was imported at {tmp_path / 'typo_users_module.py'}:2: SyntaxError: invalid syntax. "
            "Fix the module." in capsys.readouterr().err)
    (tmp_path / "said_users_module.py").write_text("raise RuntimeError('the weights are missing.')\n")
    assert run([*args, "--import_module", "said_users_module.py"]) == 1
    assert "RuntimeError: the weights are missing. Fix the module." in capsys.readouterr().err  # no '..'
    (tmp_path / "a_run").mkdir()  # a positional the flag took (hf-cse-export --import_module m.py RUN OUT)
    for folder in ("a_run", str(tmp_path / "a_run"), str(tmp_path / "no_such_run")):
        assert run([*args, "--import_module", folder]) == 1
        err = capsys.readouterr().err
        assert f"--import_module {folder!r} is a " in err and "give the command's folders before it" in err, err


def test_the_values_of_import_module_are_read_in_every_spelling():
    from hf_cse.cli.user_modules import requested_modules

    argv = ["--import_module", "a", "b.py", "--loss", "x", "--import-module=c", "--import_module", "d", "--verbose"]
    assert requested_modules(argv) == ["a", "b.py", "c", "d"]
    assert requested_modules(["--loss", "a"]) == []


def test_the_commands_name_the_import_module_flag_with_its_dashes(tmp_path, capsys):
    """The library's line says import_module; each command prints the flag it reads, as it does for its others."""
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps({"model_type": "hf_cse_users_unseen",
                                                                "method": "unseen"}))
    import numpy
    from safetensors.numpy import save_file  # its weights are there: only its config is read
    save_file({"w": numpy.zeros(1, "float32")}, str(tmp_path / "model" / "model.safetensors"))
    assert entry_points.train(["--loss", "users_unseen_loss", "--output_dir", str(tmp_path / "out")]) == 1
    assert "import that module first (on the command line: --import_module MODULE)." in capsys.readouterr().err
    assert entry_points.export([str(tmp_path / "model"), str(tmp_path / "exported")]) == 1
    assert "registers it first (on the command line: --import_module MODULE)." in capsys.readouterr().err
