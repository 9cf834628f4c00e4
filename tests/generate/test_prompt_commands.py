import json

import numpy as np
import pytest
import torch

from bertkit.checkpoints import load_checkpoint
from bertkit.cli import main
from bertkit.finetune.prompt.pet import Pattern, PETClassifier, Verbalizer
from bertkit.finetune.prompt.job import label_scores, load_prompt_classifier
from bertkit.finetune.prompt.ptuning import PTuningClassifier

ROWS = [("a good movie", "pos"), ("very good film", "pos"), ("a bad movie", "neg"), ("very bad film", "neg")] * 2


def _write(path, rows):
    path.write_text("".join(json.dumps({"text": t, "label": l}) + "\n" for t, l in rows), encoding="utf-8")
    return path


@pytest.fixture
def files(tmp_path, make_mlm_folder):
    return make_mlm_folder("mlm"), _write(tmp_path / "train.jsonl", ROWS), \
        _write(tmp_path / "dev.jsonl", ROWS[:4])


PET = ["--template", "{text} It was [MASK].", "--verbalizer", "pos=great,neg=terrible"]


def _zero_shot_reference(model_dir) -> np.ndarray:
    """(4, 2) pos/neg probabilities of the dev texts from the MLM folder itself, built by hand (no job code)."""
    base = load_checkpoint(model_dir)
    pet = PETClassifier(base.encoder, base.heads["mlm"], base.tokenizer, Pattern.parse("{text} It was [MASK]."),
                        Verbalizer.parse("pos=great,neg=terrible", base.tokenizer)).eval()
    return torch.softmax(torch.from_numpy(label_scores(pet, [t for t, _ in ROWS[:4]])), -1).numpy()


def test_zero_shot_then_evaluate_and_predict(files, tmp_path, capsys):
    model, _, dev = files
    out = tmp_path / "zs"
    assert main(["finetune", "--task", "classification", "--model", str(model), "--dev", str(dev),
                 "--output", str(out), "--epochs", "0", *PET]) == 0
    report = json.loads(capsys.readouterr().out)
    reference = _zero_shot_reference(model)
    gold = [label for _, label in ROWS[:4]]
    predicted = [["pos", "neg"][i] for i in reference.argmax(-1)]
    assert report["steps"] == 0
    assert report["dev"]["accuracy"] == pytest.approx(np.mean([p == g for p, g in zip(predicted, gold)]))
    assert main(["evaluate", "--model", str(out), "--input", str(dev)]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] == report["dev"]["accuracy"]
    assert main(["predict", "--model", str(out), "--input", str(dev), "--output", str(tmp_path / "p.jsonl"),
                 "--task", "classification"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert [r["label"] for r in rows] == predicted and [r["text"] for r in rows] == [t for t, _ in ROWS[:4]]
    np.testing.assert_allclose([[r["scores"]["pos"], r["scores"]["neg"]] for r in rows], reference, atol=1e-6)
    np.testing.assert_allclose([r["score"] for r in rows], reference.max(-1), atol=1e-6)


def test_pet_few_shot_training_fits_and_reloads(files, tmp_path, capsys):
    model, train, dev = files
    out = tmp_path / "pet"
    assert main(["finetune", "--model", str(model), "--train", str(train), "--dev", str(dev), "--output", str(out),
                 "--epochs", "30", "--lr", "3e-3", "--batch-size", "4", "--warmup-ratio", "0", "--eval-every", "1000",
                 "--progress_bar=false", *PET]) == 0
    assert json.loads(capsys.readouterr().out)["dev"]["accuracy"] == 1.0
    assert main(["evaluate", "--model", str(out), "--input", str(dev), "--task", "prompt-classification"]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] == 1.0


def test_ptuning_saved_prompt_gives_the_same_scores(files, tmp_path, capsys):
    model, train, dev = files
    out = tmp_path / "pt"
    assert main(["finetune", "--model", str(model), "--train", str(train), "--dev", str(dev), "--output", str(out),
                 "--epochs", "3", "--batch-size", "4", "--progress_bar=false", "--ptuning", "--freeze-encoder",
                 "--template", "{text} [P] [P] [MASK].", "--verbalizer", "pos=great,neg=terrible"]) == 0
    capsys.readouterr()
    saved = load_checkpoint(out)
    base = load_checkpoint(model)
    words = base.encoder.embeddings.token.weight
    prompt_rows = saved.meta["prompt_token_ids"]
    assert len(prompt_rows) == 2
    # Only the reserved rows changed: the encoder was frozen, the prompt went into those rows.
    others = [i for i in range(len(words)) if i not in prompt_rows]
    torch.testing.assert_close(saved.encoder.embeddings.token.weight[others], words[others])
    assert not torch.equal(saved.encoder.embeddings.token.weight[prompt_rows], words[prompt_rows])
    # The hooked P-tuning model and the plain reloaded PETClassifier score alike.
    pattern = Pattern.parse("{text} [P] [P] [MASK].")
    hooked = PTuningClassifier(base.encoder, base.heads["mlm"], base.tokenizer, pattern,
                               Verbalizer.parse("pos=great,neg=terrible", base.tokenizer))
    with torch.no_grad():
        hooked.prompt.copy_(saved.encoder.embeddings.token.weight[prompt_rows])
    texts = [t for t, _ in ROWS[:4]]
    torch.testing.assert_close(torch.from_numpy(label_scores(load_prompt_classifier(out), texts)),
                               torch.from_numpy(label_scores(hooked, texts)))


@pytest.mark.parametrize("extra, message", [
    (["--freeze-encoder"], "add --ptuning"),
    (["--class-weights", "sqrt"], "not supported"),
    (["--task", "ner"], "--task classification"),
])
def test_prompt_flag_errors(files, tmp_path, capsys, extra, message):
    model, train, dev = files
    args = ["finetune", "--model", str(model), "--train", str(train), "--output", str(tmp_path / "o"), *PET, *extra]
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_model_without_mlm_head_and_bad_labels(files, tmp_path, capsys, make_mlm_folder):
    model, train, dev = files
    plain = make_mlm_folder("plain", with_mlm=False)
    assert main(["finetune", "--model", str(plain), "--dev", str(dev), "--output", str(tmp_path / "o"),
                 "--epochs", "0", *PET]) == 2
    err = capsys.readouterr().err
    assert "no MLM head" in err and str(plain) in err
    bad = _write(tmp_path / "bad.jsonl", [("a good movie", "pos"), ("a film", "meh")])
    assert main(["finetune", "--model", str(model), "--dev", str(bad), "--output", str(tmp_path / "o"),
                 "--epochs", "0", *PET]) == 2
    assert "bad.jsonl:2" in capsys.readouterr().err
    assert main(["finetune", "--model", str(model), "--output", str(tmp_path / "o"), "--epochs", "0", *PET]) == 2
    assert "--dev" in capsys.readouterr().err
