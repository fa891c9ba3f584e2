"""``--import_module``: the commands import a module of the user's own before they read their flags, so that the
losses, methods and projectors it registers (``register_loss`` / ``register_method``) are the commands' own: ``--loss
NAME`` with a flag per hyperparameter, ``--method NAME``, and an evaluation or export of a model trained with them.

A value is a module name, imported as ``import NAME`` would from the current folder, or the path of a ``.py`` file
(its folder is put on ``sys.path`` first, so that it can import its neighbours). A module already imported is not
imported again, so the commands' early checks and their ``main`` can both ask for it.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import traceback
from dataclasses import field
from pathlib import Path

from ..errors import CSEError
from ..run_files import USER_MODULES

FLAG = "--import_module"
#: the spellings argparse accepts (transformers' parser adds the dashed one)
SPELLINGS = (FLAG, "--import-module")
HELP = ("Import a module of your own first (a module name importable from the current folder, or the path of a .py "
        "file): the losses, methods and projectors it registers with register_loss / register_method are then "
        "known: training names them by --loss / --method (their hyperparameters as flags), evaluation and export "
        "load models trained with them. Several: --import_module a b.")


#: the .py files imported in this process -> their module names
_LOADED: dict[Path, str] = {}


def import_module_field():
    """The ``import_module`` field of a command's arguments dataclass (one home for its help text)."""
    return field(default_factory=list, metadata={"help": HELP})


def requested_modules(argv: list[str]) -> list[str]:
    """The values of ``--import_module`` in ``argv``: ``--import_module a b``, ``--import_module=a``, repeated."""
    names, taking = [], False
    for arg in argv:
        flag, equals, value = arg.partition("=")
        if arg in SPELLINGS:
            taking = True
        elif equals and flag in SPELLINGS:
            names.append(value)
            taking = False
        elif arg.startswith("-") and taking:
            taking = False
        elif taking:
            names.append(arg)
    return names


def recorded_modules(names: list[str]) -> dict[str, list[str]]:
    """The run record's :data:`~hf_cse.run_files.USER_MODULES` entry for ``--import_module names`` (a file by its
    whole path, as another folder's rerun needs it), or nothing where none were given."""
    return {USER_MODULES: [str(Path(n).expanduser().resolve()) if n.endswith(".py") else n for n in names]} if names \
        else {}


def typed_loss(argv: list[str]) -> str | None:
    """The value of ``--loss`` in ``argv`` (``--loss x`` or ``--loss=x``, the last one given), read before the
    parser: a loss that is not registered is named before the flags of its hyperparameters are called unknown."""
    found = None
    for arg, following in zip(argv, [*argv[1:], None], strict=True):
        flag, equals, value = arg.partition("=")
        if flag == "--loss":
            found = value if equals else following
    return found


def import_user_modules(names: list[str]) -> None:
    """Import each of ``names`` (see the module docstring); a name that is neither a module nor a ``.py`` file, or a
    module that fails while it is imported, is one line naming it, where it failed and the fix."""
    for name in names:
        if not name.strip():
            raise CSEError("--import_module: an empty name. Give a module name or the path of a .py file.")
        path = Path(name).expanduser()
        if name.endswith(".py") or path.is_file():
            _import_file(name, path)
        elif path.is_dir() and not (path / "__init__.py").is_file() or os.sep in name:
            # a folder of no package, or a path: likely a positional swallowed by the flag (it takes every word after
            # it up to the next flag), which Python would import as an empty namespace package
            raise CSEError(f"--import_module {name!r} is {'a folder' if path.is_dir() else 'a path'}, not a module "
                           "or .py file. The flag takes each word after it up to the next flag: give the command's "
                           "folders before it, or end its list with another flag.")
        else:
            _import_name(name)


def _import_name(name: str) -> None:
    if name in sys.modules:
        return
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:  # as `python -c "import NAME"` run here would find it
        sys.path.insert(0, here)
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name and name.split(".")[0] == err.name.split(".")[0]:
            raise CSEError(f"--import_module {name!r}: no such module (looked in the current folder {here} and on "
                           "sys.path). Give a module name importable from there, or the path of a .py file."
                           ) from None
        raise CSEError(_failed(name, err)) from err
    except Exception as err:  # the user's module raised: where, in one line (HF_CSE_DEBUG=1 for the traceback)
        raise CSEError(_failed(name, err)) from err


def _import_file(name: str, path: Path) -> None:
    path = path.resolve()
    if not path.is_file():
        raise CSEError(f"--import_module {name!r}: no such file. Give the path of an existing .py file, or a module "
                       "name.")
    if _LOADED.get(path) in sys.modules:
        return
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    module_name = path.stem if path.stem not in sys.modules else f"hf_cse_user_{abs(hash(path))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise CSEError(f"--import_module {name!r}: Python cannot import this file; give a .py file.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # registered first, as an import does (dataclasses, pickling look it up)
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        del sys.modules[module_name]
        raise CSEError(_failed(name, err)) from err
    _LOADED[path] = module_name


def _failed(name: str, err: BaseException) -> str:
    frames = traceback.extract_tb(err.__traceback__)
    own = [f for f in frames if "importlib" not in f.filename]
    where = f" at {own[-1].filename}:{own[-1].lineno}" if own else ""
    said = str(err).rstrip()
    if isinstance(err, SyntaxError) and err.filename:  # raised by the compiler, where no frame of the module runs
        where, said = f" at {err.filename}:{err.lineno}", err.msg
    return (f"--import_module {name!r} failed while it was imported{where}: {type(err).__name__}: {said}"
            f"{'' if said.endswith(('.', '!', '?')) else '.'} Fix the module.")
