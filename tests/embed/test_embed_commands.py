"""`bertkit whiten | simcse | evaluate-embeddings | plot-embeddings` end to end on a tiny model."""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from bertkit.cli import main
from bertkit.errors import BertkitWarning


def _whitened(tmp_path, tiny_model_dir, make_sentences):
    """(corpus of 100 sentences, the tiny model whitened to 8 dims on it)."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(make_sentences(100)), encoding="utf-8")
    out = tmp_path / "white"
    assert main(["whiten", "--model", str(tiny_model_dir), "--corpus", str(corpus), "--output", str(out),
                 "--dim", "8"]) == 0
    return corpus, out


def test_whiten_then_evaluate(tmp_path, tiny_model_dir, capsys, make_sentences):
    _, out = _whitened(tmp_path, tiny_model_dir, make_sentences)
    assert "100 texts (32 -> 8 dims)" in capsys.readouterr().err
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("\n".join(json.dumps({"text_a": t, "text_b": t}) for t in make_sentences(20, seed=3)))
    assert main(["evaluate-embeddings", "--model", str(out), "--pairs", str(pairs)]) == 0
    assert json.loads(capsys.readouterr().out)["pairs_retrieval"]["recall_at_1"] == pytest.approx(1.0)
    small = tmp_path / "small.txt"
    small.write_text("the cat\na dog\n", encoding="utf-8")
    assert main(["whiten", "--model", str(tiny_model_dir), "--corpus", str(small), "--output", str(out)]) == 2
    assert "at least as many texts as vector dimensions" in capsys.readouterr().err


def test_simcse_with_overrides(tmp_path, tiny_model_dir, capsys, make_sentences):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(make_sentences(40)), encoding="utf-8")
    assert main(["simcse", "--model", str(tiny_model_dir), "--train", str(corpus), "--output",
                 str(tmp_path / "out"), "--batch-size", "8", "--max-steps", "2", "--progress_bar=false",
                 "--device=cpu"]) == 0
    assert "trained 2 steps" in capsys.readouterr().err
    assert main(["simcse", "--model", str(tiny_model_dir), "--train", str(corpus), "--output",
                 str(tmp_path / "out"), "--no_such_key=1"]) == 2


def test_plot_embeddings_writes_a_png(tmp_path, tiny_model_dir, capsys, make_sentences):
    pytest.importorskip("matplotlib")
    labeled = tmp_path / "labeled.jsonl"
    labeled.write_text("\n".join(json.dumps({"text": t, "label": "ab"[i % 2]})
                                 for i, t in enumerate(make_sentences(30))), encoding="utf-8")
    png = tmp_path / "plot.png"
    assert main(["plot-embeddings", "--model", str(tiny_model_dir), "--input", str(labeled), "--output", str(png),
                 "--method", "pca"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_embeddings_uses_max_length(tmp_path, tiny_model_dir, make_sentences, monkeypatch):
    """`plot-embeddings --max-length` was ignored: the texts were encoded at the model's full length (issue 17)."""
    import numpy as np

    import bertkit
    import bertkit.embed.plot as plot

    texts = [" ".join(make_sentences(3, seed=i)) for i in range(6)]   # ~18 words: well over 5 tokens
    labeled = tmp_path / "labeled.jsonl"
    labeled.write_text("\n".join(json.dumps({"text": t, "label": "ab"[i % 2]}) for i, t in enumerate(texts)),
                       encoding="utf-8")
    plotted = []
    monkeypatch.setattr(plot, "plot_embeddings", lambda vectors, *a, **k: plotted.append(vectors) or
                        plot.PlotResult(tmp_path / "p.png", ("pca",), len(vectors), ""))
    assert main(["plot-embeddings", "--model", str(tiny_model_dir), "--input", str(labeled),
                 "--output", str(tmp_path / "p.png"), "--method", "pca", "--max-length", "5"]) == 0
    model = bertkit.load(tiny_model_dir)
    short, full = model.encode(texts, max_length=5, normalize=True), model.encode(texts, normalize=True)
    np.testing.assert_allclose(plotted[0], short, atol=1e-5)
    assert np.abs(short - full).max() > 1e-3


