"""PEP 562 lazy package names: a package's `__init__.py` lists what it exports and the module each comes from, and
the module is imported on first use. So `import bertkit` and the light submodules (a config, the objectives'
names) load without torch, and a package re-exports without importing its heavy half."""
from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_exports(package: str, names: dict[str, str]) -> Callable[[str], Any]:
    """The module-level `__getattr__` of `package`: `names` maps each exported name to the module that defines it,
    relative to the package ("job", "objectives.mlm") or, for a name re-exported from another package, absolute
    ("bertkit.model.causal_lm")."""
    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = names[name]
        return getattr(importlib.import_module(module if module.startswith("bertkit.") else f"{package}.{module}"),
                       name)
    return __getattr__
