import sys
from pathlib import Path

import numpy as np
import pytest

from bertkit.data import shards as shards_module
from bertkit.data.shards import build_shards, open_shards, read_manifest
from bertkit.errors import BertkitError

sys.path.insert(0, str(Path(__file__).parents[1] / "pretrain"))
from pretrain_corpus import make_tokenizer, write_corpus  # noqa: E402  (the pre-training tests' tiny corpus)


def test_shards_hold_the_tokenized_corpus(tmp_path):
    tokenizer = make_tokenizer()
    corpus = tmp_path / "c.txt"
    corpus.write_text("Walking talked. The cat!\n\nA dog ran quickly.\n", encoding="utf-8")
    (shard,) = open_shards(build_shards([corpus], tokenizer, tmp_path / "s"))
    expected = [tokenizer.backend.encode(s, add_special_tokens=False).ids
                for s in ["Walking talked.", "The cat!", "A dog ran quickly."]]
    assert shard.tokens.tolist() == sum(expected, [])
    assert shard.sentence_offsets.tolist() == [0, 5, 8, 14]
    assert shard.doc_offsets.tolist() == [0, 2, 3]
    pieces = [tokenizer.id_to_token(i) for i in shard.tokens]
    assert all(w == (not p.startswith("##")) for p, w in zip(pieces, shard.words))


def test_jieba_marks_chinese_words():
    pytest.importorskip("jieba")
    from bertkit.data.shards import _jieba_word_starts
    text = "我们去公园"
    offsets = [(i, i + 1) for i in range(len(text))]
    starts = _jieba_word_starts(text, offsets).tolist()
    assert starts == [True, False, True, True, False]          # 我们 / 去 / 公园


def test_jieba_segmentation_prints_nothing():
    """jieba's own "Building prefix dict ... Loading model cost 0.9 seconds" lines came out on every pre-training run
    with --data.segmenter jieba, --quiet or not. Run in a fresh process: jieba logs on its first use only."""
    pytest.importorskip("jieba")
    import subprocess
    import sys

    code = ("from bertkit.data.shards import _jieba_word_starts; "
            "print(_jieba_word_starts('我们去公园', [(i, i + 1) for i in range(5)]).tolist())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[True, False, True, True, False]"
    assert done.stderr == ""


def test_interrupted_build_resumes_after_the_last_shard(tmp_path, monkeypatch):
    tokenizer = make_tokenizer()
    corpus = write_corpus(tmp_path / "c.txt", documents=300)
    monkeypatch.setattr(shards_module, "SENTENCES_PER_CALL", 50)
    whole = open_shards(build_shards([corpus], tokenizer, tmp_path / "whole", shard_tokens=1000))
    assert len(whole) > 3

    original, calls = shards_module._ShardWriter.write, {"n": 0}

    def dying_write(self, folder, name):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return original(self, folder, name)

    monkeypatch.setattr(shards_module._ShardWriter, "write", dying_write)
    with pytest.raises(KeyboardInterrupt):
        build_shards([corpus], tokenizer, tmp_path / "cut", shard_tokens=1000)
    assert len(read_manifest(tmp_path / "cut")["shards"]) == 2
    first = (tmp_path / "cut" / "shard_00000.tokens.npy").stat().st_mtime_ns
    with pytest.raises(BertkitError, match="did not finish"):
        open_shards(tmp_path / "cut")

    monkeypatch.setattr(shards_module._ShardWriter, "write", original)
    resumed = open_shards(build_shards([corpus], tokenizer, tmp_path / "cut", shard_tokens=1000))
    assert (tmp_path / "cut" / "shard_00000.tokens.npy").stat().st_mtime_ns == first   # not rebuilt
    assert np.concatenate([s.tokens for s in resumed]).tolist() == np.concatenate([s.tokens for s in whole]).tolist()
    assert sum(s.num_documents for s in resumed) == sum(s.num_documents for s in whole) == 300


def test_other_tokenizer_in_the_same_folder_is_refused(tmp_path):
    corpus = write_corpus(tmp_path / "c.txt", documents=3)
    build_shards([corpus], make_tokenizer(), tmp_path / "s")
    from bertkit.tokenizer import Tokenizer
    other = Tokenizer.from_vocab({t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"])})
    with pytest.raises(BertkitError, match="another corpus or tokenizer"):
        build_shards([corpus], other, tmp_path / "s")


@pytest.mark.parametrize("name", ["../elsewhere/shard_00000", "/tmp/shard_00000", None])
def test_a_manifest_naming_shards_outside_its_folder_is_refused(tmp_path, name):
    """A resumed run reads the shard folder's manifest, which anyone who could write the folder chose."""
    import json
    corpus = tmp_path / "c.txt"
    corpus.write_text("Walking talked. The cat!\n\nA dog ran quickly.\n", encoding="utf-8")
    build_shards([corpus], make_tokenizer(), tmp_path / "elsewhere")
    folder = build_shards([corpus], make_tokenizer(), tmp_path / "s")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["shards"][0]["name"] = name
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BertkitError, match=r"manifest.json: shards\[0\].name (.* )?must (name a file inside|be a non-e)"):
        open_shards(folder)


def test_a_gbk_corpus_is_read_with_its_encoding(tmp_path):
    """pretrain --encoding gb18030 (its error for a GBK corpus says to pass it): the shards hold the same tokens as
    the UTF-8 copy's."""
    text = "Walking talked. 猫坐在垫子上。\n\nA dog ran quickly.\n"
    assert text.encode("gb18030") != text.encode("utf-8")
    (tmp_path / "u.txt").write_text(text, encoding="utf-8")
    (tmp_path / "g.txt").write_bytes(text.encode("gb18030"))
    utf8 = open_shards(build_shards([tmp_path / "u.txt"], make_tokenizer(), tmp_path / "su"))[0]
    gbk = open_shards(build_shards([tmp_path / "g.txt"], make_tokenizer(), tmp_path / "sg", encoding="gb18030"))[0]
    assert gbk.tokens.tolist() == utf8.tokens.tolist()
    assert read_manifest(tmp_path / "sg")["encoding"] == "gb18030" and "encoding" not in read_manifest(tmp_path / "su")
