#!/usr/bin/env bash
# Build the local container images rdq's container rungs use where no image registry is
# reachable: rdq-local/postgres, rdq-local/redis, rdq-local/secantusdb and
# rdq-local/mariadb (for examples/rdq-mysql).
#
#   tools/build_local_images.sh [postgres] [redis] [secantusdb] [mariadb]   (default: all)
#
# Every image starts from one debootstrap'ed Debian bookworm (minbase), built once and
# kept as a tarball in $RDQ_IMAGE_CACHE (default /var/cache/rdq-local-images); the server
# is installed inside a copy of it with apt-get (postgresql-15, redis-server,
# mariadb-server) or, for
# SecantusDB, pip (Python + SecantusDB from PyPI: a MongoDB-wire-protocol server, NOT
# MongoDB), and the tree is `docker import`ed with an entrypoint from
# tools/local_images/. Each image carries the label rdq.recipe=<sha256 of its recipe>;
# an image whose label matches the current recipe is left alone (the script is
# idempotent: a second run does nothing). Needs root, debootstrap, and a Docker engine
# that answers. RDQ_DEBIAN_MIRROR overrides the Debian mirror.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
CACHE="${RDQ_IMAGE_CACHE:-/var/cache/rdq-local-images}"
MIRROR="${RDQ_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SUITE=bookworm
SECANTUS_VERSION=0.7.0b3
BASE_RECIPE="debootstrap --variant=minbase --include=ca-certificates $SUITE v1"

die() { echo "build_local_images: $*" >&2; exit 1; }
say() { echo "build_local_images: $*" >&2; }

[ "$(id -u)" -eq 0 ] || die "run as root (debootstrap and chroot need it)"
command -v docker >/dev/null || die "docker is not installed (apt-get install docker.io)"
docker info >/dev/null 2>&1 || die "Docker does not answer (start dockerd first)"

# ---- the recipes -----------------------------------------------------------------------
# name | apt packages | pip packages (into /opt/venv) | entrypoint file | docker import changes
recipe() {
    case "$1" in
    postgres)
        echo "postgresql-15|-|postgres-entrypoint.sh|ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/bin:/usr/bin:/bin;ENV PGDATA=/var/lib/postgresql/data;LABEL rdq.server=postgres;EXPOSE 5432" ;;
    redis)
        echo "redis-server|-|exec-entrypoint.sh|LABEL rdq.server=redis;EXPOSE 6379" ;;
    secantusdb)
        echo "python3 python3-venv|SecantusDB==$SECANTUS_VERSION|exec-entrypoint.sh|ENV PATH=/opt/venv/bin:/usr/local/bin:/usr/bin:/bin;LABEL rdq.server=secantusdb;LABEL rdq.note=\"SecantusDB $SECANTUS_VERSION: a MongoDB-wire-protocol server, not MongoDB\";EXPOSE 27017" ;;
    mariadb)
        echo "mariadb-server|-|mariadb-entrypoint.sh|LABEL rdq.server=mariadb;EXPOSE 3306" ;;
    *) die "unknown image '$1' (known: postgres redis secantusdb mariadb)" ;;
    esac
}

recipe_hash() {  # the base, the recipe line and the entrypoint's content
    local line entry
    line="$(recipe "$1")"
    entry="$(echo "$line" | cut -d'|' -f3)"
    { echo "$BASE_RECIPE"; echo "$line"; cat "$HERE/local_images/$entry"; } | sha256sum | cut -c1-16
}

current_hash() {  # the rdq.recipe label of rdq-local/NAME, or nothing
    docker image inspect "rdq-local/$1:latest" --format '{{index .Config.Labels "rdq.recipe"}}' 2>/dev/null || true
}

# ---- the shared base -------------------------------------------------------------------
base_tarball() {
    local hash tar tmp
    hash="$(echo "$BASE_RECIPE" | sha256sum | cut -c1-16)"
    tar="$CACHE/base-$SUITE-$hash.tar"
    if [ ! -s "$tar" ]; then
        command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"
        mkdir -p "$CACHE"
        tmp="$(mktemp -d "$CACHE/base.XXXXXX")"
        say "debootstrap $SUITE from $MIRROR (once; kept as $tar)"
        debootstrap --variant=minbase --include=ca-certificates "$SUITE" "$tmp/root" "$MIRROR" \
            >"$tmp/debootstrap.log" 2>&1 || { tail -20 "$tmp/debootstrap.log" >&2; die "debootstrap failed"; }
        tar -C "$tmp/root" -cf "$tar.part" . && mv "$tar.part" "$tar"
        rm -rf "$tmp"
    fi
    echo "$tar"
}

