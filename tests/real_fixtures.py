"""The real-output corpus in tests/fixtures/real/ (see its README): a header of ``# `` lines
(``source``, ``driver``, ``note``, ``what``), a line ``# ---``, then the output, byte for byte."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DIR = Path(__file__).parent / "fixtures" / "real"
SEPARATOR = "# ---\n"


@dataclass(frozen=True)
class RealOutput:
    name: str
    fields: dict[str, str]
    body: str                       # the output, exactly as pasted

    @property
    def source(self) -> str:
        return self.fields.get("source", "")

    @property
    def driver(self) -> str:
        return self.fields.get("driver", "")


def names() -> list[str]:
    return sorted(p.name for p in DIR.iterdir() if p.is_file() and p.name != "README")


def load(name: str) -> RealOutput:
    with open(DIR / name, encoding="utf-8", newline="") as f:      # keep every byte, \r included
        text = f.read()
    head, sep, body = text.partition(SEPARATOR)
    if not sep:
        raise ValueError(f"{name}: no '# ---' line")
    fields: dict[str, str] = {}
    for line in head.splitlines():
        key, _, value = line.removeprefix("# ").partition(":")
        if not line.startswith("# ") or not value:
            raise ValueError(f"{name}: header line is not '# key: value': {line!r}")
        fields.setdefault(key.strip(), value.strip())
    return RealOutput(name, fields, body)
