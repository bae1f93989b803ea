#!/usr/bin/env bash
# Wheels of lightning_profkit's dependencies that a GPU machine with torch, Lightning, TensorBoard and
# nvidia-ml-py usually lacks, for a machine without network (run here, where the registry is reachable):
#   bash .ci/gpu_wheels.sh [PYTHON_VERSION]     # into .whl/ (ignored by git), default Python 3.12
# There, from the checkout:
#   python3 -m pip install -q --no-index --no-deps --target .whl/site .whl/*.whl
#   PYTHONPATH=$PWD/.whl/site python3 .ci/check_cuda.py
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-3.12}
# the pinned versions; the viewers are for the check's section 5 (HTA also needs pandas, which GPU images usually
# have, and plotly and pydot, which they often lack; without them that check says "not checked")
want=$(grep -E '^(msgspec|isal|torch-tb-profiler|HolisticTraceAnalysis|plotly|pydot)==' constraints.txt)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$version" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d .whl $want
ls .whl
