#!/bin/sh
# Makes clients/python/.venv (with $PYTHON, python3 by default) and installs the package there,
# editable, with its dev tools, when pyproject.toml changed since the last install. Run by
# test.sh and by the conformance suite, whose Python driver runs in it.
set -eu
cd "$(dirname "$0")"
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "== $python -m venv .venv"
  "$python" -m venv .venv
fi
.venv/bin/python -c 'import sys; assert sys.version_info >= (3, 10), "Python 3.10 or later needed"'
stamp=.venv/.installed-pyproject
if ! cmp -s pyproject.toml "$stamp"; then
  echo "== pip install -e .[dev]"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[dev]'
  cp pyproject.toml "$stamp"
fi
