"""bench_summary.py FILE.json — one line of the figures that matter from a
`loragate bench --json` report (serving workloads, fixed batch, load test)."""
import json
import sys

txt = open(sys.argv[1]).read()
start = txt.find("{")
j = json.loads(txt[start:]) if start >= 0 else {}
def p(k):
    v = j.get(k)
    return "/".join(f"{v[q]:.0f}" for q in ("p50", "p90", "p99") if q in v) if isinstance(v, dict) else "-"
keys = ["output_tok_s", "req_s", "goodput_req_s", "prefix_hit_rate", "cached_tokens", "adapter_loads", "preemptions",
        "decode_steps", "chained_steps"]
parts = [f"{k}={j[k]:.4g}" if isinstance(j.get(k), float) else f"{k}={j[k]}" for k in keys if k in j]
for k in ("ttft_ms", "tpot_ms", "e2e_ms"):
    if k in j:
        parts.append(f"{k}(p50/p90/p99)={p(k)}")
if "adapter_load_ms" in j:
    parts.append("adapter_load_ms=" + json.dumps(j["adapter_load_ms"]))
if "tenants" in j:
    parts.append("tenants=" + ";".join(f"{t['tenant']}:done={t.get('completed')},svc={t.get('service')},ttft_p99={t.get('ttft_ms',{}).get('p99',0):.0f}" for t in j["tenants"]))
for k, v in j.items():
    if k not in keys and not isinstance(v, (dict, list)) and k not in ("tenants",):
        if k in ("tok_s", "load_ms_disk", "load_ms_host", "throughput_tok_s", "ms_per_step"):
            parts.append(f"{k}={v}")
print(" ".join(parts) if parts else txt[-400:].replace("\n", " "))
