"""What the dashboard keeps on the server: reading a calibrated profile."""

from __future__ import annotations

import pytest

from dashboard.served import load_profile_file
from sim.errors import RingsimError


def test_missing_profile_module_is_explained(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "sim.hardware.profile", None)
    with pytest.raises(RingsimError, match="no sim/hardware/profile.py"):
        load_profile_file("p.json")
