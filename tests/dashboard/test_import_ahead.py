"""A server process imports everything its views use before it answers (dashboard.app
.import_ahead): a background job forked while another thread was importing a module would
wait for ever on that module's import lock."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

DRAW_EVERY_VIEW = r"""
import json, sys
from dashboard.app import create_app
from dashboard.client import CallbackClient
from dashboard.state import defaults
before = set(sys.modules)
client = CallbackClient.for_app(create_app(background_jobs=False))
store = {"values": dict(defaults(), gpus=4, seq=8192)}
asked = {
    "timeline.figure": {"scenario.data": store, "profile.data": None, "tabs.value": "timeline"},
    "block-map.figure": {"scenario.data": store, "profile.data": None, "tabs.value": "blocks"},
    "memory.figure": {"scenario.data": store, "tabs.value": "memory"},
    "sweep.figure": {"scenario.data": store, "profile.data": None, "tabs.value": "sweep"},
    "schemes.figure": {"scenario.data": store, "profile.data": None, "tabs.value": "schemes"},
    "compare.figure": {"scenario.data": store, "profile.data": None, "tabs.value": "compare"},
}
after_app = set(sys.modules)
for lang in ("en", "id"):
    for output, values in asked.items():
        client.call(output, dict(values, **{"lang.value": lang}), ["lang.value"])
new = sorted(m for m in set(sys.modules) - after_app
             if m.split(".")[0] in ("plotly", "_plotly_utils", "dashboard", "sim", "babel"))
print(json.dumps(new))
"""


def test_drawing_every_view_imports_nothing_new():
    out = subprocess.run([sys.executable, "-c", DRAW_EVERY_VIEW], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    new = json.loads(out.stdout.strip().splitlines()[-1])
    assert new == [], new
