import json
import random

import numpy as np
import pytest
import torch

import bertkit
from bertkit.checkpoints import load_checkpoint, save_checkpoint
from bertkit.cli import build_parser, main
from bertkit.errors import BertkitWarning
from bertkit.generate import RepetitionConfig, SamplingConfig
from bertkit.finetune.seq2seq.job import read_pairs
from bertkit.finetune.seq2seq.simbert import (DEFAULT_REPETITION, SimBert, SimBertGenerator, SimBertLoss,
                                              evaluate_simbert, pair_rows, trained_pipeline, true_ranks)
from bertkit.finetune.seq2seq.unilm import Seq2SeqLM, seq2seq_decode, seq2seq_sample
from bertkit.model.config import EncoderConfig
from bertkit.model.encoder import Encoder
from bertkit.model.heads import MaskedLMHead
from bertkit.tokenizer import Tokenizer

MLM_WORDS = ("it was great terrible good bad movie film the a very not thou art thee you are hath has "
             "said god light let there be and").split()     # tests/generate/conftest.py's make_mlm_folder vocabulary
# Planted pairs: b is a word-for-word translation of a through a fixed map between two disjoint word sets, so
# a's partner is identifiable only by learning the map.
SIDE_A, SIDE_B = MLM_WORDS[:8], MLM_WORDS[8:16]


def _planted_pairs(count: int, seed: int = 0) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    pairs, seen = [], set()
    while len(pairs) < count:
        words = tuple(rng.sample(range(len(SIDE_A)), 3))
        if words not in seen:
            seen.add(words)
            pairs.append((" ".join(SIDE_A[w] for w in words), " ".join(SIDE_B[w] for w in words)))
    return pairs


def _write(path, pairs):
    path.write_text("".join(json.dumps({"text_a": a, "text_b": b}) + "\n" for a, b in pairs), encoding="utf-8")
    return path


def _simbert(folder, pooling="cls") -> tuple[SimBert, object]:
    checkpoint = load_checkpoint(folder)
    sentence = trained_pipeline(checkpoint, pooling).build(checkpoint.encoder, whiten=False)
    return SimBert(Seq2SeqLM(checkpoint.encoder, checkpoint.heads["mlm"]), sentence), checkpoint.tokenizer


