"""What ``hf-cse-train``'s early checks read besides its flags -- each loss's hyperparameters, rules and needs, each
method's main loss, projector, own flags, field rules and needs (:func:`train_facts`, written into the command's
shipped parser description) -- and the checks that read them before torch is imported
(:func:`hf_cse.cli.entry_points.check_command_line`): a loss or method setting typed that breaks its rule, another
loss's hyperparameter, a setting that would do nothing in the run.

Imports nothing heavy at module level: :func:`train_facts` imports the registries when the description is written.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping

from ..checks import InputError
from ..files import DataError
from ..hyperparameter_rules import (
    TEXT_RULES,
    check_rule,
    check_rules,
    field_needs,
    hard_negatives_words,
    not_taken_error,
    run_value,
    unknown_loss_error,
)
from ..presets import PRESETS
from . import NEGATIVES_ADVICE
from .flags_in_use import check_needs, drop_fix, given_as


def all_numbers(values) -> bool:
    """Whether every value the cached parser read is a number (else one is read otherwise: the command checks it)."""
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def _needs_facts(needs: dict, default_of: Callable[[str], object]) -> dict:
    """The needs of a method's fields or a loss's hyperparameters, with the defaults of the settings they test."""
    tested = sorted({other for each in needs.values() for other, _, _ in each})
    return {"needs": needs, "defaults": {name: default_of(name) for name in tested}}


def train_facts() -> dict:
    """What hf-cse-train's early checks read besides its flags (written into its parser description): each loss's
    hyperparameter rules and those whose default is None (not set), each method's main loss and projector, and the
    rules of its config's fields (with whose field each is: the method's, or "" for every method's)."""
    from ..losses import available_losses, get_loss_class, loss_defaults
    from ..models import METHODS
    from ..models.config import field_rule_owners
    from ..objectives import DCL

    losses = {}
    for name in available_losses():
        cls = get_loss_class(name)
        optional = sorted(k for k, p in cls.hyperparameters().items() if p.default is None)
        # as pairs: the rules are checked in their order, which a JSON object's sorted keys would lose
        losses[name] = {"rules": list(cls.hyperparameter_rules.items()), "optional": optional,
                        "hyperparameters": list(cls.hyperparameters()),
                        **_needs_facts(cls.hyperparameter_needs, loss_defaults(name).get)}
    from .arguments import method_flags

    defaults = {m: cls.config_class() for m, cls in sorted(METHODS.items())}
    return {"losses": losses, "method_losses": {m: config.loss for m, config in defaults.items()},
            "method_projectors": {m: config.projector for m, config in defaults.items()},
            "method_flags": method_flags(), "dcl_loss": DCL,
            "method_rules": {m: [[name, *ruled] for name, ruled in field_rule_owners(cls.config_class).items()]
                             for m, cls in sorted(METHODS.items())},
            "method_needs": {m: _needs_facts(field_needs(METHODS[m].config_class), lambda name: getattr(config, name))
                             for m, config in defaults.items()},
            "pairs": pair_facts()}


def pair_facts() -> dict:
    """What :func:`check_pair_flags` reads: each method's reason not to take pair rows ("" where it takes them) and
    the losses that take hard negatives (the registries imported)."""
    from ..losses import available_losses, get_loss_class
    from ..models import METHODS

    # as pairs: the methods in their registry's order, which a JSON object's sorted keys would lose
    return {"why_no_pair_rows": [[m, "" if cls.takes_pair_rows else cls.why_no_pair_rows]
                                 for m, cls in METHODS.items()],
            "negative_losses": [n for n in available_losses() if get_loss_class(n).takes_hard_negatives]}


