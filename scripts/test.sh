#!/usr/bin/env bash
# Set up everything the tests need (venv, packages, Debian's chromium and chromium-driver)
# and run the whole suite, browser and multi-process tests included.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --browser
exec .venv/bin/python -m pytest --headless "$@"
