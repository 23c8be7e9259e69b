"""What the dashboard keeps on the server for its callbacks (`Served`): the calibrated
profiles and measured traces uploaded, and the page's scenario, hardware and results read
from its stores.

Uploads stay on the server, a few at a time (an LRU named by a token of their bytes); the
browser keeps only the token. They are capped in size (MAX_UPLOAD_BYTES) and parsed as
JSON or the trace's archive only. A profile is read through sim.hardware.profile's own
validation; the example runs' profile (dashboard/measured.py) is known in every server
process by its fixed token.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from typing import Any

from dash.exceptions import PreventUpdate

from dashboard import compute, export, measured
from dashboard.state import scenario_from_values
from sim.errors import RingsimError
from sim.hardware.profile import MAX_PROFILE_BYTES, load_profile, profile_from_dict
from sim.scenario.config import scenario_from_config
from sim.trace.format import Trace

MAX_UPLOAD_BYTES = 50 * 1024 * 1024
"""Largest trace or profile file the page accepts."""
EXAMPLE_PROFILE_TOKEN = "profile-examples"
_KEPT_UPLOADS = 8


class _Kept:
    """A small LRU of server-side objects named by a token."""

    def __init__(self, size: int = _KEPT_UPLOADS):
        self.size = size
        self.items: OrderedDict[str, Any] = OrderedDict()

    def put(self, token: str, obj: Any) -> None:
        self.items[token] = obj
        self.items.move_to_end(token)
        while len(self.items) > self.size:
            self.items.popitem(last=False)

    def get(self, token: str | None) -> Any:
        return self.items.get(token) if token else None


def profile_note(token: str, name: str, profile: Any) -> dict[str, Any]:
    """What the page's `profile` store holds for a loaded profile: its token on the
    server, its file name and the machine it was measured on."""
    device = profile.measured_on.get("device")
    return {"token": token, "name": name, "device": device if isinstance(device, str) else None}


def _example_note() -> dict[str, Any] | None:
    """The store's data for the first example the package ships, if it ships one."""
    try:
        shipped = measured.examples()
    except RingsimError:
        return None          # the view names the refused file when it is opened
    return {"token": shipped[0].token, "name": shipped[0].file} if shipped else None


def profile_from_upload(contents: Any, filename: Any) -> tuple[Any, bytes]:
    """A calibrated profile from an upload (JSON only, size-capped) and its raw bytes."""
    raw = export.decode_upload(contents, filename, min(MAX_UPLOAD_BYTES, MAX_PROFILE_BYTES))
    name = filename if isinstance(filename, str) else "profile"
    return profile_from_dict(export.parse_json_bytes(raw, name), name), raw


class Served:
    """What the app's callbacks share on a server: the calibrated profiles and traces
    uploaded (kept by token), and the page's scenario and hardware read from its stores."""

    def __init__(self, profile_path: str | None = None, background: Any | None = None):
        self.background = background
        """The manager of the background callbacks (dashboard.views.background.manager), or None."""
        self.profiles = _Kept()
        self.uploaded_traces = _Kept()
        self.initial_profile = None
        if profile_path:
            with open(profile_path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()[:16]
            loaded = load_profile(profile_path)
            self.profiles.put(f"profile-{digest}", loaded)
            self.initial_profile = profile_note(f"profile-{digest}", os.path.basename(profile_path), loaded)
        self.initial_example = _example_note()

    def hardware_of(self, profile_data: Any) -> tuple[Any, str | None]:
        if not profile_data:
            return None, None
        token = profile_data.get("token")
        hw = self.profiles.get(token)
        if hw is None and token == EXAMPLE_PROFILE_TOKEN:
            hw = measured.example_profile()      # in every server process, not only the one asked
        if hw is None:
            raise RingsimError("the calibrated profile is no longer loaded on the server; "
                               "upload it again")
        return hw, token

    def loaded_profile(self, profile_data: Any) -> Any:
        """The profile the store names, or None (none loaded, or no longer on the server:
        the views say so)."""
        try:
            return self.hardware_of(profile_data)[0]
        except RingsimError:
            return None

    def scenario_of(self, data: Any):
        if not data:
            raise PreventUpdate
        return scenario_from_values(data["values"])

    def metrics_of(self, data: Any, profile_data: Any):
        """The metrics of the page's run (compute.metrics: no trace is read where they are kept)."""
        hw, key = self.hardware_of(profile_data)
        return compute.metrics(self.scenario_of(data), hw, key)

    def start_run(self, data: Any, profile_data: Any) -> threading.Thread:
        """Start making the metrics of the page's run (`metrics_of`) in a thread, and return
        it. The scenario callback starts it as it sends the page a new scenario: the cards and
        views that the page then asks for, a round trip and the browser's redraw of the
        controls later, find the run made or being made (compute's caches make a value once,
        the other askers wait for it), and a failure is theirs to show."""
        def make() -> None:
            try:
                self.metrics_of(data, profile_data)
            except Exception:      # noqa: BLE001 (the views asking for the run say what went wrong)
                pass

        thread = threading.Thread(target=make, name="ringsim-page-run", daemon=True)
        thread.start()
        return thread

    def measured_pair(self, measured_data: Any, data: Any, profile_data: Any) -> tuple | None:
        """The measured trace on screen and what it is set against: (trace, the scenario of
        its configuration on the page's hardware, the hardware model, its cache key), or
        None when the trace is no longer on the server."""
        trace = self.measured_trace(measured_data.get("token"))
        if trace is None:
            return None
        hw, key = self.hardware_of(profile_data)
        if hw is None and measured.is_example(measured_data.get("token")):
            # an example is set against the profile of the machine it ran on, unless
            # the reader loaded a profile of their own
            hw, key = measured.example_profile(), EXAMPLE_PROFILE_TOKEN
        sim_scenario = scenario_from_config(trace.config, self.scenario_of(data).hardware)
        if sim_scenario.n_gpus != trace.n_gpus:
            raise RingsimError(f"the trace has {trace.n_gpus} ranks but its configuration "
                               f"says {sim_scenario.n_gpus} GPUs")
        return trace, sim_scenario, hw, key

    def measured_trace(self, token: Any) -> Trace | None:
        ex = measured.example(token)
        return ex.trace if ex is not None else self.uploaded_traces.get(token)
