#!/usr/bin/env bash
# Runs every libFuzzer target for SECONDS each, one after another, and prints a table of
# executions per second, coverage and corpus size (docs/reliability.md).
#   scripts/fuzz.sh BUILD_DIR SECONDS [TARGET...]
# New inputs go to BUILD_DIR/fuzz-corpus/<target> (the checked-in seeds in tests/fuzz/corpus/
# stay as they are; copy a crash there as a regression). Crashes go to
# BUILD_DIR/fuzz-artifacts/<target>/ and make the script exit 1.
set -uo pipefail
build=${1:?build dir}
seconds=${2:?seconds per target}
shift 2
src=$(cd "$(dirname "$0")/.." && pwd)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(safetensors gguf engine_file tokenizer config routes http structured template)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
printf '%-12s %8s %10s %8s %8s %8s %s\n' target seconds execs exec/s cov ft corpus
for t in "${targets[@]}"; do
  exe="$build/tests/fuzz/fuzz_$t"
  [ -x "$exe" ] || { echo "missing $exe (build the fuzz preset)"; exit 2; }
  work="$build/fuzz-corpus/$t"; art="$build/fuzz-artifacts/$t/"; log="$build/fuzz-logs/$t.log"
  mkdir -p "$work" "$art" "$(dirname "$log")"
  dict=()
  [ -f "$src/tests/fuzz/$t.dict" ] && dict=(-dict="$src/tests/fuzz/$t.dict")
  extra=()
  # The request targets run a server: one input at a time, bounded time per input.
  case $t in routes|http) extra=(-timeout=120 -rss_limit_mb=8192) ;; *) extra=(-timeout=30 -rss_limit_mb=4096) ;; esac
  "$exe" "$work" "$src/tests/fuzz/corpus/$t" "${dict[@]}" "${extra[@]}" -max_total_time="$seconds" \
    -max_len=65536 -print_final_stats=1 -artifact_prefix="$art" >"$log" 2>&1
  rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' <<<"$last" | grep -o '[0-9]*'); ft=$(grep -o 'ft: [0-9]*' <<<"$last" | grep -o '[0-9]*')
  corp=$(grep -o 'corp: [0-9]*' <<<"$last" | grep -o '[0-9]*')
  printf '%-12s %8s %10s %8s %8s %8s %s\n' "$t" "$seconds" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}"
  if [ $rc -ne 0 ]; then
    echo "  FAILED (exit $rc): see $log and $art"; grep -m3 -E 'ERROR|invariant|SUMMARY' "$log" | sed 's/^/  /'
    status=1
  fi
done
exit $status
