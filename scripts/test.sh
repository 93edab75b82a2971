#!/usr/bin/env bash
# The whole test suite, as CI runs it (`bash .ci/run`) on a fresh Debian machine:
#   1. system packages (OpenMPI, libclang) if missing,
#   2. real public matrices and tensors for the real-data round trips (skipped if unreachable),
#   3. every crate's unit, property, integration and CLI tests (thread ranks),
#   4. the MPI tests: real `mpirun -n 2` and `-n 4` jobs over the `mpi` feature (transport
#      self-test, split/merge, the task runtime across ranks: runtime/src/bin/mpi_runtime.rs,
#      a `tessera compile --mpi` program: compiler/tests/mpi_program.rs),
#   5. every fuzz target for a few seconds (scripts/fuzz.sh --ci; skipped with a message
#      where libFuzzer cannot be built; a crash fails the suite).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}

# Each step says how long the suite has run so far, so a slow phase shows in CI's log.
start=$(date +%s)
step() { printf '\n== %s (at %ss)\n' "$*" "$(( $(date +%s) - start ))"; }

step "system packages"
bash scripts/install-deps.sh

step "real data (target/real-data)"
if ! bash scripts/fetch-real-data.sh; then
  echo "warning: real data could not be fetched; the real-data tests will say they skipped" >&2
fi

step "workspace tests"
cargo test --workspace

step "MPI tests (mpirun -n 2 and -n 4)"
# The workspace's target dir: the crates that do not change with the feature (every third-party
# one, lalrpop included) are reused, and so are the release dependencies that the CLI tests'
# programs built in target/tmp/tessera-cache (a separate target/mpi built them all again:
# the step took 767 s that way and 395 s this way on the same machine, the generated
# programs' 16 codegen units included). mpi-sys does not rebuild when the MPI installation
# changes: after switching between OpenMPI and MPICH, `cargo clean -p mpi-sys` first.
cargo test -p tessera-runtime --features mpi --test mpi_launch
cargo test -p tessera-datasets --features mpi --test split_merge_cli
cargo test -p tessera-compiler --features mpi --test mpi_program

step "fuzz targets, briefly (scripts/fuzz.sh --ci; longer: scripts/fuzz.sh --minutes N)"
bash scripts/fuzz.sh --ci

step "all tests passed"
