"""Every finding kind the diagnosis can emit is a known kind (model.FINDING_KINDS), has its place
in the order findings are shown (diagnosis.KIND_ORDER) and is documented for `snapshot --json`
readers (docs/snapshot-json.md): a new cause cannot reach a user's JSON unlisted."""
from __future__ import annotations

import re
from pathlib import Path

from console.diagnosis import KIND_ORDER
from console.model import FINDING_KINDS

ROOT = Path(__file__).resolve().parent.parent


def emitted_kinds() -> set[str]:
    kinds: set[str] = set()
    for path in (ROOT / "console" / "diagnosis").glob("*.py"):
        kinds.update(re.findall(r'\bfinding\(\s*"([a-z-]+)"', path.read_text()))
    return kinds


def test_every_emitted_kind_is_known_ordered_and_documented():
    emitted = emitted_kinds()
    assert {"zombie", "mps-server", "firmware-boot", "blockers-off"} <= emitted, "the scan finds the rules"
    assert emitted <= set(FINDING_KINDS), sorted(emitted - set(FINDING_KINDS))
    assert emitted <= set(KIND_ORDER), sorted(emitted - set(KIND_ORDER))
    doc = (ROOT / "docs" / "snapshot-json.md").read_text()
    undocumented = sorted(k for k in FINDING_KINDS if f"`{k}`" not in doc)
    assert not undocumented, f"finding kinds missing from docs/snapshot-json.md: {undocumented}"
