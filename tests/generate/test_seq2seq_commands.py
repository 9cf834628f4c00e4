import gzip
import importlib
import json

import pytest

from bertkit.checkpoints import load_checkpoint, save_checkpoint
from bertkit.cli import main
from bertkit.errors import CheckpointError, InputFileError
from bertkit.finetune.seq2seq.job import Seq2SeqGenerator, read_pairs

PAIRS = [("thou art good", "you are good"), ("god hath said", "god has said"),
         ("let there be light", "let there be light"), ("thee art very bad", "you are very bad")] * 4


def _write(path, rows):
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_read_pairs_accepts_both_field_names_and_reports_bad_rows(tmp_path):
    path = _write(tmp_path / "p.jsonl.gz", [{"text_a": "a", "text_b": "b", "ref": "x"}, {"source": "c", "target": "d"}])
    assert [(p.source, p.target, p.line) for p in read_pairs(path)] == [("a", "b", 1), ("c", "d", 2)]
    bad = _write(tmp_path / "bad.jsonl", [{"source": "a", "target": "b"}, {"source": "a"}])
    with pytest.raises(InputFileError, match=r"bad.jsonl:2: missing field 'target'"):
        read_pairs(bad)
    bad = _write(tmp_path / "bad2.jsonl", [{"text": "a"}])
    with pytest.raises(InputFileError, match=r"bad2.jsonl:1: needs a \"source\""):
        read_pairs(bad)
    assert read_pairs(bad.with_name("bad.jsonl"), require_target=False)[1].target is None


