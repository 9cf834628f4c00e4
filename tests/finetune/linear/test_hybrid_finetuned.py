"""finetune --method hybrid --model FINETUNED: the TF-IDF part and a fine-tuned model's probabilities, pooled on
dev. On the split-signal set the fine-tuned (cased, [UNK] for the bit-A words) model can learn only bit B and
TF-IDF (lower-cased) only bit A: the pooled hybrid must get both; the folder loads back and predicts the same
numbers through `predict`, `evaluate`, the Python API and serve /predict, equal to the pooling recomputed from
the fine-tuned folder's own predictions."""
from __future__ import annotations

import json

import numpy as np
import pytest

import bertkit
from bertkit.job_config import job_config
from bertkit.finetune import FinetuneConfig, evaluate_file, predict_file, run_finetune
from bertkit.finetune.linear import BaselineConfig, LinearPredictor, run_baseline
from bertkit.finetune.linear.hybrid import POOL_SHARES, fit_dev_pooling

pytest.importorskip("sklearn")


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, cased_encoder_dir, split_signal_files):
    root = tmp_path_factory.mktemp("hybrid_finetuned")
    files = {k: str(v) for k, v in split_signal_files.items()}
    common = dict(train=files["train"], dev=files["dev"], progress_bar=False)
    finetuned = run_finetune(job_config(FinetuneConfig, model=str(cased_encoder_dir), output=str(root / "ft"), seed=0, epochs=6,
                                            baseline=False, **common)).output
    hybrid = run_finetune(job_config(FinetuneConfig, model=str(finetuned), output=str(root / "hybrid"), method="hybrid",
                                         **common)).output
    tfidf = run_baseline(BaselineConfig(train=files["train"], dev=files["dev"], output=str(root / "tfidf"))).output
    return {"finetuned": finetuned, "hybrid": hybrid, "tfidf": tfidf}


def test_hybrid_over_a_finetuned_model_gets_both_halves_of_the_signal(tuned, split_signal_files):
    scores = {kind: evaluate_file(folder, split_signal_files["test"]) for kind, folder in tuned.items()}
    # the fine-tune sees only the case bit, TF-IDF only the word bit: each near 0.5 (chance 0.25), both 1.0
    assert 0.4 <= scores["finetuned"]["accuracy"] <= 0.65 and scores["tfidf"]["accuracy"] <= 0.65, scores
    assert scores["hybrid"]["accuracy"] >= 0.95 and scores["hybrid"]["macro_f1"] >= 0.95, scores
    meta = json.loads((tuned["hybrid"] / "bertkit.json").read_text(encoding="utf-8"))
    assert meta["linear"]["parts"][1]["logits"] == 4 and meta["task_options"]["max_length"] > 0


def test_hybrid_folder_predicts_the_pooling_of_its_parts_through_every_route(tuned, split_signal_files, tmp_path):
    from fastapi.testclient import TestClient

    from bertkit.serve.config import ServeConfig
    from bertkit.serve.server import build_service
    from bertkit.serve.app import create_app

    rows = [json.loads(line) for line in split_signal_files["test"].read_text(encoding="utf-8").splitlines()[:16]]
    texts = [row["text"] for row in rows]
    folder = tuned["hybrid"]
    offline = bertkit.load(folder).predict(texts)
    assert offline == LinearPredictor.load(folder).predict(texts)
    # the reference: the fine-tuned folder's own probabilities (bertkit predict's route) and the TF-IDF part,
    # pooled with the saved share and temperature
    predictor = LinearPredictor.load(folder)
    names = predictor.label_names
    finetuned = np.array([[p["scores"][n] for n in names] for p in bertkit.load(tuned["finetuned"]).predict(texts)])
    examples = [bertkit.finetune.classification.examples_from_inputs([t])[0] for t in texts]
    tfidf = predictor.model.parts[0].scores(examples)
    stack = predictor.model.stack.weight.astype(np.float64)
    t_share, t_model = stack[0, 0], stack[len(names), 0]
    logits = t_share * np.log(np.maximum(tfidf, 1e-12)) + t_model * np.log(np.maximum(finetuned, 1e-12))
    expected = np.exp(logits - logits.max(1, keepdims=True))
    expected /= expected.sum(1, keepdims=True)
    got = np.array([[p["scores"][n] for n in names] for p in offline])
    np.testing.assert_allclose(got, expected, atol=1e-4)
    out = tmp_path / "hybrid.jsonl"
    assert predict_file(folder, split_signal_files["test"], out) == 200
    from_file = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()[:16]]
    assert [{k: r[k] for k in ("label", "score", "scores")} for r in from_file] == offline
    service = build_service(ServeConfig(model=str(folder)))
    try:
        with TestClient(create_app(service)) as client:
            answer = client.post("/predict", json={"texts": texts})
            assert answer.status_code == 200 and answer.json()["predictions"] == offline
    finally:
        service.close()


def test_dev_pooling_ignores_a_part_that_carries_no_signal():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 300)
    good = np.full((300, 3), 0.1)
    good[np.arange(300), y] = 0.8                      # right on every row
    good[:60] = np.roll(good[:60], 1, axis=1)          # ... but 60 rows wrong: 0.8 accuracy
    noise = rng.dirichlet(np.ones(3), 300)             # a part that knows nothing
    fitted = fit_dev_pooling([noise, good], y, 3)
    assert fitted.regularization == POOL_SHARES[0]     # the noise gets no share: the model alone
    assert abs(fitted.dev_metrics["accuracy"] - 0.8) < 1e-9
