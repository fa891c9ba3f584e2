"""Method models: one ``PreTrainedModel`` subclass per method, sharing :class:`CSEConfig`.

Importing this package registers every config/model with ``AutoConfig`` / ``AutoModel``, so
``AutoModel.from_pretrained(folder)`` reloads any saved hf_cse model.
"""

from __future__ import annotations

from transformers import AutoConfig, AutoModel

from ..checkpoints import config_problem, saved_config
from ..checks import broken_model_error
from ..errors import IMPORT_THE_MODULE, CSEError, closest_name
from ..sharding import ENGINES
from .base import CSEPreTrainedModel
from .config import CSEConfig
from .diffcse import DiffCSEConfig, DiffCSEModel
from .esimcse import ESimCSEConfig, ESimCSEModel
from .imsimcse import ImSimCSEConfig, ImSimCSEModel
from .outputs import CSEOutput
from .pooling import POOLERS, pool
from .promptbert import PromptBERTConfig, PromptBERTModel
from .simcse import SimCSEConfig, SimCSEModel

#: the method model classes by name (``method``); :func:`register_method` adds one
METHODS: dict[str, type[CSEPreTrainedModel]] = {}

#: what a method that says no to something must also say: why (the clause of the refusal)
_REASONS = {"takes_pair_rows": "why_no_pair_rows", "splits_into_minibatches": "why_no_minibatch_split",
            "streams": "why_no_streaming", "captures_in_cuda_graph": "why_no_cuda_graph"}


def register_method(model_cls: type[CSEPreTrainedModel]) -> type[CSEPreTrainedModel]:
    """Make a method model class known under its config's ``method`` name: the ``method`` argument, :func:`get_method`,
    and transformers' ``AutoConfig`` / ``AutoModel`` (so ``AutoModel.from_pretrained`` reloads its saved models).
    Usable as a class decorator. Refuses a name another class holds (an earlier definition of the same class, with
    its module and qualified name, is replaced: a notebook cell run again, a reloaded module), a ``model_type`` that
    does not start with ``hf_cse`` (how a saved hf_cse model is recognised) or that another method holds (its saved
    models would load as this one) and a declared "no" without its reason."""
    config_cls = model_cls.config_class
    name = config_cls.method
    if not issubclass(model_cls, CSEPreTrainedModel) or not issubclass(config_cls, CSEConfig):
        raise TypeError(f"{model_cls.__name__}: a method is a CSEPreTrainedModel subclass whose config_class is a "
                        "CSEConfig subclass.")
    if name == CSEConfig.method or not config_cls.model_type.startswith("hf_cse"):
        raise CSEError(f"{model_cls.__name__}: its config {config_cls.__name__} needs its own `method` name and a "
                       f"`model_type` starting with 'hf_cse' (got {name!r}, {config_cls.model_type!r}).")
    for flag, reason in _REASONS.items():
        if not getattr(model_cls, flag) and not getattr(model_cls, reason):
            raise CSEError(f"{model_cls.__name__} sets {flag} = False: give the reason in {reason} (users read it "
                           "in the refusal).")
    if set(ENGINES) - set(model_cls.shards_under) and not model_cls.why_no_sharding:
        raise CSEError(f"{model_cls.__name__} leaves engines out of shards_under: give the reason in why_no_sharding.")
    held = METHODS.get(name, model_cls)
    # the same class defined again (a notebook cell run twice, a reloaded module) replaces its earlier self
    if held is not model_cls and (held.__module__, held.__qualname__) != (model_cls.__module__, model_cls.__qualname__):
        raise CSEError(f"method {name!r} is already registered ({METHODS[name].__name__}); choose another name.")
    same_type = [m for m, cls in METHODS.items() if m != name and cls.config_class.model_type == config_cls.model_type]
    if same_type:  # AutoModel would load the saved models of the one as the other
        raise CSEError(f"{model_cls.__name__}: model_type {config_cls.model_type!r} is already method "
                       f"{same_type[0]!r}'s (its saved models would load as this one); give {config_cls.__name__} "
                       "a model_type of its own.")
    METHODS[name] = model_cls
    AutoConfig.register(config_cls.model_type, config_cls, exist_ok=True)
    AutoModel.register(config_cls, model_cls, exist_ok=True)
    return model_cls


for _model_cls in (SimCSEModel, ImSimCSEModel, DiffCSEModel, PromptBERTModel, ESimCSEModel):
    register_method(_model_cls)


def get_method(name: str) -> type[CSEPreTrainedModel]:
    if name not in METHODS:
        close = closest_name(name, METHODS)
        raise CSEError(f"Unknown method {name!r}{f'; did you mean {close!r}?' if close else '.'} Available methods: "
                       f"{', '.join(sorted(METHODS))}. A method of your "
                       f"own: register it with register_method in a module, and {IMPORT_THE_MODULE}.")
    return METHODS[name]


def method_of(config) -> type[CSEPreTrainedModel] | None:
    """The registered method model class of a config (by its ``method``), or None (a bare :class:`CSEConfig`, or a
    method this installation lacks)."""
    return METHODS.get(getattr(config, "method", None))


def _saved_config(path) -> dict:
    """The config.json of a local folder ({} where there is none); one line where it cannot be read."""
    problem = config_problem(path)
    if problem:
        raise broken_model_error(str(path), problem)
    return saved_config(path) or {}


def is_cse_checkpoint(path) -> bool:
    """Whether a folder holds a saved hf_cse model (its config.json model_type starts with 'hf_cse')."""
    return str(_saved_config(path).get("model_type", "")).startswith("hf_cse")


def check_method_registered(path) -> None:
    """A local hf_cse checkpoint's method is registered in this process; else one line naming it and the fix (before,
    transformers said the architecture was unknown and advised upgrading it)."""
    saved = _saved_config(path)
    model_type = str(saved.get("model_type", ""))
    registered = any(m.config_class.model_type == model_type for m in METHODS.values())
    if not model_type.startswith("hf_cse") or "method" not in saved or registered:  # a method's config says its
        return  # method; another model (a remote-code encoder) is for transformers to load
    raise CSEError(f"{path} holds a model of the hf_cse method {saved.get('method', '?')!r} (model_type "
                   f"{model_type!r}), which is not registered in this process: "
                   f"{IMPORT_THE_MODULE.replace('that module', 'the module that registers it')}.")


__all__ = [
    "CSEConfig",
    "CSEOutput",
    "CSEPreTrainedModel",
    "check_method_registered",
    "DiffCSEConfig",
    "DiffCSEModel",
    "ESimCSEConfig",
    "ESimCSEModel",
    "ImSimCSEConfig",
    "ImSimCSEModel",
    "METHODS",
    "POOLERS",
    "PromptBERTConfig",
    "PromptBERTModel",
    "SimCSEConfig",
    "SimCSEModel",
    "get_method",
    "method_of",
    "register_method",
    "is_cse_checkpoint",
    "pool",
]
