#!/bin/bash
# Two builds of deltarl, one behaviour: micro runs (2 iterations, 20 warm-start steps,
# 4 prompts, eval every iteration) of every shipped tiny configuration with each binary,
# then every file compared byte for byte (Parquet, safetensors, run.hash, run.toml, the
# tokenizer and config files) and every manifest's config hash, settings, inputs,
# outputs, rows and summary (timings left out). The hash cache (.hash-cache.json) holds
# modification times and is left out. With DELTARL_VLLM_PYTHON set (vLLM's interpreter,
# `make vllm`), tiny-arith also runs with vLLM rollouts (`tiny-arith-vllm`: head size 32,
# as vLLM's CPU attention needs).
#
#   tests/same-outputs.sh OLD_BINARY NEW_BINARY [WORK_DIR]
#
# Build the old binary from the commit before a change (git stash; cargo build --profile
# release; copy target/release/deltarl), the new one after. Exit status 1 on any
# difference. Takes ~10 minutes on 2 cores.
set -u
old=$1 new=$2 work=${3:-$(mktemp -d)}
configs="tiny-arith tiny-steps tiny-steps-varied tiny-code"
[ -n "${DELTARL_VLLM_PYTHON:-}" ] && configs="$configs tiny-arith-vllm"
# The configuration file and the extra settings of a run.
config_of() { echo "configs/${1%-vllm}.toml"; }
extra_of() {
  case $1 in
    *-vllm) echo "--set rollout.engine=\"vllm\" --set rollout.vllm.python=\"$DELTARL_VLLM_PYTHON\"
      --set model.tiny.hidden_size=64 --set model.tiny.intermediate_size=128
      --set model.tiny.num_attention_heads=2 --set model.tiny.num_key_value_heads=1" ;;
  esac
}
repo=$(cd "$(dirname "$0")/.." && pwd)
status=0
for which in old new; do
  bin=$old; [ $which = new ] && bin=$new
  rm -rf "$work/$which"; mkdir -p "$work/$which"
  for c in $configs; do
    # shellcheck disable=SC2046 # the extra settings split into words on purpose
    (cd "$repo" && "$bin" iterate --config "$(config_of $c)" --runs-dir "$work/$which" --run $c \
      --iters 2 --set warmstart.steps=20 --set rollout.prompts_per_iter=4 \
      --set eval.every=1 --set eval.problems=8 $(extra_of $c)) > "$work/$which-$c.log" 2>&1 \
      || { echo "FAIL $which $c (log: $work/$which-$c.log)"; status=1; }
  done
done
for c in $configs; do
  for which in old new; do
    (cd "$work/$which/$c" && find . -type f ! -path '*/manifest/*' ! -name manifest.json \
      ! -name metrics.jsonl ! -path './tb/*' ! -name '.hash-cache.json' ! -name 'vllm*.log' \
      -exec sha256sum {} + | sort -k2) > "$work/$c.$which"
  done
  if cmp -s "$work/$c.old" "$work/$c.new"; then
    echo "same files   $c: $(wc -l < "$work/$c.new") files"
  else
    echo "DIFFERENT    $c:"; diff "$work/$c.old" "$work/$c.new" | head; status=1
  fi
  python3 - "$work/old/$c" "$work/new/$c" <<'PY' || status=1
import glob, json, sys
a, b = sys.argv[1], sys.argv[2]
bad, n = 0, 0
for p in sorted(glob.glob(a + "/iter-*/manifest/*.json") + glob.glob(a + "/base/manifest.json")):
    x, y = json.load(open(p)), json.load(open(b + p[len(a):]))
    n += 1
    for k in ("config_hash", "settings", "outputs", "inputs", "rows", "seed"):
        if x.get(k) != y.get(k):
            print("  manifest", p[len(a):], "differs in", k); bad += 1
    sx, sy = dict(x["summary"]), dict(y["summary"])
    for d in (sx, sy):
        for k in ("tokens_per_s", "train_seconds", "engine_startup_s"):
            d.pop(k, None)
        # How long vLLM's server took to start or wake: a timing.
        if isinstance(d.get("engine_server"), dict):
            d["engine_server"] = {k: v for k, v in d["engine_server"].items() if k != "seconds"}
    if sx != sy:
        print("  manifest", p[len(a):], "summary differs"); bad += 1
print(("same" if bad == 0 else "DIFFERENT") + " manifests", a.rsplit("/", 1)[-1] + ":", n)
sys.exit(1 if bad else 0)
PY
done
exit $status
