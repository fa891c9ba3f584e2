"""A PromptBERT model exported to sentence-transformers: SentenceTransformer(folder, trust_remote_code=True).encode
gives hf_cse's test embeddings (template, [MASK] pooling, template denoising when on), from the folder's own code;
also a decoder with a PromptEOL-style template (no [MASK]: its last token)."""

import json
from pathlib import Path

import pytest
import torch
from helpers import random_sentences
from sentence_transformers import SentenceTransformer
from transformers import AutoTokenizer

from hf_cse.export import to_sentence_transformer
from hf_cse.models import PromptBERTModel

pytestmark = pytest.mark.slow  # exports and reloads a model (1-2 s each)

PROMPTEOL = 'This sentence : "{sentence}" means in one word:"'


def own_embeddings(model, tok, sentences):
    """The model's test embedding of ``sentences``: their texts as its test time edits them (the period), tokenized."""
    edit = model.test_text_edit()
    batch = tok([edit(s) for s in sentences] if edit else sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        return model.sentence_embedding(batch["input_ids"], batch["attention_mask"])


def exported_and_own(encoder_dir, tmp_path, **config):
    tok = AutoTokenizer.from_pretrained(encoder_dir)
    model = PromptBERTModel.from_encoder(str(encoder_dir), **config).eval()
    folder = to_sentence_transformer(model, tmp_path / "st", tokenizer=tok)
    sentences = random_sentences(5, seed=7)  # no final punctuation
    st = SentenceTransformer(str(folder), device="cpu", trust_remote_code=True)
    return folder, st, st.encode(sentences, convert_to_tensor=True), own_embeddings(model, tok, sentences)


@pytest.mark.parametrize("period", [True, False])
def test_the_export_ends_a_test_sentence_with_a_period_as_the_authors_evaluation(tiny_bert_dir, tmp_path, period):
    """evaluation.py appends '.' to a test sentence ending in none of . ? " ' before templating it; the export does
    the same where test_sentence_period is on (the default), and embeds the text as given where it is off."""
    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    model = PromptBERTModel.from_encoder(str(tiny_bert_dir), test_sentence_period=period).eval()
    st = SentenceTransformer(str(to_sentence_transformer(model, tmp_path / "st", tokenizer=tok)), device="cpu",
                             trust_remote_code=True)
    bare, ended, asked = "the cat sat on the mat", "the cat sat on the mat.", "the cat sat on the mat?"
    got = st.encode([bare, ended, asked], convert_to_tensor=True)
    model.config.test_sentence_period = False  # the model's embedding of each text exactly as written
    want = own_embeddings(model, tok, [bare, ended, asked])
    assert torch.allclose(got[0], want[1 if period else 0], rtol=0, atol=1e-6)
    assert not torch.allclose(want[0], want[1], rtol=0, atol=1e-3)  # the period changes the embedding
    assert torch.allclose(got[1:], want[1:], rtol=0, atol=1e-6)  # ended sentences are left as they are


@pytest.mark.parametrize("denoise", [False, True])
def test_export_gives_the_models_embeddings(tiny_bert_dir, tmp_path, denoise):
    folder, st, got, want = exported_and_own(tiny_bert_dir, tmp_path, test_template_denoising=denoise)
    assert torch.allclose(got, want, rtol=0, atol=1e-6)
    assert type(st[0]).__module__.startswith("transformers_modules")  # the folder's copy, not hf_cse's
    assert [m["type"] for m in json.loads((folder / "modules.json").read_text())] == [
        "st_pooling.PromptTransformer", "st_pooling.PromptMaskPooling"]
    card = (folder / "README.md").read_text()
    assert "trust_remote_code=True" in card and "PromptBERT" in card and "2201.04337" in card
    assert ("template denoising" in card.split("| Pooling |")[1].split("\n")[0]) is denoise


def test_head_used_at_test_time_follows_the_pooling(tiny_bert_dir, tmp_path):
    """mlp_only_train=False (the authors' sentemb_forward without --mlp_only_train): the MLP on the [MASK] vector,
    exported as a Dense module after the prompt pooling."""
    folder, st, got, want = exported_and_own(tiny_bert_dir, tmp_path, mlp_only_train=False)
    assert "Dense" in json.loads((folder / "modules.json").read_text())[2]["type"]
    card = (folder / "README.md").read_text()
    assert "st_pooling.PromptTransformer" in card and "Dense(32 -> 32, Tanh)" in card  # the card's module list
    assert torch.allclose(got, want, rtol=0, atol=1e-6)


def test_without_trust_remote_code_sentence_transformers_refuses(tiny_bert_dir, tmp_path):
    folder, _, _, _ = exported_and_own(tiny_bert_dir, tmp_path)
    with pytest.raises(ValueError, match="trust_remote_code"):
        SentenceTransformer(str(folder), device="cpu")


def test_decoder_with_a_promptEOL_template_exports_its_last_token(tiny_llama_dir, tmp_path):
    _, _, got, want = exported_and_own(tiny_llama_dir, tmp_path, template=PROMPTEOL, template2=PROMPTEOL,
                                       pooler_type="last", test_template_denoising=True)
    assert torch.nn.functional.cosine_similarity(got, want).min() >= 0.9999


def test_training_run_with_the_preset_and_another_loss_exports_the_trained_model(tiny_bert_dir, tmp_path):
    """--preset promptbert_bert_base --loss gs_infonce (PromptBERT views under another registry loss) trains, saves a
    promptbert model and exports it; the export gives the saved model's embeddings."""
    from transformers import AutoModel

    from hf_cse.cli.train import train_from_args

    out = tmp_path / "run"
    train_from_args(["--preset", "promptbert_bert_base", "--loss", "gs_infonce", "--model_name_or_path",
                     str(tiny_bert_dir), "--max_steps", "2", "--per_device_train_batch_size", "8",
                     "--max_train_samples", "32", "--eval_strategy", "no", "--save_strategy", "no",
                     "--load_best_model_at_end", "false", "--report_to", "none", "--output_dir", str(out)])
    model = AutoModel.from_pretrained(out).eval()
    assert model.config.method == "promptbert" and model.config.loss == "gs_infonce"
    tok = AutoTokenizer.from_pretrained(out)
    sentences = random_sentences(4, seed=11)
    want = own_embeddings(model, tok, sentences)
    st = SentenceTransformer(str(out / "sentence-transformers"), device="cpu", trust_remote_code=True)
    assert torch.allclose(st.encode(sentences, convert_to_tensor=True), want, rtol=0, atol=1e-6)


def test_the_files_shipped_as_remote_code_import_nothing_from_hf_cse():
    """st_pooling.py and templates.py are copied into a PromptBERT export and imported there by sentence-transformers
    (trust_remote_code): an import of hf_cse (relative or absolute) would fail in a folder without the package."""
    import ast

    from hf_cse.models import promptbert

    folder = Path(promptbert.__file__).parent
    shipped = {"st_pooling", "templates"}
    for name in shipped:
        for node in ast.walk(ast.parse((folder / f"{name}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                assert node.level == 1 and node.module in shipped, f"{name}.py: from {'.' * node.level}{node.module}"
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            assert not any(m.split(".")[0] == "hf_cse" for m in modules), f"{name}.py imports {modules}"


def test_an_overwrite_by_another_methods_export_leaves_none_of_the_prompt_code(tiny_bert_dir, tmp_path):
    """A SimCSE export over a PromptBERT one (overwrite=True) kept PromptBERT's st_pooling.py, templates.py and
    prompt_template.json (missing from the hand-kept list of export files): its folder shipped another method's
    code. The files an export writes are those its record lists; the user's own are kept."""
    from hf_cse.models import SimCSEModel

    tok = AutoTokenizer.from_pretrained(tiny_bert_dir)
    folder = to_sentence_transformer(PromptBERTModel.from_encoder(str(tiny_bert_dir)).eval(), tmp_path / "st",
                                     tokenizer=tok)
    own_code = {"st_pooling.py", "templates.py", "prompt_template.json"} & {p.name for p in folder.iterdir()}
    assert "st_pooling.py" in own_code
    assert own_code <= set(json.loads((folder / "hf_cse_card_inputs.json").read_text())["files"])
    (folder / "notes.txt").write_text("mine")
    to_sentence_transformer(SimCSEModel.from_encoder(str(tiny_bert_dir)).eval(), folder, tokenizer=tok,
                            overwrite=True)
    assert not own_code & {p.name for p in folder.iterdir()} and (folder / "notes.txt").read_text() == "mine"
    assert all(m["type"].startswith("sentence_transformers.") for m in json.loads((folder / "modules.json")
                                                                                   .read_text()))
