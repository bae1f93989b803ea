#!/usr/bin/env bash
# Usage: bash dev.sh demo | test [pytest args...] | floor | check-cuda
# demo and test create or refresh .venv (pinned by constraints.txt), then run.
# floor builds the wheel, installs it at the lowest declared versions (constraints-floor.txt) into .venv-floor and
# runs a fit and a summary with it.
# check-cuda is for a CUDA machine, with the python3 that has its torch (see .ci/check_cuda.py).
set -euo pipefail
cd "$(dirname "$0")"
VENV=${PROFKIT_VENV:-.venv}
PY=${PYTHON:-python3}

refresh_venv() {
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  local stamp="$VENV/.profkit-stamp" want
  want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q -c constraints.txt -e ".[dev]"
    # litdata for its loader's test; without its dependencies, whose torchvision is built for another torch
    "$VENV/bin/python" -m pip install -q -c constraints.txt --no-deps litdata
    echo "$want" > "$stamp"
  fi
}

browser_deps() {
  # The browser test drives Debian's Chromium; install it where we can (root with apt), else it skips.
  if ! command -v chromedriver >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null) \
      || echo "dev.sh: could not install chromium; the browser test will be skipped" >&2
  fi
}

floor() {
  local venv root=$PWD run dist wheel
  venv=$(realpath -m "${PROFKIT_FLOOR_VENV:-.venv-floor}")
  [ -x "$venv/bin/python" ] || "$PY" -m venv "$venv"
  # the wheel a user would install, with its LICENSE, at the lowest declared versions
  dist=$(mktemp -d)
  "$venv/bin/python" -m pip wheel -q --no-deps -w "$dist" .
  wheel=$(ls "$dist"/lightning_profkit-*.whl)
  "$venv/bin/python" -m zipfile -l "$wheel" | grep -q 'dist-info/licenses/LICENSE' || { echo "no LICENSE in $wheel" >&2; exit 1; }
  "$venv/bin/python" -m pip install -q -c constraints-floor.txt "$wheel"
  "$venv/bin/python" -m pip install -q --force-reinstall --no-deps "$wheel"
  "$venv/bin/python" -m pip freeze | grep -iE '^(torch|lightning|numpy|tensorboard|torch-tb-profiler|msgspec|isal)=='
  run=$(mktemp -d)
  (cd "$run" && "$venv/bin/python" -c 'import lightning_profkit, sys; sys.exit("site-packages" not in lightning_profkit.__file__)' \
     && "$venv/bin/python" "$root/examples/data_bound.py" >/dev/null && "$venv/bin/profkit" summary runs >/dev/null)
  rm -rf "$run" "$dist"
  echo "dev.sh floor: the wheel, installed at the lowest declared versions, ran a fit and profkit summary"
}

case "${1:-}" in
  demo) shift; refresh_venv; exec "$VENV/bin/python" examples/data_bound.py "$@" ;;
  # a test file per worker, as many workers as CPUs up to 4 (`-n 0` after `test` runs them one at a time)
  test) shift; refresh_venv; browser_deps; exec "$VENV/bin/python" -m pytest -q -n auto --maxprocesses 4 --dist loadfile "$@" ;;
  # the machine's own python3 with its CUDA torch: no virtual environment, nothing fetched (GPU machines are often offline)
  check-cuda) shift; exec "$PY" .ci/check_cuda.py "$@" ;;
  floor) floor ;;
  *) echo "usage: bash dev.sh demo | test [pytest args] | floor | check-cuda" >&2; exit 2 ;;
esac
