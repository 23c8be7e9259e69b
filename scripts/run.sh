#!/usr/bin/env bash
# Set up and run the main job: the dashboard on its default scenario
# (http://127.0.0.1:8050). Extra arguments go to `ringsim dashboard`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/ringsim dashboard "$@"
