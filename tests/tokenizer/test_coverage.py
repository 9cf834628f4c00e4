"""The [UNK]-rate check: fires on Chinese text through an English vocabulary (a tiny one and MiniLM's), names
the rate, examples and the cause; stays silent on matching text; wired into encode, predict and fine-tune."""
import json
import warnings

import pytest
import torch

import bertkit
from bertkit.job_config import job_config
from bertkit.api import minilm_path
from bertkit.tokenizer import Tokenizer
from bertkit.tokenizer.coverage import UNKNOWN_WARN_RATE, measure_coverage, warn_unknown
from bertkit.checkpoints import save_checkpoint
from bertkit.model import Encoder, EncoderConfig
from bertkit.model.heads import SequenceClassificationHead

ENGLISH = ["the cat sat on the mat", "a dog ran in the park", "the cat and the dog"]
CHINESE = ["我爱北京天安门，今天天气很好。", "这家店的服务还是很好的，下次还来。", "中华人民共和国成立了"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "a", "dog", "ran", "in",
         "park", "and", ",", "."]


def english_tokenizer(lowercase=True):
    return Tokenizer.from_vocab({t: i for i, t in enumerate(VOCAB)}, lowercase=lowercase)


def classifier_folder(folder, head=True):
    tokenizer = english_tokenizer()
    torch.manual_seed(0)
    config = EncoderConfig(vocab_size=tokenizer.vocab_size, hidden_size=16, num_layers=1, num_heads=2,
                           intermediate_size=32, max_position_embeddings=64)
    if not head:
        save_checkpoint(folder, Encoder(config), tokenizer)
        return folder
    save_checkpoint(folder, Encoder(config), tokenizer, {"classifier": SequenceClassificationHead(config, 2)},
                    {"task": "classification", "labels": ["other", "pets"]})
    return folder


def messages(record):
    return [str(w.message) for w in record if "[UNK]" in str(w.message)]


def test_chinese_through_a_tiny_english_vocab_warns_once_with_rate_examples_and_cause():
    tokenizer = english_tokenizer()
    with pytest.warns(UserWarning) as record:
        message = warn_unknown(tokenizer, CHINESE, "encode")
    assert messages(record) == [message]
    assert message.startswith("encode: 100% of the text tokens are [UNK] (over 5%), e.g. '")
    assert "'很'" in message and "CJK script" in message and "another language" in message
    assert "bertkit vocab extend" in message   # the remedy that keeps the model: add the characters, then pre-train
    with warnings.catch_warnings():
        warnings.simplefilter("error")            # once per tokenizer, not once per batch
        assert warn_unknown(tokenizer, CHINESE, "encode") is None


def test_matching_text_stays_silent():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert warn_unknown(english_tokenizer(), ENGLISH, "encode") is None
        assert warn_unknown(Tokenizer.from_folder(minilm_path()), ENGLISH + ["Café naïve résumé"], "encode") is None


def test_minilm_vocab_on_chinese_reviews():
    """all-MiniLM-L6-v2's uncased English vocabulary lacks most common Chinese characters (是, 了, 很, 这)."""
    coverage = measure_coverage(Tokenizer.from_folder(minilm_path()), CHINESE)
    assert coverage.rate > 0.3 and "CJK" in coverage.cause
    assert coverage.rate > UNKNOWN_WARN_RATE


def test_casing_is_named_when_lowercasing_would_fix_it():
    tokenizer = english_tokenizer(lowercase=False)      # keeps case over an uncased vocabulary
    message = None
    with pytest.warns(UserWarning):
        message = warn_unknown(tokenizer, ["The Cat sat on The Mat", "A Dog ran"], "fine-tune data x.jsonl")
    assert "casing" in message and "do_lower_case=true" in message


