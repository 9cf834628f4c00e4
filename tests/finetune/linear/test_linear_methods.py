"""finetune --method linear-probe | hybrid: the hybrid beats both of its parts on a planted set where each part
sees half of the signal, and every folder kind (TF-IDF, probe, hybrid) predicts the same numbers through
`bertkit predict`, `bertkit evaluate`, `bertkit.load(...).predict` and serve /predict."""
from __future__ import annotations

import json

import numpy as np
import pytest

import bertkit
from bertkit.job_config import job_config
from bertkit.cli import main
from bertkit.finetune import FinetuneConfig, evaluate_file, predict_file, run_finetune
from bertkit.finetune.linear import BaselineConfig, LinearPredictor, run_baseline

pytest.importorskip("sklearn")


@pytest.fixture(scope="module")
def folders(tmp_path_factory, cased_encoder_dir, split_signal_files):
    """The three kinds of linear folder, fitted on the split-signal set."""
    root = tmp_path_factory.mktemp("linear_folders")
    files = {k: str(v) for k, v in split_signal_files.items()}
    made = {"tfidf": run_baseline(BaselineConfig(train=files["train"], dev=files["dev"],
                                                 output=str(root / "tfidf"))).output}
    for method in ("linear-probe", "hybrid"):
        made[method] = run_finetune(job_config(FinetuneConfig, model=str(cased_encoder_dir), train=files["train"],
                                                   dev=files["dev"], output=str(root / method), method=method,
                                                   progress_bar=False)).output
    return made


def test_hybrid_beats_both_parts_where_each_sees_half_of_the_signal(folders, split_signal_files):
    test = split_signal_files["test"]
    scores = {kind: evaluate_file(folder, test) for kind, folder in folders.items()}
    # each part alone can tell only one of the two bits (4 classes: chance 0.25, one bit 0.5)
    assert scores["tfidf"]["accuracy"] <= 0.65 and scores["linear-probe"]["accuracy"] <= 0.65, scores
    assert scores["hybrid"]["accuracy"] >= 0.95 and scores["hybrid"]["macro_f1"] >= 0.95, scores


def test_each_folder_predicts_the_same_through_every_route(folders, split_signal_files, tmp_path):
    from fastapi.testclient import TestClient

    from bertkit.serve.config import ServeConfig

    from bertkit.serve.server import build_service
    from bertkit.serve.app import create_app

    rows = [json.loads(line) for line in split_signal_files["test"].read_text(encoding="utf-8").splitlines()[:12]]
    texts = [row["text"] for row in rows]
    for kind, folder in folders.items():
        loaded = bertkit.load(folder)
        offline = loaded.predict(texts)
        assert offline == LinearPredictor.load(folder).predict(texts)
        out = tmp_path / f"{kind}.jsonl"
        assert predict_file(folder, split_signal_files["test"], out) == 200
        from_file = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()[:12]]
        assert [{k: r[k] for k in ("label", "score", "scores")} for r in from_file] == offline
        service = build_service(ServeConfig(model=str(folder)))
        try:
            with TestClient(create_app(service)) as client:
                answer = client.post("/predict", json={"texts": texts})
                assert answer.status_code == 200 and answer.json()["task"] == "classification"
                assert answer.json()["predictions"] == offline          # exactly: the same code and batch
                assert client.get("/status").json()["model"]["method"] == kind
                empty = client.post("/predict", json={"texts": ["fine", "  "]})
                assert empty.status_code == 422 and "texts[1]" in empty.json()["detail"]
                vectors = client.post("/encode", json={"texts": ["the city"]})
                if kind == "tfidf":
                    assert vectors.status_code == 409 and "no encoder" in vectors.json()["detail"]
                else:   # the frozen encoder: the same vectors as the model it came from
                    expected = bertkit.load(folder).encode(["the city"])
                    np.testing.assert_allclose(vectors.json()["results"][0], expected[0], atol=1e-6)
        finally:
            service.close()


