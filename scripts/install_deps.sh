#!/usr/bin/env bash
# Installs the Debian packages ferry needs to build and test, when any are missing.
#   scripts/install_deps.sh [fuzz]   fuzz: also clang 14 with libFuzzer and its runtimes (make fuzz)
set -euo pipefail
pkgs=(cmake ninja-build ccache g++ pkg-config make
      libdnnl-dev libboost-dev nlohmann-json3-dev libsentencepiece-dev sentencepiece libpcre2-dev
      libfmt-dev libspdlog-dev libcli11-dev libyaml-cpp-dev
      libgtest-dev libgmock-dev libbenchmark-dev libssl-dev openssl libsqlite3-dev)
# The Batch API's redis backend is tested against a real redis-server.
pkgs+=(redis-server)
missing=()
# The server tests drive ferry with the openai npm client and curl.
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || pkgs+=(nodejs npm)
command -v curl >/dev/null 2>&1 || pkgs+=(curl)
# bench/qos_report.py plots the QoS benchmark's timeline.
pkgs+=(python3-matplotlib)
# The structured-output tests validate answers with Python's jsonschema, independently of ferry.
pkgs+=(python3-jsonschema)
# The fuzz preset: clang 14, libFuzzer and the sanitizer runtimes, LLVM's OpenMP, the symbolizer.
[[ ${1:-} == fuzz ]] && pkgs+=(clang-14 libclang-rt-14-dev libomp-14-dev llvm-14)
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  sudo_cmd=""
  [[ $(id -u) -eq 0 ]] || sudo_cmd="sudo"
  $sudo_cmd apt-get update
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y --no-install-recommends "${missing[@]}"
fi
