#!/usr/bin/env bash
# Set up everything the tests need (venv, packages, Debian's chromium and chromium-driver),
# lint (ruff, configured in pyproject.toml) and run the whole suite, browser and
# multi-process tests included, spread over three pytest-xdist workers (`-n 3`: on two
# cores the browser tests wait on Chromium, so a third worker fills the gaps; tests that
# share a spawned process group stay on one worker, tests/hw/conftest.py). Arguments after
# it go to pytest (`-n 0` runs everything in this process).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --browser
.venv/bin/ruff check .
exec .venv/bin/python -m pytest --headless -n 3 "$@"