def test_tfidf_folder_refuses_to_encode_in_one_line(folders, tmp_path, capsys):
    with pytest.raises(bertkit.errors.BertkitError, match="has no encoder"):
        bertkit.load(folders["tfidf"]).encode(["text"])
    texts = tmp_path / "texts.txt"
    texts.write_text("one text\n", encoding="utf-8")
    assert main(["encode", "--model", str(folders["tfidf"]), "--input", str(texts), "--output",
                 str(tmp_path / "v.npy")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "TF-IDF + linear model" in err[0] and not (tmp_path / "v.npy").exists()


def test_probe_and_hybrid_folders_are_encoders_plus_a_linear_model(folders, cased_encoder_dir):
    for kind in ("linear-probe", "hybrid"):
        meta = json.loads((folders[kind] / "bertkit.json").read_text(encoding="utf-8"))
        assert meta["linear"]["method"] == kind and meta["task"] == "classification"
        assert not list(folders[kind].glob("*.bin")) and not list(folders[kind].glob("*.pkl"))
        base = bertkit.load(cased_encoder_dir).encode(["the day"])
        np.testing.assert_array_equal(bertkit.load(folders[kind]).encode(["the day"]), base)
        record = json.loads((folders[kind] / "metrics.json").read_text(encoding="utf-8"))
        assert record["method"] == kind and record["baseline"]["dev"]["accuracy"] <= 0.65


def test_vectors_are_cached_by_model_and_data(cased_encoder_dir, split_signal_files, tmp_path, monkeypatch, capsys):
    files = {k: str(v) for k, v in split_signal_files.items()}
    config = job_config(FinetuneConfig, model=str(cased_encoder_dir), train=files["train"], dev=files["dev"],
                            output=str(tmp_path / "probe"), method="linear-probe", baseline=False)
    first = run_finetune(config)
    cached = sorted(p.name for p in (tmp_path / "probe" / "run" / "vectors").iterdir())
    assert len(cached) == 2 and cached[0].startswith("dev-") and cached[1].startswith("train-")

    def no_encoder(*args, **kwargs):
        raise AssertionError("the encoder ran although the vectors were cached")
    monkeypatch.setattr("bertkit.finetune.linear.vectors.encode_examples", no_encoder)
    capsys.readouterr()
    again = run_finetune(config)
    assert again.metrics == first.metrics and "from the cache" in capsys.readouterr().err


def test_pair_and_regression_hybrids_run_end_to_end(cased_encoder_dir, tmp_path):
    from fastapi.testclient import TestClient

    from bertkit.serve.config import ServeConfig

    from bertkit.serve.server import build_service
    from bertkit.serve.app import create_app
    from linear_data import FILLER, write_jsonl

    rng = np.random.default_rng(0)

    def pairs(n):
        rows = []
        for _ in range(n):
            first = list(rng.choice(FILLER, size=4))
            same = bool(rng.random() < 0.5)
            second = list(rng.permutation(first)) if same else list(rng.choice(FILLER, size=4))
            rows.append({"text": " ".join(first), "text_pair": " ".join(second), "label": str(int(same))})
        return rows

    def values(n):
        rows = []
        for _ in range(n):
            count = int(rng.integers(0, 4))
            rows.append({"text": " ".join(["good"] * count + list(rng.choice(FILLER[:6], size=3))), "label": count})
        return rows

    for task, make in (("pair-classification", pairs), ("regression", values)):
        files = {name: str(write_jsonl(tmp_path / f"{task}-{name}.jsonl", make(n)))
                 for name, n in (("train", 200), ("dev", 60), ("test", 60))}
        out = run_finetune(job_config(FinetuneConfig, task=task, model=str(cased_encoder_dir), train=files["train"],
                                          dev=files["dev"], output=str(tmp_path / task), method="hybrid")).output
        scores = evaluate_file(out, files["test"])
        main_score = scores["spearman"] if task == "regression" else scores["accuracy"]
        assert main_score >= 0.9, (task, scores)
        inputs = [("the movie", "movie the")] if task != "regression" else ["good good the"]
        served = ["the movie ||| movie the"] if task != "regression" else ["good good the"]
        service = build_service(ServeConfig(model=str(out)))
        try:
            with TestClient(create_app(service)) as client:
                answer = client.post("/predict", json={"texts": served}).json()["predictions"]
                assert answer == bertkit.load(out).predict(inputs), task
                if task != "regression":   # a pair model takes pairs only
                    single = client.post("/predict", json={"texts": ["the movie"]})
                    assert single.status_code == 422 and "pairs" in single.json()["detail"]
        finally:
            service.close()


def test_saving_a_probe_folder_again_keeps_its_linear_model(folders, tmp_path):
    copy = bertkit.load(folders["hybrid"]).save(tmp_path / "saved")
    texts = ["zorp the Day", "quib a day"]
    assert bertkit.load(copy).predict(texts) == bertkit.load(folders["hybrid"]).predict(texts)
    for kind in ("hybrid", "tfidf"):        # no transformers class computes a linear model: one line, no folder
        with pytest.raises(bertkit.errors.BertkitError, match="cannot be converted|no encoder"):
            bertkit.api.convert(folders[kind], tmp_path / kind)
        assert not (tmp_path / kind).exists()


def test_linear_methods_refuse_loop_settings_and_keep_a_better_model(cased_encoder_dir, split_signal_files,
                                                                     tmp_path, capsys):
    files = {k: str(v) for k, v in split_signal_files.items()}
    common = dict(model=str(cased_encoder_dir), train=files["train"], dev=files["dev"], output=str(tmp_path / "m"))
    with pytest.raises(bertkit.errors.BertkitError, match="--epochs is a fine-tuning setting"):
        run_finetune(job_config(FinetuneConfig, **common, method="linear-probe", epochs=3))
    hybrid = run_finetune(job_config(FinetuneConfig, **common, method="hybrid", baseline=False))
    probe = run_finetune(job_config(FinetuneConfig, **common, method="linear-probe", baseline=False))
    # the probe (one bit of two) scores below the hybrid on the same dev file: the hybrid stays, and its
    # metrics are the ones reported (as finetune reports a kept model's)
    assert probe.kept_earlier_model and probe.metrics == hybrid.metrics and hybrid.metrics["accuracy"] >= 0.95
    assert json.loads((tmp_path / "m" / "bertkit.json").read_text(encoding="utf-8"))["linear"]["method"] == "hybrid"
    assert "kept the model already in" in capsys.readouterr().err


def test_hybrid_transforms_the_dev_texts_with_tfidf_once(cased_encoder_dir, split_signal_files, tmp_path, monkeypatch):
    """The hybrid's fits build the dev TF-IDF features; the stack and the collapse check reuse their scores
    (it built them three times: fit, stack inputs, collapse check)."""
    from bertkit.finetune.linear.tfidf import TfidfBlock

    files = {k: str(v) for k, v in split_signal_files.items()}
    dev_texts = [json.loads(line)["text"] for line in open(files["dev"], encoding="utf-8") if line.strip()]
    dev_calls = []
    transform = TfidfBlock.transform

    def counted(self, texts):
        if list(texts) == dev_texts:
            dev_calls.append(id(self))
        return transform(self, texts)
    monkeypatch.setattr(TfidfBlock, "transform", counted)
    run_finetune(job_config(FinetuneConfig, model=str(cased_encoder_dir), train=files["train"], dev=files["dev"],
                                output=str(tmp_path / "hybrid"), method="hybrid", baseline=False, progress_bar=False))
    assert dev_calls and len(dev_calls) == len(set(dev_calls)), f"{len(dev_calls)} dev transforms by " \
        f"{len(set(dev_calls))} TF-IDF blocks"
