import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def run_worker(tmp_path, nproc: int, batch_size: int) -> list[float]:
    out = tmp_path / f"losses_{nproc}.json"
    env = {**os.environ, "PYTHONPATH": str(HERE), "OMP_NUM_THREADS": "1"}
    if nproc == 1:
        cmd = [sys.executable, str(HERE / "ddp_worker.py"), str(out), str(batch_size)]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}", "--standalone",
               str(HERE / "ddp_worker.py"), str(out), str(batch_size)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.slow
def test_two_process_gloo_matches_one_process_with_same_global_batch(tmp_path):
    single = run_worker(tmp_path, 1, 8)
    double = run_worker(tmp_path, 2, 4)
    assert len(single) == len(double) == 20
    assert double == pytest.approx(single, abs=1e-4)
