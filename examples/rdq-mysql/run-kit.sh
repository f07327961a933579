#!/usr/bin/env bash
# Run the rdq compliance kit on rdq-mysql: the whole conformance suite, the stateful
# machine (ci profile) and the standard chaos campaign, in one pytest run.
#
#   ./run-kit.sh dsn   [PYTEST ARGS...]  the server at $RDQ_MYSQL_DSN
#                                        (default mysql://root@127.0.0.1:3306/test)
#   ./run-kit.sh local [PYTEST ARGS...]  a private mariadbd/mysqld the kit starts from
#                                        the local binaries (no DSN, no container)
#
# Uses the python on PATH (or $PYTHON): the one whose environment has rdq and rdq-mysql
# installed. A server that cannot be provisioned is a failure, never a skip
# (--rdq-require-backend); pytest's "no tests collected" (exit 5) is a failure too.
set -uo pipefail
cd "$(dirname "$0")"
rung="${1:-}"
[ $# -gt 0 ] && shift
python="${PYTHON:-python}"
case "$rung" in
  dsn)
    dsn="${RDQ_MYSQL_DSN:-mysql://root@127.0.0.1:3306/test}"
    "$python" -m pytest -p no:cacheprovider --rdq-require-backend --rdq-dsn "$dsn" "$@"
    ;;
  local)
    env -u RDQ_MYSQL_DSN -u RDQ_DSN "$python" -m pytest -p no:cacheprovider \
      --rdq-require-backend --rdq-no-docker "$@"
    ;;
  *)
    echo "usage: $0 dsn|local [pytest args...]" >&2
    exit 2
    ;;
esac
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "run-kit.sh: pytest collected no tests; that is a failure" >&2
  rc=1
fi
exit "$rc"
