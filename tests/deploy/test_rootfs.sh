#!/usr/bin/env bash
# test_rootfs.sh - the coordinator image's contract, without a container
# engine (ctest label `slow`).
#
#   test_rootfs.sh SOURCE_DIR COORDINATOR DEPLOY_FRAMES CACHE_DIR
#
# 1. debootstrap --variant=minbase bookworm (what debian:bookworm-slim is
#    made from), cached in CACHE_DIR/bookworm-minbase: minutes the first
#    time, a copy afterwards.
# 2. Carry out the runtime stage of deploy/Dockerfile in a copy of it, read
#    by tests/deploy/dockerfile.py: its RUN lines in the root filesystem
#    (apt-get install of deploy/runtime-packages.txt, the user, /data), its
#    COPY lines (the list; COORDINATOR for the build stage's binary), and
#    its ENV, USER, WORKDIR, VOLUME, ENTRYPOINT and HEALTHCHECK.
# 3. Run it as a container would: new PID namespace (the coordinator is
#    PID 1) and mount namespace, read-only root, the data volume at /data, a
#    tmpfs /tmp, the secrets read-only at /run/secrets/, the image's user
#    and environment (STARLING_LISTEN moved to a free loopback port), the
#    entry point; then from outside, with curl and openssl only: /healthz,
#    the image's HEALTHCHECK, /readyz, auth, /metrics, a task, an enrolled
#    device whose signed check-in, download and resumable upload close a
#    round, the new model version, an online backup with the image's sqlite3
#    (deploy/README.md's command), SIGTERM with exit status 0, a restart on
#    the same volume, a renewed certificate and admin token taken on SIGHUP,
#    and a refusal to start without the secrets.
#
# Needs root (debootstrap, chroot, namespaces) and Debian's mirror.
# SL_DEPLOY_MIRROR / SL_DEPLOY_SECURITY_MIRROR override the mirrors.
set -euo pipefail

