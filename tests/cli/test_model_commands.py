"""`bertkit encode / convert` end to end, and one-line errors for bad input."""
import gzip
import json
import subprocess
import sys

import numpy as np
import pytest

from bertkit.cli import main


def run(args, capsys):
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.err


def test_encode_txt_and_jsonl(tiny_model_dir, tmp_path, capsys):
    (tmp_path / "in.txt").write_text("the cat\nhello world\na\ndog\n", encoding="utf-8")
    code, err = run(["encode", "--model", str(tiny_model_dir), "--input", str(tmp_path / "in.txt"),
                     "--output", str(tmp_path / "out.npy"), "--pooling", "cls", "--normalize"], capsys)
    assert code == 0, err
    vectors = np.load(tmp_path / "out.npy")
    assert vectors.shape == (4, 32) and np.isfinite(vectors).all()
    with gzip.open(tmp_path / "in.jsonl.gz", "wt", encoding="utf-8") as handle:
        handle.write("\ufeff" + "\n".join(json.dumps({"text": t, "id": i}) for i, t in enumerate(["a", "b"])) + "\n")
    code, err = run(["encode", "--model", str(tiny_model_dir), "--input", str(tmp_path / "in.jsonl.gz"),
                     "--output", str(tmp_path / "out2.npy")], capsys)
    assert code == 0, err
    assert np.load(tmp_path / "out2.npy").shape == (2, 32)


@pytest.mark.parametrize("case", ["missing_model", "wrong_type", "empty", "bad_utf8", "too_long", "bad_json",
                                  "max_length", "gbk"])
def test_bad_input_gives_one_line_error(case, tiny_model_dir, tmp_path, capsys):
    model, text = str(tiny_model_dir), tmp_path / "in.txt"
    text.write_text("the cat\n", encoding="utf-8")
    extra, expect = [], ""
    if case == "missing_model":
        model, expect = str(tmp_path / "nope"), "does not exist"
    elif case == "wrong_type":
        text = tmp_path / "in.pdf"
        text.write_bytes(b"%PDF")
        expect = "unsupported file type"
    elif case == "empty":
        text.write_text("", encoding="utf-8")
        expect = "is empty"
    elif case == "bad_utf8":
        text.write_bytes(b"fine\nbad \xff\xfe byte\n")
        expect = "in.txt:2: invalid utf-8"
    elif case == "gbk":
        text.write_bytes("好\n".encode("utf-8") + "中文句子\n".encode("gbk"))
        expect = "gb18030"
    elif case == "too_long":
        text.write_text("ok\n" + "hello " * 200 + "\n", encoding="utf-8")
        extra, expect = ["--long-texts", "error"], "line 2 has"
    elif case == "bad_json":
        text = tmp_path / "in.jsonl"
        text.write_text('{"text": "a"}\n{"txt": "b"}\n', encoding="utf-8")
        expect = "in.jsonl:2: missing field 'text'"
    elif case == "max_length":
        extra, expect = ["--max-length", "600"], "--max-length 600 > 64"
    code, err = run(["encode", "--model", model, "--input", str(text), "--output", str(tmp_path / "o.npy"),
                     *extra], capsys)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("bertkit: error:") and expect in err, err
    assert "Traceback" not in err


def test_gb18030_file_reads_when_asked(tiny_model_dir, tmp_path, capsys):
    text = tmp_path / "zh.txt"
    text.write_bytes("你好世界\n".encode("gb18030"))
    code, err = run(["encode", "--model", str(tiny_model_dir), "--input", str(text), "--output",
                     str(tmp_path / "o.npy"), "--encoding", "gb18030"], capsys)
    assert code == 0, err


def test_console_script_runs_as_module(tiny_model_dir, tmp_path):
    result = subprocess.run([sys.executable, "-m", "bertkit", "encode", "--model", str(tmp_path / "none"),
                             "--input", "x.txt", "--output", "o.npy"], capture_output=True, text=True)
    assert result.returncode == 2 and "Traceback" not in result.stderr


def test_encode_precision_flag_says_what_runs(tiny_model_dir, tmp_path, capsys, monkeypatch):
    """--precision bf16: a one-line note, vectors within bf16 tolerance (cosine >= 0.999) of fp32; auto follows
    the CPU flags (monkeypatched: without AMX or avx512_bf16 it stays in fp32, bit for bit)."""
    from bertkit import runtime

    (tmp_path / "in.txt").write_text("the cat sat on the mat\nhello world\ndog\n", encoding="utf-8")
    outputs = {}
    for precision, flags in (("fp32", {}), ("bf16", {}), ("auto", {"avx2": True}), ("auto", {"amx_bf16": True})):
        monkeypatch.setattr(runtime, "cpu_capabilities", lambda flags=flags: flags)
        output = tmp_path / f"{precision}-{len(outputs)}.npy"
        code, err = run(["encode", "--model", str(tiny_model_dir), "--input", str(tmp_path / "in.txt"),
                         "--output", str(output), "--precision", precision, "--normalize"], capsys)
        assert code == 0, err
        outputs[(precision, tuple(flags))] = np.load(output)
        assert sum(line.startswith("bertkit: precision") for line in err.splitlines()) == 1
    fp32 = outputs[("fp32", ())]
    np.testing.assert_array_equal(outputs[("auto", ("avx2",))], fp32)
    for key in (("bf16", ()), ("auto", ("amx_bf16",))):
        assert (outputs[key] * fp32).sum(1).min() >= 0.999
        assert not np.array_equal(outputs[key], fp32)                 # really computed in bf16


def test_encode_refuses_a_blank_line_naming_it(tiny_model_dir, tmp_path, capsys):
    (tmp_path / "in.txt").write_text("the cat\n\nhello world\n", encoding="utf-8")
    output = tmp_path / "o.npy"
    code, err = run(["encode", "--model", str(tiny_model_dir), "--input", str(tmp_path / "in.txt"),
                     "--output", str(output)], capsys)
    assert code == 2 and not output.exists()
    assert err.strip() == f"bertkit: error: {tmp_path / 'in.txt'}: line 2 is empty or whitespace-only; remove it " \
                          "or send some text"