def check_pair_flags(pairs: dict, method: str | None, loss: str | None, pair_column: str | None,
                     negative_column: str | None, hard_negative_weight: float | None = None) -> None:
    """Pair options that cannot train: a negative column without a pair column, a weight of hard negatives without
    them (it would weigh nothing), pairs with a method that does not take pair rows (DiffCSE: its views are edits
    of one sentence), hard negatives for a loss without them (a weight of them for such a loss: the loss's own
    refusal, that it takes no such hyperparameter).
    ``pairs``: :func:`pair_facts` (none, in an older parser description: the method's and loss's are left to the
    command)."""
    if negative_column and not pair_column:
        raise DataError("--negative_column needs --pair_column (triplets are anchor, positive, hard negative).")
    takers = pairs.get("negative_losses", [])
    if hard_negative_weight and not negative_column and (not takers or loss in takers):  # else: the loss's refusal
        raise InputError(f"--hard_negative_weight {hard_negative_weight:g} weighs hard negatives, but the data has "
                         "none: add --pair_column and --negative_column (triplets), or drop --hard_negative_weight.")
    why_not = dict(pairs.get("why_no_pair_rows", []))
    if not pair_column or method not in why_not:
        return
    if why_not[method]:
        others = " or ".join(name for name, why in why_not.items() if not why)
        raise DataError(f"--pair_column does not work with --method {method} ({why_not[method]}); "
                        f"use --method {others} for pair data.")
    if negative_column and loss not in takers:
        raise DataError(f"{hard_negatives_words(loss, '--negative_column', takers)} {NEGATIVES_ADVICE}")


def check_pair_values(facts: dict, args: dict) -> None:
    """:func:`check_pair_flags` on the pair flags typed, with the run's main loss (``--loss``, else the method's)."""
    loss = args.get("loss") or facts.get("method_losses", {}).get(args.get("method"))
    weight = args.get("hard_negative_weight")
    check_pair_flags(facts.get("pairs", {}), args.get("method"), loss, args.get("pair_column"),
                     args.get("negative_column"), weight if all_numbers([weight]) else None)


def refuse_unregistered_loss(facts: dict, loss: str | None) -> None:
    """``loss`` is one the description knows, or the caller registered (the registry is then imported already)."""
    losses = facts.get("losses")
    if not losses or loss is None or loss in losses:
        return
    registry = sys.modules.get("hf_cse.losses.registry")
    available = registry.available_losses() if registry is not None else losses
    if loss not in available:
        raise unknown_loss_error(loss, available)


def check_loss_values(facts: dict, args: dict, typed_flags: set[str]) -> None:
    """The main loss (``--loss``, else the method's) is registered, takes the hyperparameter flags typed
    (``typed_flags``: those given on the command line, not by a preset), and the values typed for it keep its rules,
    as the registry and the loss check them; a loss registered by the caller's own code (the registry is then
    imported already) is left to the command."""
    loss = args.get("loss") or facts.get("method_losses", {}).get(args.get("method"))
    losses = facts.get("losses")
    if not losses or loss is None:
        return
    if loss not in losses:
        refuse_unregistered_loss(facts, loss)
        return  # the caller's loss: the command checks it
    known = losses[loss]
    takes = known.get("hyperparameters")
    if takes is not None:
        every = {name for facts_of in losses.values() for name in facts_of.get("hyperparameters", ())}
        wrong = sorted(name for name in every - set(takes) if name in typed_flags)
        if wrong:
            raise not_taken_error(loss, wrong, takes, dashes="--")
    rules = dict(known["rules"])
    typed = {name: args.get(name) for name in rules if args.get(name) is not None}
    if all_numbers(typed.values()):
        check_rules(loss, rules, typed, frozenset(known["optional"]), dashes="--")


def check_dcl_values(facts: dict, args: dict, typed_flags: set[str]) -> None:
    """The DCL objective's weight and hyperparameters typed (``--dcl_weight``, ``--dcl_temperature``) keep the rules
    the objective and the DCL loss check."""
    dcl = facts.get("losses", {}).get(facts.get("dcl_loss"))
    if dcl is None:
        return
    if "dcl_weight" in typed_flags and all_numbers([args.get("dcl_weight")]):
        check_rule("", "dcl_weight", args["dcl_weight"], "non_negative", dashes="--")
    for name, rule in dcl["rules"]:
        value = args.get(f"dcl_{name}")
        if f"dcl_{name}" in typed_flags and value is not None and all_numbers([value]):
            check_rule(facts["dcl_loss"], f"dcl_{name}", value, rule, dashes="--")


#: how a boolean flag may be typed (transformers' string_to_bool), false ones first
BOOL_WORDS = ("false", "no", "n", "f", "0", "true", "yes", "y", "t", "1")


def switched_on(value) -> bool:
    """A switch's value as the cached parser gives it (a bool typed may come as its text)."""
    return value.strip().lower() not in (*BOOL_WORDS[:5], "") if isinstance(value, str) else bool(value)