if [ $# -ne 4 ]; then
    echo "usage: test_rootfs.sh SOURCE_DIR COORDINATOR DEPLOY_FRAMES CACHE_DIR" >&2
    exit 2
fi
src=$(realpath "$1")
coordinator=$(realpath "$2")
frames=$(realpath "$3")
cache=$(realpath -m "$4")
mirror=${SL_DEPLOY_MIRROR:-http://deb.debian.org/debian}
security_mirror=${SL_DEPLOY_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
python=/usr/bin/python3
start=$SECONDS
checks=0

log() { printf 'test_rootfs: [%4ds] %s\n' $((SECONDS - start)) "$*"; }
ok() {
    checks=$((checks + 1))
    log "ok: $*"
}
fail() {
    printf 'test_rootfs: [%4ds] FAIL: %s\n' $((SECONDS - start)) "$*" >&2
    exit 1
}

[ "$(id -u)" -eq 0 ] || fail "needs root (debootstrap, chroot, mount and PID namespaces)"
if ! command -v debootstrap >/dev/null; then
    log "installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap \
        >/dev/null || fail "cannot install debootstrap"
fi
for prog in curl openssl unshare nsenter chroot sha256sum base64 od "$python"; do
    command -v "$prog" >/dev/null || fail "needs $prog"
done

# ---- 1. the base root filesystem (cached) ------------------------------------------
mkdir -p "$cache"
base=$cache/bookworm-minbase
if [ -e "$base/.starling-complete" ]; then
    log "base root filesystem: cached in $base"
else
    log "debootstrap --variant=minbase bookworm $base (cached for later runs)"
    rm -rf "$base.partial"
    if ! debootstrap --variant=minbase bookworm "$base.partial" "$mirror" \
        >"$cache/debootstrap.log" 2>&1; then
        tail -n 20 "$cache/debootstrap.log" >&2
        fail "debootstrap failed (log: $cache/debootstrap.log)"
    fi
    touch "$base.partial/.starling-complete"
    rm -rf "$base"
    mv "$base.partial" "$base"
fi

# The run's root filesystem, data volume and secrets; kept after a failure
# for a look, removed at the next run.
work=$cache/run
rm -rf "$work"
mkdir -p "$work"
root=$work/root
cp -a "$base" "$root"
rm -f "$root/.starling-complete"
# What debian:bookworm-slim has that debootstrap does not write: its deb822
# sources (with updates and security), and what Docker gives a build step.
rm -f "$root/etc/apt/sources.list"
cat >"$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security_mirror
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
cp /etc/resolv.conf "$root/etc/resolv.conf"

# ---- 2. the Dockerfile's runtime stage ----------------------------------------------
docker_path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
build_env=("PATH=$docker_path" HOME=/root)
image_env=()
user="" workdir=/ healthcheck="" stopsignal=""
volumes=() exposed=() entrypoint=() cmd=()

df_from() { [ "$1" = debian:bookworm-slim ] || fail "runtime stage FROM $1, not debian:bookworm-slim"; }
df_copy() {
    local from=$1 source=$2 dest=$3 file
    case "$from" in
    build)
        [ "$source" = /src/build/release/coordinator/starling-coordinator ] ||
            fail "COPY --from=build $source: not the binary this test has"
        file=$coordinator
        ;;
    "") file=$src/$source ;;
    *) fail "COPY --from=$from: unknown stage" ;;
    esac
    [ -f "$file" ] || fail "COPY $source: no such file"
    case "$dest" in */) dest=$dest$(basename "$source") ;; esac
    # Docker's COPY: owned by root, the source's mode
    install -D -o 0 -g 0 -m "$(stat -c %a "$file")" "$file" "$root$dest"
}
df_run() {
    [ -z "$user" ] || fail "RUN after USER: this test runs build steps as root only"
    log "RUN ${1:0:72}..."
    # shellcheck disable=SC2016 # expanded by the inner shell
    unshare --mount --fork /bin/sh -c 'mount -t proc proc "$1/proc" && exec chroot "$@"' \
        sh "$root" /usr/bin/env -i "${build_env[@]}" /bin/sh -c "cd / && $1" \
        >>"$work/build.log" 2>&1 || {
        tail -n 30 "$work/build.log" >&2
        fail "RUN failed (log: $work/build.log)"
    }
}
df_env() {
    image_env+=("$1=$2")
    build_env+=("$1=$2")
}
df_volume() { volumes+=("$@"); }
df_workdir() {
    workdir=$1
    mkdir -p "$root$1"
}
df_user() { user=$1; }
df_expose() { exposed+=("$1"); }
df_stopsignal() { stopsignal=$1; }
df_healthcheck() { healthcheck=$1; }
df_entrypoint() { entrypoint=("$@"); }
df_cmd() { cmd=("$@"); }

stage=$("$python" "$src/tests/deploy/dockerfile.py" "$src/deploy/Dockerfile" runtime)
eval "$stage"
ok "carried out the runtime stage of deploy/Dockerfile"

