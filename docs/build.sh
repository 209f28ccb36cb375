#!/usr/bin/env bash
# Build the HTML documentation with warnings as errors, as CI does:
#
#   docs/build.sh [SPHINX OPTIONS...]      e.g. docs/build.sh -E (rebuild everything)
#
# Output: docs/_build/html/index.html.  Needs the docs extra
# (python -m pip install ".[docs]") and similearn installed in that Python
# ($PYTHON, default: python).  The API pages autosummary generates go to
# docs/generated/ (git-ignored).
set -euo pipefail
docs="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "${PYTHON:-python}" -m sphinx -W --keep-going -b html "$@" "$docs" "$docs/_build/html"
