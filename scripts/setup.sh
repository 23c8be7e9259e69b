#!/usr/bin/env bash
# Create .venv and install ringsim with everything the tests need. Idempotent.
#   scripts/setup.sh           python packages only
#   scripts/setup.sh --browser also Debian's chromium and chromium-driver (browser tests)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
stamp=.venv/.ringsim-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints/cpu.txt -nt "$stamp" ]; then
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -c constraints/cpu.txt -e '.[test]'
    touch "$stamp"
fi
if [ "${1:-}" = "--browser" ]; then
    if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
        SUDO=""
        [ "$(id -u)" -eq 0 ] || SUDO="sudo"
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
    fi
fi