[ "$stopsignal" = SIGTERM ] || fail "STOPSIGNAL is '$stopsignal'"
[[ "$user" =~ ^[0-9]+:[0-9]+$ ]] || fail "USER '$user' is not uid:gid"
uid=${user%:*}
gid=${user#*:}
[ "${#volumes[@]}" -eq 1 ] || fail "expected one VOLUME, got ${volumes[*]}"
volume=${volumes[0]}
[ -n "$healthcheck" ] || fail "no HEALTHCHECK"
[ "${#entrypoint[@]}" -ge 1 ] || fail "no ENTRYPOINT"
packages=$(sed -e 's/#.*//' "$src/deploy/runtime-packages.txt")
for pkg in $packages; do
    # shellcheck disable=SC2016 # a dpkg-query format, not a shell expansion
    status=$(chroot "$root" dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
    [ "$status" = installed ] || fail "package $pkg is not installed in the root filesystem"
done
ok "every package of deploy/runtime-packages.txt is installed ($(echo "$packages" | wc -w))"
missing=$(chroot "$root" ldd "${entrypoint[0]}" | grep 'not found' || true)
[ -z "$missing" ] || fail "libraries missing in the image: $missing"
ok "ldd in the image resolves every library of ${entrypoint[0]}"
[ "$(stat -c %u:%g "$root$volume")" = "$uid:$gid" ] || fail "$volume is not owned by $user"
chroot "$root" getent passwd "$uid" >/dev/null || fail "no user $uid in the image"
[ -z "$(ls -A "$root/var/lib/apt/lists")" ] || fail "apt lists left in the image"
ok "user $user exists and owns $volume; no apt lists left behind"
log "image size (root filesystem): $(du -sh "$root" | cut -f1)"

# ---- 3. run it as a container ---------------------------------------------------------
secrets=$work/secrets
data=$work/volume
mkdir -p "$secrets" "$data" "$root/run/secrets"
# a fresh named volume starts as a copy of the image's directory
chown --reference="$root$volume" "$data"
chmod --reference="$root$volume" "$data"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -keyout "$secrets/tls.key" -out "$secrets/tls.crt" -subj /CN=starling-test \
    -addext subjectAltName=IP:127.0.0.1,DNS:localhost >/dev/null 2>&1
admin=$(openssl rand -hex 32)
enrol=$(openssl rand -hex 32)
printf '%s\n' "$admin" >"$secrets/admin-token"
printf '%s\n' "$enrol" >"$secrets/enrolment-token"
# as Kubernetes mounts them (projected, defaultMode 0440, group fsGroup)
chgrp "$gid" "$secrets"/*
chmod 0440 "$secrets"/*
port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# the operator's one override (docker run -e): a loopback port
run_env=("PATH=$docker_path" HOSTNAME=starling-test HOME="$volume" "${image_env[@]}"
    "STARLING_LISTEN=127.0.0.1:$port")
base_url=https://127.0.0.1:$port
cacert=$secrets/tls.crt

# shellcheck disable=SC2016 # expanded by the inner shell
container_sh='set -e
root=$1 volume_dir=$2 volume=$3 secrets=$4 user=$5 workdir=$6
shift 6
mount --bind "$root" "$root"
mount -o remount,bind,ro "$root"
mount --bind "$volume_dir" "$root$volume"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$root/tmp"
mount --bind "$secrets" "$root/run/secrets"
mount -o remount,bind,ro "$root/run/secrets"
mount -t proc -o nosuid,nodev,noexec proc "$root/proc"
exec chroot --userspec="$user" "$root" /usr/bin/env -i --chdir="$workdir" "$@"'

upid="" cpid=""
cleanup() {
    if [ -n "$cpid" ] && kill -0 "$cpid" 2>/dev/null; then
        kill -KILL "$cpid" 2>/dev/null || true
    fi
    [ -z "$upid" ] || wait "$upid" 2>/dev/null || true
}
trap cleanup EXIT

# run_container SECRETS_DIR CMD: a one-off container (docker compose run):
# the same mounts, user and environment, CMD through /bin/sh, in the foreground
run_container() {
    unshare --mount --pid --fork /bin/sh -c "$container_sh" sh "$root" "$data" "$volume" "$1" \
        "$user" "$workdir" "${run_env[@]}" /bin/sh -c "$2"
}
# start_container LOG SECRETS_DIR: the coordinator in the background; sets
# upid (unshare) and cpid (the coordinator: sh, chroot and env exec into it)
start_container() {
    unshare --mount --pid --fork /bin/sh -c "$container_sh" sh "$root" "$data" "$volume" "$2" \
        "$user" "$workdir" "${run_env[@]}" "${entrypoint[@]}" "${cmd[@]}" >"$1" 2>&1 &
    upid=$!
    cpid=""
    for _ in $(seq 100); do
        cpid=$(tr -d ' ' 2>/dev/null <"/proc/$upid/task/$upid/children" || true)
        if [ -n "$cpid" ] && [ "$(cat "/proc/$cpid/comm" 2>/dev/null)" = starling-coordi ]; then
            return 0
        fi
        kill -0 "$upid" 2>/dev/null || return 0
        sleep 0.1
    done
    fail "the coordinator did not start"
}

# http METHOD PATH [curl options]: status in $status, body in $work/body,
# headers in $work/headers
http() {
    local method=$1 path=$2
    shift 2
    status=$(curl -sS --cacert "$cacert" --max-time 20 -X "$method" -D "$work/headers" \
        -o "$work/body" -w '%{http_code}' "$@" "$base_url$path") || status=000
}
admin_http() { http "$@" -H "Authorization: Bearer $admin"; }
# signed METHOD PATH BODY_FILE|"" [curl options]: a device request (api_sign.h)
signed() {
    local method=$1 path=$2 body=$3 ts nonce digest sig
    shift 3
    ts=$(date +%s%3N)
    nonce=$(openssl rand -hex 16)
    digest=$(sha256sum <"${body:-/dev/null}" | cut -d' ' -f1)
    sig=$(printf 'STARLING-V1\n%s\n%s\n%s\n%s\n%s' "$method" "$path" "$ts" "$nonce" "$digest" |
        openssl dgst -sha256 -sign "$work/device.key" | base64 -w0)
    local args=(-H "X-Starling-Device: $device_id" -H "X-Starling-Timestamp: $ts"
        -H "X-Starling-Nonce: $nonce" -H "X-Starling-Signature: $sig")
    [ -z "$body" ] || args+=(--data-binary "@$body")
    http "$method" "$path" "${args[@]}" "$@"
}
# json KEY...: a member of the last JSON body
json() {
    "$python" -c 'import json, sys
d = json.load(open(sys.argv[1]))
for k in sys.argv[2:]:
    d = d[int(k)] if isinstance(d, list) else d[k]
print(json.dumps(d) if isinstance(d, (bool, dict, list)) or d is None else d)' "$work/body" "$@"
}
header() { tr -d '\r' <"$work/headers" | sed -n "s/^$1: //Ip" | tail -n 1; }
expect() { # STATUS WHAT
    [ "$status" = "$1" ] || fail "$2: HTTP $status, expected $1: $(head -c 400 "$work/body" 2>/dev/null)"
}
# in_container CMD: a shell command inside the running container, as its user
# with its environment (what docker exec and the HEALTHCHECK do)
in_container() {
    nsenter --target "$cpid" --mount --pid -- chroot --userspec="$user" "$root" \
        /usr/bin/env -i --chdir="$workdir" "${run_env[@]}" /bin/sh -c "$1"
}
wait_healthy() {
    for _ in $(seq 150); do
        kill -0 "$cpid" 2>/dev/null || fail "the coordinator exited: $(tail -n 5 "$1")"
        http GET /healthz
        [ "$status" = 200 ] && return 0
        sleep 0.2
    done
    fail "no /healthz after 30 s: $(tail -n 5 "$1")"
}
# stop_container LOG: SIGTERM from outside; the exit status must be 0
stop_container() {
    local t0=$SECONDS rc=0
    kill -TERM "$cpid"
    wait "$upid" || rc=$?
    upid=""
    [ "$rc" -eq 0 ] || fail "exit status $rc after SIGTERM: $(tail -n 5 "$1")"
    grep -q 'stopped cleanly' "$1" || fail "no 'stopped cleanly' in the log"
    ok "SIGTERM from outside: exit status 0 after $((SECONDS - t0)) s, 'stopped cleanly'"
}

log "starting the container: ${entrypoint[*]} ${cmd[*]} as $user, $base_url"
start_container "$work/coordinator.log" "$secrets"
wait_healthy "$work/coordinator.log"
[ "$(cat "$work/body")" = ok ] || fail "/healthz body: $(cat "$work/body")"
ok "GET /healthz: 200 ok over HTTPS (the mounted certificate)"
grep -q "^Uid:[[:space:]]*${uid}[[:space:]]*${uid}[[:space:]]*${uid}[[:space:]]*${uid}\$" "/proc/$cpid/status" ||
    fail "the coordinator does not run as uid $uid: $(grep Uid "/proc/$cpid/status")"
grep -q "^NSpid:[[:space:]]*${cpid}[[:space:]]*1\$" "/proc/$cpid/status" ||
    fail "the coordinator is not PID 1 of its namespace"
ok "runs as uid $uid, PID 1 of its PID namespace, on a read-only root"
in_container "$healthcheck" || fail "the image's HEALTHCHECK failed on a running coordinator"
ok "the image's HEALTHCHECK command passes inside the container"
written=$(nsenter --target "$cpid" --mount -- touch "$root/written" 2>&1 || true)
case "$written" in
*"Read-only file system"*) ;;
*) fail "the root filesystem is not read-only: '$written'" ;;
esac
in_container 'touch /tmp/x && touch /data/x && rm /tmp/x /data/x' ||
    fail "/tmp or /data is not writable for the user"
ok "only /data and /tmp are writable"

http GET /readyz
expect 200 "GET /readyz"
ok "GET /readyz: 200 (storage takes writes)"
http GET /v1/status
expect 401 "GET /v1/status without the token"
admin_http GET /v1/status
expect 200 "GET /v1/status with the mounted admin token"
[ "$(json tasks)" = "[]" ] || fail "a new volume has tasks: $(cat "$work/body")"
ok "the mounted admin token is required and accepted"
admin_http GET /metrics
expect 200 "GET /metrics"
grep -q '^starling_http_requests_total{route="/healthz",status="200"} [1-9]' "$work/body" ||
    fail "/metrics lacks the /healthz request count"
ok "GET /metrics: Prometheus text"

# a task of two small tensors, one device, a round of one
"$frames" layout >"$work/layout.txt"
"$frames" model "$work/model.frame"
"$python" - "$work/layout.txt" "$work/model.frame" >"$work/task.json" <<'EOF'
import base64, json, sys
print(json.dumps({
    "config": {"name": "deploy-test", "target": 1, "quorum": 1, "over_selection": 1.0,
               "selection_window_ms": 300, "report_deadline_ms": 60000},
    "layout": open(sys.argv[1]).read(),
    "model": base64.b64encode(open(sys.argv[2], "rb").read()).decode()}))
EOF
admin_http POST /v1/tasks -H 'Content-Type: application/json' --data-binary "@$work/task.json"
expect 201 "POST /v1/tasks"
task=$(json task_id)
openssl ecparam -name prime256v1 -genkey -noout -out "$work/device.key" 2>/dev/null
pub=$(openssl ec -in "$work/device.key" -pubout -conv_form uncompressed -outform DER 2>/dev/null |
    tail -c 65 | od -An -v -tx1 | tr -d ' \n')
printf '{"enrolment_token":"%s","public_key":"%s"}' "$enrol" "$pub" >"$work/enrol.json"
http POST /v1/devices -H 'Content-Type: application/json' --data-binary "@$work/enrol.json"
expect 201 "POST /v1/devices (enrolment with the mounted token)"
device_id=$(json device_id)
ok "task $task created, device $device_id enrolled (openssl key, mounted enrolment token)"

printf '{"task_id":%s,"num_samples":100}' "$task" >"$work/checkin.json"
selected=false
for _ in $(seq 50); do
    signed POST /v1/checkin "$work/checkin.json" -H 'Content-Type: application/json'
    expect 200 "POST /v1/checkin"
    selected=$(json selected)
    [ "$selected" = true ] && break
    sleep 0.2
done
[ "$selected" = true ] || fail "the device was never selected"
round=$(json round_id)
version=$(json model_version)
ok "signed check-in: selected for round $round from model version $version"

signed GET "/v1/models/$version?task=$task" ""
expect 200 "GET /v1/models/$version (signed)"
etag=$(header ETag)
[ "$etag" = "\"$(sha256sum <"$work/body" | cut -d' ' -f1)\"" ] || fail "ETag $etag is not the body's SHA-256"
ok "model download: $(stat -c %s "$work/body") bytes, ETag = SHA-256"

"$frames" update "$round" "$version" "$work/update.frame"
length=$(stat -c %s "$work/update.frame")
printf '{"length":%s,"sha256":"%s","num_samples":100}' "$length" \
    "$(sha256sum <"$work/update.frame" | cut -d' ' -f1)" >"$work/upload.json"
signed POST "/v1/rounds/$round/uploads" "$work/upload.json" -H 'Content-Type: application/json'
expect 201 "POST /v1/rounds/$round/uploads"
upload=$(json upload_id)
signed PATCH "/v1/uploads/$upload" "$work/update.frame" -H 'Upload-Offset: 0' \
    -H 'Content-Type: application/offset+octet-stream'
expect 200 "PATCH /v1/uploads/$upload"
if [ "$(json accepted)" != true ] || [ "$(json duplicate)" != false ]; then
    fail "upload not accepted: $(cat "$work/body")"
fi
ok "resumable upload of $length bytes: accepted, durable"

new_version=""
for _ in $(seq 100); do
    admin_http GET /v1/status
    expect 200 "GET /v1/status"
    new_version=$(json tasks 0 model_version)
    [ "$new_version" -gt "$version" ] && break
    sleep 0.2
done
[ "$new_version" -gt "$version" ] || fail "the round did not produce a new model version"
admin_http GET "/v1/rounds/$round"
expect 200 "GET /v1/rounds/$round"
if [ "$(json state)" != closed ] || [ "$(json reported)" != 1 ]; then
    fail "round $round: $(cat "$work/body")"
fi
admin_http GET "/v1/models/latest?task=$task"
expect 200 "GET /v1/models/latest"
[ "$(header X-Starling-Model-Version)" = "$new_version" ] ||
    fail "latest is version $(header X-Starling-Model-Version), not $new_version"
ok "round $round closed with 1 report; model version $new_version downloaded"

# deploy/README.md's online backup, inside the running container
in_container "sqlite3 /data/starling.db \"VACUUM INTO '/data/starling-backup.db'\"" ||
    fail "sqlite3 VACUUM INTO failed"
[ "$(in_container 'sqlite3 -readonly /data/starling-backup.db "PRAGMA integrity_check"')" = ok ] ||
    fail "the backup fails its integrity check"
[ "$(in_container 'sqlite3 -readonly /data/starling-backup.db "SELECT max(version) FROM model_versions"')" = "$new_version" ] ||
    fail "the backup lacks model version $new_version"
ok "online backup while serving: integrity ok, holds model version $new_version"
# a change after the backup, which the restore below must undo
sed -e 's/"deploy-test"/"after-backup"/' "$work/task.json" >"$work/task2.json"
admin_http POST /v1/tasks -H 'Content-Type: application/json' --data-binary "@$work/task2.json"
expect 201 "POST /v1/tasks (after the backup)"
admin_http GET /v1/status
[ "$(json tasks 1 name)" = after-backup ] || fail "no second task: $(cat "$work/body")"

stop_container "$work/coordinator.log"
[ "$(stat -c %u "$data/starling.db")" = "$uid" ] || fail "starling.db is not owned by $uid"
[ ! -s "$data/starling.db-wal" ] || fail "a non-empty WAL was left after SIGTERM"
ok "the volume holds starling.db owned by $uid, WAL checkpointed"

# deploy/README.md's restore, as a one-off container on the stopped volume
run_container "$secrets" 'cp /data/starling-backup.db /data/starling.db && rm -f /data/starling.db-wal /data/starling.db-shm' ||
    fail "the restore command failed"
log "restored the backup; restarting on the same volume"
start_container "$work/coordinator2.log" "$secrets"
wait_healthy "$work/coordinator2.log"
admin_http GET /v1/status
expect 200 "GET /v1/status after the restart"
[ "$(json tasks 0 model_version)" = "$new_version" ] || fail "model version lost over a restart"
[ "$(json tasks 1 2>/dev/null || echo none)" = none ] || fail "the restore did not undo the task made after the backup"
ok "restore and restart on the volume: task $task at model version $new_version, the later task gone"

# a renewed certificate and a new admin token, replaced in the mounted directory as a
# Kubernetes Secret's update is, taken on SIGHUP without a restart (deploy/README.md)
cp "$secrets/tls.crt" "$work/old.crt"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
    -keyout "$work/new.key" -out "$work/new.crt" -subj /CN=starling-test \
    -addext subjectAltName=IP:127.0.0.1,DNS:localhost >/dev/null 2>&1
new_admin=$(openssl rand -hex 32)
printf '%s\n' "$new_admin" >"$work/new-admin"
for f in new.key:tls.key new.crt:tls.crt new-admin:admin-token; do
    cp "$work/${f%%:*}" "$secrets/.${f#*:}.next"
    chgrp "$gid" "$secrets/.${f#*:}.next"
    chmod 0440 "$secrets/.${f#*:}.next"
    mv "$secrets/.${f#*:}.next" "$secrets/${f#*:}"
done
kill -HUP "$cpid"
for _ in $(seq 50); do
    http GET /healthz
    [ "$status" = 200 ] && break
    sleep 0.2
done
expect 200 "GET /healthz trusting the renewed certificate after SIGHUP"
status=$(curl -sS --cacert "$work/old.crt" --max-time 20 -o /dev/null -w '%{http_code}' \
    "$base_url/healthz" 2>/dev/null) || status=000
[ "$status" = 000 ] || fail "the replaced certificate is still served to new connections"
admin_http GET /v1/status
expect 401 "the replaced admin token after SIGHUP"
admin=$new_admin
admin_http GET /metrics
expect 200 "GET /metrics with the new admin token"
expiry=$(sed -n 's/^starling_tls_certificate_expiry_timestamp_seconds //p' "$work/body")
[ -n "$expiry" ] && [ $(((expiry - $(date +%s) + 43200) / 86400)) = 30 ] ||
    fail "the served certificate's expiry is not the renewed one's: '$expiry'"
kill -0 "$cpid" 2>/dev/null || fail "the coordinator exited on SIGHUP"
grep -q 'SIGHUP: TLS certificate and key reloaded' "$work/coordinator2.log" ||
    fail "no reload in the log: $(tail -n 3 "$work/coordinator2.log")"
ok "SIGHUP: the renewed certificate (30 days) and the new admin token, no restart, the old ones refused"
stop_container "$work/coordinator2.log"
# the health check can fail: nothing listens any more (run in the plain root)
if chroot --userspec="$user" "$root" /usr/bin/env -i "${run_env[@]}" /bin/sh -c "$healthcheck" \
    >/dev/null 2>&1; then
    fail "the HEALTHCHECK passes with no coordinator running"
fi
ok "the HEALTHCHECK fails once the coordinator is gone"

mkdir -p "$work/no-secrets"
start_container "$work/coordinator3.log" "$work/no-secrets"
rc=0
wait "$upid" || rc=$?
upid="" cpid=""
if [ "$rc" -ne 2 ] || ! grep -q 'admin_token_file' "$work/coordinator3.log"; then
    fail "without secrets: exit status $rc, expected 2: $(tail -n 3 "$work/coordinator3.log")"
fi
ok "without the secrets mounted it refuses to start (exit status 2, names the missing file)"

trap - EXIT
printf '%d passed, 0 failed (%d s)\n' "$checks" $((SECONDS - start))
