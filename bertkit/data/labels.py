"""Label maps: label name <-> index, built from the training file and saved with the model."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class LabelMap:
    names: tuple[str, ...]

    @classmethod
    def from_labels(cls, labels: Iterable[str]) -> "LabelMap":
        """Sorted names, so the same training labels always give the same indices (whatever the row order)."""
        return cls(tuple(sorted(set(labels))))

    @classmethod
    def from_tags(cls, tags: Iterable[str]) -> "LabelMap":
        """NER tags: "O" first (index 0, a stable background class), then entity tags sorted by type, then prefix."""
        unique = set(tags) - {"O"}
        ordered = sorted(unique, key=lambda tag: (tag[2:] if tag[1:2] == "-" else tag, tag))
        return cls(("O",) + tuple(ordered))

    def __len__(self) -> int:
        return len(self.names)

    def __contains__(self, name: object) -> bool:
        return name in self._index

    @property
    def _index(self) -> dict[str, int]:
        cached = self.__dict__.get("_index_cache")
        if cached is None:
            cached = {name: i for i, name in enumerate(self.names)}
            object.__setattr__(self, "_index_cache", cached)
        return cached

    def id(self, name: str) -> int:
        return self._index[name]

    def name(self, index: int) -> str:
        return self.names[index]
