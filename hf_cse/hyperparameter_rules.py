"""The rules a loss's numeric hyperparameters must keep, by name, in a module that imports nothing heavy: a loss
declares them (``ContrastiveLoss.hyperparameter_rules``, checked when it is built), and the command line checks the
values typed for the chosen loss against the same rules before torch is imported (the rules are written into the
training command's shipped parser description: :mod:`hf_cse.cli.entry_points`). A method's config declares the
rules of its numeric fields the same way (``metadata["rule"]``: :func:`field_rules`), checked when the config is built
and, for the values typed, before torch.

    check_rule("infonce", "temperature", 0.0, "temperature")
    # CSEError: infonce: temperature must be a number >= 0.0001 (the papers sweep 0.01 to 50; ...), got 0.0.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Callable, Mapping

from .errors import IMPORT_THE_MODULE, CSEError


def plain_number(value):
    """A NumPy scalar (``np.float32(0.05)``, ``np.int64(4)``: a sweep's values) as the Python number it holds, which
    the rules judge and a config writes to JSON; anything else as it is."""
    if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        item = value.item()
        return item if isinstance(item, int | float) else value
    return value


def _number(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def _template_text(value) -> bool:
    """A PromptBERT template: ``{sentence}`` once, ``{mask}`` at most once, no other placeholder (where ``{mask}``
    may stand, and a mask token typed out, depend on the tokenizer: ``models/promptbert/templates.TemplateIds``)."""
    if not isinstance(value, str) or value.count("{sentence}") != 1 or value.count("{mask}") > 1:
        return False
    rest = value.replace("{sentence}", "").replace("{mask}", "")
    return not ("{" in rest and "}" in rest[rest.index("{"):])


#: rule name -> (what a value must be, the test)
RULES: dict[str, tuple[str, Callable[[object], bool]]] = {
    "positive": ("a finite number > 0", lambda v: _number(v) and v > 0),
    "non_negative": ("a finite number >= 0", lambda v: _number(v) and v >= 0),
    "finite": ("a finite number", _number),
    "degrees": ("an angle in degrees in [0, 180)", lambda v: _number(v) and 0 <= v < 180),
    "count": ("None or an integer >= 0", lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)
                                                                   and v >= 0)),
    "size": ("an integer >= 0", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0),
    "fraction": ("a number in [0, 1)", lambda v: _number(v) and 0 <= v < 1),
    "open_fraction": ("a number in (0, 1)", lambda v: _number(v) and 0 < v < 1),
    "unit_interval": ("a number in [0, 1]", lambda v: _number(v) and 0 <= v <= 1),
    # a share of tokens to edit: none edits nothing, and the task on them learns nothing
    "edit_share": ("a number in (0, 1] (0 edits no token)", lambda v: _number(v) and 0 < v <= 1),
    # a softmax temperature: the logits are cosines over it, so a tiny one makes the softmax a hard maximum whose loss
    # is huge (1e-30: a loss of 6e28, trained on) or divides by zero (1e-300 in float32)
    "temperature": ("a number >= 0.0001 (the papers sweep 0.01 to 50; a smaller one makes the softmax a hard maximum)",
                    lambda v: _number(v) and v >= 1e-4),
    # a hinge or gate on the gap of two cosines (or unit distances), which is never below -2: a margin at or below
    # -2 leaves every anchor inactive, and the loss trains nothing
    "gap_margin": ("a finite number > -2 (a similarity gap is never below -2: a smaller margin trains nothing)",
                   lambda v: _number(v) and v > -2),
    # an additive log-weight on a logit: beyond what half precision holds it overflows (and e^65504 already is
    # all of the softmax)
    "log_weight": ("a finite number in [-65504, 65504] (the range half precision holds)",
                   lambda v: _number(v) and abs(v) <= 65504),
    "template": ("text with {sentence} exactly once (where the sentence goes), {mask} at most once (the token whose "
                 "hidden state is read) and no other {placeholder}, "
                 "e.g. 'This sentence of \"{sentence}\" means{mask}.'",
                 _template_text),
}

#: the rules that judge text (the others judge numbers)
TEXT_RULES = frozenset({"template"})

#: what a value of each rule that lets None through must be where it is typed as a flag: None cannot be typed, the
#: flag is left out for it
ON_THE_COMMAND_LINE = {"count": "an integer >= 0, or left out (None)"}


def rule_as_typed(rule: str) -> str:
    """What a value of ``rule`` must be, as a flag's help says it (:data:`ON_THE_COMMAND_LINE`, else the rule's own
    words)."""
    return ON_THE_COMMAND_LINE.get(rule, RULES[rule][0])


def unknown_loss_error(name: str, available) -> CSEError:
    """The refusal of a loss name that is not registered (the registry's, and the command line's early check)."""
    close = difflib.get_close_matches(str(name), sorted(available), n=1)
    guess = f" (did you mean {close[0]!r}?)" if close else ""  # first: a long list may be cut to fit a line
    return CSEError(f"Unknown loss {name!r}{guess}. Available losses: {', '.join(sorted(available))}. A loss of your "
                    f"own: register it with register_loss in a module, and {IMPORT_THE_MODULE}.")


def not_taken_error(loss: str, wrong, takes, dashes: str = "") -> CSEError:
    """The refusal of hyperparameters given for ``loss`` that it does not take (``takes``: those it does);
    ``dashes="--"``: named as the command line's flags."""
    return CSEError(f"{dashes}loss {loss} does not take {', '.join(dashes + w for w in wrong)}. Its hyperparameters: "
                    f"{', '.join(dashes + t for t in takes) or '(none)'}.", fields=("loss", *wrong, *takes))


