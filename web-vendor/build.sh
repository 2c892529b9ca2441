#!/usr/bin/env bash
# Refresh static/vendor/ from the pinned npm packages (run by `make vendor`).
set -euo pipefail
cd "$(dirname "$0")"
npm install --no-audit --no-fund
out=../static/vendor
mkdir -p "$out"
cp node_modules/htmx.org/dist/htmx.min.js "$out/htmx.min.js"
cp node_modules/htmx-ext-sse/dist/sse.min.js "$out/htmx-ext-sse.min.js"
npx esbuild editor.js --bundle --minify --format=iife --global-name=CM --outfile="$out/codemirror.min.js"
(cd node_modules && for p in htmx.org htmx-ext-sse codemirror @codemirror/view; do
  printf '%s %s\n' "$p" "$(node -p "require('./$p/package.json').version")"; done) > "$out/VERSIONS"
