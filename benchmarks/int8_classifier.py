"""int8 classifier quality: a fine-tuned folder, its `bertkit quantize` int8 folder (both int8 kernels) and a
TF-IDF + logistic regression baseline, on one labelled test split (accuracy and macro-F1).

    bertkit finetune --task classification --model "$(python -c 'import bertkit.api; print(bertkit.api.minilm_path())')" \
        --train ../shared/data/bbc_train.jsonl.gz --dev ../shared/data/bbc_dev.jsonl.gz --output /tmp/bbc-minilm \
        --epochs 3 --lr 1e-4 --batch-size 16 --max-length 128 --seed 42 --precision bf16
    bertkit quantize --model /tmp/bbc-minilm --output /tmp/bbc-int8 --dev ../shared/data/bbc_dev.jsonl.gz
    python benchmarks/int8_classifier.py --fp32 /tmp/bbc-minilm --int8 /tmp/bbc-int8 \
        --train ../shared/data/bbc_train.jsonl.gz --test ../shared/data/bbc_test.jsonl.gz
"""
from __future__ import annotations

import argparse
import gzip
import json

import torch


def read_rows(path: str) -> tuple[list[str], list[str]]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    return [row["text"] for row in rows], [str(row["label"]) for row in rows]


def tfidf_baseline(train: str, test: str) -> dict:
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, f1_score

    train_texts, train_labels = read_rows(train)
    test_texts, test_labels = read_rows(test)
    vectorizer = TfidfVectorizer(sublinear_tf=True, ngram_range=(1, 2), min_df=2)
    classifier = LogisticRegression(max_iter=2000, C=10.0).fit(vectorizer.fit_transform(train_texts), train_labels)
    predicted = classifier.predict(vectorizer.transform(test_texts))
    return {"accuracy": accuracy_score(test_labels, predicted), "macro_f1": f1_score(test_labels, predicted,
                                                                                     average="macro")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fp32", required=True, help="the fine-tuned folder")
    parser.add_argument("--int8", required=True, help="its bertkit quantize folder")
    parser.add_argument("--train", required=True, help="training split (for the TF-IDF baseline)")
    parser.add_argument("--test", required=True)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    import bertkit
    from bertkit.finetune.predict import evaluate_file
    from bertkit.model.precision import apply_precision
    from bertkit.runtime import PrecisionChoice

    int_mm = bertkit.load(args.int8, device="cpu", precision="fp32")     # the kernel CPUs without fast bf16 get
    apply_precision(int_mm.encoder, int_mm.heads, PrecisionChoice("int8", torch.float32, "int8 (int_mm)"))
    models = {"bertkit fp32": bertkit.load(args.fp32, device="cpu", precision="fp32"),
              "bertkit int8 (as loaded here: " + bertkit.load(args.int8, device="cpu").precision_note + ")":
                  bertkit.load(args.int8, device="cpu"),
              "bertkit int8 (int_mm kernel, fp32 elsewhere)": int_mm}
    rows = {name: evaluate_file(model, args.test) for name, model in models.items()}
    rows["TF-IDF (1-2 grams) + logistic regression"] = tfidf_baseline(args.train, args.test)
    print(f"test: {args.test}")
    print("| model | accuracy | macro-F1 |\n|---|---:|---:|")
    for name, metrics in rows.items():
        print(f"| {name} | {metrics['accuracy']:.4f} | {metrics['macro_f1']:.4f} |")


if __name__ == "__main__":
    main()
