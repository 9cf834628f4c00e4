"""A 2-D picture of labeled texts' vectors: PCA always, t-SNE beside it when scikit-learn is installed.

Input: JSONL with `text` and `label` (or `.txt`, unlabeled). Output: one PNG. Points are colored by label,
so clusters that a good encoder separates show up at a glance.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

import numpy as np

from bertkit.data.text import check_readable, iter_lines
from bertkit.embed.evaluation import read_jsonl, text_field
from bertkit.embed.whitening import encode_composed
from bertkit.errors import BertkitError

Method = Literal["auto", "pca", "tsne"]


@dataclass(frozen=True)
class PlotResult:
    path: Path
    methods: tuple[str, ...]
    points: int
    note: str = ""


def pca_2d(vectors: np.ndarray) -> np.ndarray:
    centered = np.asarray(vectors, dtype=np.float64) - np.mean(vectors, axis=0)
    _, _, vt = np.linalg.svd(centered, full_matrices=False)
    return centered @ vt[:2].T


def tsne_2d(vectors: np.ndarray, seed: int = 0) -> np.ndarray:
    from sklearn.manifold import TSNE
    perplexity = float(min(30, max(2, (len(vectors) - 1) // 3)))   # must stay below the number of points
    return TSNE(n_components=2, perplexity=perplexity, init="pca", random_state=seed).fit_transform(vectors)


def read_labeled(path: str | Path, field: str = "text", label_field: str = "label"):
    path = check_readable(path, (".txt", ".jsonl"))
    if path.name.removesuffix(".gz").endswith(".txt"):
        texts = [line for _, line in iter_lines(path) if line.strip()]
        return texts, [""] * len(texts)
    texts, labels = [], []
    for number, row in read_jsonl(path):
        texts.append(text_field(path, number, row, field))
        labels.append(str(row.get(label_field, "")))
    return texts, labels


def plot_embeddings(vectors: np.ndarray, labels: list[str], output: str | Path, method: Method = "auto",
                    title: str = "") -> PlotResult:
    try:
        import matplotlib
        matplotlib.use("Agg")   # files only: no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        raise BertkitError("plot-embeddings needs matplotlib: pip install 'bertkit[plot]'") from None
    if len(vectors) < 3:
        raise BertkitError(f"plot-embeddings needs at least 3 texts, got {len(vectors)}")
    output = Path(output)
    if output.suffix.lower() != ".png":
        raise BertkitError(f"--output {output}: expected a .png file name")
    methods, note = ["pca"], ""
    if method in ("auto", "tsne"):
        try:
            import sklearn  # noqa: F401
            methods = ["pca", "tsne"] if method == "auto" else ["tsne"]
        except ImportError:
            if method == "tsne":
                raise BertkitError("t-SNE needs scikit-learn: pip install scikit-learn") from None
            note = "scikit-learn is not installed: PCA only"
    names = sorted(set(labels))
    colors = plt.get_cmap("tab10" if len(names) <= 10 else "tab20")
    fig, axes = plt.subplots(1, len(methods), figsize=(6 * len(methods), 5.5), squeeze=False)
    for axis, name in zip(axes[0], methods):
        points = pca_2d(vectors) if name == "pca" else tsne_2d(vectors)
        for i, label in enumerate(names):
            mask = np.array([lab == label for lab in labels])
            axis.scatter(points[mask, 0], points[mask, 1], s=8, alpha=0.7, color=colors(i % colors.N),
                         label=label or None)
        axis.set_title(f"{name.upper()}" + (f": {title}" if title else ""))
        axis.set_xticks([])
        axis.set_yticks([])
    if any(names) and len(names) <= 20:
        axes[0][-1].legend(loc="best", fontsize=8, markerscale=2)
    fig.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=120)
    plt.close(fig)
    return PlotResult(output, tuple(methods), len(vectors), note)


def plot_model(model, input_path, output, method: Method = "auto", pooling: Optional[str] = None,
               layers: str | None = None, max_points: int = 5000, batch_size: int = 64,
               max_length: int | None = None, progress: bool = False) -> PlotResult:
    """Plot a loaded model's (`bertkit.load(folder)`) vectors of the labeled texts in `input_path`."""
    texts, labels = read_labeled(input_path)
    if len(texts) > max_points:   # t-SNE is quadratic; a seeded sample keeps the picture honest and quick
        keep = np.sort(np.random.default_rng(0).choice(len(texts), max_points, replace=False))
        texts, labels = [texts[i] for i in keep], [labels[i] for i in keep]
    vectors = encode_composed(model, texts, batch_size=batch_size, max_length=max_length, pooling=pooling,
                              layers=layers, normalize=True, progress=progress)
    return plot_embeddings(vectors, labels, output, method, title=Path(model.path).name)
