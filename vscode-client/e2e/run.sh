#!/usr/bin/env bash
# End-to-end: package the extension (with stridelens bundled), install it into code-server
# 4.100.3, and drive the scenario (static hover, SL101 quick fix, fallback debugger + runtime
# facts + memory panel, a Python without torch and a missing one, attach by host:port to a
# running debugpy.listen() process, a notebook's cell hover, the panel's step diff, then hovers, inline facts and the
# memory panel in Chinese with stridelens.locale) in Debian's chromium. The interpreter has torch and debugpy
# but not stridelens: the .vsix's bundled copy serves it. Everything installed is cached under
# vscode-client/.e2e/; screenshots land in vscode-client/e2e-artifacts/. Leaves no process behind.
set -euo pipefail
CLIENT="$(cd "$(dirname "$0")/.." && pwd)"
REPO="$(cd "$CLIENT/.." && pwd)"
# Builds the bundle (pip wheel + pip install --target): the repository's venv (make venv).
BUILD_PYTHON="${STRIDELENS_BUILD_PYTHON:-$REPO/.venv/bin/python}"
ARTIFACTS="$CLIENT/e2e-artifacts"
start=$(date +%s)

bash "$CLIENT/e2e/install.sh"

# The user's interpreter: torch (the pin on local disk: any other spec downloads GBs) and
# debugpy, no stridelens. Cached, keyed on the pin; made (once) in the background while npm
# and the packaging run. pip compiles the bytecode (about 40 s of the 70 s it took here):
# without it every import of torch compiles torch again where PYTHONDONTWRITEBYTECODE is set
# (an explain took 41 s instead of 12).
TORCH_PIN=2.13.0
VENV="$CLIENT/.e2e/py-torch-$TORCH_PIN"
PYTHON="${STRIDELENS_E2E_PYTHON:-$VENV/bin/python}"
VENV_PID=""
if [ -z "${STRIDELENS_E2E_PYTHON:-}" ] && [ ! -e "$VENV/.complete" ]; then
  echo "e2e: creating a venv with torch==$TORCH_PIN and debugpy (once, in the background)"
  mkdir -p "$CLIENT/.e2e"
  (
    t_venv=$(date +%s)
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check "torch==$TORCH_PIN" debugpy
    touch "$VENV/.complete"
    echo "venv ready in $(( $(date +%s) - t_venv )) s"
  ) >"$CLIENT/.e2e/venv.log" 2>&1 &
  VENV_PID=$!
  trap 'pkill -TERM -P "$VENV_PID" 2>/dev/null; kill "$VENV_PID" 2>/dev/null || true' EXIT INT TERM  # pip, then the subshell
fi

cd "$CLIENT"
lock_hash=$(sha1sum package-lock.json | cut -c1-40)
if [ "$(cat node_modules/.lock-hash 2>/dev/null)" != "$lock_hash" ]; then
  echo "e2e: npm ci"
  npm ci --no-audit --no-fund >/dev/null
  echo "$lock_hash" > node_modules/.lock-hash
fi
npm test >"$CLIENT/.e2e/unit.log" 2>&1 || { cat "$CLIENT/.e2e/unit.log"; echo "e2e: unit tests FAILED"; exit 1; }
echo "e2e: unit tests $(grep -E '^# (pass|fail)' "$CLIENT/.e2e/unit.log" | tr '\n' ' ')"
PYTHON="$BUILD_PYTHON" npm run -s package >"$CLIENT/.e2e/package.log" 2>&1 || { cat "$CLIENT/.e2e/package.log"; echo "e2e: packaging FAILED"; exit 1; }
grep '^bundle:' "$CLIENT/.e2e/package.log" || true
vsix_kib=$(du -k stridelens.vsix | cut -f1)
echo "e2e: packaged stridelens.vsix, $vsix_kib KiB"
[ "$vsix_kib" -lt 5120 ] || { echo "e2e: the .vsix is over 5 MiB"; exit 1; }
# The translations travel in the .vsix: package.nls*.json (contributed strings), l10n/ (runtime strings).
"$BUILD_PYTHON" -c "
import sys, zipfile
names = set(zipfile.ZipFile('stridelens.vsix').namelist())
want = ['extension/package.nls.json', 'extension/package.nls.zh-cn.json', 'extension/l10n/bundle.l10n.zh-cn.json']
missing = [n for n in want if n not in names]
sys.exit('e2e: the .vsix lacks ' + ', '.join(missing) if missing else 0)
"
echo "e2e: the .vsix carries package.nls.json, package.nls.zh-cn.json, l10n/bundle.l10n.zh-cn.json"

if [ -n "$VENV_PID" ]; then
  wait "$VENV_PID" || { cat "$CLIENT/.e2e/venv.log"; echo "e2e: venv install FAILED"; exit 1; }
  echo "e2e: $(tail -1 "$CLIENT/.e2e/venv.log")"
