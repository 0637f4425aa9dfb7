# shellcheck shell=bash
# Shared by the job tests across namespaced hosts (sourced): root check, a work dir on /var/tmp (the
# hosts see this machine's filesystem except /tmp and /dev/shm), `fail` with the logs worth reading,
# HOSTS hosts started (scripts/hosts.sh) and torn down on exit, the bridge's address, the job files
# (tests/common/job_files.sh) and `hosts_section`. Set NAME (work dir), HOSTS (how many) and B (the
# troupe binary) before sourcing; FAIL_LOGS (globs under the work dir) adds logs to a failure's
# report.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
S="$here/scripts/hosts.sh"
if [[ $(id -u) -ne 0 ]]; then echo "SKIP: hosts.sh needs root (network and mount namespaces)"; exit 77; fi
work=/var/tmp/troupe-$NAME-$$
cache=/var/tmp/troupe-multihost-datasets
mkdir -p "$work" "$cache"
fail() {
  echo "FAIL: $*"
  local p f
  for p in '*.err' 'jobs/*/logs/master.log' ${FAIL_LOGS:-}; do
    for f in "$work"/$p; do [[ -f $f ]] && { echo "== $f"; tail -40 "$f"; }; done
  done
  exit 1
}
trap '"$S" down > /dev/null 2>&1; rm -rf "$work"' EXIT
"$S" up "$HOSTS" > /dev/null || fail "hosts up"
bridge=$("$S" addr h1 | sed 's/\.[0-9]*$/.1/')
source "$here/tests/common/job_files.sh"
# hosts_section HOST:SLOTS...: the [cluster] section that places a job's nodes on these hosts
# through `hosts.sh exec`, the runner and the master here on the bridge.
hosts_section() {
  local list
  list=$(printf '"%s", ' "$@")
  printf '[cluster]\nhosts = [%s]\nhost_command = "%s exec {host}"\nadvertise = "%s"\n' "${list%, }" "$S" "$bridge"
}
