#!/bin/sh
# Open MPI's remote-shell agent (`--mca plm_rsh_agent`) for hosts emulated with
# network namespaces (testing/emulated_hosts.h): where mpirun would ssh to a
# host, this runs the command in that host's network namespace with the
# host's own hostname. Used by //bench:collectives --cross_host.
#
#   TPX_EMULATED_HOSTS="10.77.0.1=<netns>=<hostname> 10.77.0.2=<netns>=<hostname>"
#   emulated_host_rsh.sh [ssh options] 10.77.0.2 orted ...
set -eu
while [ $# -gt 0 ]; do
  case "$1" in
    -*) shift ;;  # ssh-style options mpirun may add; nothing to forward
    *) break ;;
  esac
done
if [ $# -lt 2 ]; then
  echo "emulated_host_rsh.sh: usage: emulated_host_rsh.sh <host> <command...>" >&2
  exit 2
fi
target=$1
shift
for entry in ${TPX_EMULATED_HOSTS:-}; do
  address=${entry%%=*}
  rest=${entry#*=}
  netns=${rest%%=*}
  name=${rest#*=}
  if [ "$address" = "$target" ] || [ "$name" = "$target" ]; then
    exec ip netns exec "$netns" unshare --uts /bin/sh -c \
      'hostname "$1" && shift && exec /bin/sh -c "$*"' sh "$name" "$@"
  fi
done
echo "emulated_host_rsh.sh: no emulated host '$target' in TPX_EMULATED_HOSTS" >&2
exit 255