fi
"$PYTHON" -W ignore -c "import torch, debugpy" || { echo "e2e: $PYTHON lacks torch/debugpy"; exit 1; }
if "$PYTHON" -c "import stridelens" 2>/dev/null; then echo "e2e: $PYTHON has stridelens: the bundled copy would not be tested"; exit 1; fi
# Which stridelens the launcher picks (stridelens.importStrategy): the bundled one for the
# e2e interpreter either way; for the repository's venv (its own, editable stridelens) the
# bundled one unless fromEnvironment.
which_copy() { STRIDELENS_IMPORT_STRATEGY="$2" "$1" "$CLIENT/bundled/tool/launch.py" --info | "$BUILD_PYTHON" -c "import json, sys; print(json.load(sys.stdin)['fromBundle'])"; }
for check in "$PYTHON useBundled True" "$PYTHON fromEnvironment True" "$BUILD_PYTHON useBundled True" "$BUILD_PYTHON fromEnvironment False"; do
  set -- $check
  got=$(which_copy "$1" "$2")
  [ "$got" = "$3" ] || { echo "e2e: launch.py with $2 for $1: fromBundle $got, expected $3"; exit 1; }
done
echo "e2e: launcher picks the bundled stridelens (useBundled; fromEnvironment without one) and the interpreter's (fromEnvironment)"

TMP="$(mktemp -d "${TMPDIR:-/tmp}/stridelens-e2e.XXXXXX")"
CS_PID=""
cleanup() {
  # Step 5's debuggee (its own process group), should the scenario not have ended it.
  if [ -s "$TMP/attach-target.pid" ]; then kill -KILL -- "-$(cat "$TMP/attach-target.pid")" 2>/dev/null || true; fi
  if [ -n "$CS_PID" ] && kill -0 "$CS_PID" 2>/dev/null; then
    kill -TERM -- "-$CS_PID" 2>/dev/null || true   # code-server's own process group (setsid)
    for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$CS_PID" 2>/dev/null || break; sleep 0.3; done
    kill -KILL -- "-$CS_PID" 2>/dev/null || true
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

# A temp copy of the examples: the scenario edits files.
WS="$TMP/ws"
mkdir -p "$WS/.vscode" "$TMP/xdg/config" "$TMP/xdg/data" "$TMP/xdg/cache" "$TMP/xdg/state" "$TMP/tmp" "$TMP/user/User"
cp -r "$REPO/examples" "$WS/examples"
cp "$CLIENT/e2e/attach_target.py" "$WS/attach_target.py"   # step 5's debuggee (there before quick open indexes)
cp "$CLIENT/e2e/plain_target.py" "$WS/plain_target.py"     # step 4's debuggee: no torch
cp "$CLIENT/e2e/steps_target.py" "$WS/steps_target.py"     # step 7's debuggee: a list that grows per step
cat > "$WS/.vscode/settings.json" <<JSON
{ "stridelens.interpreter": "$PYTHON" }
JSON
cat > "$TMP/user/User/settings.json" <<JSON
{
  "workbench.startupEditor": "none",
  "security.workspace.trust.enabled": false,
  "workbench.tips.enabled": false,
  "editor.hover.delay": 200,
  "editor.lightbulb.enabled": "on",
  "telemetry.telemetryLevel": "off",
  "extensions.autoCheckUpdates": false,
  "extensions.autoUpdate": false,
  "update.mode": "none",
  "debug.openDebug": "neverOpen",
  "debug.internalConsoleOptions": "neverOpen",
  "workbench.colorTheme": "Default Dark Modern",
  "window.commandCenter": false
}
JSON
export XDG_CONFIG_HOME="$TMP/xdg/config" XDG_DATA_HOME="$TMP/xdg/data" XDG_CACHE_HOME="$TMP/xdg/cache" XDG_STATE_HOME="$TMP/xdg/state" TMPDIR="$TMP/tmp"
CS="$CLIENT/.e2e/code-server/node_modules/.bin/code-server"
CS_ARGS=(--user-data-dir "$TMP/user" --extensions-dir "$TMP/ext")
"$CS" "${CS_ARGS[@]}" --install-extension "$CLIENT/stridelens.vsix" >/dev/null
PORT=$("$PYTHON" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
setsid "$CS" "${CS_ARGS[@]}" --bind-addr "127.0.0.1:$PORT" --auth none --disable-telemetry --disable-update-check \
  --disable-workspace-trust --disable-getting-started-override "$WS" >"$TMP/code-server.log" 2>&1 &
CS_PID=$!
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break
  kill -0 "$CS_PID" 2>/dev/null || { cat "$TMP/code-server.log"; echo "e2e: code-server exited"; exit 1; }
  sleep 0.2
done
echo "e2e: code-server on 127.0.0.1:$PORT"
# Step 4: a Python with neither torch nor debugpy (nor stridelens), and one that does not exist.
python3 -m venv --without-pip "$TMP/bare" 2>/dev/null || "$PYTHON" -m venv --without-pip "$TMP/bare"
export E2E_BARE_PYTHON="$TMP/bare/bin/python" E2E_MISSING_PYTHON="$TMP/no-such-env/bin/python"
# Step 5 runs an attach target with the venv's Python; its process group id goes to the pidfile.
export E2E_PYTHON="$PYTHON" E2E_TARGET_PIDFILE="$TMP/attach-target.pid"
rm -rf "$ARTIFACTS"
rc=0
node "$CLIENT/e2e/scenario.mjs" "http://127.0.0.1:$PORT" "$WS" "$ARTIFACTS" || rc=$?
cp "$TMP/code-server.log" "$ARTIFACTS/code-server.log" 2>/dev/null || true
find "$TMP/user" -name "*stridelens*.log" -exec cp {} "$ARTIFACTS/" \; 2>/dev/null || true
echo "e2e: $([ $rc = 0 ] && echo PASSED || echo FAILED) in $(( $(date +%s) - start )) s; screenshots in $ARTIFACTS"
exit $rc
