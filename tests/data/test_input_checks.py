"""Inputs that used to pass silently or end in a deep traceback now fail early with one clear message."""

import json
import logging

import pytest
import torch
from tiny_models import tiny_tokenizer
from transformers import AutoTokenizer, GPT2Config, GPT2Model

import hf_cse.models.base as base_module
from hf_cse.data import DataError, TwoViewCollator, load_train_dataset, read_sentences, tokenize_dataset
from hf_cse.losses import available_losses, build_loss, get_loss_class
from hf_cse.models import DiffCSEModel, SimCSEModel
from hf_cse.models.diffcse import GeneratorError, MaskedLMGenerator, load_generator
from hf_cse.objectives import build_objectives, compute_objectives

# losses that take only (z1, z2); off_dropout_infonce also needs z_nodropout (tested on its own)
PAIR_LOSSES = [name for name in available_losses() if not get_loss_class(name).extra_inputs]


def _views(n=6, dim=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    z1 = torch.randn(n, dim, generator=g)
    return z1, z1 + 0.1 * torch.randn(n, dim, generator=g)


# ------------------------------------------------------------------ loss inputs


def test_mixed_dtype_views_are_one_type_error():
    z1, z2 = _views()
    with pytest.raises(TypeError, match=r"z1 is torch.float32 but z2 is torch.bfloat16"):
        build_loss("infonce")(z1, z2.bfloat16())


def test_mixed_dtype_extra_input_is_refused():
    z1, z2 = _views()
    loss = build_loss("off_dropout_infonce")
    with pytest.raises(TypeError, match=r"z_nodropout is torch.float16"):
        loss(z1, z2, z_nodropout=z1.half())


def test_bf16_views_stay_legal_and_are_upcast():
    z1, z2 = _views()
    out = build_loss("infonce")(z1.bfloat16(), z2.bfloat16())
    assert out.loss.dtype == torch.float32 and torch.isfinite(out.loss)


def test_integer_embeddings_are_refused():
    with pytest.raises(TypeError, match="floating-point"):
        build_loss("infonce")(torch.ones(4, 8, dtype=torch.long), torch.ones(4, 8, dtype=torch.long))


@pytest.mark.parametrize("name", PAIR_LOSSES)
def test_a_zero_row_is_refused_by_every_loss(name):
    z1, z2 = _views()
    z2[3] = 0.0
    with pytest.raises(ValueError, match=r"1 of 6 rows of z2 cannot be normalised \(row 3's norm is 0"):
        build_loss(name)(z1, z2)


@pytest.mark.parametrize("name", ["infonce", "focal_infonce", "barlow_twins"])
def test_all_zero_views_are_refused_instead_of_a_constant_loss(name):
    # before: infonce / focal_infonce returned log 6 and barlow_twins a constant, each with zero gradient
    zeros = torch.zeros(6, 8, requires_grad=True)
    with pytest.raises(ValueError, match="6 of 6 rows of z1 cannot be normalised.*zero gradient"):
        build_loss(name)(zeros, zeros + 0)


def test_a_row_whose_norm_overflows_is_refused():
    z1, z2 = _views()
    z1[0] = 1e20  # finite, but its squared norm overflows float32, so it normalises to zero
    with pytest.raises(ValueError, match="row 0's norm overflows"):
        build_loss("infonce")(z1, z2)


def test_a_zero_extra_input_row_is_refused():
    z1, z2 = _views()
    z_nodropout = z1.clone()
    z_nodropout[1] = 0.0
    with pytest.raises(ValueError, match="rows of z_nodropout cannot be normalised"):
        build_loss("off_dropout_infonce")(z1, z2, z_nodropout=z_nodropout)


def test_small_but_nonzero_rows_still_train():
    z1, z2 = _views()
    z1 = (z1 * 1e-6).requires_grad_()  # norm ~3e-6, well above the 1e-8 floor
    out = build_loss("infonce")(z1, z2)
    out.loss.backward()
    assert z1.grad.abs().sum() > 0


# ------------------------------------------------------------------ model config


@pytest.fixture
def encoder_loading_fails(monkeypatch):
    """Any attempt to load encoder weights raises, so a test sees which check ran first."""

    def refuse(*args, **kwargs):
        raise AssertionError("encoder weights were loaded")

    monkeypatch.setattr(base_module, "load_encoder", refuse)


@pytest.mark.parametrize("method", [SimCSEModel, DiffCSEModel])
@pytest.mark.parametrize(
    "config_kwargs, message",
    [
        ({"loss": "no_such_loss"}, "Unknown loss 'no_such_loss'"),
        ({"loss_kwargs": {"temperature": -1.0}}, "temperature must be a number >= 0.0001"),
        ({"loss_kwargs": {"margin": 0.1}}, "does not take hyperparameter"),
        ({"off_dropout": True}, "off_dropout_infonce"),
    ],
)
def test_from_encoder_refuses_a_bad_objective_before_loading_weights(
    tiny_bert_dir, encoder_loading_fails, method, config_kwargs, message
):
    with pytest.raises(ValueError, match=message):
        method.from_encoder(str(tiny_bert_dir), **config_kwargs)


def test_from_encoder_with_a_valid_objective_reaches_the_weights(tiny_bert_dir, encoder_loading_fails):
    # the control for the test above: the patched loader is the one from_encoder calls
    with pytest.raises(AssertionError, match="encoder weights were loaded"):
        SimCSEModel.from_encoder(str(tiny_bert_dir), loss="focal_infonce")


# ------------------------------------------------------------------ training text


def test_special_token_only_lines_are_dropped_with_one_warning(tiny_bert_dir, tmp_path, caplog):
    path = tmp_path / "train.txt"
    # zero-width spaces, control characters, and characters outside the tiny vocabulary ([UNK] only)
    path.write_text("the cat sat\n\u200b\u200b\n\x01\x02\n\u4e00\u4e01\na dog runs\n", encoding="utf-8")
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    with caplog.at_level(logging.WARNING, logger="hf_cse.data"):
        ds = tokenize_dataset(load_train_dataset(str(path)), tok, 32)
    assert len(ds) == 2 and ds.column_names == ["input_ids", "token_type_ids", "attention_mask"]
    assert tok.decode(ds[0]["input_ids"], skip_special_tokens=True) == "the cat sat"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "dropped 3 of 5 training sentences" in warnings[0]
    assert "\\u200b" in warnings[0]  # the example is shown escaped, so an invisible line is visible


def test_clean_text_gives_no_warning(tiny_bert_dir, tmp_path, caplog):
    path = tmp_path / "train.txt"
    path.write_text("the cat sat\na dog runs\n")
    with caplog.at_level(logging.WARNING, logger="hf_cse.data"):
        ds = tokenize_dataset(load_train_dataset(str(path)), AutoTokenizer.from_pretrained(tiny_bert_dir), 32)
    assert len(ds) == 2 and not [r for r in caplog.records if r.name == "hf_cse.data"]


def test_text_of_special_tokens_only_is_refused(tiny_bert_dir, tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("\u200b\n\x01\n", encoding="utf-8")
    with pytest.raises(DataError, match="all 2 sentences tokenize to special tokens only"):
        tokenize_dataset(load_train_dataset(str(path)), AutoTokenizer.from_pretrained(tiny_bert_dir), 32)


def _write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_jsonl_is_read_by_field_not_as_raw_lines(tmp_path):
    # before: every row was the raw JSON text '{"text": "the cat sat", "id": 1}'
    path = _write_jsonl(tmp_path / "train.jsonl", [{"text": " the cat sat ", "id": 1}, {"text": None, "id": 2},
                                                  {"text": "a dog runs", "id": 3}])
    assert load_train_dataset(str(path))["text"] == ["the cat sat", "a dog runs"]
    assert read_sentences(path) == ["the cat sat", "a dog runs"]


def test_jsonl_other_column_and_json_list(tmp_path):
    path = _write_jsonl(tmp_path / "train.jsonl", [{"sent": "the cat sat"}, {"sent": "a dog runs"}])
    assert load_train_dataset(str(path), text_column="sent")["text"] == ["the cat sat", "a dog runs"]
    listed = tmp_path / "train.json"
    listed.write_text(json.dumps([{"text": "the cat sat"}, {"text": "a dog runs"}]))
    assert load_train_dataset(str(listed))["text"] == ["the cat sat", "a dog runs"]


@pytest.mark.parametrize(
    "name, content, text_column, message",
    [
        ("train.jsonl", '{"text": "ok"}\n{"sent": "no text field"}\n', None,
         r"line 2 has no field 'text'.*text_column"),
        ("train.jsonl", '{"text": "ok"}\n{"text": "unclosed\n', None, "line 2 is not valid JSON"),
        ("train.jsonl", '{"text": "ok"}\n["a", "list"]\n', None, "line 2 is a JSON list, not an object"),
        # said by JSON's name of the kind ("a JSON str" before)
        ("train.jsonl", '{"text": "ok"}\n"just a string"\n', None,
         "line 2 is a JSON string, not an object with a 'text' field"),
        ("train.jsonl", '{"text": "ok"}\n{"text": 12}\n', None, "line 2: field 'text' holds int 12, not a sentence"),
        ("train.csv", "text,label\na sentence,1\nan extra,column,1\n", "text", "line 3 has 3 fields, the header has 2"),
        ("train.csv", "text,label\na sentence,1\ntoo few\n", "text", "line 3 has 1 fields, the header has 2"),
        ("train.csv", "text, text\na sentence,another\n", "text", "its header names the column 'text' twice"),
        ("train.csv", 'text,label\na sentence,1\n"an unclosed,2\nmore,3\n', "text",
         "line 3 opens a quoted field that is never closed, so every line after it would be one cell"),
        ("train.csv", "text,label\n3,1\n4.5,0\n", "text", "column 'text' holds only numbers"),
        # valid JSON, but one document: "line 1 is not valid JSON (Expecting property name...)" before
        ("train.json", '{\n "data": [{"text": "a"},\n  {"text": "b"}]\n}\n', None,
         r"holds one JSON object over several lines, with the keys \['data'\] \(its records may be the list under "
         r"'data'\).*a \.json file holding one list of objects"),
        # the same on one line: "line 1 has no field 'text' ... Pass text_column", which led nowhere
        ("train.json", '{"data": [{"text": "a"}, {"text": "b"}]}\n', None,
         r"holds one JSON object without a 'text' field, with the keys \['data'\] \(its records may be the list "
         r"under 'data'\)"),
        # the record of a JSON list by its number ("line 1", the list's line, before)
        ("train.json", '[{"text": "a"}, {"text": "b"}, {"text": 3}]', None,
         r"train\.json: record 3: field 'text' holds int 3"),
    ],
)
def test_a_malformed_training_file_is_named_with_its_line(tmp_path, name, content, text_column, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(DataError, match=message):
        load_train_dataset(str(path), text_column=text_column)



@pytest.mark.parametrize("content", ['{\n "data": [{"text": "a"},\n  {"text": "b"}]\n}\n',
                                     '{"data": [{"text": "a"}, {"text": "b"}]}\n'])
def test_the_command_lines_early_check_says_a_json_document_holds_the_records(tmp_path, content):
    """The check before torch read a pretty-printed JSON document line by line: "line 1 is not valid JSON", of a
    valid JSON file; the reader of the whole file said what it is."""
    from hf_cse.text_files import check_json_head

    path = tmp_path / "train.json"
    path.write_text(content)
    with pytest.raises(DataError, match=r"train\.json holds one JSON object .*not records: give a \.jsonl file"):
        check_json_head(path, content, None)
    path.write_text('{"text": "one sentence"}\n')  # a JSON-lines file of one record is one
    check_json_head(path, path.read_text(), None)

def test_a_column_of_mostly_numbers_is_trained_on_with_a_warning(tmp_path, caplog):
    """Not all numbers (no refusal), but most rows are: likely the wrong column or file, said once."""
    path = tmp_path / "train.csv"
    path.write_text("text\nthe cat sat\na dog runs\n" + "".join(f"{i}\n" for i in range(5)))
    with caplog.at_level(logging.WARNING, logger="hf_cse.data"):
        assert len(load_train_dataset(str(path))) == 7
    assert "5 of the 7 rows of column 'text' are numbers, not sentences" in caplog.text
    caplog.clear()
    path.write_text("text\nthe cat sat\na dog runs\n1\n")
    with caplog.at_level(logging.WARNING, logger="hf_cse.data"):
        load_train_dataset(str(path))
    assert "are numbers" not in caplog.text


def test_text_column_for_a_plain_text_file_is_refused(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("the cat sat\na dog runs\n")
    with pytest.raises(DataError, match="text_column sent was given, but .* is read as plain text"):
        load_train_dataset(str(path), text_column="sent")


# ------------------------------------------------------------------ DiffCSE generator


def test_generator_without_masked_lm_head_is_refused(tiny_bert_dir):
    # tiny_bert_dir holds a plain BertModel: transformers would add a random masked-LM head
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    with pytest.raises(GeneratorError, match=r"has no masked-LM head weights \(6 missing.*cls\.predictions"):
        load_generator(str(tiny_bert_dir), tok)


def test_generator_with_masked_lm_head_loads(tiny_bert_dir, tiny_mlm_dir):
    generator = load_generator(str(tiny_mlm_dir), AutoTokenizer.from_pretrained(tiny_bert_dir))
    assert isinstance(generator, MaskedLMGenerator)


# ------------------------------------------------------------------ encoders naming the hidden size differently


@pytest.fixture(scope="module")
def tiny_gpt2_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny_gpt2")
    tok = tiny_tokenizer(folder)
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tok), n_embd=24, n_layer=1, n_head=2, n_positions=64,
                        bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id)
    GPT2Model(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_gpt2_encoder_trains_one_step_with_avg_pooling(tiny_gpt2_dir):
    # before: CSEConfig read hidden_size from the raw dict (GPT-2 calls it n_embd): a 0 x 0 projector
    model = SimCSEModel.from_encoder(str(tiny_gpt2_dir), pooler_type="avg")
    assert model.config.hidden_size == 24 and model.projector.dense.weight.shape == (24, 24)
    tok = AutoTokenizer.from_pretrained(tiny_gpt2_dir)
    batch = tok(["the cat sat on the mat", "a dog runs", "rain falls on the city", "the team won"],
                padding=True, return_tensors="pt")
    batch = {k: v.unsqueeze(1).repeat(1, 2, 1) for k, v in batch.items()}
    model.train()
    before = model.encoder.get_input_embeddings().weight.detach().clone()
    loss, _ = compute_objectives(build_objectives(model.config), model(**batch).embeddings)
    loss.backward()
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    assert torch.isfinite(loss)
    assert not torch.equal(before, model.encoder.get_input_embeddings().weight)


@pytest.mark.parametrize("pooler", ["cls", "cls_before_pooler"])
def test_gpt2_encoder_refuses_first_token_pooling(tiny_gpt2_dir, pooler):
    with pytest.raises(ValueError, match="causal \\(decoder-only\\) encoder.*pooler_type avg"):
        SimCSEModel.from_encoder(str(tiny_gpt2_dir), pooler_type=pooler)


def test_distilbert_hidden_size_still_read_from_dim(tiny_distilbert_dir):
    model = SimCSEModel.from_encoder(str(tiny_distilbert_dir))
    assert model.config.hidden_size == 32 and model.projector.dense.weight.shape == (32, 32)


def test_collator_pads_with_end_of_text_when_the_tokenizer_has_no_pad_token(tiny_bert_dir, caplog):
    # GPT-2's tokenizer has no padding token: before, the first batch failed inside tokenizer.pad
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    tok.pad_token, tok.eos_token = None, "[SEP]"
    with caplog.at_level(logging.WARNING, logger="hf_cse.data"):
        batch = TwoViewCollator(tok)([dict(tok(s)) for s in ["the cat", "a dog runs fast"]])
    assert tok.pad_token == "[SEP]" and "padding with its end-of-text token '[SEP]'" in caplog.text
    assert batch["input_ids"][0, 0, -1] == tok.sep_token_id and batch["attention_mask"][0, 0, -1] == 0


def test_collator_refuses_a_tokenizer_without_pad_or_end_token(tiny_bert_dir):
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    tok.pad_token = None
    with pytest.raises(DataError, match="neither a padding nor an end-of-text token"):
        TwoViewCollator(tok)


def test_too_few_sentences_left_after_dropping_special_only_lines_is_refused(tiny_bert_dir, tmp_path):
    """8 lines pass the row check before tokenizing; 3 of them are special tokens only, leaving 5 < one batch."""
    from hf_cse.cli import train as train_cli

    path = tmp_path / "train.txt"
    path.write_text("the cat sat\na dog runs\nthe man reads\na bird sings\nthe sun shines\n"
                    "\u200b\u200b\n\x01\x02\n\u4e00\u4e01\n", encoding="utf-8")
    with pytest.raises(DataError, match="has 5 sentences, fewer than one global batch of 8"):
        train_cli.train_from_args(["--model_name_or_path", str(tiny_bert_dir), "--train_file", str(path),
                        "--max_steps", "1",
                        "--per_device_train_batch_size", "8", "--output_dir", str(tmp_path / "out"), "--use_cpu",
                        "--disable_tqdm", "true"])
    assert not (tmp_path / "out" / "model.safetensors").exists()


def test_a_mistyped_relative_model_path_is_no_hub_id(tmp_path, monkeypatch):
    """``runs/nosuch`` beside a folder ``runs/`` is a path with a typo: refused at once as no such folder, instead of
    asking the Hub for a repository ``runs/nosuch`` (a minute of retries, then the network blamed)."""
    from hf_cse.checks import InputError, check_model_source

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    with pytest.raises(InputError, match="model_name_or_path runs/nosuch: no such folder"):
        check_model_source("runs/nosuch")


def test_a_lora_adapter_folder_is_named_as_one_with_where_its_model_is(tmp_path):
    """A LoRA run's adapter/ was 'a folder without config.json, so it holds no model'."""
    from hf_cse.checks import InputError, check_model_source

    adapter = tmp_path / "run" / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text('{"peft_type": "LORA"}')
    with pytest.raises(InputError, match=r"CHECKPOINT .*adapter holds a LoRA adapter alone \(adapter_config.json\), "
                                         r"not a model; give the training run's folder"):
        check_model_source(str(adapter), "CHECKPOINT")


@pytest.mark.slow  # files and a saved data set read, whole and streamed (~1.5 s)
@pytest.mark.parametrize("kind", ["jsonl", "json", "csv", "txt", "saved"])
def test_numbers_stored_as_text_are_refused_whatever_they_are_read_from(tmp_path, kind, caplog):
    """{"text": "0"}, {"text": "1"}, ... trained silently from .jsonl/.json files and saved data sets, while the same
    numbers in a .csv (and any streamed) were refused as "only numbers, not sentences"."""
    import json
    from types import SimpleNamespace

    import datasets

    from hf_cse.streaming import load_training_text

    def write(texts: list[str]) -> str:
        path = tmp_path / f"train_{len(list(tmp_path.iterdir()))}.{kind}"
        if kind == "jsonl":
            path.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))
        elif kind == "json":
            path.write_text(json.dumps([{"text": text} for text in texts]))
        elif kind == "csv":
            path.write_text("text\n" + "".join(f"{text}\n" for text in texts))
        elif kind == "txt":
            path.write_text("".join(f"{text}\n" for text in texts))
        else:
            datasets.Dataset.from_dict({"text": texts}).save_to_disk(str(path))
        return str(path)

    def read(source: str, streaming: bool):
        named = {"dataset_name": source, "train_file": None} if kind == "saved" else {"train_file": source,
                                                                                        "dataset_name": None}
        return load_training_text(SimpleNamespace(streaming=streaming, train_files=None), SimpleNamespace(
            dataset_config_name=None, text_column=None, **named), seed=0)

    numbers = write([str(i) for i in range(12)])
    said = "its lines hold" if kind == "txt" else "column 'text' holds"
    for streaming in (False, True):
        with pytest.raises(DataError, match=rf"{said} only numbers, not sentences"):
            read(numbers, streaming)
    mostly = write(["the cat sat", "a dog runs", *map(str, range(5))])
    with caplog.at_level(logging.WARNING, logger="hf_cse.data"):
        assert len(read(mostly, streaming=False)) == 7
    assert "5 of the 7 rows of" in caplog.text and "are numbers, not sentences" in caplog.text


@pytest.mark.slow  # a file read whole and streamed (~1 s)
def test_pair_columns_of_a_file_read_for_sentences_are_named_in_one_warning(tmp_path, caplog):
    """A triplet file (sent0, sent1, hard_neg) read for sentences with text_column sent0 trained on sent0 alone
    without a word: its other columns were dropped before the trainer's check of unread text columns could see them."""
    from types import SimpleNamespace

    from hf_cse.streaming import load_training_text

    path = tmp_path / "nli.csv"
    path.write_text("sent0,sent1,hard_neg,gold_label,score\n" + "".join(
        f"a cat sat {i},a dog ran {i},a bird flew {i},{i % 3},0.{i}\n" for i in range(10)))
    for streaming in (False, True):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="hf_cse.data"):
            load_training_text(SimpleNamespace(streaming=streaming, train_files=None), SimpleNamespace(
                train_file=str(path), dataset_name=None, dataset_config_name=None, text_column="sent0"), seed=0)
        said = [r.getMessage() for r in caplog.records if "not read" in r.getMessage()]
        assert len(said) == 1 and "columns sent1, hard_neg (strings) are not read" in said[0]  # not label, score
        assert "name the positive's column as pair_column (a hard negative's as negative_column)" in said[0]
    caplog.clear()
    (tmp_path / "plain.csv").write_text("text,label\n" + "".join(f"sentence {i},{i}\n" for i in range(10)))
    with caplog.at_level(logging.WARNING, logger="hf_cse.data"):
        load_train_dataset(str(tmp_path / "plain.csv"))
    assert "not read" not in caplog.text
