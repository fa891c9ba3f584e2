"""hf_cse: unsupervised contrastive sentence embeddings on the Hugging Face Trainer.

The Python API, at the top level::

    from hf_cse import ContrastiveTrainer, ContrastiveTrainingArguments, SimCSEModel

* ``ContrastiveTrainer`` (:mod:`hf_cse.trainer`) and its arguments, ``ContrastiveTrainingArguments``
  (:mod:`hf_cse.training_args`);
* each method's model class: ``SimCSEModel``, ``ImSimCSEModel``, ``DiffCSEModel``, ``PromptBERTModel``,
  ``ESimCSEModel``, and that of any method registered since (``hf_cse.<ClassName>``); ``METHODS`` (every registered
  method by name) and ``get_method(name)`` (:mod:`hf_cse.models`);
* ``from_preset(name, encoder, output_dir)``: a paper's main setting as a model and its arguments
  (:mod:`hf_cse.presets`);
* ``losses`` (:mod:`hf_cse.losses`: ``build_loss``, ``available_losses``) and ``models``.

``import hf_cse`` imports nothing heavy: the commands (``python -m hf_cse``, ``hf-cse-*``) start here and answer
``--help``, ``config`` and the refusals that need no model before torch is imported. The names above are loaded on
first use (PEP 562); ``hf_cse.models`` registers the methods with ``AutoConfig`` / ``AutoModel`` when it is imported
(``import hf_cse.models``, or the first use of one of these names).
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

#: name -> the module that holds it (a submodule itself where the module and the name are the same)
_LAZY = {"ContrastiveTrainer": "hf_cse.trainer", "ContrastiveTrainingArguments": "hf_cse.training_args",
         **dict.fromkeys(("SimCSEModel", "ImSimCSEModel", "DiffCSEModel", "PromptBERTModel", "ESimCSEModel", "METHODS",
                          "get_method"), "hf_cse.models"),
         "from_preset": "hf_cse.presets", "losses": "hf_cse.losses", "models": "hf_cse.models"}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    if name not in _LAZY:
        value = _method_model(name)  # looked up each time: a method may be registered again, or removed
        if value is None:
            raise AttributeError(f"module 'hf_cse' has no attribute {name!r}")
        return value
    module = importlib.import_module(_LAZY[name])
    value = module if module.__name__ == f"{__name__}.{name}" else getattr(module, name)
    globals()[name] = value  # later uses skip this function
    return value


def _method_model(name: str):
    """The model class called ``name`` of a method registered since (a method added to the package, or one of
    yours): a top-level name too, with no line here; None for any other name."""
    if not name.endswith("Model"):
        return None
    try:  # (a first such lookup loads the models: seconds)
        methods = importlib.import_module("hf_cse.models").METHODS
    except ImportError:  # torch or transformers broken: no such attribute, as hasattr expects
        return None
    return next((cls for cls in methods.values() if cls.__name__ == name), None)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
