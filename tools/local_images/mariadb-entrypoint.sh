#!/bin/sh
# rdq-local/mariadb entrypoint: the official mariadb image's interface, reduced to what
# rdq uses. MARIADB_ROOT_PASSWORD (required) is root's password from any host and
# MARIADB_DATABASE (optional) a database to create; both are applied at every start
# (an --init-file, idempotent). The data directory /var/lib/mysql is created with
# mariadb-install-db when empty. "mariadbd ARGS..." (or just "--opt ...") runs the server
# as the mysql user; any other command runs as given.
set -eu
DATADIR=/var/lib/mysql
case "${1:-}" in
    mariadbd) shift ;;
    -*) ;;
    *) exec "$@" ;;
esac
: "${MARIADB_ROOT_PASSWORD:?MARIADB_ROOT_PASSWORD must be set}"
mkdir -p "$DATADIR" /run/mysqld
chown mysql:mysql "$DATADIR" /run/mysqld
if [ ! -d "$DATADIR/mysql" ]; then
    setpriv --reuid=mysql --regid=mysql --init-groups -- mariadb-install-db --no-defaults \
        --datadir="$DATADIR" --auth-root-authentication-method=normal --skip-test-db \
        --skip-name-resolve >/dev/null
fi
init=/run/mysqld/rdq-init.sql
{
    echo "CREATE USER IF NOT EXISTS 'root'@'%' IDENTIFIED BY '$MARIADB_ROOT_PASSWORD';"
    echo "ALTER USER 'root'@'%' IDENTIFIED BY '$MARIADB_ROOT_PASSWORD';"
    echo "GRANT ALL PRIVILEGES ON *.* TO 'root'@'%' WITH GRANT OPTION;"
    if [ -n "${MARIADB_DATABASE:-}" ]; then
        echo "CREATE DATABASE IF NOT EXISTS \`$MARIADB_DATABASE\`;"
    fi
} > "$init"
chown mysql "$init"
chmod 600 "$init"
exec setpriv --reuid=mysql --regid=mysql --init-groups -- mariadbd --no-defaults \
    --datadir="$DATADIR" --socket=/run/mysqld/mysqld.sock --init-file="$init" "$@"
