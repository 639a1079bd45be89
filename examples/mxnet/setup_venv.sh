#!/usr/bin/env bash
# Create (idempotently) the private virtualenv used by the MXNet example.
#
# MXNet 1.9.1 (the last release) only works on Python 3.11 with numpy<1.24
# (it uses the removed `np.bool` alias), which conflicts with the rest of the
# project, so it lives in its own venv at examples/mxnet/.venv (gitignored).
# ps.yaml runs `.venv/bin/python ps_train.py` relative to this directory.
#
# Every package in it is pinned by constraints.txt next to this script (what the tests ran
# with); `--lock` re-resolves the newest versions mxnet allows into a fresh venv and rewrites it.
#
# Usage: bash examples/mxnet/setup_venv.sh [--lock]   (env PYTHON=python3.11 to pick the base
# interpreter)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="$HERE/.venv"
PY="${PYTHON:-python3}"
MXNET_VERSION="1.9.1"
NUMPY_VERSION="1.23.5"

if [ "${1:-}" = "--lock" ]; then
  work=$(mktemp -d "${TMPDIR:-/tmp}/trainop-mxnet-lock.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  "$PY" -m venv "$work/venv"
  "$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "mxnet==$MXNET_VERSION" "numpy==$NUMPY_VERSION"
  {
    echo "# The exact versions in the MXNet example's venv (written by setup_venv.sh --lock)."
    "$work/venv/bin/python" -m pip freeze | LC_ALL=C sort -f
  } > "$HERE/constraints.txt"
  echo "wrote $HERE/constraints.txt"
  exit 0
fi

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi

have_pkgs() {
  "$VENV/bin/python" - "$MXNET_VERSION" "$NUMPY_VERSION" <<'PYEOF' 2>/dev/null
import sys
from importlib.metadata import version
ok = version("mxnet") == sys.argv[1] and version("numpy") == sys.argv[2]
sys.exit(0 if ok else 1)
PYEOF
}

if ! have_pkgs; then
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
    -c "$HERE/constraints.txt" "mxnet==$MXNET_VERSION" "numpy==$NUMPY_VERSION"
fi

# Smoke-test the import. libmxnet.so links libquadmath.so.0 / libgomp.so.1
# (Debian: libquadmath0, libgomp1; both usually present with gcc runtime).
if ! "$VENV/bin/python" -c "import mxnet" >/dev/null 2>&1; then
  echo "setup_venv.sh: 'import mxnet' failed:" >&2
  "$VENV/bin/python" -c "import mxnet" || true
  echo "hint: apt-get install -y libquadmath0 libgomp1" >&2
  exit 1
fi

echo "$VENV"