def hard_negatives_words(loss: str, source: str | None, takers) -> str:
    """That ``loss`` has no use for the hard negatives given (from ``source``, in the caller's terms), and which
    losses (``takers``) have: the loss's refusal (:class:`~hf_cse.losses.errors.HardNegativesNotTakenError`), and
    the command line's before torch."""
    where = f" ({source})" if source else ""
    return (f"loss {loss!r} has no defined use for hard negatives{where}; the losses that take them: "
            f"{', '.join(takers)}.")


def check_rule(owner: str, param: str, value, rule: str, dashes: str = "", fields=()) -> None:
    """``value`` of ``param`` (a hyperparameter of loss ``owner``, or a field of method ``owner``'s config; "": the
    settings every method has) keeps ``rule`` (a name of :data:`RULES`); ``dashes="--"``: ``param`` named as the
    command line's flag."""
    what, holds = RULES[rule]
    if not holds(value):
        # a loss gives no fields: the same hyperparameter has another flag in the DCL objective (--dcl_temperature)
        raise CSEError(f"{owner}: " * bool(owner) + f"{dashes}{param} must be {what}, got {value!r}.", fields=fields)


def check_rules(loss_name: str, rules: Mapping[str, str], values: Mapping[str, object],
                optional: frozenset[str] = frozenset(), dashes: str = "") -> None:
    """Each of ``values`` that has a rule in ``rules`` keeps it, in the order of ``rules``; None passes for the
    hyperparameters in ``optional`` (those whose default is None: not set)."""
    for param, rule in rules.items():
        if param in values and not (values[param] is None and param in optional):
            check_rule(loss_name, param, values[param], rule, dashes)


def field_rules(config_cls: type) -> dict[str, str]:
    """The rules of a config dataclass's fields (``metadata["rule"]``, a name of :data:`RULES`), by field."""
    rules = {f.name: f.metadata["rule"] for f in dataclasses.fields(config_cls) if "rule" in f.metadata}
    unknown = set(rules.values()) - set(RULES)
    if unknown:
        raise TypeError(f"{config_cls.__name__}: unknown field rules {sorted(unknown)}; rules: {sorted(RULES)}")
    return rules


#: how a setting's need on another setting is tested (a need is ``(other, test, value)``: e.g. ESimCSE's momentum
#: acts only with ``("queue_size", ">", 0)``): test -> whether ``other``'s current value meets it
NEED_TESTS: dict[str, Callable[[object, object], bool]] = {
    "==": lambda current, value: current == value,
    "!=": lambda current, value: current != value,
    ">": lambda current, value: _number(current) and current > value,
    "not_in": lambda current, values: current not in values,
}


def unmet_need(needs, value_of: Callable[[str], object]) -> tuple | None:
    """The first of ``needs`` (``(other, test, value)`` each) that the run's values (``value_of(other)``) do not
    meet: the setting that has them would do nothing. None: it acts."""
    for other, test, value in needs:
        if not NEED_TESTS[test](value_of(other), value):
            return other, test, value
    return None


def run_value(given: Callable[[str], object], *defaults: Mapping) -> Callable[[str], object]:
    """The run's value of a setting a need tests (``value_of`` for :func:`unmet_need`): the one ``given`` returns
    (None: not given), else that of the first of ``defaults`` that has it (the method config's, then the loss's)."""

    def value_of(name: str):
        value = given(name)
        return value if value is not None else next((each[name] for each in defaults if name in each), None)

    return value_of


def shown_value(value) -> str:
    """A setting's value as a command line writes it (``false``, not ``False``; ``unset`` for None)."""
    return "unset" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def need_words(other: str, test: str, value, dashes: str = "") -> str:
    """What a need asks, in words: ``queue_size > 0``, ``surrogate false``, ``gd other than none``."""
    name = dashes + other
    if test == "==":
        return f"{name} {shown_value(value)}"
    if test == ">":
        return f"{name} > {shown_value(value)}"
    values = list(value) if test == "not_in" else [value]
    unset = None in values  # "set": a value not None; "to other than ...": the rest
    rest = [v for v in values if v is not None]
    return f"{name}{' set' * unset}{' to' * (unset and bool(rest))}" + \
        (f" other than {' or '.join(map(shown_value, rest))}" if rest else "")


def check_needs_declared(owner: str, needs: Mapping[str, object], names) -> None:
    """A declaration of needs (setting -> list of ``(other, test, value)``) names settings of ``names`` and tests of
    :data:`NEED_TESTS` (checked where it is declared)."""
    for name, each in needs.items():
        for need in each:
            other, test, _ = need
            if name not in names or other not in names or test not in NEED_TESTS:
                raise TypeError(f"{owner}: the need {name!r} -> {tuple(need)!r} names a setting it does not have or "
                                f"a test not in {sorted(NEED_TESTS)}")


def field_needs(config_cls: type) -> dict[str, list[list]]:
    """The needs of a config dataclass's fields (``metadata["needs"]``: the settings each acts only with), by
    field."""
    needs = {f.name: [list(need) for need in f.metadata["needs"]] for f in dataclasses.fields(config_cls)
             if "needs" in f.metadata}
    check_needs_declared(config_cls.__name__, needs, {f.name for f in dataclasses.fields(config_cls)})
    return needs