def test_max_length_over_the_position_limit_is_one_line(tmp_path, tiny_model_dir, make_sentences, capsys):
    labeled = tmp_path / "labeled.jsonl"
    rows = [json.dumps({"text": t, "label": "ab"[i % 2]}) for i, t in enumerate(make_sentences(6))]
    labeled.write_text("\n".join(rows), encoding="utf-8")
    png = tmp_path / "p.png"
    assert main(["plot-embeddings", "--model", str(tiny_model_dir), "--input", str(labeled), "--output", str(png),
                 "--method", "pca", "--max-length", "100000"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("bertkit: error: max_length 100000 > the model's limit") and "\n" not in err
    assert not png.exists()


def test_encode_prints_the_unknown_rate_and_unwhitened_warnings(tmp_path, tiny_model_dir, capsys, make_sentences):
    corpus, white = _whitened(tmp_path, tiny_model_dir, make_sentences)
    texts = tmp_path / "texts.txt"
    texts.write_text("жжж жж ж the cat\nгде мой кот\n", encoding="utf-8")
    with pytest.warns(BertkitWarning) as record:
        assert main(["encode", "--model", str(white), "--input", str(texts), "--output", str(tmp_path / "v.npy"),
                     "--pooling", "cls"]) == 0
    said = " ".join(str(w.message) for w in record)
    # bertkit encode ignored every warning to print truncation once; index build printed these
    assert "encode: " in said and "[UNK]" in said
    assert "whitening was fitted on pooling=mean layers=last, so these vectors are not whitened (32 dims, not 8)" \
        in said
    assert np.load(tmp_path / "v.npy").shape == (2, 32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", BertkitWarning)
        assert main(["encode", "--model", str(white), "--input", str(corpus), "--output", str(tmp_path / "w.npy")]) == 0
    assert np.load(tmp_path / "w.npy").shape == (100, 8)


def test_plot_embeddings_names_the_line_of_an_empty_text(tmp_path, tiny_model_dir, capsys):
    data = tmp_path / "labeled.jsonl"
    data.write_text('{"text": "the cat", "label": "a"}\n{"text": "a dog", "label": "b"}\n{"text": " ", "label": "b"}\n')
    assert main(["plot-embeddings", "--model", str(tiny_model_dir), "--input", str(data),
                 "--output", str(tmp_path / "p.png")]) == 2
    assert "labeled.jsonl:3: 'text' is empty or whitespace-only" in capsys.readouterr().err   # it said "text 2"


def test_encode_no_normalize_gives_the_raw_vectors_of_a_normalizing_folder(tmp_path, tiny_model_dir, capsys):
    import bertkit
    from bertkit.model.sentence import SentencePipeline

    model = bertkit.load(tiny_model_dir)
    model.sentence = SentencePipeline(model.sentence.config.replace(normalize=True))   # as all-MiniLM-L6-v2's
    model.save(tmp_path / "unit")
    texts = tmp_path / "texts.txt"
    texts.write_text("the cat sat\na red apple\n", encoding="utf-8")
    encode = ["encode", "--model", str(tmp_path / "unit"), "--input", str(texts)]
    assert main([*encode, "--output", str(tmp_path / "unit.npy")]) == 0
    np.testing.assert_allclose(np.linalg.norm(np.load(tmp_path / "unit.npy"), axis=1), 1.0, atol=1e-5)
    # the folder's normalization could not be turned off from the command line (the API and server can)
    assert main([*encode, "--output", str(tmp_path / "raw.npy"), "--no-normalize"]) == 0
    raw = np.load(tmp_path / "raw.npy")
    np.testing.assert_allclose(raw, bertkit.load(tmp_path / "unit").encode(["the cat sat", "a red apple"],
                                                                          normalize=False), atol=1e-5)
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0)


def test_encode_token_vectors_with_sliding_windows_is_one_line(tmp_path, tiny_model_dir, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("the cat sat\n", encoding="utf-8")
    code = main(["encode", "--model", str(tiny_model_dir), "--input", str(texts), "--output", str(tmp_path / "t.npz"),
                 "--pooling", "none", "--long-texts", "sliding-window"])
    # it was a ValueError traceback
    assert code == 2 and "pooling 'none' returns token vectors; it cannot average sliding windows" \
        in capsys.readouterr().err