def test_encode_predict_and_finetune_warn_on_chinese(tmp_path):
    folder = classifier_folder(tmp_path / "clf")
    model = bertkit.load(folder)
    with pytest.warns(UserWarning, match=r"^predict: 100% of the text tokens are \[UNK\]"):
        model.predict(CHINESE)
    model = bertkit.load(folder)
    with pytest.warns(UserWarning, match=r"^encode: .*CJK"):
        model.encode(CHINESE)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        bertkit.load(folder).encode(ENGLISH)
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"text": t, "label": label}) + "\n"
                             for t, label in zip(CHINESE * 2, ["pets", "other"] * 3)), encoding="utf-8")
    from bertkit.finetune import FinetuneConfig, run_finetune
    with pytest.warns(UserWarning, match=r"fine-tune data .*train.jsonl: 100% .*CJK script"):
        run_finetune(job_config(FinetuneConfig, task="classification", model=str(folder), train=str(train),
                                    output=str(tmp_path / "out"), epochs=1, max_length=32))


def test_rerank_finetune_warns_on_chinese_and_not_on_english(tmp_path):
    from bertkit.finetune.rerank import RerankConfig, run_rerank_finetune
    folder = classifier_folder(tmp_path / "encoder", head=False)

    def run(texts, name):
        train = tmp_path / f"{name}.jsonl"
        train.write_text("".join(json.dumps({"query": t, "positive": texts[i - 1], "negative": texts[i - 2]}) + "\n"
                                 for i, t in enumerate(texts)), encoding="utf-8")
        run_rerank_finetune(job_config(RerankConfig, model=str(folder), train=str(train), output=str(tmp_path / name),
                                         epochs=1, batch_size=3, max_length=32, progress_bar=False))

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        run(ENGLISH, "english")
    with pytest.warns(UserWarning, match=r"fine-tune data .*chinese.jsonl: 100% .*CJK script"):
        run(CHINESE, "chinese")


def test_prompt_and_seq2seq_finetune_warn_on_chinese(tmp_path):
    from bertkit.cli import main
    from bertkit.model.heads import MaskedLMHead
    tokenizer = english_tokenizer()
    torch.manual_seed(0)
    config = EncoderConfig(vocab_size=tokenizer.vocab_size, hidden_size=16, num_layers=1, num_heads=2,
                           intermediate_size=32, max_position_embeddings=64)
    save_checkpoint(tmp_path / "mlm", Encoder(config), tokenizer, {"mlm": MaskedLMHead(config)})
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"text": t, "label": label, "source": t, "target": t}) + "\n"
                            for t, label in zip(CHINESE * 2, ["pets", "other"] * 3)), encoding="utf-8")
    common = ["--model", str(tmp_path / "mlm"), "--train", str(rows), "--epochs", "1", "--max-length", "32",
              "--progress_bar=false"]
    with pytest.warns(UserWarning, match=r"fine-tune data .*rows.jsonl: 100% .*CJK script"):
        assert main(["finetune", "--task", "classification", *common, "--output", str(tmp_path / "pet"),
                     "--template", "{text} a [MASK] .", "--verbalizer", "pets=cat,other=dog"]) == 0
    with pytest.warns(UserWarning, match=r"fine-tune data .*rows.jsonl: 100% .*CJK script"):
        assert main(["finetune", "--task", "seq2seq", *common, "--output", str(tmp_path / "s2s")]) == 0


def test_a_chinese_vocab_short_of_characters_is_not_called_another_language():
    """A Chinese vocabulary trained on too little text warned 'a vocabulary for another language' on Chinese
    reviews; the cause now says it lacks characters of its own script."""
    known = sorted(set("".join(CHINESE[:2])) - set("，。"))
    tokenizer = Tokenizer.from_vocab({t: i for i, t in enumerate(VOCAB[:5] + known)})
    texts = ["中华人民共和国成立了，国家和人民。"] * 3
    coverage = measure_coverage(tokenizer, texts)
    assert coverage.rate > UNKNOWN_WARN_RATE
    assert "another language" not in coverage.cause and "lacks these characters" in coverage.cause
    assert "another language" in measure_coverage(english_tokenizer(), CHINESE).cause
