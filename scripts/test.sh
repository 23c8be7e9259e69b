#!/usr/bin/env bash
# Set up everything the tests need (venv, packages, Debian's chromium and chromium-driver),
# lint (ruff, configured in pyproject.toml) and run the whole suite, browser and
# multi-process tests included.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --browser
.venv/bin/ruff check .
exec .venv/bin/python -m pytest --headless "$@"
