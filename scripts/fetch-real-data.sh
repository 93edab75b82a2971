#!/usr/bin/env bash
# Fetches real public sparse matrices and tensors into ${TESSERA_REAL_DATA:-target/real-data},
# using only the package registries (Debian APT, optionally PyPI):
#   - the binary package r-cran-matrix: small .mtx files shipped with R's Matrix package;
#   - the source package suitesparse (via a private APT configuration with a deb-src entry, so
#     the system's sources are untouched): a few modest Matrix Market files from Mongoose/SPQR;
#   - PyPI pykeen's kinships triples as a 3rd-order .tns, when python3 has pip
#     (TESSERA_REAL_DATA_PYKEEN=0 skips it, =1 makes it required).
# Idempotent: a part already fetched (its stamp file exists) is skipped. Fails with a message
# naming the step that failed. Works as root or a user on Debian bookworm.
set -euo pipefail
cd "$(dirname "$0")/.."

out=${TESSERA_REAL_DATA:-target/real-data}
max_bytes=${TESSERA_REAL_DATA_MAX_BYTES:-2000000} # skip suitesparse matrices larger than this
mkdir -p "$out"
out=$(cd "$out" && pwd)
work="$out/.work"
mkdir -p "$work"

die() {
  echo "fetch-real-data: error: $*" >&2
  exit 1
}
command -v apt-get >/dev/null || die "apt-get not found (needs Debian or a derivative)"
command -v dpkg-deb >/dev/null || die "dpkg-deb not found"

# --- r-cran-matrix: binary package, extracted without installing ---------------------------
fetch_r_matrix() {
  [ -e "$out/r-cran-matrix/.done" ] && return 0
  echo "== r-cran-matrix (apt-get download)"
  rm -rf "$work/r" && mkdir -p "$work/r"
  (cd "$work/r" && apt-get -o APT::Sandbox::User=root download -q r-cran-matrix >/dev/null) ||
    die "apt-get download r-cran-matrix failed (run 'apt-get update' first?)"
  dpkg-deb -x "$work/r"/r-cran-matrix_*.deb "$work/r/root" || die "dpkg-deb -x r-cran-matrix failed"
  rm -rf "$out/r-cran-matrix" && mkdir -p "$out/r-cran-matrix"
  local n=0 f
  while IFS= read -r -d '' f; do
    case "$f" in
    *.gz) gzip -dc "$f" >"$out/r-cran-matrix/$(basename "${f%.gz}")" ;;
    *) cp "$f" "$out/r-cran-matrix/" ;;
    esac
    n=$((n + 1))
  done < <(find "$work/r/root" \( -name '*.mtx' -o -name '*.mtx.gz' \) -print0)
  [ "$n" -gt 0 ] || die "no .mtx files found in r-cran-matrix"
  touch "$out/r-cran-matrix/.done"
  echo "   $n matrices in $out/r-cran-matrix"
}

