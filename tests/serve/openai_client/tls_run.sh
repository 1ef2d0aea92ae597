#!/usr/bin/env bash
# The official openai npm client over HTTPS: `ferry serve` with listener.tls and a
# self-signed certificate (made here with openssl), the client trusting only it. Then the
# certificate is renewed on disk and SIGHUP reloads it: a client trusting only the new one
# connects, and the server still stops cleanly on SIGTERM.
# usage: tls_run.sh FERRY_BINARY SOURCE_DIR WORK_DIR
set -euo pipefail
ferry=$1 src=$2 work=$3
here="$src/tests/serve/openai_client"
command -v node >/dev/null && command -v openssl >/dev/null || { echo "node and openssl are needed (scripts/install_deps.sh)"; exit 1; }
mkdir -p "$work"
cp "$here/package.json" "$here/package-lock.json" "$here/tls_test.mjs" "$work/"
cd "$work"
[[ -d node_modules/openai ]] || npm ci --no-audit --no-fund --loglevel=error
cert() {  # DIR CN
  mkdir -p "$1"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=$2" \
    -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -keyout "$1/key.pem" -out "$1/cert.pem" >/dev/null 2>&1
}
cert "$work/first" ferry-first
cert "$work/second" ferry-second
mkdir -p "$work/live"
cp "$work/first/cert.pem" "$work/first/key.pem" "$work/live/"
cat >"$work/tls.yaml" <<YAML
listener: {host: 127.0.0.1, port: 0, tls: {cert: $work/live/cert.pem, key: $work/live/key.pem, min_version: "1.2"}}
auth: {mode: none}
models:
  - name: kjv-decoder
    path: $src/models/demo/kjv-decoder
log: {level: info, request_log: false}
YAML
log="$work/server.log"
"$ferry" serve --config "$work/tls.yaml" >"$log" 2>&1 &
pid=$!
trap 'kill -9 $pid 2>/dev/null || true' EXIT
port=""
for _ in $(seq 1 600); do
  port=$(sed -n 's/.*listening on https:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$log" | head -1)
  if [[ -n $port ]] && curl -sf --cacert "$work/first/cert.pem" "https://localhost:$port/health/ready" >/dev/null 2>&1; then break; fi
  kill -0 $pid 2>/dev/null || { cat "$log"; echo "server exited early"; exit 1; }
  sleep 0.1
done
[[ -n $port ]] || { cat "$log"; echo "server did not start"; exit 1; }
NODE_EXTRA_CA_CERTS="$work/first/cert.pem" FERRY_BASE_URL="https://localhost:$port/v1" node tls_test.mjs
# Plain HTTP on the TLS port gets nothing useful, and the server stays up.
if curl -sf --max-time 5 "http://127.0.0.1:$port/health/ready" >/dev/null 2>&1; then echo "plain HTTP was answered"; exit 1; fi
# Renewal: new files, SIGHUP, and a client that trusts only the new certificate.
cp "$work/second/cert.pem" "$work/second/key.pem" "$work/live/"
kill -HUP $pid
for _ in $(seq 1 100); do grep -q "TLS certificate reloaded" "$log" && break; sleep 0.05; done
grep -q "TLS certificate reloaded" "$log" || { cat "$log"; echo "SIGHUP did not reload"; exit 1; }
NODE_EXTRA_CA_CERTS="$work/second/cert.pem" FERRY_BASE_URL="https://localhost:$port/v1" node tls_test.mjs
kill -TERM $pid
status=0
wait $pid || status=$?
trap - EXIT
if [[ $status -ne 0 ]]; then cat "$log"; echo "server exited with $status after SIGTERM"; exit 1; fi
echo "server shut down cleanly"
