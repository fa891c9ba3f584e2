"""An export into a folder it cannot write fails in one line before the model is loaded (the folder and the one it
is written in, where its temporary folder is made and renamed, are probed), and a swap that fails anyway leaves no
temporary folder behind. Tests run as root here, which file modes do not stop: the probe's file creation is made to
fail for the folders a test protects (as a read-only or immutable folder makes it fail)."""

from __future__ import annotations

import errno
import tempfile
from pathlib import Path

import pytest

from hf_cse.checks import InputError
from hf_cse.export import sentence_transformers as export_module
from hf_cse.export import to_sentence_transformer
from hf_cse.export.folders import atomic_output_dir, check_export_folder


@pytest.fixture
def protect(monkeypatch):
    """``protect(folder)``: creating a file in ``folder`` fails with EACCES, as in a read-only folder."""
    protected: set[Path] = set()
    original = tempfile.NamedTemporaryFile

    def named_temporary_file(*args, dir=None, **kwargs):
        if dir is not None and Path(dir).resolve() in protected:
            raise PermissionError(errno.EACCES, "Permission denied")
        return original(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", named_temporary_file)
    return lambda folder: protected.add(Path(folder).resolve())


@pytest.fixture
def no_loading(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded although the folder cannot be written")

    monkeypatch.setattr(export_module, "load_model", refuse)


def test_an_unwritable_folder_is_refused_before_the_model_is_loaded(tiny_bert_dir, tmp_path, protect, no_loading,
                                                                     capsys):
    from hf_cse.cli.export import main

    target = tmp_path / "readonly"
    target.mkdir()
    protect(target)  # an empty folder that cannot be written
    with pytest.raises(InputError, match=r"^out_dir .*readonly cannot be written \(Permission denied\); choose a "
                                         r"folder you can write to\.$"):
        to_sentence_transformer(str(tiny_bert_dir), target)
    capsys.readouterr()
    assert main([str(tiny_bert_dir), str(target)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("hf-cse-export: error: out_dir ") and "cannot be written" in err and "\n" not in err

    parent = tmp_path / "parent"  # a folder whose parent cannot be written (its temporary folder goes there)
    parent.mkdir()
    protect(parent)
    with pytest.raises(InputError, match=rf"^out_dir {parent / 'st'}: its parent folder {parent} cannot be written"):
        to_sentence_transformer(str(tiny_bert_dir), parent / "st")
    # a folder to create in it (the command's check, before the library's lock file would be refused there)
    with pytest.raises(InputError, match=rf"^out_dir {parent}/a/st: the folder to create it in {parent} cannot be "):
        check_export_folder(parent / "a" / "st", overwrite=False)
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == ["parent", "readonly"]
    assert not list(parent.iterdir()) and not list(target.iterdir())


def test_a_failed_swap_leaves_no_temporary_folder(tmp_path, monkeypatch):
    out = tmp_path / "st"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    rename = Path.rename

    def refuse_out(self, target):  # the folder cannot be moved aside (an immutable folder)
        if Path(self) == out:
            raise PermissionError(errno.EPERM, "Operation not permitted")
        return rename(self, target)

    monkeypatch.setattr(Path, "rename", refuse_out)
    with pytest.raises(PermissionError):
        with atomic_output_dir(out, overwrite=True) as tmp:
            (tmp / "modules.json").write_text("[]")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["st"] and (out / "notes.txt").read_text() == "mine"
