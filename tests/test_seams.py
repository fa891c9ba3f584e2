"""The private names of transformers, sentence-transformers, datasets and mteb that hf_cse uses (hf_cse/seams.py):
each still exists in the installed versions with the parameters hf_cse relies on, and no other library module reaches
a private name of another package (read with ``ast``; nothing is run)."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import pytest

from hf_cse import seams

PACKAGE = Path(__file__).resolve().parents[1] / "hf_cse"
#: private names of other packages used outside seams.py, with why they stay there: torch and argparse, which
#: hf_cse's upper bounds do not cover (each is one line and reads a stable attribute)
OUTSIDE_SEAMS = {
    ("models/mlm.py", "_parameters"),  # torch.nn.Module: untie a parameter the MaskedLM model ties
    ("cli/train.py", "_actions"),  # argparse: the flags the user typed (HfArgumentParser has no public list)
    ("cli/parsing.py", "_actions"),  # argparse: the known flags, for "did you mean" on a typo
    ("cli/help.py", "_actions"),  # argparse: the flags --help shows, by destination, and the positionals of the usage
    ("cli/help.py", "_get_help_string"),  # argparse: the defaults formatter's hook, to leave out "(default: None)"
    ("cli/run_config.py", "_actions"),  # argparse: each flag's type and default, to check a --config file
    ("cli/parser_cache.py", "_actions"),  # argparse: the flags of a command's parser, written down for its next start
    ("cli/parser_cache.py", "_get_formatter"),  # argparse: each flag's help as the parser shows it (defaults written
    ("cli/parser_cache.py", "_expand_help"),  # in), so that a rebuilt parser shows the same
    ("cli/__init__.py", "_instances"),  # tqdm: the open progress bars, closed before an error line is printed
    ("distributed.py", "_run_exitfuncs"),  # atexit: a process of a launch runs the exit handlers, then ends
    ("process_exit.py", "_exit"),  # os._exit (public, despite its name): ends it without the interpreter's finalization
    ("cached_graphs.py", "_foreach_zero_"),  # torch's multi-tensor ops (torch._foreach_*): one launch for all grads
    ("models/esimcse/momentum.py", "_foreach_add_"),  # torch's multi-tensor ops: the momentum update
    ("models/esimcse/momentum.py", "_foreach_mul_"),
    ("models/esimcse/momentum.py", "_load_from_state_dict"),  # torch.nn.Module's hook for a module's own state
    ("models/esimcse/momentum.py", "_save_to_state_dict"),  # ... and its twin, for the saved side
}


def _owner(path: str):
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("owner, name, parameters", seams.SEAMS, ids=[f"{o}.{n}" for o, n, _ in seams.SEAMS])
def test_each_seam_exists_with_the_parameters_hf_cse_relies_on(owner, name, parameters):
    pytest.importorskip(owner.partition(".")[0])  # an optional package (mteb) may not be installed
    cls = _owner(owner)
    if parameters is None:  # an attribute: a class attribute, a property, or one the class's own code assigns
        source = inspect.getsource(inspect.getmodule(cls))
        assert hasattr(cls, name) or re.search(rf"self\.{name}\s*=", source), f"{owner}.{name} is gone"
        if isinstance(inspect.getattr_static(cls, name, None), property):
            assert inspect.getattr_static(cls, name).fset is not None, f"{owner}.{name} can no longer be set"
        return
    method = getattr(cls, name, None)
    assert callable(method), f"{owner}.{name} is gone"
    found = tuple(inspect.signature(method).parameters)
    assert found[:len(parameters)] == parameters, f"{owner}.{name}{found}: hf_cse passes {parameters}"


def test_the_epoch_hook_overrides_a_method_the_trainer_calls():
    """``EpochStartHook`` overrides ``Trainer._run_epoch``: the name must still be the one the training loop calls,
    or the sampler's ``set_epoch`` on resume would silently stop."""
    from transformers import Trainer

    loop = inspect.getsource(Trainer._inner_training_loop)
    assert "self._run_epoch(" in loop


def _private_names_of_other_packages(path: Path) -> set[str]:
    """``x._name`` with ``x`` not ``self`` / ``cls`` / ``super()``, and ``getattr(x, "_name")``."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and re.fullmatch(r"_[a-z]\w*", node.attr):
            base = node.value
            if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                continue
            if isinstance(base, ast.Call) and getattr(base.func, "id", None) == "super":
                found.add(node.attr)  # an override calling the package's private method
                continue
            found.add(node.attr)
        elif (isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "setattr", "hasattr")
              and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
              and re.fullmatch(r"_[a-z]\w*", str(node.args[1].value))):
            found.add(node.args[1].value)
    return found


def _defined_in_classes(path: Path, private: set[str]) -> set[str]:
    """Of ``private``, the names a class of ``path`` defines (a method, a class attribute) or sets on ``self``: an
    override of a transformers model's private name (``_init_weights``, ``_keep_in_fp32_modules_strict``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ClassDef):
            for statement in node.body:
                if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found.add(statement.name)
                targets = (statement.targets if isinstance(statement, ast.Assign) else
                           [statement.target] if isinstance(statement, ast.AnnAssign) else [])
                found |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
              and getattr(node.value, "id", None) == "self"):
            found.add(node.attr)
    return found & private


def test_no_library_module_but_seams_uses_a_private_name_of_another_package():
    from transformers import PretrainedConfig, PreTrainedModel, Trainer

    # the Trainer's private names: its methods and the attributes its own code sets (a subclass reaches them as self._x)
    trainer_source = inspect.getsource(inspect.getmodule(Trainer))
    trainer_private = set(re.findall(r"self\.(_[a-z]\w*)", trainer_source))
    # a model's and a config's: what an hf_cse model or config class would override or set
    model_private = {n for owner in (PreTrainedModel, PretrainedConfig) for n in dir(owner)
                     if re.fullmatch(r"_[a-z]\w*", n)}
    outside = set()
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == "seams.py":
            continue
        names = _private_names_of_other_packages(path) | _defined_in_classes(path, model_private)
        if rel == "trainer.py":  # ContrastiveTrainer is a Trainer: its self._x may be the Trainer's
            tree = ast.parse(path.read_text(encoding="utf-8"))
            names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                      and getattr(n.value, "id", None) == "self" and n.attr in trainer_private}
            names |= {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name in trainer_private}
        outside |= {(rel, name) for name in names}
    assert outside <= OUTSIDE_SEAMS, f"private names outside hf_cse/seams.py: {sorted(outside - OUTSIDE_SEAMS)}"


def test_setup_cfg_bounds_the_packages_whose_private_names_are_used():
    text = (PACKAGE.parent / "setup.cfg").read_text()
    for package in {owner.partition(".")[0].replace("_", "-") for owner, _, _ in seams.SEAMS}:
        assert re.search(rf"^\s*{package}>=[\d.]+,<\d+", text, re.M), f"setup.cfg: {package} has no upper bound"
