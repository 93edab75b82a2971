#!/usr/bin/env bash
# The main job on a built-in default: generate a sparse matrix and a vector, convert the matrix
# to CSR in the .tcs binary format by streaming, show and validate it, then compile and run
# SpMV y(i) = A(i,j) * x(j) with the `tessera` CLI and show the first entries of y; then run
# the same statement with a distribution schedule as block tasks on the task runtime.
# Everything lands in ${TESSERA_DEMO_DIR:-target/demo}.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=${TESSERA_DEMO_DIR:-target/demo}
n=${TESSERA_DEMO_N:-200000}
mkdir -p "$dir"

echo "== building tessera-data and tessera (release)"
cargo build --release -q -p tessera-datasets -p tessera-compiler
bin=target/release

echo "== generating a ${n}x${n} power-law matrix A and a dense vector x"
$bin/tessera-data generate --dims "$n,$n" --nnz $((n * 10)) --kind powerlaw --seed 7 -o "$dir/A.tns"
$bin/tessera-data generate --dims "$n" --density 1 --seed 8 -o "$dir/x.tns"

echo "== converting A to CSR .tcs (streaming, bounded memory)"
$bin/tessera-data convert "$dir/A.tns" "$dir/A.tcs" --format csr --memory 64M

echo "== info"
$bin/tessera-data info "$dir/A.tcs"

echo "== y(i) = A(i,j) * x(j) with A in CSR"
$bin/tessera run "y(i) = A(i,j) * x(j)" -f A:csr -i A="$dir/A.tcs" -i x="$dir/x.tns" \
  -o "$dir/y.tns" --threads 2
echo "first entries of $dir/y.tns:"
head -n 5 "$dir/y.tns"

echo "== the same statement distributed: 4 row blocks as tasks on the task runtime"
echo "   (the first distributed program compiles the compiler and runtime into the program"
echo "    cache: under a minute, once; --interpret would run the blocks without a build)"
sched="split(i, io, ii, 4)"
$bin/tessera emit "y(i) = A(i,j) * x(j)" -f A:csr -s "$sched" --plan
$bin/tessera run "y(i) = A(i,j) * x(j)" -f A:csr -s "$sched" -i A="$dir/A.tcs" -i x="$dir/x.tns" \
  -o "$dir/y_blocks.tns" --threads 2 --stats
if cmp -s "$dir/y.tns" "$dir/y_blocks.tns"; then
  echo "block tasks: same y as the plain kernel"
else
  echo "block tasks: y differs from the plain kernel" >&2
  exit 1
fi
