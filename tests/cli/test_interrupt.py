"""Ctrl-C in a training command said only "bertkit: interrupted": not that its state was saved, nor the one flag
that continues it."""
from __future__ import annotations

from bertkit.cli import finetune_commands, main
from bertkit.train.checkpointing import state_path
from bertkit.train.fit import run_folder


def test_ctrl_c_in_a_training_command_names_the_saved_state_and_resume(tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"

    def interrupted_after_a_save(args):
        saved = state_path(run_folder(out))
        saved.parent.mkdir(parents=True)
        saved.write_bytes(b"")
        raise KeyboardInterrupt

    def interrupted_at_once(args):
        raise KeyboardInterrupt

    command = ["finetune", "--task", "classification", "--model", "m", "--train", "t.jsonl", "--output", str(out)]
    monkeypatch.setattr(finetune_commands, "run_finetune_command", interrupted_at_once)
    assert main(command) == 130
    assert capsys.readouterr().err == "bertkit: interrupted\n"           # nothing saved yet: nothing to resume
    monkeypatch.setattr(finetune_commands, "run_finetune_command", interrupted_after_a_save)
    assert main(command) == 130
    assert capsys.readouterr().err == ("bertkit: interrupted; the last training state is in "
                                       f"{out / 'run' / 'checkpoint'}: the same command with --resume continues "
                                       "from it\n")
