"""ERNIE 1.0 knowledge masking: lexicon entries become units that are masked entirely or not at all, within the
15% budget; phrase masking without a lexicon is whole-word masking."""
import numpy as np

from bertkit.cli import main
from bertkit.pretrain.lexicon import join_entities, read_lexicon
from bertkit.pretrain.masking import IGNORE_INDEX, MaskingConfig, mask_row, row_rng
from test_job import TINY, TINY_CONFIG

ENTITIES = ["big red house", "blue river", "walking", "city"]


def lexicon_of(tokenizer, tmp_path, entries=ENTITIES):
    path = tmp_path / "entities.txt"
    path.write_text("# entities\n" + "\n".join(entries) + "\n\n", encoding="utf-8")
    return read_lexicon(path, tokenizer)


def encode(tokenizer, text):
    ids = tokenizer.backend.encode(text, add_special_tokens=False).ids
    pieces = tokenizer.backend.encode(text, add_special_tokens=False).tokens
    return np.array(ids), np.array([not p.startswith("##") for p in pieces])


def test_entries_are_joined_into_one_word_on_word_boundaries_only(tokenizer, tmp_path):
    lexicon = lexicon_of(tokenizer, tmp_path)
    assert len(lexicon) == 4
    ids, starts = encode(tokenizer, "the big red house sat on a blue river far away walking")
    joined = join_entities(ids, starts, lexicon)
    tokens = tokenizer.backend.encode("the big red house sat on a blue river far away walking",
                                      add_special_tokens=False).tokens
    words, current = [], []
    for token, start in zip(tokens, joined):
        if start and current:
            words.append(" ".join(current))
            current = []
        current.append(token)
    words.append(" ".join(current))
    assert words == ["the", "big red house", "sat", "on", "a", "blue river", "far", "away", "walk ##ing"]
    # an entry followed by a ## piece is part of a longer word: not matched ("big red house" then "##ing")
    ids, starts = encode(tokenizer, "the big red house")
    ids = np.append(ids, tokenizer.backend.token_to_id("##ing"))
    starts = np.append(starts, False)
    assert join_entities(ids, starts, lexicon).tolist() == starts.tolist()


def test_planted_entities_are_masked_whole_or_not_at_all_and_the_budget_holds(tokenizer, tmp_path):
    lexicon = lexicon_of(tokenizer, tmp_path)
    text = " ".join(["the big red house by the blue river in the city", "cat sat on a mat walking"] * 4)
    body, starts = encode(tokenizer, text)
    ids = np.concatenate([[tokenizer.cls_id], body, [tokenizer.sep_id]])
    words = np.concatenate([[True], starts, [True]])
    maskable = (ids != tokenizer.cls_id) & (ids != tokenizer.sep_id)
    joined = join_entities(ids, words, lexicon)
    occurrences = []                                     # (start, end) of every planted entity in the row
    for entry in ENTITIES:
        seq = tokenizer.backend.encode(entry, add_special_tokens=False).ids
        occurrences += [(t, t + len(seq)) for t in range(len(ids) - len(seq) + 1) if ids[t:t + len(seq)].tolist() == seq]
    assert len(occurrences) == 16
    budget = round(maskable.sum() * 0.15)
    fully = 0
    for i in range(300):
        row = mask_row(ids, maskable, MaskingConfig(strategy="entity"), row_rng(0, 0, i), tokenizer.mask_id,
                       np.arange(5, tokenizer.vocab_size), joined)
        predicted = row.labels != IGNORE_INDEX
        assert predicted.sum() <= budget and predicted.sum() >= budget - 3     # at most the budget, nearly all of it
        for start, end in occurrences:
            assert predicted[start:end].all() or not predicted[start:end].any(), (i, start, end)
            fully += bool(predicted[start:end].all()) and end - start > 1
    assert fully > 100                                  # multi-token entities do get masked, as units


def test_entity_masking_needs_a_lexicon_and_runs_with_one(tmp_path, corpus, vocab_dir, capsys):
    common = ["pretrain", "--config", TINY_CONFIG, "--corpus", str(corpus), "--vocab", str(vocab_dir), "--max-steps",
              "3", *TINY]
    assert main([*common, "--output", str(tmp_path / "a"), "--masking", "entity"]) == 2
    assert "--lexicon FILE" in capsys.readouterr().err
    assert main([*common, "--output", str(tmp_path / "b"), "--masking", "token", "--lexicon", str(corpus)]) == 2
    assert "--masking phrase or entity" in capsys.readouterr().err
    assert main([*common, "--output", str(tmp_path / "c"), "--masking", "entity", "--lexicon",
                 str(tmp_path / "missing.txt")]) == 2
    assert "missing.txt: no such file" in capsys.readouterr().err
    lexicon = tmp_path / "lex.txt"
    lexicon.write_text("\n".join(ENTITIES), encoding="utf-8")
    assert main([*common, "--output", str(tmp_path / "d"), "--masking", "entity", "--lexicon", str(lexicon)]) == 0
    assert main([*common, "--output", str(tmp_path / "e"), "--masking", "phrase"]) == 0


def test_entries_are_joined_once_per_instance_not_per_epoch_or_copy(tmp_path, corpus, tokenizer, monkeypatch):
    """join_entities runs once per instance; later epochs and static copies reuse its word starts (the same)."""
    from bertkit.data.shards import build_shards, open_shards
    from bertkit.pretrain import batching
    from bertkit.pretrain.batching import PretrainingBatches, SpecialIds
    from bertkit.pretrain.instances import build_instances

    build_shards([str(corpus)], tokenizer, tmp_path / "shards")
    shards = open_shards(tmp_path / "shards")
    instances = build_instances(shards, "packed", 32, 0)
    lexicon = lexicon_of(tokenizer, tmp_path)
    calls = []

    def counted(ids, starts, lex):
        calls.append(1)
        return join_entities(ids, starts, lex)

    monkeypatch.setattr(batching, "join_entities", counted)
    data = PretrainingBatches(shards, instances, SpecialIds.from_tokenizer(tokenizer),
                              MaskingConfig(strategy="entity"), 0, static_copies=2, lexicon=lexicon)
    indices = list(range(len(data)))                      # both static copies of every instance
    first = [data.make_batch(indices, epoch) for epoch in (0, 1)]
    assert len(calls) == len(instances)
    for i in range(len(instances)):                       # the kept starts are the ones join_entities gives
        ids, _, words = data.row(i)
        assert data.joined_words(i, ids, words).tolist() == join_entities(ids, words, lexicon).tolist()
    fresh = PretrainingBatches(shards, instances, SpecialIds.from_tokenizer(tokenizer),
                               MaskingConfig(strategy="entity"), 0, static_copies=2, lexicon=lexicon)
    for epoch, batch in zip((0, 1), first):                # masks are what a fresh source draws
        again = fresh.make_batch(indices, epoch)
        assert all((again[k] == batch[k]).all() for k in batch)


def test_the_lexicon_and_the_shards_mark_the_same_continuation_pieces(tokenizer, tmp_path):
    vocab = tokenizer.backend.get_vocab()
    mask = lexicon_of(tokenizer, tmp_path).continuation
    assert sorted(int(i) for i in np.flatnonzero(mask)) == sorted(i for t, i in vocab.items() if t.startswith("##"))
    assert len(mask) == max(vocab.values()) + 1
