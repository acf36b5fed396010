#!/usr/bin/env bash
# gateway_bench.sh — the gateway's own cost, with h2load (Debian nghttp2-client)
# on loopback (docs/benchmarks.md "Gateway"):
#   1. authenticated GET /v1/models: requests/s and p50/p99 latency, 2 loop threads
#   2. POST /v1/completions with max_tokens 1 (one client, sequential) against the
#      same request in-process (`loragate bench --workload closed --clients 1`):
#      the latency the gateway adds (TLS, HTTP/2, auth, JSON, cross-thread
#      messages, the durable ledger commit before the last byte)
#
#   bash tests/bench/gateway_bench.sh [MODEL]       (from the repo root, after a build)
#
# MODEL defaults to the tiny fixture model (engine time ~negligible, so what is
# measured is the gateway). Env: N_MODELS (default 200000), CONC (default 64),
# N_CMPL (default 2000). Prints one JSON object per figure; the server listens
# on 127.0.0.1 only and is stopped at the end.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
BIN=${LG_BIN:-build/loragate}
MODEL=${1:-tests/golden/lora_fixtures/base}
N_MODELS=${N_MODELS:-200000}
CONC=${CONC:-64}
N_CMPL=${N_CMPL:-2000}
command -v h2load >/dev/null || { echo "h2load not found (apt-get install nghttp2-client)" >&2; exit 1; }
TMP=$(mktemp -d)
ADMIN="lg-admin-$(head -c 24 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')"
LORAGATE_ADMIN_KEY=$ADMIN $BIN serve --model "$MODEL" --data-dir "$TMP/data" --listen 127.0.0.1:0 --threads 2 \
  --access-log off >"$TMP/out" 2>"$TMP/err" &
PID=$!
trap 'kill -TERM $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$TMP"' EXIT
for _ in $(seq 300); do grep -q "^loragate: try:" "$TMP/out" 2>/dev/null && break; sleep 0.1; done
URL=$(grep -o "serving on https://[^ ]*" "$TMP/out" | head -1 | cut -d' ' -f3)
[ -n "$URL" ] || { cat "$TMP/err" >&2; exit 1; }
CA="--cacert $TMP/data/tls/cert.pem"
curl -sS $CA -H "Authorization: Bearer $ADMIN" "$URL/admin/v1/tenants" -H 'content-type: application/json' \
  -d '{"name":"bench"}' >/dev/null
KEY=$(curl -sS $CA -H "Authorization: Bearer $ADMIN" "$URL/admin/v1/tenants/bench/keys" \
  -H 'content-type: application/json' -d '{"name":"bench","scopes":["inference"]}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')

pct() { # log file (h2load --log-file: start_us status duration_us) -> p50/p99 ms JSON
  python3 - "$1" <<'EOF'
import sys
d = sorted(int(l.split()[2]) for l in open(sys.argv[1]) if l.strip() and l.split()[1] == "200")
def q(p): return d[min(len(d) - 1, int(p * len(d)))] / 1000.0
print(f'"ok": {len(d)}, "p50_ms": {q(0.5):.3f}, "p99_ms": {q(0.99):.3f}')
EOF
}

# 1. GET /v1/models, authenticated, HTTP/2 over TLS
h2load -n "$N_MODELS" -c "$CONC" -m 8 -t 1 -H "authorization: Bearer $KEY" --log-file "$TMP/models.log" \
  "$URL/v1/models" >"$TMP/models.txt"
RPS=$(grep -o "finished in [^,]*, [0-9.]* req/s" "$TMP/models.txt" | grep -o "[0-9.]* req/s" | cut -d' ' -f1)
echo "{\"figure\": \"GET /v1/models\", \"requests\": $N_MODELS, \"connections\": $CONC, \"streams_per_conn\": 8, \"req_s\": $RPS, $(pct "$TMP/models.log")}"

# 2. completion, max_tokens 1, one client: over the gateway ...
python3 -c 'import json; print(json.dumps({"model": "base", "prompt": [5, 6, 7, 8, 9, 10, 11, 12], "max_tokens": 1, "temperature": 0}))' >"$TMP/body.json"
[ "$MODEL" = tests/golden/lora_fixtures/base ] || python3 -c 'import json,sys; print(json.dumps({"model": sys.argv[1], "prompt": [5, 6, 7, 8, 9, 10, 11, 12], "max_tokens": 1, "temperature": 0}))' "$(basename "${MODEL%.gguf}")" >"$TMP/body.json"
h2load -n "$N_CMPL" -c 1 -m 1 -t 1 -d "$TMP/body.json" -H "authorization: Bearer $KEY" \
  -H "content-type: application/json" --log-file "$TMP/cmpl.log" "$URL/v1/completions" >"$TMP/cmpl.txt"
echo "{\"figure\": \"POST /v1/completions max_tokens 1, 1 client, via gateway\", $(pct "$TMP/cmpl.log")}"
# ... and in-process
$BIN bench --model "$MODEL" --workload closed --clients 1 --requests "$N_CMPL" --prompt-len 8 --output-len 1 \
  --json --no-progress 2>/dev/null | python3 -c '
import json, sys
t = sys.stdin.read(); j = json.loads(t[t.find("{"):])
print(json.dumps({"figure": "same request in-process (loragate bench --workload closed --clients 1)",
                  "p50_ms": j["e2e_ms"]["p50"], "p99_ms": j["e2e_ms"]["p99"]}))'
