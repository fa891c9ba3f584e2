"""The scores of a model card beyond SentEval's: MTEB tasks (``run_eval.py``'s ``mteb:`` tasks, ``results.json``'s
``mteb``) and the user's own scored pairs (``eval_file`` / ``eval_dataset_name``, its ``own_data``), each labelled as
what it is; an MTEB score is in the Hub ``model-index`` only where what it measured can be named: its main metric and
a public data set, one split and one subset of it (not a mean over several). The user's pairs are never there: the
metadata names public benchmarks, and a file of the user's is none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..evaluation.results import EvalResults
from .text import is_number, table

#: what the card says of the user's own scored pairs' metric (``hf_cse.evaluation.evaluators.PairsEvaluator``)
PAIRS_METRIC = "Spearman correlation x 100 of cosine similarities"


def _mteb_facts(results: EvalResults, task: str) -> dict[str, Any]:
    """What ``run_eval.py`` recorded about the MTEB task's score (``details["mteb"][task]``; older results hold its
    main metric only, or nothing)."""
    facts = ((results.details or {}).get("mteb") or {}).get(task)
    return facts if isinstance(facts, dict) else {}


def _mteb_data(facts: dict[str, Any]) -> tuple[str, str | None]:
    """The card's words for the data an MTEB score was measured on, and why it is not in the ``model-index`` (None:
    it is)."""
    dataset, splits, subsets = facts.get("dataset"), facts.get("splits") or [], facts.get("subsets") or []
    if not dataset:
        return "not recorded", "its data set was not recorded"
    if dataset == "local":
        return "scored pairs of the user's own under MTEB's task definition (not MTEB's data)", "local data"
    words = f"`{dataset}`" + (f", {'/'.join(map(str, splits))}" if splits else "")
    if len(subsets) > 1:
        return f"{words}, mean over its {len(subsets)} subsets", f"a mean over {len(subsets)} subsets"
    if len(splits) > 1:
        return words + " (mean over the splits)", "a mean over several splits"
    return words, None


def mteb_section(results: EvalResults) -> list[str]:
    """The card's lines on the MTEB tasks: a table of each task's main score and what it was measured on, and
    which are not in the ``model-index`` and why."""
    if not results.mteb:
        return []
    rows, left_out = [], []
    for task, score in results.mteb.items():
        facts = _mteb_facts(results, task)
        data, why_not = _mteb_data(facts)
        main = f"`{facts['main_score']}`" if facts.get("main_score") else "not recorded"
        if not facts.get("main_score"):
            why_not = "its main metric was not recorded"
        rows.append((task, main, data, f"{score:.2f}" if is_number(score) else "undefined"))
        if why_not:
            left_out.append(f"{task} ({why_not})")
    parts = ["", "MTEB tasks (the `mteb` package's task definitions and metrics on these embeddings; each task's main "
             "score x 100, as MTEB reports it: its main metric, averaged over the splits and subsets it ran):", "",
             table(("MTEB task", "Main score", "Data", "Value"), rows)]
    if left_out:
        parts += ["", f"Not in the Hub metadata (`model-index`): {'; '.join(left_out)}."]
    return parts


def mteb_model_index_results(results: EvalResults) -> list:
    """``huggingface_hub.EvalResult`` entries of the MTEB scores whose metric and data can be named (see the module
    docstring), under MTEB's task type and its main score's name."""
    from huggingface_hub import EvalResult

    entries = []
    for task, score in (results.mteb or {}).items():
        facts = _mteb_facts(results, task)
        if not (is_number(score) and facts.get("main_score") and _mteb_data(facts)[1] is None):
            continue
        revision = facts.get("revision")
        entries.append(EvalResult(
            task_type=str(facts.get("task_type") or "MTEB"), task_name=f"MTEB {task}",
            dataset_type=str(facts["dataset"]), dataset_name=f"MTEB {task}",
            dataset_config=str(facts["subsets"][0]) if facts.get("subsets") else None,
            dataset_split=str(facts["splits"][0]) if facts.get("splits") else None,
            dataset_revision=str(revision) if revision and revision != "local" else None,
            metric_type=str(facts["main_score"]), metric_name=f"{facts['main_score']} x 100 (MTEB main score)",
            metric_value=round(score, 2),
        ))
    return entries


def _pairs_source(results: EvalResults, source: Any) -> str:
    """The user's pairs as the card names them: a file by its name (never the machine's path), a Hub data set by
    its id with the configuration and split scored (``settings["command"]``)."""
    source = str(source)
    command = (results.settings or {}).get("command") or {}
    if command.get("eval_dataset_name") == source and not Path(source).is_absolute():
        config, split = command.get("eval_dataset_config_name"), command.get("eval_dataset_split")
        return f"data set `{source}`" + "".join(f", {k} {v}" for k, v in (("configuration", config),
                                                                             ("split", split)) if v)
    return f"file `{Path(source).name}`"


def own_data_section(results: EvalResults) -> list[str]:
    """The card's lines on the user's own scored pairs (``own_data``): which file or data set, how many pairs, the
    score under its name (``eval_name``)."""
    scores = results.own_data_scores()
    if not scores:
        return []
    own = results.own_data or {}
    source = _pairs_source(results, own["source"]) if own.get("source") else "not recorded"
    pairs = str(own["pairs"]) if own.get("pairs") is not None else "not recorded"
    rows = [(f"`{name}`", source, pairs, f"{score:.2f}" if is_number(score) else "undefined")
            for name, score in scores.items()]
    return ["", f"The user's own scored sentence pairs ({PAIRS_METRIC}; not in the Hub metadata (`model-index`), "
            "which names public benchmarks):", "", table(("Name", "Pairs from", "Pairs", "Spearman"), rows)]
