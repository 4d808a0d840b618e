#!/usr/bin/env bash
# Builds the runtimes' venvs that scatter_rewrite/targets/runners/ run prepared models in, each apart from the project's
# venv (onnx2tf pins onnx, onnxruntime, numpy and tensorflow exactly): onnx2tf (+ TensorFlow and LiteRT),
# openvino, tvm, mnn. Usage: setup_venvs.sh [NAME...] (default: all four). Where: $SCATTER_REWRITE_RUNTIME_VENVS,
# default /work/venvs. A venv whose requirements file has not changed since it was built is kept as it is.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="${SCATTER_REWRITE_RUNTIME_VENVS:-/work/venvs}"
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(onnx2tf openvino tvm mnn)
mkdir -p "$root"
for name in "${names[@]}"; do
    req="$here/requirements-$name.txt"
    [ -f "$req" ] || { echo "setup_venvs.sh: no runtime named $name" >&2; exit 2; }
    venv="$root/$name"
    stamp="$venv/.requirements"
    if [ -f "$stamp" ] && cmp -s "$req" "$stamp"; then
        echo "$name: $venv is up to date"
        continue
    fi
    echo "$name: building $venv"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet -r "$req"
    cp "$req" "$stamp"
    "$venv/bin/python" -m pip freeze >"$venv/.freeze"
done
