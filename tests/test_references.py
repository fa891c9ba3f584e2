"""Every loss and method model names the paper that defines it, as data."""

import re

import pytest

from hf_cse.losses import available_losses, get_loss_class
from hf_cse.models import METHODS
from hf_cse.references import PAPERS, SIMCSE, Paper, register_paper


@pytest.mark.parametrize("name", available_losses())
def test_every_loss_cites_a_known_paper(name):
    refs = get_loss_class(name).references
    assert refs, f"{name}: set `references = (PAPER, ...)` on its class, the papers that define it (CONTRIBUTING.md)"
    unknown = [p.key for p in refs if PAPERS.get(p.key) is not p]
    assert not unknown, f"{name}: add {unknown} to hf_cse.references.PAPERS with register_paper(Paper(...))"


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_cites_known_papers(method):
    """(That each shipped method's own paper comes first: tests/models/test_method_declarations.py.)"""
    cls = METHODS[method]
    assert cls.references and all(isinstance(p, Paper) and PAPERS[p.key] is p for p in cls.references + cls.builds_on)


@pytest.mark.parametrize("paper", list(PAPERS.values()), ids=list(PAPERS))
def test_paper_records_are_consistent(paper):
    assert re.fullmatch(r"\d{4}\.\d{5}", paper.arxiv)
    assert paper.bibtex.startswith(f"@inproceedings{{{paper.key},")
    assert f"eprint    = {{{paper.arxiv}}}" in paper.bibtex
    assert f"year      = {{{paper.year}}}" in paper.bibtex
    assert str(paper.year) in paper.venue
    assert paper.authors[0].split()[-1] in paper.bibtex


def test_register_paper_adds_a_new_record_and_refuses_a_taken_key(monkeypatch):
    from dataclasses import replace

    monkeypatch.setattr("hf_cse.references.PAPERS", dict(PAPERS))  # leave the shared registry as it was
    from hf_cse import references

    new = replace(SIMCSE, key="doe2099example", title="An Example")
    assert register_paper(new) is new and references.PAPERS["doe2099example"] is new
    assert register_paper(SIMCSE) is SIMCSE  # the same record again is fine
    with pytest.raises(ValueError, match="already taken"):
        register_paper(replace(SIMCSE, title="Another Title"))
