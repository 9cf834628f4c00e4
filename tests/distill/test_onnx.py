import numpy as np
import pytest
import torch

import bertkit
from bertkit.checkpoints import load_checkpoint
from bertkit.cli import main
from bertkit.distill.onnx_export import ExportedGraph, export_onnx, make_session
from bertkit.distill.onnx_model import OnnxModel, onnx_file_of

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")


@pytest.mark.parametrize("pooling,normalized", [("mean", True), ("cls", False), ("max", False), ("pooler", True)])
def test_onnx_matches_pytorch_at_several_shapes(model_dir, tmp_path, pooling, normalized):
    result = export_onnx(model_dir, tmp_path / "out" / "model.onnx", pooling, normalized)
    assert result.max_abs_diff < 1e-4
    assert result.outputs == ("embeddings", "logits")
    checkpoint = load_checkpoint(model_dir)
    graph = ExportedGraph(checkpoint.sentence.build(checkpoint.encoder, pooling, None, normalized),
                          checkpoint.heads["classifier"]).eval()
    session = make_session(result.path)
    for batch, length in [(1, 1), (4, 7), (2, 33), (7, 64)]:
        ids = torch.randint(5, 32, (batch, length))
        mask = torch.ones(batch, length, dtype=torch.long)
        mask[0, max(1, length - 3):] = 0
        with torch.no_grad():
            vectors, logits = graph(ids, mask)
        got = session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
        np.testing.assert_allclose(got[0], vectors.numpy(), atol=1e-4)
        np.testing.assert_allclose(got[1], logits.numpy(), atol=1e-4)


def test_onnx_model_encode_and_predict_match_bertkit(model_dir, tmp_path):
    path = export_onnx(model_dir, tmp_path / "onnx" / "model.onnx", "mean", True).path
    assert onnx_file_of(tmp_path / "onnx") == path and onnx_file_of(model_dir) is None
    texts = ["sport goal team", "the bank profit market shares", "film", ""]
    onnx = OnnxModel(path)
    expected = bertkit.load(model_dir).encode(texts, normalize=True)
    np.testing.assert_allclose(onnx.encode(texts, batch_size=2), expected, atol=1e-5)
    predictions = onnx.predict(texts)
    assert [p["label"] in ("sport", "business", "arts") for p in predictions] == [True] * 4
    with pytest.raises(bertkit.errors.BertkitError):
        onnx.encode(texts, pooling="cls")


def test_export_command_reports_difference(model_dir, tmp_path, capsys):
    assert main(["export-onnx", "--model", str(model_dir), "--output", str(tmp_path / "m.onnx")]) == 0
    assert "max_abs_diff_vs_pytorch" in capsys.readouterr().out
    assert main(["export-onnx", "--model", str(model_dir), "--output", str(tmp_path / "m.bin")]) == 2
