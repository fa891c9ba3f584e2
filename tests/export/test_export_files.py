"""Which files of a folder its export wrote (what an overwrite replaces and a push uploads): those the export's
record lists, the fixed ones every export writes, and the code files its modules.json names."""

from __future__ import annotations

import json

from hf_cse.export.folders import atomic_output_dir, export_files


def old_export(folder, record_files=None):
    folder.mkdir()
    (folder / "modules.json").write_text(json.dumps([{"idx": 0, "name": "0", "path": "",
                                                       "type": "st_pooling.PromptTransformer"}]))
    for name in ("hf_cse_config.json", "st_pooling.py", "templates.py", "prompt_template.json", "notes.txt"):
        (folder / name).write_text("{}")
    if record_files is not None:
        (folder / "hf_cse_card_inputs.json").write_text(json.dumps({"files": record_files}))


def test_the_export_files_are_those_its_record_lists(tmp_path):
    old_export(tmp_path / "st", ["hf_cse_card_inputs.json", "hf_cse_config.json", "modules.json", "st_pooling.py",
                                 "templates.py", "prompt_template.json"])
    assert sorted(export_files(tmp_path / "st")) == ["hf_cse_card_inputs.json", "hf_cse_config.json",
                                                      "modules.json", "prompt_template.json", "st_pooling.py",
                                                      "templates.py"]


def test_an_export_without_the_list_has_its_modules_code_files(tmp_path):
    old_export(tmp_path / "st")  # an export of an older hf_cse: its modules.json names its own code file
    assert "st_pooling.py" in export_files(tmp_path / "st") and "notes.txt" not in export_files(tmp_path / "st")


def test_an_overwrite_drops_the_previous_exports_own_code_and_keeps_the_users_files(tmp_path):
    out = tmp_path / "st"
    old_export(out, ["hf_cse_card_inputs.json", "hf_cse_config.json", "modules.json", "st_pooling.py", "templates.py",
                     "prompt_template.json"])
    with atomic_output_dir(out, overwrite=True) as tmp:
        (tmp / "modules.json").write_text("[]")
        (tmp / "hf_cse_config.json").write_text("{}")
    assert sorted(p.name for p in out.iterdir()) == ["hf_cse_config.json", "modules.json", "notes.txt"]