in_chroot() {  # run a command in the chroot with a clean environment
    local root="$1"; shift
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 \
        chroot "$root" "$@"
}

WORK=""
cleanup() {  # a half-built tree is removed, whatever happened
    if [ -n "$WORK" ]; then
        umount "$WORK/root/proc" 2>/dev/null || true
        rm -rf "$WORK"
        WORK=""
    fi
}
trap cleanup EXIT

build() {
    local name="$1" hash line apt pip entry changes work root
    hash="$(recipe_hash "$name")"
    if [ "$(current_hash "$name")" = "$hash" ]; then
        say "rdq-local/$name is up to date (recipe $hash): nothing to do"
        return 0
    fi
    line="$(recipe "$name")"
    IFS='|' read -r apt pip entry changes <<<"$line"
    work="$(mktemp -d "${TMPDIR:-/tmp}/rdq-image-$name.XXXXXX")"
    root="$work/root"
    WORK="$work"
    mkdir -p "$root"
    tar -C "$root" -xf "$(base_tarball)"
    cp /etc/resolv.conf "$root/etc/resolv.conf"
    printf '#!/bin/sh\nexit 101\n' > "$root/usr/sbin/policy-rc.d"  # start no service
    chmod +x "$root/usr/sbin/policy-rc.d"
    mkdir -p "$root/etc/postgresql-common"
    echo "create_main_cluster = false" > "$root/etc/postgresql-common/createcluster.conf"
    mount -t proc proc "$root/proc"
    say "rdq-local/$name: apt-get install $apt"
    in_chroot "$root" apt-get update -qq >"$work/apt.log" 2>&1 \
        && in_chroot "$root" apt-get install -y -qq --no-install-recommends $apt >>"$work/apt.log" 2>&1 \
        || { tail -20 "$work/apt.log" >&2; die "apt-get failed for $name"; }
    if [ "$pip" != "-" ]; then
        say "rdq-local/$name: pip install $pip"
        in_chroot "$root" python3 -m venv /opt/venv
        # The download trusts what this host trusts (a TLS proxy's CA, say); not kept.
        cp /etc/ssl/certs/ca-certificates.crt "$root/tmp/host-ca.crt"
        in_chroot "$root" /opt/venv/bin/pip install -q --no-cache-dir --cert /tmp/host-ca.crt \
            $pip >>"$work/pip.log" 2>&1 \
            || { tail -20 "$work/pip.log" >&2; die "pip install failed for $name"; }
        rm -f "$root/tmp/host-ca.crt"
    fi
    umount "$root/proc"
    install -m 0755 "$HERE/local_images/$entry" "$root/usr/local/bin/rdq-entrypoint"
    rm -rf "$root/var/lib/apt/lists"/* "$root/var/cache/apt"/*.bin "$root/usr/share/doc" \
        "$root/usr/share/man" "$root/usr/share/locale" "$root/usr/sbin/policy-rc.d"
    : > "$root/etc/resolv.conf"
    local args=(--change "ENTRYPOINT [\"/usr/local/bin/rdq-entrypoint\"]"
                --change "LABEL rdq.recipe=$hash" --change "LABEL rdq.kit-image=rdq-local/$name")
    local change
    IFS=';' read -r -a parts <<<"$changes"
    for change in "${parts[@]}"; do args+=(--change "$change"); done
    say "rdq-local/$name: docker import"
    tar -C "$root" -c . | docker import "${args[@]}" - "rdq-local/$name:latest" >/dev/null
    cleanup
    say "rdq-local/$name built (recipe $hash, $(docker image inspect "rdq-local/$name:latest" --format '{{.Id}}'))"
}

names=("$@")
[ "${#names[@]}" -gt 0 ] || names=(postgres redis secantusdb mariadb)
for n in "${names[@]}"; do recipe "$n" >/dev/null; done  # a bad name fails before any work
for n in "${names[@]}"; do build "$n"; done
