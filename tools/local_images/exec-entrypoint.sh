#!/bin/sh
# rdq-local/redis and rdq-local/secantusdb entrypoint: make /data, run the command.
set -eu
mkdir -p /data
cd /data
exec "$@"
