#!/usr/bin/env bash
# Do two trees print the same thing? The LLM-free commands (list, dry runs, retrieval-only, the
# LLM-free retention tables) and the demo on the embedded model, run in each tree from a scratch
# folder of its own, their outputs diffed with timings masked. For a refactor: "dry runs, retrieval
# figures and the demo's tables unchanged", shown by command.
#
#   bash benchmarks/smoke/outputs_unchanged.sh BASE_REF [HEAD_DIR] [OUT]
#
# BASE_REF is a commit of this repository (extracted with git archive); HEAD_DIR defaults to this
# working tree; OUT (default /tmp/outputs_unchanged) keeps each tree's outputs and the diffs. The
# demo (`qmsum --mode recall`, the README's main job, with its baselines, on 2 cases) runs in both
# trees against one local OpenAI-compatible test server (agentlab.testing.openai_server: it answers
# deterministically and extractively from the prompt, stating an 8,192-token window the vLLM way),
# so the same prompts give the same tables. DEMO_MODEL=embedded runs it on the embedded model
# instead: the base tree first with an empty call cache, then the head tree on that cache (the
# head replays every call; a prompt it builds differently misses the cache, calls the model and
# shows in the diff and in the cache-row count printed last); that takes most of an hour on 2
# cores. SKIP_DEMO=1 leaves the demo out. Exit status 1 if any output differs.
set -u
cd "$(dirname "$0")/../.."
REPO=$(pwd)
BASE_REF=${1:?usage: outputs_unchanged.sh BASE_REF [HEAD_DIR] [OUT]}
HEAD_DIR=$(cd "${2:-$REPO}" && pwd)
OUT=${3:-/tmp/outputs_unchanged}
PY=${PY:-$REPO/.venv/bin/python}
if [ -z "${AGENTLAB_DATA_DIR:-}" ] && [ -d ../shared/datasets ]; then
    export AGENTLAB_DATA_DIR=$(cd ../shared/datasets && pwd)
fi
rm -rf "$OUT" && mkdir -p "$OUT/base-tree" "$OUT/base" "$OUT/head"
git -C "$REPO" archive "$BASE_REF" | tar -x -C "$OUT/base-tree"

COMMANDS=(
    "list|list"
    "qmsum-dry|qmsum --dry-run --limit 3"
    "qmsum-summary-dry|qmsum --mode summary --dry-run --limit 3"
    "qmsum-compaction-dry|qmsum --arm compaction --dry-run --limit 3"
    "qmsum-inspect_trim-dry|qmsum --arm inspect_trim --dry-run --limit 3"
    "mtbench101-dry|mtbench101 --dry-run --limit 3"
    "mtbench101-summary-dry|mtbench101 --mode summary --dry-run --limit 3"
    "locomo-dry|locomo --dry-run --limit 3"
    "locomo-long_context-dry|locomo --mode long_context --dry-run --limit 3"
    "qmsum-retrieval|qmsum --retrieval-only"
    "locomo-retrieval|locomo --retrieval-only"
    "locomo-retrieval-dialog|locomo --retrieval-only --unit dialog --retriever lexical"
    "retention-qmsum|retention qmsum --arms all --no-store"
    "retention-trajectories|retention trajectories --arms all --context-budget 2048 --no-store"
)
if [ "${SKIP_DEMO:-0}" != 1 ]; then
    MODEL=${DEMO_MODEL:-}
    if [ -z "$MODEL" ]; then
        $PY -m agentlab.testing.openai_server --context-window 8192 >"$OUT/test-server.log" 2>&1 &
        SERVER=$!
        trap 'kill $SERVER 2>/dev/null' EXIT
        for _ in $(seq 100); do grep -q "use --model" "$OUT/test-server.log" && break; sleep 0.1; done
        MODEL=$(sed -n 's/.*use --model \([^ ]*\).*/\1/p' "$OUT/test-server.log")
        [ -n "$MODEL" ] || { echo "the test server did not start: $OUT/test-server.log"; exit 1; }
    fi
    COMMANDS+=("demo|qmsum --mode recall --limit 2 --model $MODEL")
fi

run_tree() {  # run_tree NAME SRC: every command with SRC's package, from OUT/NAME
    local name=$1 src=$2
    # The embedded demo shares one call cache (the head replays the base's calls); on the test
    # server each tree has its own, so both process every prompt and print the same accounting.
    if [ "${DEMO_MODEL:-}" = embedded ]; then export AGENTLAB_CACHE_DB="$OUT/calls.duckdb"
    else export AGENTLAB_CACHE_DB="$OUT/$name/calls.duckdb"; fi
    for entry in "${COMMANDS[@]}"; do
        local key=${entry%%|*} args=${entry#*|}
        local quiet=--no-progress
        case $args in list*|retention*) quiet= ;; esac
        (cd "$OUT/$name" && PYTHONPATH="$src" $PY -m agentlab.bench $args $quiet \
            >"$key.out" 2>"$key.err"; echo "exit $?" >>"$key.out")
    done
}
mask() {  # timings, dates, run ids and paths differ between trees and runs
    local replayed='s/^( *prompt tokens processed by the server:).*/\1 <replayed>/'
    [ "${DEMO_MODEL:-}" = embedded ] || replayed='s/^$//'
    sed -E -e "$replayed" -e 's/[0-9]+(\.[0-9]+)? ?(ms|s|min)\b/<t>/g' -e 's/[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9:.]+/<date>/g' \
        -e "s#$OUT/(base|head)#<dir>#g" -e 's#127\.0\.0\.1:[0-9]+#127.0.0.1:<port>#g' -e 's/(run[_ ]id[=: ]+)[0-9a-f]+/\1<id>/g' "$1"
}
cache_rows() {  # rows of the shared call cache (the embedded demo's)
    $PY -c "import duckdb,sys; c=duckdb.connect(sys.argv[1], read_only=True); print(sum(c.execute(f'select count(*) from \"{t}\"').fetchone()[0] for (t,) in c.execute('select table_name from information_schema.tables').fetchall()))" "$OUT/calls.duckdb" 2>/dev/null || echo 0
}

run_tree base "$OUT/base-tree"
before=$(cache_rows)
run_tree head "$HEAD_DIR"
after=$(cache_rows)

status=0
for entry in "${COMMANDS[@]}"; do
    key=${entry%%|*}
    if [ "$(tail -n 1 "$OUT/base/$key.out")" != "exit 0" ]; then
        printf '%-28s the base tree cannot run it (%s): %s\n' "$key" "$(tail -n 1 "$OUT/base/$key.out")" "$OUT/base/$key.err"
        continue
    fi
    if diff <(mask "$OUT/base/$key.out") <(mask "$OUT/head/$key.out") >"$OUT/$key.diff"; then
        printf '%-28s same (%s lines)\n' "$key" "$(wc -l <"$OUT/head/$key.out")"
    else
        printf '%-28s DIFFERS: %s\n' "$key" "$OUT/$key.diff"; status=1
    fi
done
if [ "${DEMO_MODEL:-}" = embedded ]; then
    echo "call-cache rows after the base tree: $before; after the head tree: $after (equal: the head called no model)"
    [ "$before" = "$after" ] || status=1
fi
exit $status
