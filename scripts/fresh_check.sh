#!/usr/bin/env bash
# Checks the README's two commands on a fresh Debian 12: builds a clean bookworm root with
# mmdebstrap, copies a clean clone of this commit and ../shared/fixtures into it, and there
# runs `make test`, then `make demo` until /health/ready answers 200 (plus one completion),
# then stops the server. Needs root. Exits non-zero with a message on the first failure.
#
# The root is minbase (what the debian:bookworm image has) plus make, the one tool the
# README presumes; everything else must come from scripts/install_deps.sh. No CUDA toolkit
# is installed, so the CUDA backend is not built there. Only this machine's network
# settings are carried in (DNS, proxy variables, NODE_EXTRA_CA_CERTS), as a fresh machine
# on the same network would have them.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: scripts/fresh_check.sh [options]
  --root DIR          the Debian root to build (default /var/tmp/ferry-fresh/root); it is
                      recreated on each run and must be empty, absent or made by this script
  --work DIR          clone and logs (default /var/tmp/ferry-fresh/work)
  --sources FILE      an apt sources file for the root (repeatable; default: this machine's
                      Debian entries under /etc/apt/sources.list*)
  --port N            the demo server's port (default 8000)
  --demo-timeout S    seconds allowed for /health/ready to answer 200 (default 300)
  --keep-root         keep the root after a successful run (a failed run always keeps it)
  -h, --help          this text
EOF
}

root=/var/tmp/ferry-fresh/root
work=/var/tmp/ferry-fresh/work
port=8000
demo_timeout_s=300
keep_root=0
sources=()
while (($#)); do
  case $1 in
    --root) root=${2:?--root needs a directory}; shift 2 ;;
    --work) work=${2:?--work needs a directory}; shift 2 ;;
    --sources) sources+=("${2:?--sources needs a file}"); shift 2 ;;
    --port) port=${2:?--port needs a number}; shift 2 ;;
    --demo-timeout) demo_timeout_s=${2:?--demo-timeout needs seconds}; shift 2 ;;
    --keep-root) keep_root=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "fresh_check: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
done

start_s=$SECONDS
log() { printf '[%s +%ds] fresh_check: %s\n' "$(date -u +%H:%M:%S)" $((SECONDS - start_s)) "$*"; }
die() { log "FAILED: $*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || die "needs root (mmdebstrap in root mode, chroot, mounts)"
[[ $port =~ ^[0-9]+$ ]] || die "--port must be a number"
[[ $demo_timeout_s =~ ^[0-9]+$ ]] || die "--demo-timeout must be seconds"
root=$(realpath -m "$root")
work=$(realpath -m "$work")
[[ $root != / && $work != / ]] || die "--root and --work must not be /"

repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel) || die "not inside a git checkout"
fixtures=$(realpath -m "$repo/../shared/fixtures")
[[ -d $fixtures ]] || die "$fixtures is missing (the README wants ../shared/fixtures beside the checkout)"
commit=$(git -C "$repo" rev-parse HEAD)

