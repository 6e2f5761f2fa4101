#!/usr/bin/env bash
# Build the pollster .deb (cargo-deb) and .rpm (cargo-generate-rpm) from a
# checkout. Prints the path of each package on the last lines.
#
#   packaging/build.sh                   # both packages, the version in Cargo.toml
#   packaging/build.sh --version 0.1.1   # the same binary, packaged as 0.1.1
#   packaging/build.sh --no-build        # reuse target/release/pollster
#   packaging/build.sh --deb-only | --rpm-only
#
# Installs cargo-deb and cargo-generate-rpm with `cargo install --locked` when
# they are missing. The release binary is built once, without debug info
# and stripped, and both packages are made from it (`cargo deb --no-build`).
# Note: cargo-deb deletes other versions' pollster .debs from target/debian.
set -euo pipefail
cd "$(dirname "$0")/.."

# Tool versions this packaging was written against (any later 3.x / 0.x
# should do).
CARGO_DEB_VERSION="${CARGO_DEB_VERSION:-3.8.0}"
CARGO_GENERATE_RPM_VERSION="${CARGO_GENERATE_RPM_VERSION:-0.21.1}"

version=""
build=1
want_deb=1
want_rpm=1
while [ $# -gt 0 ]; do
  case "$1" in
    --version) version="${2:?--version needs a value}"; shift 2 ;;
    --version=*) version="${1#--version=}"; shift ;;
    --no-build) build=0; shift ;;
    --deb-only) want_rpm=0; shift ;;
    --rpm-only) want_deb=0; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "build.sh: unknown argument: $1" >&2; exit 2 ;;
  esac
done
if [ -n "$version" ] && ! [[ "$version" =~ ^[0-9][0-9A-Za-z.+~]*$ ]]; then
  echo "build.sh: --version must look like 1.2.3 (got '$version')" >&2
  exit 2
fi

export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
target_dir="${CARGO_TARGET_DIR:-$PWD/target}"
export CARGO_TARGET_DIR="$target_dir"

ensure_tool() { # ensure_tool SUBCOMMAND CRATE VERSION
  if ! cargo "$1" --version >/dev/null 2>&1; then
    echo "== installing $2 $3 (cargo install --locked)"
    cargo install --locked "$2" --version "$3"
  fi
}
[ "$want_deb" = 1 ] && ensure_tool deb cargo-deb "$CARGO_DEB_VERSION"
[ "$want_rpm" = 1 ] && ensure_tool generate-rpm cargo-generate-rpm "$CARGO_GENERATE_RPM_VERSION"

bin="$target_dir/release/pollster"
if [ "$build" = 1 ]; then
  echo "== cargo build --release (stripped, no debug info)"
  # [profile.release] keeps debug info for benchmarks and profiling; the
  # packaged binary does without (cargo-generate-rpm does not strip).
  CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_STRIP=symbols \
    cargo build --release --locked --bin pollster
fi
if [ ! -x "$bin" ]; then
  echo "build.sh: $bin is missing: run without --no-build" >&2
  exit 1
fi

deb_out="$target_dir/debian"
rpm_out="$target_dir/generate-rpm"
mkdir -p "$deb_out" "$rpm_out"
built=()

if [ "$want_deb" = 1 ]; then
  echo "== cargo deb${version:+ --deb-version $version}"
  deb_args=(--no-build --strip --output "$deb_out")
  [ -n "$version" ] && deb_args+=(--deb-version "$version")
  deb="$(cargo deb "${deb_args[@]}" | tail -n 1)"
  built+=("$deb")
fi

if [ "$want_rpm" = 1 ]; then
  echo "== cargo generate-rpm${version:+ (version $version)}"
  rpm_args=(--target-dir "$target_dir")
  if [ -n "$version" ]; then
    rpm_args+=(--set-metadata "version = \"$version\"")
  fi
  pkg_version="${version:-$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)}"
  rpm_file="$rpm_out/pollster-$pkg_version-1.$(uname -m).rpm"
  cargo generate-rpm "${rpm_args[@]}" --output "$rpm_file"
  built+=("$rpm_file")
fi

echo "== packages"
for f in "${built[@]}"; do
  [ -f "$f" ] || { echo "build.sh: expected package $f was not written" >&2; exit 1; }
  echo "$f"
done
