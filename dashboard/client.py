"""Drive the app's callbacks over HTTP the way the browser does, without a browser.

The page's dependency graph comes from `/_dash-dependencies`; a call POSTs one
callback's inputs and state to `/_dash-update-component` and returns the outputs it
sent back. A background callback answers with its job's handles first; the call then
asks again with them, as the page does, until the job's outputs come. Used by the
tests (through Flask's test client), the benchmark and the load
script (over loopback HTTP).
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable
from urllib.parse import urlencode

POLL_S = 0.05
"""How often a call asks a background job for its outputs."""


def _split_outputs(output: str) -> list[tuple[str, str]]:
    parts = output[2:-2].split("...") if output.startswith("..") else [output]
    return [tuple(p.rsplit(".", 1)) for p in parts]  # type: ignore[misc]


class CallbackClient:
    """Calls callbacks by (a substring of) their output, e.g. "timeline.figure"."""

    def __init__(self, dependencies: list[dict[str, Any]],
                 post: Callable[[str, bytes], tuple[int, bytes]]):
        self.deps = dependencies
        self._post = post

    @classmethod
    def for_app(cls, app) -> "CallbackClient":
        client = app.server.test_client()
        deps = json.loads(client.get("/_dash-dependencies").data)

        def post(path: str, body: bytes) -> tuple[int, bytes]:
            r = client.post(path, data=body, content_type="application/json")
            return r.status_code, r.data

        return cls(deps, post)

    @classmethod
    def for_url(cls, base: str, session=None) -> "CallbackClient":
        import requests

        s = session or requests.Session()
        deps = s.get(base + "/_dash-dependencies", timeout=30).json()

        def post(path: str, body: bytes) -> tuple[int, bytes]:
            r = s.post(base + path, data=body, headers={"Content-Type": "application/json"},
                       timeout=300)
            return r.status_code, r.content

        return cls(deps, post)

    def dependency(self, output: str) -> dict[str, Any]:
        found = [d for d in self.deps if output in d["output"]]
        if len(found) > 1:
            # an output that another callback also writes (allow_duplicate: "id.prop@hash")
            # names the callback that writes it plainly
            found = [d for d in found if output in (".".join(p) for p in _split_outputs(d["output"]))] or found
        if len(found) != 1:
            raise KeyError(f"{len(found)} callbacks have an output matching {output!r}")
        return found[0]

    def payload(self, output: str, values: dict[str, Any], changed: list[str]) -> dict[str, Any]:
        dep = self.dependency(output)
        outs = [{"id": i, "property": p} for i, p in _split_outputs(dep["output"])]

        def fill(specs):
            return [{"id": s["id"], "property": s["property"],
                     "value": values.get(f"{s['id']}.{s['property']}")} for s in specs]

        return {"output": dep["output"], "outputs": outs if len(outs) > 1 else outs[0],
                "inputs": fill(dep["inputs"]), "state": fill(dep["state"]),
                "changedPropIds": changed}

    def call(self, output: str, values: dict[str, Any], changed: list[str] | None = None
             ) -> tuple[int, dict[str, dict[str, Any]]]:
        """Status and the outputs sent back ({} when the callback did not update). A
        background callback behind a request that asks first (dashboard/views/background.py:
        its only input is the view's "-asked" store) is called as the page calls it: the
        asking callback with `values`, then, unless that drew the outputs, the job with what
        it asked."""
        dep = self.dependency(output)
        asked = [i["id"] for i in dep["inputs"] if i["id"].endswith("-asked") and i["property"] == "data"]
        if len(dep["inputs"]) != 1 or not asked:
            return self._call(output, values, changed)
        status, out = self._call(f"{asked[0]}.data", values, changed)
        if status != 200 or asked[0] not in out:
            return status, {k: {p.split("@")[0]: v for p, v in props.items()} for k, props in out.items()}
        return self._call(output, {f"{asked[0]}.data": out[asked[0]]["data"]}, [f"{asked[0]}.data"])

    def _call(self, output: str, values: dict[str, Any], changed: list[str] | None
              ) -> tuple[int, dict[str, dict[str, Any]]]:
        body = json.dumps(self.payload(output, values, changed or [])).encode()
        status, data = self.post_following(body)
        if status != 200 or not data:
            return status, {}
        return status, json.loads(data).get("response", {})

    def post_following(self, body: bytes, timeout_s: float = 600) -> tuple[int, bytes]:
        """POST a callback's payload; for a background callback, ask again with its job's
        handles until the outputs come (or nothing does: the job found no update)."""
        status, data = self._post("/_dash-update-component", body)
        if status != 200 or not data or not data.startswith(b'{"cacheKey"'):
            return status, data
        handles = json.loads(data)
        query = "?" + urlencode({"cacheKey": handles["cacheKey"], "job": handles["job"]})
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            time.sleep(POLL_S)
            status, data = self._post("/_dash-update-component" + query, body)
            if status != 200 or not data:
                return status, data
            if "response" in json.loads(data):
                return status, data
        return status, data