def _tiny_start(folder):
    """A tiny random BERT + MLM head over the planted pairs' words, saved as a folder (seeded)."""
    torch.manual_seed(0)
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", *MLM_WORDS]
    tokenizer = Tokenizer.from_vocab({t: i for i, t in enumerate(tokens)}, lowercase=True)
    config = EncoderConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_layers=2, num_heads=2,
                           intermediate_size=64, max_position_embeddings=64, hidden_dropout=0.0,
                           attention_dropout=0.0)
    encoder = Encoder(config)
    head = MaskedLMHead(config)
    head.apply(encoder._init_weights)
    return save_checkpoint(folder, encoder, tokenizer, {"mlm": head})


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny random BERT fine-tuned as SimBERT on 48 planted pairs, its starting folder and a dev file (the first
    16 pairs: the test checks that the planted signal was learned, not generalisation)."""
    root = tmp_path_factory.mktemp("simbert")
    start = _tiny_start(root / "start")
    pairs = _planted_pairs(48)
    train = _write(root / "train.jsonl", pairs)
    dev = _write(root / "dev.jsonl", pairs[:16])
    out = root / "simbert"
    code = main(["finetune", "--task", "simbert", "--model", str(start), "--train", str(train),
                 "--output", str(out), "--epochs", "12", "--lr", "5e-3", "--batch-size", "8", "--max-length", "16",
                 "--warmup-ratio", "0", "--progress_bar=false"])
    assert code == 0
    return start, out, dev


def test_training_lowers_both_losses_and_retrieves_the_planted_partner(trained):
    start, out, dev = trained
    pairs = read_pairs(dev)
    before = evaluate_simbert(*_simbert(start), pairs, 16, batch_size=8)
    after = evaluate_simbert(*_simbert(out), pairs, 16, batch_size=8)
    assert after["generation_loss"] < 0.5 * before["generation_loss"]
    assert after["similarity_loss"] < 0.5 * before["similarity_loss"]
    # 16 candidates: chance top-1 is 1/16 and chance mean rank 8.5
    assert after["retrieval_top1"] >= 0.5 > before["retrieval_top1"]
    assert after["mean_rank"] < 3
    meta = json.loads((out / "bertkit.json").read_text())
    assert meta["task"] == "simbert" and meta["encode"]["pooling"] == "cls"


def test_source_vectors_of_the_seq2seq_pass_equal_a_plain_encode(trained):
    """The similarity loss pools the source side of the seq2seq rows: those must be the vectors bertkit.load(...)
    .encode gives the source alone, or the model trains one vector and ranks with another."""
    _, out, dev = trained
    model, tokenizer = _simbert(out)
    model.eval()
    pairs = read_pairs(dev)[:6]
    a = [e.ids for e in tokenizer.backend.encode_batch([p.source for p in pairs], add_special_tokens=False)]
    b = [e.ids for e in tokenizer.backend.encode_batch([p.target for p in pairs], add_special_tokens=False)]
    batch = pair_rows(tokenizer, a, b, 16)
    positions = torch.zeros_like(batch["input_ids"], dtype=torch.bool)
    with torch.no_grad():
        _, vectors = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], positions)
    texts = [t for p in pairs for t in (p.source, p.target)]
    plain = bertkit.load(out).encode(texts)
    np.testing.assert_allclose(vectors.numpy(), plain, atol=1e-5)


def test_generate_similar_ranks_samples_by_the_models_own_vectors(trained, capsys):
    _, out, _ = trained
    source = " ".join(SIDE_A[:3])
    assert main(["generate", "--model", str(out), "--similar", source, "-n", "4", "--samples", "12", "--seed", "3",
                 "--top-k", "5", "--max-new-tokens", "6"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert 1 <= len(lines) <= 4
    cosines = [float(line.split("\t")[0]) for line in lines]
    texts = [line.split("\t")[1] for line in lines]
    assert len(set(texts)) == len(texts) and source not in texts
    vectors = bertkit.load(out).encode([source, *texts])          # independent: the folder's own pooling
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    expected = vectors[1:] @ vectors[0]
    np.testing.assert_allclose(cosines, expected, atol=1e-4)
    assert cosines == sorted(cosines, reverse=True)


def test_generate_similar_takes_the_repetition_controls(trained, capsys):
    """--no-repeat-ngram-size / --repetition-penalty reach the samples (they were refused for --similar): the
    printed paraphrases are those of SimBertGenerator.similar with the same settings, and none repeats a word pair
    (each word is one token in this vocabulary)."""
    _, out, _ = trained
    source = " ".join(SIDE_A[:3])
    flags = ["--similar", source, "-n", "6", "--samples", "12", "--seed", "3", "--temperature", "2",
             "--max-new-tokens", "10"]
    assert main(["generate", "--model", str(out), *flags, "--no-repeat-ngram-size", "2",
                 "--repetition-penalty", "1.2"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    expected = SimBertGenerator(out).similar(source, 6, 12, SamplingConfig(temperature=2.0), 10, 3,
                                             no_repeat_ngram_size=2, repetition_penalty=1.2)
    assert [line.split("\t")[1] for line in lines] == [item.text for item in expected] and lines
    for item in expected:
        words = item.text.split()
        assert len(set(zip(words, words[1:]))) == len(words) - 1
    generator = SimBertGenerator(out)
    plain, controlled = (generator.sample(source, 12, SamplingConfig(temperature=2.0), 10, 3,
                                          no_repeat_ngram_size=size, repetition_penalty=penalty)
                         for size, penalty in ((0, 1.0), (2, 1.2)))
    assert plain != controlled                          # the same seed draws other samples under the controls
    for bad, message in ((["--repetition-penalty", "0"], "--repetition-penalty must be a finite number > 0"),
                         (["--no-repeat-ngram-size", "-1"], "--no-repeat-ngram-size must be >= 0")):
        assert main(["generate", "--model", str(out), *flags, *bad]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1


def test_generate_similar_defaults_to_no_repeated_trigrams(trained, capsys):
    """The paraphrase default (DEFAULT_REPETITION, chosen in BENCHMARKS.md) is what --similar without the flags
    and SimBertGenerator.similar use, and what --help says; --no-repeat-ngram-size 0 turns it off."""
    _, out, _ = trained
    assert DEFAULT_REPETITION == RepetitionConfig(no_repeat_ngram_size=3, repetition_penalty=1.0)
    help_text = " ".join(build_parser()._subparsers._group_actions[0].choices["generate"].format_help().split())
    assert f"--similar: {DEFAULT_REPETITION.no_repeat_ngram_size}" in help_text
    source = " ".join(SIDE_A[:3])
    flags = ["--similar", source, "-n", "4", "--samples", "8", "--seed", "5", "--temperature", "3",
             "--max-new-tokens", "12"]
    assert main(["generate", "--model", str(out), *flags]) == 0
    printed = [line.split("\t")[1] for line in capsys.readouterr().out.strip().splitlines()]
    generator = SimBertGenerator(out)
    explicit = generator.similar(source, 4, 8, SamplingConfig(temperature=3.0), 12, 5, no_repeat_ngram_size=3,
                                 repetition_penalty=1.0)
    assert printed == [item.text for item in explicit]
    assert main(["generate", "--model", str(out), *flags, "--no-repeat-ngram-size", "0"]) == 0
    off = [line.split("\t")[1] for line in capsys.readouterr().out.strip().splitlines()]
    assert off == [item.text for item in generator.similar(source, 4, 8, SamplingConfig(temperature=3.0), 12, 5,
                                                           no_repeat_ngram_size=0)]


def test_sampling_with_top_k_1_is_greedy_decoding(trained):
    _, out, _ = trained
    generator = SimBertGenerator(out)
    ids = [e.ids for e in generator.tokenizer.backend.encode_batch([" ".join(SIDE_A[2:5])],
                                                                    add_special_tokens=False)][0]
    tok = generator.tokenizer
    greedy = seq2seq_decode(generator.model, ids, tok.cls_id, tok.sep_id, 8, banned_ids=generator.banned_ids)
    sampled = seq2seq_sample(generator.model, ids, tok.cls_id, tok.sep_id, 3, SamplingConfig(top_k=1), 8,
                             generator.banned_ids)
    assert sampled == [greedy] * 3
    first = generator.sample(" ".join(SIDE_A[2:5]), 5, SamplingConfig(temperature=1.5), 8, seed=7)
    assert first == generator.sample(" ".join(SIDE_A[2:5]), 5, SamplingConfig(temperature=1.5), 8, seed=7)


def test_a_folder_without_mlm_head_gets_a_tied_one(tmp_path, make_mlm_folder):
    start = make_mlm_folder("plain", with_mlm=False)
    train = _write(tmp_path / "train.jsonl", _planted_pairs(8))
    with pytest.warns(BertkitWarning, match="no MLM head"):
        assert main(["finetune", "--task", "simbert", "--model", str(start), "--train", str(train), "--output",
                     str(tmp_path / "out"), "--epochs", "1", "--batch-size", "4", "--max-length", "16",
                     "--progress_bar=false", "--pooling=mean"]) == 0
    checkpoint = load_checkpoint(tmp_path / "out")
    assert "mlm" in checkpoint.heads and checkpoint.sentence.config.pooling == "mean"


def test_bad_settings_stop_with_one_line(tmp_path, make_mlm_folder, capsys):
    start = make_mlm_folder("m")
    train = _write(tmp_path / "train.jsonl", _planted_pairs(8))
    code = main(["finetune", "--task", "simbert", "--model", str(start), "--train", str(train), "--output",
                 str(tmp_path / "o"), "--batch-size", "1"])
    assert code == 2 and "--batch-size must be >= 2" in capsys.readouterr().err
    assert main(["generate", "--model", str(start), "--similar", "thou art"]) == 2
    assert "not fine-tuned as SimBERT" in capsys.readouterr().err


def test_true_ranks_count_ties_against_the_pair():
    queries = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    corpus = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 1.0]])
    assert true_ranks(queries, corpus).tolist() == [2, 3, 1]



def test_a_short_simbert_fine_tune_generates_the_planted_translation_exactly(tmp_path):
    """Targets a deterministic word-for-word map of their sources (both directions, as pair_rows feeds them):
    after a short fine-tune under SimBertLoss (generation + similarity), greedy decoding from the SAVED folder
    (what the generator feeds: segment 1, positions after the source, a closing [SEP]) reproduces every target
    through the tokenizer's decode (lowercase, detokenised), and a tiny top-p nucleus is greedy."""
    start = _tiny_start(tmp_path / "start")
    model, tokenizer = _simbert(start, pooling="mean")
    pairs = _planted_pairs(12, seed=1)
    a = [tokenizer.backend.encode(x, add_special_tokens=False).ids for x, _ in pairs]
    b = [tokenizer.backend.encode(y, add_special_tokens=False).ids for _, y in pairs]
    batch = pair_rows(tokenizer, a, b, 16)
    loss_fn = SimBertLoss()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(120):
        loss, stats = loss_fn(model, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert stats["generation_loss"] < 0.05
    out = save_checkpoint(tmp_path / "simbert", model.lm.encoder, tokenizer, {"mlm": model.lm.mlm},
                          {"task": "simbert", "max_length": 16}, sentence=trained_pipeline(load_checkpoint(start),
                                                                                           "mean"))
    generator = SimBertGenerator(out)
    tok = generator.tokenizer
    for x, y in pairs:
        for source, target in ((x, y), (y, x)):
            ids = tok.backend.encode(source, add_special_tokens=False).ids
            greedy = seq2seq_decode(generator.model, ids, tok.cls_id, tok.sep_id, 8, banned_ids=generator.banned_ids)
            assert tok.decode(greedy) == target
            assert generator.sample(source, 2, SamplingConfig(top_p=0.05), 8, seed=1) == [target, target]