def check_typed_needs(facts: dict, args: dict, given: set[str]) -> None:
    """A setting typed that acts only with another setting this run has otherwise (e.g. --mlm_weight without
    --do_mlm, ESimCSE's --momentum with --queue_size 0): the method's fields' needs and the main loss's; the other
    setting's value is the one typed or the preset's, else the method's or the loss's default."""
    preset = PRESETS.get(args.get("preset") or "", {})
    shown = {name: switched_on(value) if isinstance(value, str) and value.strip().lower() in BOOL_WORDS
             else value for name, value in args.items()}  # as the command shows it: False, not 'false'
    loss = args.get("loss") or facts.get("method_losses", {}).get(args.get("method"))
    chosen = {name: shown[name] for name in shown if name in given or name in preset}  # not the parser's defaults
    for owner in (facts.get("method_needs", {}).get(args.get("method")), facts.get("losses", {}).get(loss)):
        if owner and owner.get("needs"):
            check_needs(given, owner["needs"], run_value(chosen.get, owner["defaults"]), shown)


def check_method_values(facts: dict, args: dict, typed_flags: set[str]) -> None:
    """The values typed for the method's config fields keep their rules, as the config checks them."""
    for name, rule, owner in facts.get("method_rules", {}).get(args.get("method"), ()):
        value = args.get(name)
        if name in typed_flags and (all_numbers([value]) or rule in TEXT_RULES and isinstance(value, str)):
            check_rule(owner, name, value, rule, dashes="--")


#: the training arguments that set how a run's export is pushed (``--push_to_hub``): alone they do nothing
HUB_PUSH_SETTINGS = ("hub_model_id", "hub_token", "hub_private_repo", "hub_revision")


def check_hub_settings(chosen: set[str], values: Mapping[str, object]) -> None:
    """A setting of the Hub push chosen (``chosen``: typed, or set by a ``--config`` file; ``values``: the run's)
    while ``push_to_hub`` is off would do nothing: a ``--hub_model_id`` alone pushed nothing, without a word."""
    idle = [name for name in HUB_PUSH_SETTINGS if name in chosen
            and (name != "hub_private_repo" or switched_on(values.get(name)))]  # false: a public repo, as unset
    if idle and not switched_on(values.get("push_to_hub")):
        raise InputError(f"{given_as(chosen, idle[0])} sets the Hub push of the run's export, and --push_to_hub is "
                         f"off: add --push_to_hub, or {drop_fix(chosen, idle[0])}.", fields=(idle[0], "push_to_hub"))


#: Trainer flags the trainer sets itself, whatever is typed (:class:`hf_cse.trainer.ContrastiveTrainer`), and why
DECIDED_BY_THE_TRAINER = {
    "eval_on_start": "the dev data is scored before the first step whenever the run has dev data (the untrained "
                     "encoder's score, a candidate for the saved model), and never without",
    "logging_nan_inf_filter": "no loss is filtered; a NaN or Inf loss stops the run at the next logging step, naming "
                              "it (the filter would read every step's loss on the host)",
    **dict.fromkeys(("hub_strategy", "hub_always_push"), "--push_to_hub pushes the run's sentence-transformers export "
                    "once, after training, never the Trainer's checkpoints"),
}


def check_trainer_decides(chosen: set[str], values: Mapping[str, object]) -> None:
    """A training argument hf_cse decides (:data:`DECIDED_BY_THE_TRAINER`) or cannot use (``use_liger_kernel``)
    chosen (typed, or set by a ``--config`` file), refused naming where it was set."""
    from ..trainer_arguments import LIGER_WHY

    for flag, why in DECIDED_BY_THE_TRAINER.items():
        if flag in chosen:
            raise InputError(f"{given_as(chosen, flag)} is hf_cse's to decide: {why}. "
                             f"{_sentence(drop_fix(chosen, flag))}", fields=(flag,))
    if "use_liger_kernel" in chosen and switched_on(values.get("use_liger_kernel")):
        raise InputError(f"{given_as(chosen, 'use_liger_kernel')}: {LIGER_WHY}. "
                         f"{_sentence(drop_fix(chosen, 'use_liger_kernel'))}", fields=("use_liger_kernel",))


def _sentence(words: str) -> str:
    """``words`` as a sentence of their own: capitalised, with a full stop."""
    return words[:1].upper() + words[1:] + "."
