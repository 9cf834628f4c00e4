"""The TF-IDF baseline: analyzers and transform equal scikit-learn's, the reloaded folder gives the in-memory
scikit-learn pipeline's probabilities, loading needs no scikit-learn, and a planted keyword is learned."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bertkit.errors import BertkitError
from bertkit.finetune import evaluate_file
from bertkit.finetune.linear import BaselineConfig, LinearPredictor, run_baseline
from bertkit.finetune.linear.baseline import fit_baseline
from bertkit.finetune.linear.splits import read_splits
from bertkit.finetune.linear.tfidf import Analyzer, default_analyzers, fit_tfidf_blocks, sklearn_vectorizer

from linear_data import keyword_rows, write_jsonl

pytest.importorskip("sklearn")

TRICKY = ["Hello  World! it's a TEST\tof   the analyzer", "a b c", "", "   ", "x", "ab",
          "naïve café — ünïcode ＡＢＣ 中文字符测试，好的", "The quick brown fox jumps over the lazy dog again and again",
          "line\nbreaks\r\nand\u00a0no-break spaces", "数字123和English混合"]
KINDS = [Analyzer("word", 1, 2), Analyzer("word", 2, 3), Analyzer("char_wb", 2, 5), Analyzer("char_wb", 1, 3),
         Analyzer("char", 1, 3), Analyzer("char", 2, 4)]


@pytest.mark.parametrize("analyzer", KINDS + [Analyzer("jieba", 1, 2)], ids=str)
def test_analyzers_and_transform_equal_scikit_learn(analyzer):
    if analyzer.kind == "jieba":
        pytest.importorskip("jieba")
    reference = sklearn_vectorizer(analyzer).build_analyzer()
    for text in TRICKY:
        assert analyzer(text) == reference(text), text
    fitted = [t for t in TRICKY if t.strip()]
    blocks, vectorizers = fit_tfidf_blocks([analyzer], fitted)
    expected = vectorizers[0].transform(TRICKY).toarray()
    rows = blocks[0].transform(TRICKY)
    dense = np.zeros_like(expected)
    for r in range(len(TRICKY)):
        span = slice(rows.indptr[r], rows.indptr[r + 1])
        dense[r, rows.indices[span]] = rows.data[span]
    np.testing.assert_allclose(dense, expected, rtol=0, atol=1e-12)
    weight = np.random.default_rng(0).normal(size=(expected.shape[1], 3))
    np.testing.assert_allclose(rows.dot(weight, chunk_values=7), expected @ weight, rtol=0, atol=1e-12)


def test_default_analyzers_follow_the_script():
    assert default_analyzers(["An English sentence."]) == [Analyzer("word", 1, 2), Analyzer("char_wb", 2, 5)]
    chinese = default_analyzers(["这家酒店的服务很好", "房间太小了"])
    assert chinese[0] == Analyzer("char", 1, 3)
    assert chinese[1:] == ([Analyzer("jieba", 1, 2)] if _has("jieba") else [])


def _has(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def _held_out_equals_sklearn(tmp_path, task, train_rows, dev_rows, held_out_rows):
    tmp_path.mkdir(parents=True, exist_ok=True)
    files = {name: write_jsonl(tmp_path / f"{name}.jsonl", rows)
             for name, rows in (("train", train_rows), ("dev", dev_rows), ("test", held_out_rows))}
    splits = read_splits(task, files["train"], files["dev"], files["test"])
    model, fit = fit_baseline(splits)
    folder = run_baseline(BaselineConfig(task=task, output=str(tmp_path / "model")), splits).output
    reloaded = LinearPredictor.load(folder)
    expected = fit.reference_scores(splits.test)           # scikit-learn's vectorizers and estimator alone
    np.testing.assert_allclose(reloaded.scores(splits.test), expected, rtol=0, atol=1e-6)
    return reloaded, expected, splits


def test_reloaded_classifier_gives_the_sklearn_pipelines_probabilities(tmp_path):

    reloaded, expected, _ = _held_out_equals_sklearn(tmp_path, "classification", keyword_rows(300, 0),
                                                  keyword_rows(80, 1), keyword_rows(120, 2))
    assert expected.shape == (120, 4) and reloaded.label_names == ["arts", "politics", "sport", "tech"]
    files = sorted(p.name for p in Path(reloaded.path).iterdir())
    assert files == ["bertkit.json", "linear.safetensors", "metrics.json", "run", "tfidf_vocabulary.json"]


def test_reloaded_chinese_binary_classifier_equals_sklearn(tmp_path):
    good, bad = "服务很好房间干净推荐", "太差了房间很脏失望"
    rng = np.random.default_rng(0)

    def rows(n):
        out = []
        for _ in range(n):
            label = str(rng.integers(2))
            source = good if label == "1" else bad
            picked = "".join(rng.choice(list(source + "的了是我们酒店"), size=8))
            out.append({"text": picked, "label": label})
        return out
    reloaded, expected, _ = _held_out_equals_sklearn(tmp_path, "classification", rows(200), rows(60), rows(60))
    assert expected.shape == (60, 2)                   # binary: the stored [0, z] columns give sklearn's pair
    assert reloaded.model.parts[0].features.tfidf[0].analyzer == Analyzer("char", 1, 3)


def test_reloaded_pair_model_and_regressor_equal_sklearn(tmp_path):
    rng = np.random.default_rng(1)
    words = "sun moon star river stone tree cloud rain wind fire".split()

    def pair_rows(n):
        out = []
        for _ in range(n):
            first = " ".join(rng.choice(words, size=5))
            same = rng.random() < 0.5
            second = " ".join(rng.permutation(first.split())) if same else " ".join(rng.choice(words, size=5))
            out.append({"text": first, "text_pair": second, "label": "1" if same else "0"})
        return out
    pairs, _, splits = _held_out_equals_sklearn(tmp_path / "pairs", "pair-classification", pair_rows(200),
                                                pair_rows(60), pair_rows(60))
    # "same words, reordered" is exactly what the shared-term features and the cosine see
    assert pairs.model.pairs and pairs.evaluate_examples(splits.test)["accuracy"] >= 0.95

    def value_rows(n):
        out = []
        for _ in range(n):
            count = int(rng.integers(0, 5))
            text = " ".join(["fire"] * count + list(rng.choice(words[:-1], size=4)))
            out.append({"text": text, "label": float(count)})
        return out
    regressor, values, splits = _held_out_equals_sklearn(tmp_path / "values", "regression", value_rows(200),
                                                         value_rows(60), value_rows(60))
    assert values.shape == (60, 1) and regressor.predict(["fire fire fire sun"])[0].keys() == {"score"}
    assert regressor.evaluate_examples(splits.test)["spearman"] >= 0.9


def test_planted_keyword_is_learned(keyword_files, tmp_path):
    # 90% of the rows carry their class's keyword, 10% a random class's: the best possible accuracy is
    # 0.9 + 0.1 / 4 = 0.925 and chance is 0.25
    result = run_baseline(BaselineConfig(train=str(keyword_files["train"]), dev=str(keyword_files["dev"]),
                                         test=str(keyword_files["test"]), output=str(tmp_path / "m")))
    assert result.test["accuracy"] >= 0.85 and result.test["macro_f1"] >= 0.85, result.test
    assert evaluate_file(result.output, keyword_files["test"]) == result.test       # the `bertkit evaluate` path
    saved = json.loads((result.output / "metrics.json").read_text(encoding="utf-8"))
    assert saved["test"] == result.test and saved["C"] == result.regularization
    assert LinearPredictor.load(result.output).predict(["the chip is in the city"])[0]["label"] == "tech"


def test_texts_that_share_no_word_are_one_line_without_scikit_learn_advice(tmp_path):
    rows = [{"text": "good", "label": "pos"}, {"text": "bad", "label": "neg"}]
    train = write_jsonl(tmp_path / "train.jsonl", rows)
    with pytest.raises(BertkitError, match=r"^TF-IDF: one of its feature sets \(word or character n-grams\) has no "
                                           r"term that occurs in 2 or more of the 2 training texts") as err:
        run_baseline(BaselineConfig(train=str(train), dev=str(train), output=str(tmp_path / "m")))
    assert "max_df" not in str(err.value)      # scikit-learn's "Try a lower min_df or a higher max_df."


def test_loading_and_predicting_need_no_scikit_learn(keyword_files, tmp_path):
    folder = run_baseline(BaselineConfig(train=str(keyword_files["train"]), dev=str(keyword_files["dev"]),
                                         output=str(tmp_path / "m"))).output
    expected = LinearPredictor.load(folder).predict(["a vote in the city", "match"])
    script = ("import sys, json\n"
              "sys.modules['sklearn'] = sys.modules['scipy'] = None   # any import of them now fails\n"
              "import bertkit\n"
              f"print(json.dumps(bertkit.load({str(folder)!r}).predict(['a vote in the city', 'match'])))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == expected


def test_cli_baseline_evaluate_and_predict_agree(keyword_files, tmp_path, capsys):
    from bertkit.cli import main

    folder = tmp_path / "tfidf"
    assert main(["baseline", "--train", str(keyword_files["train"]), "--dev", str(keyword_files["dev"]),
                 "--test", str(keyword_files["test"]), "--output", str(folder)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert main(["evaluate", "--model", str(folder), "--input", str(keyword_files["test"])]) == 0
    assert json.loads(capsys.readouterr().out) == printed["test"]
    assert main(["predict", "--model", str(folder), "--input", str(keyword_files["test"]), "--output",
                 str(tmp_path / "p.jsonl")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text(encoding="utf-8").splitlines()]
    offline = LinearPredictor.load(folder).predict([row["text"] for row in rows])
    assert [{k: row[k] for k in ("label", "score", "scores")} for row in rows] == offline


@pytest.mark.parametrize("damage, message", [
    ("vocabulary", "tfidf_vocabulary.json: blocks"),
    ("weight", "linear.safetensors: parts.0.weight"),
    ("nan", "holds NaN or infinite values"),
    ("method", "bertkit.json: linear.method"),
])
def test_damaged_folders_are_named_in_one_line(keyword_files, tmp_path, capsys, damage, message):
    from safetensors.numpy import load_file, save_file

    from bertkit.cli import main

    folder = run_baseline(BaselineConfig(train=str(keyword_files["train"]), dev=str(keyword_files["dev"]),
                                         output=str(tmp_path / "m"))).output
    if damage == "vocabulary":
        vocabulary = json.loads((folder / "tfidf_vocabulary.json").read_text(encoding="utf-8"))
        vocabulary["blocks"] = vocabulary["blocks"][:1]
        (folder / "tfidf_vocabulary.json").write_text(json.dumps(vocabulary), encoding="utf-8")
    elif damage in ("weight", "nan"):
        tensors = load_file(str(folder / "linear.safetensors"))
        if damage == "weight":
            tensors["parts.0.weight"] = tensors["parts.0.weight"][:-3]
        else:
            tensors["parts.0.bias"][0] = np.nan
        save_file(tensors, str(folder / "linear.safetensors"))
    else:
        meta = json.loads((folder / "bertkit.json").read_text(encoding="utf-8"))
        meta["linear"]["method"] = "pickle"
        (folder / "bertkit.json").write_text(json.dumps(meta), encoding="utf-8")
    capsys.readouterr()
    assert main(["evaluate", "--model", str(folder), "--input", str(keyword_files["dev"])]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
