import torch

from bertkit.cli import main
from bertkit.distill.quantize import is_quantized, load_quantized, quantize_int8, save_quantized
from bertkit.finetune.model import model_from_checkpoint

from distill_fixtures import write_examples


def test_quantized_save_reload_gives_the_same_outputs(model_dir, tmp_path):
    from bertkit.checkpoints import load_checkpoint
    fp32 = load_checkpoint(model_dir)
    int8_encoder = quantize_int8(fp32.encoder)
    assert type(fp32.encoder.blocks[0].attention.qkv) is torch.nn.Linear      # the input is left as it was
    assert "Linear" in type(int8_encoder.blocks[0].attention.qkv).__name__
    assert type(int8_encoder.blocks[0].attention.qkv) is not torch.nn.Linear
    save_quantized(model_dir, tmp_path / "q")
    reloaded = load_quantized(tmp_path / "q")
    assert is_quantized(reloaded.meta)
    ids = torch.randint(5, 32, (2, 9))
    with torch.no_grad():
        before = int8_encoder(ids).last_hidden_state
        after = reloaded.encoder(ids).last_hidden_state
        full = fp32.encoder(ids).last_hidden_state
    torch.testing.assert_close(after, before)
    assert float((after - full).abs().max()) < 0.1          # int8 error: small, not zero
    net = model_from_checkpoint(reloaded, "classification", reloaded.meta["labels"])
    assert net(ids).shape == (2, 3)


def test_quantize_command_reports_accuracy_and_speed(model_dir, tmp_path, capsys):
    dev = write_examples(tmp_path / "dev.jsonl", 12)
    assert main(["quantize", "--model", str(model_dir), "--output", str(tmp_path / "q"), "--dev", str(dev)]) == 0
    out = capsys.readouterr().out
    assert "int8 / fp32 speed" in out and "accuracy change" in out
