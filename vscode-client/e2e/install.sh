#!/usr/bin/env bash
# Installs what the end-to-end run needs, cached under vscode-client/.e2e/ (git-ignored):
# Debian's chromium + ripgrep + a CJK font, code-server 4.100.3 from the npm registry (offline-safe ripgrep).
set -euo pipefail
HERE="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="$HERE/.e2e"
CS_VERSION=4.100.3
mkdir -p "$CACHE"

need_apt=()
command -v chromium >/dev/null || need_apt+=(chromium)
command -v rg >/dev/null || need_apt+=(ripgrep)
# A font with Chinese glyphs (step 8's screenshots; ~5 MB): without one chromium draws boxes.
{ command -v fc-list >/dev/null && [ -n "$(fc-list :lang=zh 2>/dev/null)" ]; } || need_apt+=(fonts-wqy-microhei)
# code-server's kerberos module is built from source: it needs the GSSAPI headers (and a compiler).
[ -e /usr/include/gssapi/gssapi.h ] || need_apt+=(libkrb5-dev)
command -v g++ >/dev/null || need_apt+=(g++)
command -v make >/dev/null || need_apt+=(make)
if ((${#need_apt[@]})); then
  echo "e2e: apt-get install ${need_apt[*]}"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}") >/dev/null
fi

CS="$CACHE/code-server"
if [ ! -x "$CS/node_modules/.bin/code-server" ] || [ "$(cat "$CS/.version" 2>/dev/null)" != "$CS_VERSION" ]; then
  echo "e2e: installing code-server@$CS_VERSION (about a minute, once)"
  rm -rf "$CS" "$CACHE/tmp-install"
  mkdir -p "$CS" "$CACHE/tmp-install"
  export TMPDIR="$CACHE/tmp-install"
  # @vscode/ripgrep's postinstall downloads rg from GitHub: give it Debian's as the cached download.
  rgc="$TMPDIR/vscode-ripgrep-cache-1.15.11"
  mkdir -p "$rgc"
  cp "$(command -v rg)" "$TMPDIR/rg"
  tar -C "$TMPDIR" -czf "$rgc/ripgrep-v13.0.0-10-x86_64-unknown-linux-musl.tar.gz" rg
  cp "$rgc/ripgrep-v13.0.0-10-x86_64-unknown-linux-musl.tar.gz" "$rgc/ripgrep-v13.0.0-4-x86_64-unknown-linux-musl.tar.gz"
  echo '{"private": true}' > "$CS/package.json"
  # As root npm needs unsafe-perm; npm >= 11.x blocks dependency install scripts by default,
  # and code-server's postinstall (which installs VS Code's own modules) must run.
  (cd "$CS" && npm_config_unsafe_perm=true npm_config_yes=true npm_config_dangerously_allow_all_scripts=true \
    npm_config_audit=false npm_config_fund=false npm_config_update_notifier=false \
    npm install --no-save "code-server@$CS_VERSION" >"$CACHE/code-server-install.log" 2>&1) \
    || { tail -30 "$CACHE/code-server-install.log"; echo "e2e: code-server install FAILED"; exit 1; }
  echo "$CS_VERSION" > "$CS/.version"
  rm -rf "$CACHE/tmp-install"
fi
# code-server writes a config (with a password) under $XDG_CONFIG_HOME: keep it in the cache.
echo "e2e: code-server $(XDG_CONFIG_HOME="$CACHE/xdg" XDG_DATA_HOME="$CACHE/xdg" "$CS/node_modules/.bin/code-server" --version 2>/dev/null | grep -v ' info ' | head -1)"
