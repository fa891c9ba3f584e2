"""The parser descriptions shipped in the package (hf_cse/cli/parsers/<command>.json) are those of the commands as
they are: a fresh install answers ``--help`` and the refusals of the command line from them on its first start
(hf_cse.cli.parser_cache). They go stale with any change of hf_cse's source: then run
``python scripts/write_parser_descriptions.py`` and commit the files with the change."""

from __future__ import annotations

import json

import pytest

from hf_cse.cli import entry_points, parser_cache

REWRITE = "run `python scripts/write_parser_descriptions.py` and commit hf_cse/cli/parsers/ with your change"


@pytest.mark.parametrize("command", list(entry_points.MODULES))
def test_the_shipped_description_is_the_commands_own(command):
    path = parser_cache.shipped_path(command)
    assert path.is_file(), f"{path} is missing: {REWRITE}"
    shipped = json.loads(path.read_text(encoding="utf-8"))
    now = parser_cache.key_parts()
    assert shipped["made_from"]["hf_cse"] == now["hf_cse"], f"hf_cse changed since {path.name} was written: {REWRITE}"
    if shipped["made_from"] != now:  # another Python, transformers or torch: valid where those are installed
        pytest.skip(f"{path.name} was made with other requirements ({shipped['made_from']}, here {now}); "
                    "it is not used here")
    assert shipped["key"] == parser_cache.parser_key(command)
    # with what the early checks read besides the flags (the losses' rules)
    own = parser_cache.describe(entry_points.build_parser(command), entry_points.command_facts(command))
    own = json.loads(json.dumps(own))
    assert shipped["description"] == own, REWRITE
    assert parser_cache.shipped_parser(command) is not None