# --- suitesparse: source package via a private APT configuration -----------------------------
fetch_suitesparse() {
  [ -e "$out/suitesparse/.done" ] && return 0
  echo "== suitesparse (apt-get source --download-only, private APT config)"
  command -v dpkg-source >/dev/null || die "dpkg-source not found (apt-get install dpkg-dev)"
  local apt="$work/apt"
  mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/etc/sources.list.d" "$apt/etc/preferences.d"
  cat >"$apt/etc/sources.list" <<'EOF'
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main
EOF
  local opts=(-o "Dir::Etc::SourceList=$apt/etc/sources.list"
    -o "Dir::Etc::SourceParts=$apt/etc/sources.list.d"
    -o "Dir::Etc::PreferencesParts=$apt/etc/preferences.d"
    -o "Dir::State::Lists=$apt/lists"
    -o "Dir::Cache=$apt/cache"
    -o "Debug::NoLocking=1"
    -o "APT::Sandbox::User=root")
  apt-get "${opts[@]}" update -q >/dev/null || die "apt-get update with the private deb-src config failed"
  rm -rf "$work/src" && mkdir -p "$work/src"
  (cd "$work/src" && apt-get "${opts[@]}" source --download-only -q suitesparse >/dev/null) ||
    die "apt-get source --download-only suitesparse failed"
  local orig
  orig=$(ls "$work/src"/suitesparse_*.orig.tar.* 2>/dev/null | head -n1)
  [ -n "$orig" ] || die "no suitesparse orig tarball downloaded"
  rm -rf "$out/suitesparse" "$work/x" && mkdir -p "$out/suitesparse" "$work/x"
  # Only the Matrix Market files are needed: one pass over the tarball extracts them all,
  # then those of modest size are kept, named after their directory (Mongoose_Matrix_G51.mtx).
  tar -xf "$orig" -C "$work/x" --wildcards '*/Matrix/*.mtx' ||
    die "extracting the Matrix Market files from $orig failed"
  local n=0 f name
  while IFS= read -r -d '' f; do
    [ "$(stat -c %s "$f")" -le "$max_bytes" ] || continue
    name=$(echo "${f#"$work/x/"}" | sed 's|^[^/]*/||; s|/|_|g')
    cp "$f" "$out/suitesparse/$name"
    n=$((n + 1))
  done < <(find "$work/x" -path '*/Matrix/*.mtx' -print0)
  rm -rf "$work/x"
  [ "$n" -gt 0 ] || die "no Matrix Market files found in $orig"
  touch "$out/suitesparse/.done"
  echo "   $n matrices in $out/suitesparse"
}

# --- pykeen kinships triples as a 3rd-order tensor (optional) ---------------------------------
fetch_pykeen() {
  local want=${TESSERA_REAL_DATA_PYKEEN:-auto}
  [ "$want" = 0 ] && return 0
  [ -e "$out/pykeen/.done" ] && return 0
  if ! python3 -m pip --version >/dev/null 2>&1; then
    [ "$want" = 1 ] && die "python3 with pip is needed for the pykeen triples"
    echo "== pykeen kinships: skipped (no python3 -m pip; the 3rd-order real-data test will skip)"
    return 0
  fi
  echo "== pykeen kinships (pip download --no-deps)"
  rm -rf "$work/pykeen" && mkdir -p "$work/pykeen"
  python3 -m pip download -q --no-deps "pykeen==1.11.1" -d "$work/pykeen" || die "pip download pykeen failed"
  mkdir -p "$out/pykeen"
  python3 - "$work/pykeen" "$out/pykeen/kinships.tns" <<'EOF' || die "building kinships.tns failed"
import glob, sys, zipfile
whl = glob.glob(sys.argv[1] + "/pykeen-*.whl")[0]
with zipfile.ZipFile(whl) as z:
    names = [n for n in z.namelist() if "kinships" in n and n.endswith((".txt", ".tsv"))]
    triples = []
    for n in names:
        for line in z.read(n).decode().splitlines():
            parts = line.split("\t")
            if len(parts) == 3:
                triples.append(parts)
if not triples:
    sys.exit("no kinships triples in the wheel")
ids = [{}, {}]
def index(d, k):
    return d.setdefault(k, len(d) + 1)
coords = set()
for h, r, t in triples:
    coords.add((index(ids[0], h), index(ids[1], r), index(ids[0], t)))
with open(sys.argv[2] + ".tmp", "w") as f:
    for c in sorted(coords):
        f.write("%d %d %d 1\n" % c)
import os
os.replace(sys.argv[2] + ".tmp", sys.argv[2])
EOF
  touch "$out/pykeen/.done"
  echo "   $out/pykeen/kinships.tns"
}

fetch_r_matrix
fetch_suitesparse
fetch_pykeen
rm -rf "$work/r" "$work/src" "$work/pykeen"
echo "real data in $out:"
find "$out" -name '*.mtx' -o -name '*.tns' | sort | sed "s|^$out/|  |"
