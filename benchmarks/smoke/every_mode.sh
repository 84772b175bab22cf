#!/usr/bin/env bash
# Every benchmark in every mode on the embedded SmolLM2 model, then each report: the end-to-end
# acceptance runs of the harness (QMSum --limit 3; MT-Bench-101, LongMemEval, LoCoMo --limit 2).
# LongMemEval runs on a generated file in the real schema (the data cannot be had offline).
#
#   bash benchmarks/smoke/every_mode.sh [DB] [LOGDIR]
#
# Defaults: results/smoke.duckdb and results/smoke-logs/. Resumable like every run: rerunning
# finishes only what is missing. Exit status 1 if any command failed (all are still attempted).
set -u
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
if [ -z "${AGENTLAB_DATA_DIR:-}" ] && [ -d ../shared/datasets ]; then
    export AGENTLAB_DATA_DIR=$(cd ../shared/datasets && pwd)
fi
DB=${1:-results/smoke.duckdb}
LOGS=${2:-results/smoke-logs}
mkdir -p "$LOGS" "$(dirname "$DB")"
FIXTURE="$LOGS/longmemeval_fixture.json"
failed=0

step() {  # step NAME ARGS...: run one command, log it, time it
    local name=$1; shift
    local started=$SECONDS
    echo "== $name: $*"
    "$@" >"$LOGS/$name.log" 2>&1
    local rc=$?
    echo "   exit $rc after $((SECONDS - started)) s (log: $LOGS/$name.log)"
    [ $rc -eq 0 ] || failed=1
}

bench() { step "$1" "$PY" -m agentlab.bench "${@:2}" --db "$DB" --no-progress; }

bench qmsum-long_context qmsum --mode long_context --limit 3
bench qmsum-summary      qmsum --mode summary --limit 3
bench qmsum-recall       qmsum --mode recall --limit 3
step  qmsum-report       "$PY" -m agentlab.bench report qmsum --db "$DB"

bench mtbench101-baseline mtbench101 --mode baseline --limit 2
bench mtbench101-summary  mtbench101 --mode summary --limit 2
step  mtbench101-report   "$PY" -m agentlab.bench report mtbench101 --db "$DB"

step  longmemeval-fixture "$PY" -m agentlab.bench fixture longmemeval "$FIXTURE" --questions 2 --sessions 8 --turns 8 \
      --question-type single-session-user
for mode in long_context summary recall; do
    bench "longmemeval-$mode" longmemeval --mode "$mode" --limit 2 --set "dataset.path=$FIXTURE"
done
step  longmemeval-report  "$PY" -m agentlab.bench report longmemeval --db "$DB"

for mode in long_context session_recall memory; do
    bench "locomo-$mode" locomo --mode "$mode" --limit 2
done
step  locomo-report       "$PY" -m agentlab.bench report locomo --db "$DB"

exit $failed