def test_finetune_seq2seq_then_generate_predict_evaluate(tmp_path, capsys, make_mlm_folder):
    model = make_mlm_folder("mlm")
    train = _write(tmp_path / "train.jsonl", [{"source": s, "target": t} for s, t in PAIRS])
    dev = _write(tmp_path / "dev.jsonl.gz", [{"text_a": s, "text_b": t} for s, t in PAIRS[:4]])
    out = tmp_path / "s2s"
    code = main(["finetune", "--task", "seq2seq", "--model", str(model), "--train", str(train), "--dev", str(dev),
                 "--output", str(out), "--epochs", "15", "--lr", "3e-3", "--batch-size", "4", "--max-length", "32",
                 "--warmup-ratio", "0", "--progress_bar=false"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["dev"]["loss"] < 1.5
    assert json.loads((out / "bertkit.json").read_text())["task"] == "seq2seq"

    generator = Seq2SeqGenerator(out)
    cached = generator.decode(["thou art good", "god hath said"], max_new_tokens=8)
    assert cached == generator.decode(["thou art good", "god hath said"], max_new_tokens=8, use_cache=False)
    assert main(["generate", "--model", str(out), "--source", "thou art good", "--max-new-tokens", "8"]) == 0
    assert capsys.readouterr().out.strip() == cached[0]

    assert main(["predict", "--model", str(out), "--input", str(dev), "--output", str(tmp_path / "p.jsonl")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and rows[0]["source"] == PAIRS[0][0] and "generated" in rows[0] and "target" in rows[0]
    assert main(["predict", "--model", str(out), "--input", str(dev), "--output", str(tmp_path / "b.jsonl"),
                 "--num-beams", "3", "--no-repeat-ngram-size", "2"]) == 0
    beams = [json.loads(line)["generated"] for line in (tmp_path / "b.jsonl").read_text().splitlines()]
    assert beams == generator.decode([s for s, _ in PAIRS[:4]], 64, num_beams=3, no_repeat_ngram_size=2)
    capsys.readouterr()
    assert main(["evaluate", "--model", str(out), "--input", str(dev)]) == 0
    assert json.loads(capsys.readouterr().out)["loss"] < 1.5


def test_seq2seq_errors_are_one_line(tmp_path, capsys, make_mlm_folder):
    no_mlm = make_mlm_folder("plain", with_mlm=False)
    train = _write(tmp_path / "train.jsonl", [{"source": "a", "target": "b"}])
    assert main(["finetune", "--task", "seq2seq", "--model", str(no_mlm), "--train", str(train),
                 "--output", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "no MLM head" in err and str(no_mlm) in err
    model = make_mlm_folder("mlm")
    assert main(["finetune", "--task", "seq2seq", "--model", str(model), "--train", str(train),
                 "--output", str(tmp_path / "o"), "--gradual-unfreezing"]) == 2
    assert "not supported with --task seq2seq" in capsys.readouterr().err
    assert main(["finetune", "--task", "seq2seq", "--model", str(model), "--train", str(train),
                 "--output", str(tmp_path / "o"), "--template", "{text} [MASK]"]) == 2
    assert "prompt-based" in capsys.readouterr().err
    assert main(["generate", "--model", str(model), "--source", "a"]) == 2
    assert "not fine-tuned for seq2seq" in capsys.readouterr().err


def test_generate_beam_search_flags_and_bad_values(tmp_path, capsys, make_mlm_folder):
    mlm = load_checkpoint(make_mlm_folder("mlm"))
    folder = save_checkpoint(tmp_path / "s2s", mlm.encoder, mlm.tokenizer, {"mlm": mlm.heads["mlm"]},
                             {"task": "seq2seq", "max_length": 32})     # untrained: decoding is all that is tested
    generator = Seq2SeqGenerator(folder)
    expected = generator.decode(["thou art good"], max_new_tokens=12, num_beams=3, no_repeat_ngram_size=2)[0]
    assert expected == generator.decode(["thou art good"], max_new_tokens=12, num_beams=3, no_repeat_ngram_size=2,
                                        use_cache=False)[0]
    assert main(["generate", "--model", str(folder), "--source", "thou art good", "--max-new-tokens", "12",
                 "--num-beams", "3", "--no-repeat-ngram-size", "2"]) == 0
    printed = capsys.readouterr().out.strip()
    words = printed.split()
    assert printed == expected and len(set(zip(words, words[1:]))) == len(words) - 1

    for flags, message in ((["--num-beams", "0"], "--num-beams must be >= 1"),
                           (["--no-repeat-ngram-size", "-1"], "--no-repeat-ngram-size must be >= 0"),
                           (["--repetition-penalty", "0"], "--repetition-penalty must be a finite number > 0"),
                           (["--repetition-penalty", "nan"], "--repetition-penalty must be a finite number > 0"),
                           (["--num-beams", "2", "--top-k", "5"], "--top-k: seq2seq decoding is greedy or beam")):
        assert main(["generate", "--model", str(folder), "--source", "a", *flags]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1
    assert main(["generate", "--model", str(folder), "--prompt", "a", "--num-beams", "2"]) == 2
    assert "is for seq2seq folders (--source)" in capsys.readouterr().err


def test_generate_source_passes_the_repetition_penalty(tmp_path, capsys, make_mlm_folder):
    mlm = load_checkpoint(make_mlm_folder("mlm"))
    folder = save_checkpoint(tmp_path / "s2s", mlm.encoder, mlm.tokenizer, {"mlm": mlm.heads["mlm"]},
                             {"task": "seq2seq", "max_length": 32})
    generator = Seq2SeqGenerator(folder)
    plain = generator.decode(["thou art good"], max_new_tokens=12)[0]
    penalised = generator.decode(["thou art good"], max_new_tokens=12, repetition_penalty=3.0)[0]
    assert penalised != plain          # the untrained model loops; the penalty changes its greedy path
    assert main(["generate", "--model", str(folder), "--source", "thou art good", "--max-new-tokens", "12",
                 "--repetition-penalty", "3"]) == 0
    assert capsys.readouterr().out.strip() == penalised
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps({"source": "thou art good"}) + "\n", encoding="utf-8")
    assert main(["predict", "--model", str(folder), "--input", str(source), "--output", str(tmp_path / "out.jsonl"),
                 "--max-new-tokens", "12", "--repetition-penalty", "3"]) == 0
    assert json.loads((tmp_path / "out.jsonl").read_text(encoding="utf-8"))["generated"] == penalised
    capsys.readouterr()
    assert main(["predict", "--model", str(folder), "--input", str(source), "--output", str(tmp_path / "bad.jsonl"),
                 "--repetition-penalty", "0"]) == 2
    err = capsys.readouterr().err
    assert "--repetition-penalty must be a finite number > 0" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "bad.jsonl").exists()


def test_a_seq2seq_folder_path_goes_to_its_own_loader_once_with_the_decoding_settings(tmp_path, monkeypatch):
    """predict_file / evaluate_file route a folder by bertkit.json's task (finetune/tasks.py), without loading its
    weights first: the job's own loader is the only load; predict's decoding settings reach it."""
    predict_module = importlib.import_module("bertkit.finetune.predict")
    folder = tmp_path / "s2s"
    folder.mkdir()
    (folder / "bertkit.json").write_text(json.dumps({"task": "seq2seq"}))
    seen = []
    monkeypatch.setattr(predict_module, "_checkpoint_of", lambda model: pytest.fail("weights loaded to route"))
    monkeypatch.setattr(predict_module, "predict_seq2seq_file",
                        lambda folder, source, output, encoding, **generation: seen.append(generation) or 7)
    monkeypatch.setattr(predict_module, "evaluate_seq2seq_file", lambda folder, *rest: {"loss": 0.5})
    settings = {"max_new_tokens": 9, "num_beams": 3, "no_repeat_ngram_size": 2}
    assert predict_module.predict_file(str(folder), "in.jsonl", "out.jsonl", generation=settings) == 7
    assert seen == [settings]
    assert predict_module.evaluate_file(folder, "dev.jsonl") == {"loss": 0.5}
    with pytest.raises(CheckpointError, match="fine-tuned for 'seq2seq', not 'classification'"):
        predict_module.evaluate_file(folder, "dev.jsonl", task="classification")
