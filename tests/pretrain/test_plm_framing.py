"""`--objective plm` pre-trains on rows framed as the saved folder's XLNet tokenizer frames a text when the folder is
loaded (A [SEP] [CLS], [CLS] in segment 2, padding on the left), and a plm folder fine-tunes."""
import json
import random

import torch

from bertkit.checkpoints import load_checkpoint
from bertkit.cli import main
from bertkit.pretrain.objectives.plm import xlnet_framing
from test_job import TINY, TINY_CONFIG

PAD, CLS, SEP = 0, 2, 3


def test_xlnet_framing_moves_cls_last_and_pads_left():
    ids = torch.tensor([[CLS, 11, 12, 13, SEP], [CLS, 21, SEP, PAD, PAD]])
    attention = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    types = torch.zeros_like(ids)
    framed, framed_attention, framed_types = xlnet_framing(ids, attention, types, PAD)
    assert framed.tolist() == [[11, 12, 13, SEP, CLS], [PAD, PAD, 21, SEP, CLS]]
    assert framed_attention.tolist() == [[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]]
    assert framed_types.tolist() == [[0, 0, 0, 0, 2], [0, 0, 0, 0, 2]]


def test_plm_rows_are_framed_as_the_saved_folder_frames_a_text_and_the_folder_finetunes(tmp_path, corpus, vocab_dir,
                                                                                          tokenizer):
    out = tmp_path / "plm"
    assert main(["pretrain", "--config", TINY_CONFIG, "--corpus", str(corpus), "--vocab", str(vocab_dir), "--output",
                 str(out), "--arch", "xlnet", "--max-steps", "3", *TINY]) == 0
    loaded = load_checkpoint(out).tokenizer
    texts = ["the cat sat on a mat.", "a big red house!"]
    # the BERT-framed rows pre-training batches hold, right-padded, then framed for XLNet
    bert = tokenizer.pad_to_tensors(tokenizer.encode_batch(texts))
    assert bert["input_ids"][:, 0].eq(CLS).all() and bert["attention_mask"][1, -1] == 0      # [CLS] A [SEP] pad
    framed, framed_attention, framed_types = xlnet_framing(bert["input_ids"], bert["attention_mask"],
                                                           bert["token_type_ids"], PAD)
    expected = loaded.pad_to_tensors(loaded.encode_batch(texts))
    assert framed.tolist() == expected["input_ids"].tolist()
    assert framed_attention.tolist() == expected["attention_mask"].tolist()
    assert framed_types.tolist() == expected["token_type_ids"].tolist()

    rng = random.Random(0)
    data = [{"text": f"the {rng.choice(['cat', 'dog'])} sat", "label": rng.choice(["a", "b"])} for _ in range(24)]
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in data), encoding="utf-8")
    assert main(["finetune", "--model", str(out), "--train", str(train), "--output", str(tmp_path / "ft"),
                 "--max-steps", "2", "--no-baseline", "--quiet"]) == 0
    assert json.loads((tmp_path / "ft" / "config.json").read_text())["architectures"] == \
        ["XLNetForSequenceClassification"]
