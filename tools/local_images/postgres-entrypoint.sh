#!/bin/sh
# rdq-local/postgres entrypoint: the official image's interface, reduced to what rdq uses.
# POSTGRES_USER / POSTGRES_PASSWORD / POSTGRES_DB create the first user and database when
# PGDATA is empty; then "postgres ARGS..." runs as the postgres user (other commands run
# as given). Host connections need the password (scram-sha-256), from any address.
set -eu
PGDATA="${PGDATA:-/var/lib/postgresql/data}"
export PGDATA
as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"; }
if [ "${1:-}" = "postgres" ]; then
    mkdir -p "$PGDATA" /var/run/postgresql
    chown postgres:postgres "$PGDATA" /var/run/postgresql
    chmod 700 "$PGDATA"
    if [ ! -s "$PGDATA/PG_VERSION" ]; then
        user="${POSTGRES_USER:-postgres}"
        pwfile="$(mktemp)"
        printf '%s\n' "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set}" > "$pwfile"
        chown postgres "$pwfile"
        as_postgres initdb -D "$PGDATA" -U "$user" --pwfile="$pwfile" \
            --encoding=UTF8 --locale=C.UTF-8 --auth-local=trust --auth-host=scram-sha-256 >/dev/null
        rm -f "$pwfile"
        echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
        db="${POSTGRES_DB:-$user}"
        if [ "$db" != "postgres" ]; then
            echo "CREATE DATABASE \"$db\" OWNER \"$user\";" \
                | as_postgres postgres --single -D "$PGDATA" -j postgres >/dev/null
        fi
    fi
    shift
    exec setpriv --reuid=postgres --regid=postgres --init-groups -- postgres "$@"
fi
exec "$@"
