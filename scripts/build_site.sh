#!/usr/bin/env bash
# Builds the book (mkdocs.yml: the course, then the reference chapters) in
# strict mode: a broken link, a missing include or a page left out of the
# navigation fails the build. Usage: build_site.sh [OUTPUT_DIR] (default site/).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m mkdocs build --strict --quiet --site-dir "${1:-site}"
