import numpy as np

from bertkit.data.shards import build_shards, open_shards
from bertkit.pretrain.batching import PretrainingBatches, SpecialIds
from bertkit.pretrain.instances import build_instances
from bertkit.pretrain.masking import IGNORE_INDEX, MaskingConfig
from pretrain_corpus import write_corpus


def shards_of(tmp_path, tokenizer, documents=40):
    return open_shards(build_shards([write_corpus(tmp_path / "c.txt", documents)], tokenizer, tmp_path / "s"))


def test_packed_instances_fill_max_length_and_cover_the_corpus(tmp_path, tokenizer):
    shards = shards_of(tmp_path, tokenizer)
    instances = build_instances(shards, "packed", 32, seed=0)
    lengths = instances.a_end - instances.a_start
    assert (lengths <= 30).all() and (instances.pair_label == -1).all()
    assert lengths.sum() == len(shards[0].tokens)                     # every token in exactly one instance
    assert (instances.a_start[1:] == instances.a_end[:-1]).all()
    data = PretrainingBatches(shards, instances, SpecialIds.from_tokenizer(tokenizer), MaskingConfig())
    rows = [data.row(i)[0] for i in range(len(instances))]
    assert all(r[0] == tokenizer.cls_id and r[-1] == tokenizer.sep_id and len(r) <= 32 for r in rows)
    assert np.mean([len(r) for r in rows]) > 26                        # packed: little room left unused
    doc_starts = shards[0].sentence_offsets[shards[0].doc_offsets[:-1]]
    inside = sum(((doc_starts > a) & (doc_starts < b)).sum() for a, b in zip(instances.a_start, instances.a_end))
    assert inside > 10
    assert sum((r == tokenizer.sep_id).sum() - 1 for r in rows) == inside   # a [SEP] between packed documents


def test_nsp_pairs_are_half_random(tmp_path, tokenizer):
    shards = shards_of(tmp_path, tokenizer, documents=300)
    instances = build_instances(shards, "nsp", 48, seed=0)
    assert abs(instances.pair_label.mean() - 0.5) < 0.1
    total = (instances.a_end - instances.a_start) + (instances.b_end - instances.b_start)
    assert (total <= 45).all() and ((instances.a_end - instances.a_start) > 0).all()


def test_sop_swaps_half_of_the_pairs(tmp_path, tokenizer):
    shards = shards_of(tmp_path, tokenizer, documents=300)
    instances = build_instances(shards, "sop", 48, seed=0)
    assert abs(instances.pair_label.mean() - 0.5) < 0.1
    swapped = instances.pair_label == 1
    assert (instances.a_start[swapped] >= instances.b_end[swapped]).all()       # B comes before A
    assert (instances.b_start[~swapped] >= instances.a_end[~swapped]).all()


def test_batches_mask_and_pad(tmp_path, tokenizer):
    shards = shards_of(tmp_path, tokenizer)
    instances = build_instances(shards, "sop", 32, seed=0)
    data = PretrainingBatches(shards, instances, SpecialIds.from_tokenizer(tokenizer), MaskingConfig())
    batch = data.make_batch(list(range(8)), epoch=0)
    ids, labels = batch["input_ids"], batch["labels"]
    assert ids.shape == labels.shape == batch["token_type_ids"].shape and batch["pair_labels"].shape == (8,)
    special = (ids == tokenizer.cls_id) | (ids == tokenizer.sep_id) | (batch["attention_mask"] == 0)
    assert (labels[special] == IGNORE_INDEX).all()
    assert (labels != IGNORE_INDEX).sum() > 0
    again = data.make_batch(list(range(8)), epoch=0)
    assert (again["input_ids"] == ids).all()                           # a batch is a function of its items
