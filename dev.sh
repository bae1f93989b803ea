#!/usr/bin/env bash
# Usage: bash dev.sh demo | test [pytest args...] | floor [pytest args...] | newest [pytest args...] | check-cuda
# demo and test create or refresh .venv (pinned by constraints.txt), then run.
# floor builds the sdist and the wheel, installs the wheel at the lowest declared versions (constraints-floor.txt)
# on the lowest declared Python, runs the quick start from it, then the tests; newest runs the tests at the newest
# releases on the newest Python here. Both keep their environments under ~/.cache/lightning_profkit.
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

# Where `floor` and `newest` keep their environments between runs (CI's too: each is made anew when what it was
# made from changes, else only this checkout is reinstalled into it).
ENVS=${PROFKIT_ENVS:-${XDG_CACHE_HOME:-$HOME/.cache}/lightning_profkit}
FLOOR_PYTHON=3.10   # requires-python's floor
NEWEST_PYTHON=3.13  # the newest Python this project's machines have
SUITE=(-m pytest -q -n auto --maxprocesses 4 --dist loadfile)  # a test file per worker, as many as CPUs up to 4
# the whole suite but the docs' site, which the pinned job builds with its pinned tools
RANGE_TESTS=(--ignore=tests/test_docs.py)

python_for() {  # VERSION: an interpreter of that version, python3.X on PATH or pyenv's
  local want=$1 candidate
  local pyenvs; pyenvs=$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")
  for candidate in "$(command -v "python$want" || true)" "$pyenvs"/versions/"$want".*/bin/python; do
    if [ -x "$candidate" ] && [ "$("$candidate" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = "$want" ]; then
      echo "$candidate"; return
    fi
  done
  echo "dev.sh: no Python $want found (python$want on PATH or pyenv's)" >&2; return 1
}

kept_venv() {  # NAME PYTHON KEY: the environment $ENVS/NAME, made anew with PYTHON when KEY differs from its own
  local dir="$ENVS/$1"
  if [ "$(cat "$dir/.profkit-key" 2>/dev/null)" != "$3" ]; then
    rm -rf "$dir" && mkdir -p "$ENVS" && "$2" -m venv "$dir" >&2
    "$dir/bin/python" -m pip install -q --upgrade pip build >&2
  fi
  echo "$dir"
}

installed_versions() {
  "$1/bin/python" -m pip freeze | grep -iE '^(torch|lightning|pytorch-lightning|numpy|tensorboard|msgspec|isal)==' | tr '\n' ' '
  "$1/bin/python" -c 'import sys; print("python==%d.%d.%d" % sys.version_info[:3])'
}

floor() {
  # the sdist and the wheel built from it, as a user would install them, at the lowest declared versions on the
  # lowest declared Python: LICENSE in both, the quick start from the installed copy, then the suite
  local py venv key root=$PWD run dist wheel
  py=$(python_for "$FLOOR_PYTHON")
  key=$( (echo "$py"; cat constraints-floor.txt pyproject.toml) | sha256sum | cut -d' ' -f1)
  venv=$(kept_venv floor "$py" "$key")
  dist=$(mktemp -d)
  "$venv/bin/python" -m build --outdir "$dist" . > "$dist/build.log" 2>&1 || { cat "$dist/build.log" >&2; exit 1; }
  wheel=$(ls "$dist"/lightning_profkit-*.whl)
  "$venv/bin/python" -m zipfile -l "$wheel" | grep 'dist-info/licenses/LICENSE' >/dev/null || { echo "no LICENSE in $wheel" >&2; exit 1; }
  tar -tzf "$dist"/lightning_profkit-*.tar.gz | grep '/LICENSE$' >/dev/null || { echo "no LICENSE in the sdist" >&2; exit 1; }
  "$venv/bin/python" -m pip install -q -c constraints-floor.txt "$wheel[dev]"
  "$venv/bin/python" -m pip install -q --force-reinstall --no-deps "$wheel"
  "$venv/bin/python" -m pip install -q -c constraints.txt --no-deps litdata  # as refresh_venv does
  echo "$key" > "$venv/.profkit-key"
  echo "dev.sh floor: $(installed_versions "$venv")"
  run=$(mktemp -d)
  (cd "$run" && "$venv/bin/python" -c 'import lightning_profkit, sys; sys.exit("site-packages" not in lightning_profkit.__file__)' \
     && "$venv/bin/python" "$root/examples/data_bound.py" >/dev/null && "$venv/bin/profkit" summary runs >/dev/null)
  rm -rf "$run" "$dist"
  echo "dev.sh floor: the wheel built from the sdist, installed at the lowest declared versions, ran the quick start"
  "$venv/bin/python" "${SUITE[@]}" "${RANGE_TESTS[@]}" "$@"
}

newest() {
  # the newest releases the package index serves (past the machine's cap on torch) on the newest Python here
  local py venv
  py=$(python_for "$NEWEST_PYTHON")
  venv=$(kept_venv newest "$py" "$py")
  PIP_CONSTRAINT=/dev/null "$venv/bin/python" -m pip install -q --upgrade --upgrade-strategy eager -e ".[dev]"
  PIP_CONSTRAINT=/dev/null "$venv/bin/python" -m pip install -q --upgrade --no-deps litdata
  echo "dev.sh newest: $(installed_versions "$venv")"
  "$venv/bin/python" "${SUITE[@]}" "${RANGE_TESTS[@]}" "$@"
}

case "${1:-}" in
  demo) shift; refresh_venv; exec "$VENV/bin/python" examples/data_bound.py "$@" ;;
  # `-n 0` after `test` runs the test files one at a time
  test) shift; refresh_venv; browser_deps; exec "$VENV/bin/python" "${SUITE[@]}" "$@" ;;
  # the machine's own python3 with its CUDA torch: no virtual environment, nothing fetched (GPU machines are often offline)
  check-cuda) shift; exec "$PY" .ci/check_cuda.py "$@" ;;
  floor) shift; browser_deps; floor "$@" ;;
  newest) shift; browser_deps; newest "$@" ;;
  *) echo "usage: bash dev.sh demo | test [pytest args] | floor [pytest args] | newest [pytest args] | check-cuda" >&2; exit 2 ;;
esac
