from bertkit.checkpoints.gpt2 import save_gpt2
from bertkit.cli import main
from bertkit.generate import generate
from bertkit.tokenizer.bpe import BPETokenizer


def test_vocab_bpe_then_generate_streams_text(tmp_path, corpus_file, tiny_model, capsys):
    assert main(["vocab-bpe", "--corpus", str(corpus_file), "--output", str(tmp_path / "tok"),
                 "--vocab-size", "300", "--min-frequency", "1"]) == 0
    tokenizer = BPETokenizer.from_folder(tmp_path / "tok")
    assert tokenizer.vocab_size == 300
    save_gpt2(tmp_path / "model", tiny_model, tokenizer)
    capsys.readouterr()
    args = ["generate", "--model", str(tmp_path / "model"), "--prompt", "the cat", "--max-new-tokens", "5"]
    assert main(args) == 0
    greedy = capsys.readouterr()
    assert greedy.out.startswith("the cat") and "5 tokens" in greedy.err
    assert main(args + ["--no-cache"]) == 0
    assert capsys.readouterr().out == greedy.out
    assert main(args + ["--top-k", "20", "--top-p", "0.9", "--temperature", "1.2", "--seed", "1"]) == 0
    sampled = capsys.readouterr().out
    assert main(args + ["--top-k", "20", "--top-p", "0.9", "--temperature", "1.2", "--seed", "1"]) == 0
    assert capsys.readouterr().out == sampled
    # the repetition controls reach GPT-2 generation (they were refused without --source)
    assert main(args + ["--no-repeat-ngram-size", "1", "--repetition-penalty", "1.3"]) == 0
    controlled = capsys.readouterr().out
    prompt_ids = tokenizer.encode("the cat")
    expected = generate(tiny_model, prompt_ids, 5, eos_id=tokenizer.eos_id, no_repeat_ngram_size=1,
                        repetition_penalty=1.3)
    assert controlled == "the cat" + tokenizer.decode(expected.token_ids) + "\n"
    ids = prompt_ids + expected.token_ids
    assert len(set(ids)) == len(ids)                    # no-repeat 1: no token twice, the prompt's included


def test_generate_errors_are_one_line(tmp_path, capsys):
    assert main(["generate", "--model", str(tmp_path), "--prompt", "x"]) == 2
    assert "config.json" in capsys.readouterr().err
    for flags, message in ((["--no-repeat-ngram-size", "-2"], "--no-repeat-ngram-size must be >= 0"),
                           (["--repetition-penalty", "-1"], "--repetition-penalty must be a finite number > 0"),
                           (["--repetition-penalty", "inf"], "--repetition-penalty must be a finite number > 0")):
        assert main(["generate", "--model", str(tmp_path), "--prompt", "x", *flags]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1