# Debian's own entries of this machine's apt sources, so the root sees the same archive.
if ((${#sources[@]} == 0)); then
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] && grep -Eq '^[^#]*(deb\.debian\.org|security\.debian\.org|ftp\.[a-z]+\.debian\.org)' "$f" &&
      sources+=("$f")
  done
  ((${#sources[@]})) || die "no Debian entries in /etc/apt/sources.list*; pass --sources FILE"
fi
for f in "${sources[@]}"; do [[ -f $f ]] || die "--sources $f: no such file"; done

# --- Everything below that touches the root is undone by cleanup. ----------------------
mounts=()
unmount_all() {
  local i
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
    umount -R "${mounts[i]}" 2>/dev/null || umount -R -l "${mounts[i]}" 2>/dev/null ||
      log "warning: could not unmount ${mounts[i]}"
  done
  mounts=()
}
# Processes whose root directory is the check's root (a server left behind by a failure).
kill_root_processes() {
  local p r
  for p in /proc/[0-9]*; do
    r=$(readlink "$p/root" 2>/dev/null) || continue
    [[ $r == "$root" ]] && kill -KILL "${p#/proc/}" 2>/dev/null || true
  done
}
still_mounted() { findmnt -rn -o TARGET | grep -q -F -e "$root/"; }
# Long steps run in the background and are waited for, so that a signal (Ctrl-C, timeout)
# is handled at once instead of after the step ends.
child=""
run_child() {
  "$@" &
  child=$!
  local rc=0
  wait "$child" || rc=$?
  child=""
  return "$rc"
}
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -n $child ]]; then
    kill -TERM "$child" 2>/dev/null || true
    wait "$child" 2>/dev/null || true
  fi
  if ((${#mounts[@]})); then
    kill_root_processes
    unmount_all
  fi
  if ((rc != 0)); then
    log "failed (exit $rc) after $((SECONDS - start_s)) s; the root is kept at $root for inspection"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- mmdebstrap ------------------------------------------------------------------------
if ! command -v mmdebstrap >/dev/null; then
  log "installing mmdebstrap"
  apt-get update -qq || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap ||
    die "could not install mmdebstrap"
fi

# --- a clean clone of this commit ------------------------------------------------------
if [[ -n $(git -C "$repo" status --porcelain --untracked-files=no) ]]; then
  log "note: $repo has uncommitted changes; they are not part of the check"
fi
mkdir -p "$work"
rm -rf "$work/ferry"
log "cloning $commit from $repo"
git clone --quiet --no-checkout "$repo" "$work/ferry" || die "git clone failed"
git -C "$work/ferry" checkout --quiet --detach "$commit" || die "git checkout $commit failed"

# --- a fresh Debian 12 root ------------------------------------------------------------
marker=.ferry-fresh-root
if [[ -e $root ]]; then
  still_mounted && die "something is still mounted under $root; unmount it first"
  if [[ -e $root/$marker ]]; then
    log "removing the previous root $root"
    rm -rf --one-file-system "$root" || die "could not remove $root"
  elif [[ -n $(ls -A "$root") ]]; then
    die "$root exists, is not empty and was not made by this script; pick another --root"
  fi
fi
mkdir -p "$(dirname "$root")"
log "building a Debian 12 (bookworm) root in $root from ${sources[*]}"
run_child mmdebstrap --variant=minbase --include=make \
  bookworm "$root" "${sources[@]}" || die "mmdebstrap failed"
touch "$root/$marker"

log "copying the clone and ../shared/fixtures into the root"
mkdir -p "$root/build/shared"
cp -a "$work/ferry" "$root/build/ferry"
cp -a "$fixtures" "$root/build/shared/fixtures"
# This machine's network settings, which a fresh machine on the same network would share:
# DNS, proxies, and the extra CA certificates node is told to trust (on a network whose
# TLS goes through an intercepting proxy). npm reaches its registry from the root.
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
net_env=()
for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
  [[ -n ${!v:-} ]] && net_env+=("$v=${!v}")
done
if [[ -n ${NODE_EXTRA_CA_CERTS:-} && -f $NODE_EXTRA_CA_CERTS ]]; then
  mkdir -p "$root/etc/ssl"
  cp -L "$NODE_EXTRA_CA_CERTS" "$root/etc/ssl/host-extra-ca.crt"
  net_env+=(NODE_EXTRA_CA_CERTS=/etc/ssl/host-extra-ca.crt)
  log "node in the root trusts this machine's NODE_EXTRA_CA_CERTS ($NODE_EXTRA_CA_CERTS)"
fi

mount -t proc proc "$root/proc" && mounts+=("$root/proc") || die "mounting /proc failed"
mount -t sysfs sysfs "$root/sys" && mounts+=("$root/sys") || die "mounting /sys failed"
mount --rbind /dev "$root/dev" && mounts+=("$root/dev") || die "mounting /dev failed"
mount --make-rslave "$root/dev"

# The steps a user runs, inside the root: `make test`, then `make demo` until ready.
cat >"$root/build/fresh_inner.sh" <<'INNER'
#!/bin/bash
set -euo pipefail
port=$1 demo_timeout_s=$2 start_s=$3
log() { printf '[%s +%ds] fresh_check (in root): %s\n' "$(date -u +%H:%M:%S)" $((start_s + SECONDS)) "$*"; }
die() { log "FAILED: $*" >&2; exit 1; }
cd /build/ferry

log "make test"
t0=$SECONDS
make test || die "make test failed"
log "make test passed in $((SECONDS - t0)) s"

(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && die "port $port is already in use; pass --port"
log "make demo on port $port"
t0=$SECONDS
# Its own process group, so stopping it reaches make, demo.sh and the server.
FERRY_DEMO_PORT=$port setsid make demo >/build/demo.log 2>&1 &
demo=$!
stop_demo() {
  kill -TERM -- -"$demo" 2>/dev/null || return 0
  local deadline=$((SECONDS + 30))
  while kill -0 -- -"$demo" 2>/dev/null; do
    if ((SECONDS > deadline)); then
      kill -KILL -- -"$demo" 2>/dev/null || true
      log "the demo did not stop within 30 s of SIGTERM; killed"
      return 1
    fi
    sleep 0.2
  done
}
trap 'stop_demo || true' EXIT
url=http://127.0.0.1:$port
deadline=$((SECONDS + demo_timeout_s))
until [[ $(curl -s -o /dev/null -w '%{http_code}' "$url/health/ready") == 200 ]]; do
  if ! kill -0 "$demo" 2>/dev/null; then
    tail -n 40 /build/demo.log >&2
    die "make demo exited before the server was ready"
  fi
  if ((SECONDS > deadline)); then
    tail -n 40 /build/demo.log >&2
    die "/health/ready did not answer 200 within $demo_timeout_s s"
  fi
  sleep 0.5
done
log "demo ready in $((SECONDS - t0)) s"
code=$(curl -s -o /build/completion.json -w '%{http_code}' "$url/v1/completions" \
  -H 'Content-Type: application/json' \
  -d '{"model": "kjv-decoder", "prompt": "In the beginning", "max_tokens": 8, "temperature": 0}')
[[ $code == 200 ]] || { cat /build/completion.json >&2; die "POST /v1/completions answered $code"; }
log "completion: $(cat /build/completion.json)"
trap - EXIT
stop_demo || die "the demo server did not stop on SIGTERM"
log "demo stopped"
INNER

log "running the README's setup steps in the root"
run_child chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "${net_env[@]}" \
  /bin/bash /build/fresh_inner.sh "$port" "$demo_timeout_s" $((SECONDS - start_s)) ||
  die "the steps in the root failed (see above; the root is $root)"
cp "$root/build/demo.log" "$work/demo.log" 2>/dev/null || true

kill_root_processes
unmount_all
if ((keep_root)); then
  log "the root is kept at $root"
else
  still_mounted && die "something is still mounted under $root; not removing it"
  rm -rf --one-file-system "$root"
fi
log "OK: make test and make demo work on a fresh Debian 12 ($commit), $((SECONDS - start_s)) s"
