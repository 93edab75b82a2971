#!/usr/bin/env bash
# Coverage-guided fuzzing of every parser Tessera has (targets in fuzz/fuzz_targets/).
#
#   bash scripts/fuzz.sh --minutes 30            # a campaign: 30 minutes per target
#   bash scripts/fuzz.sh --seconds 20 tns mtx    # some targets briefly
#   bash scripts/fuzz.sh --ci                    # what scripts/test.sh runs: a short budget,
#                                                # skipped with a message if libFuzzer can't build
#
# Builds with libFuzzer (the `libfuzzer-sys` crate) and the sanitizer-coverage flags that
# `cargo fuzz build --sanitizer none` uses, on the stable toolchain; no extra tool needed
# (with cargo-fuzz installed, `cargo fuzz run --sanitizer none TARGET` runs the same targets,
# and `RUSTC_BOOTSTRAP=1 cargo fuzz run TARGET` adds AddressSanitizer). Inputs found are kept
# in fuzz/corpus-run/TARGET (seeds: fuzz/corpus/TARGET, committed); a crash is saved in
# fuzz/artifacts/TARGET/ and makes the script fail. Each run appends a line to
# fuzz/runs.log: date, target, seconds, executions, crashes.
set -uo pipefail
cd "$(dirname "$0")/.."

seconds=60
ci=0
targets=()
while (($#)); do
  case "$1" in
    --minutes) seconds=$(($2 * 60)); shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --ci) ci=1; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
all=(tns mtx tcs convert expr schedule split_merge)
((${#targets[@]})) || targets=("${all[@]}")
if ((ci)); then
  # A smoke run inside the test suite's budget: 10 s per target, and a build that trades
  # executions per second for compile time (opt-level 1, line tables only).
  seconds=${TESSERA_FUZZ_SECONDS:-10}
  export CARGO_PROFILE_RELEASE_OPT_LEVEL=${TESSERA_FUZZ_OPT_LEVEL:-1}
  export CARGO_PROFILE_RELEASE_DEBUG=line-tables-only
fi

skip() {
  echo "fuzz: SKIPPED — $*" >&2
  echo "fuzz: the fuzz targets did not run; nothing was checked by them" >&2
  exit 0
}

triple=$(rustc -vV 2>/dev/null | sed -n 's/^host: //p')
[[ -n "$triple" ]] || { ((ci)) && skip "no rustc"; echo "no rustc" >&2; exit 1; }
export CARGO_TARGET_DIR="${TESSERA_FUZZ_TARGET_DIR:-$PWD/fuzz/target}"
flags="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4"
flags+=" -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table"
flags+=" -Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing"
flags+=" -Cllvm-args=-simplifycfg-branch-fold-threshold=0 -Cllvm-args=-sanitizer-coverage-stack-depth"
flags+=" -Cdebug-assertions -Coverflow-checks"
echo "== fuzz: building ${targets[*]} (libFuzzer, $triple)"
start=$SECONDS
bins=()
for t in "${targets[@]}"; do bins+=(--bin "$t"); done
mkdir -p "$CARGO_TARGET_DIR"
build_log="$CARGO_TARGET_DIR/build.log"
if ! RUSTFLAGS="$flags" cargo build --manifest-path fuzz/Cargo.toml --target "$triple" \
     --release "${bins[@]}" 2>&1 | tee "$build_log"; then
  # A target that no longer compiles against Tessera's API is a failure, not a missing tool
  # (a new field in an options struct once skipped every target silently).
  if grep -q 'could not compile `tessera' "$build_log"; then
    echo "fuzz: FAILED — the fuzz targets do not compile against Tessera (errors above); fix fuzz/fuzz_targets/" >&2
    exit 1
  fi
  ((ci)) && skip "the fuzz targets could not be built (libFuzzer needs a C++ compiler and the crates libfuzzer-sys/arbitrary)"
  exit 1
fi
echo "fuzz: built in $((SECONDS - start)) s"

failed=()
for t in "${targets[@]}"; do
  mkdir -p "fuzz/corpus-run/$t" "fuzz/artifacts/$t" "fuzz/corpus/$t"
  log="$CARGO_TARGET_DIR/$t.log"
  echo "== fuzz: $t for ${seconds} s"
  began=$SECONDS
  # -rss_limit_mb: an input that makes a reader allocate without bound is a crash too.
  "$CARGO_TARGET_DIR/$triple/release/$t" "fuzz/corpus-run/$t" "fuzz/corpus/$t" \
    -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 -max_len=4096 \
    -artifact_prefix="fuzz/artifacts/$t/" -print_final_stats=1 >"$log" 2>&1
  rc=$?
  took=$((SECONDS - began))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
  if ((rc != 0)); then
    failed+=("$t")
    echo "fuzz: $t FAILED (exit $rc); the input is in fuzz/artifacts/$t/. Last lines:"
    tail -n 40 "$log"
  fi
  echo "fuzz: $t: ${took} s, ${execs:-0} executions, ${cov:-cov: ?}, exit $rc"
  printf '%s %s seconds=%s execs=%s cov=%s exit=%s\n' "$(date -u +%FT%TZ)" "$t" "$took" \
    "${execs:-0}" "${cov#cov: }" "$rc" >>fuzz/runs.log
done
if ((${#failed[@]})); then
  echo "fuzz: crashes in: ${failed[*]} (reproduce: $CARGO_TARGET_DIR/$triple/release/TARGET fuzz/artifacts/TARGET/crash-...)" >&2
  exit 1
fi
echo "fuzz: all targets ran clean"
