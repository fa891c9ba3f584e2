"""experiments/: configs asking for scores per embedding dimension (``truncate_dims``) make run.py score the cell
and the untrained encoder with run_eval's --truncate_dims, and make_table.py a table by dimension with the lists
against the untrained encoder cut the same way; every row says where it was trained, from its record."""

from __future__ import annotations

import importlib.util
import sys

from eval_helpers import REPO

TASKS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness")


def _module(name: str):
    sys.path.insert(0, str(REPO / "experiments"))
    spec = importlib.util.spec_from_file_location(name, REPO / "experiments" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _eval(full: float, by_dim: dict[int, float]) -> dict:
    """A run_eval results.json: every task at ``full``, and at each dimension every task at ``by_dim[d]``."""
    return {"model": "m", **{t: full for t in TASKS}, "avg": full,
            "dimensions": {str(d): {"sts": {t: v for t in TASKS}, "avg": v} for d, v in by_dim.items()}}


def _cell(method: str, seed: int | None, full: float, by_dim: dict[int, float], config: dict | None = None,
          device: str = "cpu") -> dict:
    train = {"precision": "bf16 autocast (losses in fp32)"} if seed is not None else {}
    return {"method": method, "seed": seed, "config": config or {}, "train": train, "device": device,
            "eval": _eval(full, by_dim)}


def test_run_scores_the_untrained_encoder_at_every_dimension_the_configs_ask_for():
    run = _module("run")
    assert run.dims_flags(run.load_config("simcse_matryoshka")["about"]) == ["--truncate_dims", "384,256,128,64"]
    assert run.dims_flags(run.load_config("simcse")["about"]) == []
    assert run.baseline_dims(["simcse", "simcse_dims", "simcse_matryoshka"]) == "384,256,128,64"
    assert run.baseline_dims(["simcse", "promptbert"]) is None
    command, budget = run.train_command("general", "simcse_matryoshka", 42, "auto", None, None, REPO / "x")
    flags = " ".join(command)
    config = run.load_config("simcse_matryoshka")  # the run's settings go by --config
    assert f"--config {REPO / 'experiments' / 'configs' / 'simcse_matryoshka.json'}" in flags
    assert config["matryoshka_dims"] == "384,256,128,64" and config["projector"] == "none"
    assert budget["max_steps"] == 200 and "--truncate_dims" not in flags  # an evaluation flag, not a training one


def test_the_table_by_dimension_averages_over_seeds_and_compares_with_the_untrained_encoder_cut_the_same_way():
    table = _module("make_table")
    cells = [_cell("untrained_own", None, 78.0, {}, device="NVIDIA H100 80GB HBM3"),
             _cell("untrained_own_dims", None, 78.0, {384: 78.0, 64: 70.0}),
             _cell("simcse", 42, 79.5, {}, device="NVIDIA H100 80GB HBM3"),
             _cell("simcse", 43, 79.7, {}, device="NVIDIA H100 80GB HBM3"),
             _cell("simcse_dims", 42, 79.0, {384: 79.0, 64: 69.0}),
             _cell("simcse_dims", 43, 79.2, {384: 79.2, 64: 69.4}),
             _cell("simcse_matryoshka", 42, 78.8, {384: 78.8, 64: 76.0}, {"matryoshka_dims": "384,64"}),
             _cell("simcse_matryoshka", 43, 78.6, {384: 78.6, 64: 76.4}, {"matryoshka_dims": "384,64"})]
    lines, _, label = table.regime_section("general", cells, ["simcse", "simcse_dims", "simcse_matryoshka"])
    rows = {line.split(" | ")[0].strip("| "): line for line in lines if line.startswith("| ")}
    assert "untrained_own_dims" not in rows  # an anchor of the table by dimension only
    assert rows["simcse"].split(" | ")[2] == "H100 80GB HBM3, bf16"
    assert rows["simcse_matryoshka"].split(" | ")[2] == "CPU, bf16"
    assert "| method | seeds | trained on | 384 | 64 |" in lines
    assert "| simcse_matryoshka | 2 | CPU, bf16 | 78.70 ± 0.14 | 76.20 ± 0.28 |" in lines
    assert "| **untrained, own pooling (mean + Normalize)** | – | CPU, fp32 (scored only) | 78.00 | 70.00 |" in lines
    at_64 = lines[lines.index("STS Avg. minus the **untrained encoder cut to 64** (70.00):"):]
    assert at_64[1] == "- above by more than the noise at every seed: simcse_matryoshka (+6.20; +6.00 / +6.40)"
    assert at_64[2] == "- below by more than the noise at every seed: simcse_dims (-0.80; -1.00 / -0.60)"
    assert "- above by more than the noise at every seed: simcse_matryoshka (+7.00; +7.00 / +7.00)" in at_64
    # against SimCSE trained on the same device (simcse_dims repeats its training on the CPU), not the H100 one
    start = next(i for i, line in enumerate(lines) if line.startswith("STS Avg. minus SimCSE's"))
    assert "- below by more than the noise at every seed: simcse_matryoshka (-0.40; -0.20 / -0.60)" in \
        lines[start:start + 6]
    assert label == "STS Avg."


def test_rows_are_compared_with_simcses_precision_twins_and_unrecorded_cells_take_the_regimes_device(monkeypatch):
    table = _module("make_table")
    monkeypatch.setitem(table.REGIMES, "general", {**table.REGIMES["general"], "unrecorded_device": "cpu",
                                                   "unrecorded_precision": "fp32"})
    old = [{**_cell("simcse", seed, score, {}), "device": None} for seed, score in ((42, 76.0), (43, 76.4))]
    for cell in old:
        cell["train"] = {"best_stsb_dev": 80.0}  # trained, but neither device nor precision recorded
    twins = [{**_cell("simcse", seed, score, {}), "device": None, "precision": "bf16"}
             for seed, score in ((42, 76.2), (43, 76.6))]
    rows = [_cell("esimcse", seed, score, {}, {"method": "esimcse"}) for seed, score in ((42, 77.0), (43, 77.4))]
    lines, _, _ = table.regime_section("general", [*old, *rows], ["simcse", "esimcse"], twins)
    table_rows = {line.split(" | ")[0].strip("| "): line for line in lines if line.startswith("| ")}
    assert table_rows["simcse"].split(" | ")[2] == "CPU, fp32"  # from the regime: its record has neither
    start = next(i for i, line in enumerate(lines) if line.startswith("STS Avg. minus SimCSE's"))
    assert "simcse, simcse (bf16 twins)" in lines[start]
    # esimcse (CPU, bf16) against the twins (CPU from the regime, bf16 recorded), not the fp32 cells
    assert "- above by more than the noise at every seed: esimcse (+0.80; +0.80 / +0.80)" in lines[start:start + 6]
