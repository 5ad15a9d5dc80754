#!/usr/bin/env bash
# The GPU check, for sessions lent a device machine (its torch is there; nothing else is).
#
#   bash tests/device/check.sh prepare   # here: pure-Python test deps for the device's Python
#   then the device tool's `run` with command `bash tests/device/check.sh run`, carry [".gpu"]
#
# `.gpu/` must be ignored locally: `echo /.gpu/ >> .git/info/exclude`.
set -u
case "${1:-}" in
prepare)
    PY_VERSION=${PY_VERSION:-3.12}  # the device's Python (seen: 3.12.3, torch 2.11.0+cu130)
    rm -rf .gpu/site
    .venv/bin/pip install -q --target .gpu/site --python-version "$PY_VERSION" --only-binary=:all: \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --no-deps \
        debugpy rich pygments markdown-it-py mdurl pytest pluggy iniconfig packaging \
        pytest-timeout pygls lsprotocol attrs cattrs typing_extensions
    # The working tree that travels is capped at 64 MiB: drop other platforms' attach helpers.
    find .gpu/site/debugpy -type f \( -name "*.dll" -o -name "*.exe" -o -name "*.dylib" -o -name "*.pdb" \) -delete
    find .gpu/site -name __pycache__ -type d -prune -exec rm -rf {} +
    du -sh .gpu/site
    ;;
run)
    export PYTHONPATH="$PWD/.gpu/site:$PWD/.gpu/pkg" PYTHONUNBUFFERED=1 PYDEVD_DISABLE_FILE_VALIDATION=1
    PY=$(command -v python3)
    $PY -c "import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.is_available())"
    # stridelens laid out as pip would install it (same import names).
    rm -rf .gpu/pkg && mkdir -p .gpu/pkg/stridelens .gpu/bin
    cp -r server/_root/* .gpu/pkg/stridelens/
    cp -r server .gpu/pkg/stridelens/server
    cp -r inspector .gpu/pkg/stridelens/inspector
    printf '#!/bin/sh\nexec %s -m stridelens "$@"\n' "$PY" > .gpu/bin/stridelens && chmod +x .gpu/bin/stridelens
    export PATH="$PWD/.gpu/bin:$PATH"
    set -o pipefail
    $PY -m pytest -p no:cacheprovider -m cuda -rs -v \
        tests/inspector/test_e2e.py tests/hardening/test_probe_side_effects.py tests/inspector/test_cuda_summary.py \
        tests/rules/test_device_mismatch_truth.py 2>&1 | tee "${OUT:-.}/cuda_tests.log"
    status=$?
    $PY -m pytest -q -p no:cacheprovider tests/inspector/test_probe.py tests/hardening/test_probe_side_effects.py \
        2>&1 | tail -3 | tee "${OUT:-.}/probe_tests.log"
    exit $status
    ;;
*)
    echo "usage: bash tests/device/check.sh prepare|run" >&2
    exit 2
    ;;
esac
