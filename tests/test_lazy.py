"""bertkit/lazy.py: the one PEP 562 `__getattr__` of the packages that re-export lazily."""
import json
import subprocess
import sys

import pytest

import bertkit
import bertkit.distill
import bertkit.embed
import bertkit.generate
import bertkit.model
import bertkit.pretrain
from bertkit.lazy import lazy_exports


def test_every_lazy_package_uses_the_helper_and_resolves_to_the_defining_module():
    from bertkit.api import load
    from bertkit.distill.prune import prune_heads
    from bertkit.embed.whitening import fit_whitening
    from bertkit.model.causal_lm import gpt_config
    from bertkit.model.encoder import Encoder
    from bertkit.pretrain.job import run_pretraining

    assert (bertkit.load, bertkit.distill.prune_heads, bertkit.embed.fit_whitening,
            bertkit.pretrain.run_pretraining, bertkit.generate.gpt_config, bertkit.model.Encoder) == \
        (load, prune_heads, fit_whitening, run_pretraining, gpt_config, Encoder)   # absolute names too
    for package in (bertkit, bertkit.distill, bertkit.embed, bertkit.generate, bertkit.model, bertkit.pretrain):
        assert package.__getattr__.__qualname__ == "lazy_exports.<locals>.__getattr__", package.__name__
        with pytest.raises(AttributeError, match=f"module '{package.__name__}' has no attribute 'nope'"):
            package.nope


def test_a_name_loads_its_module_on_first_use_only():
    code = ("import json, sys; import bertkit, bertkit.pretrain, bertkit.distill, bertkit.embed, bertkit.generate, "
            "bertkit.model.config; "
            "light = 'torch' not in sys.modules; bertkit.pretrain.MaskingConfig; "
            "print(json.dumps([light, 'bertkit.pretrain.masking' in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert json.loads(done.stdout) == [True, True], done.stderr
    getattr_ = lazy_exports("bertkit.pretrain", {"MaskingConfig": "masking"})
    assert getattr_("MaskingConfig") is bertkit.pretrain.MaskingConfig
