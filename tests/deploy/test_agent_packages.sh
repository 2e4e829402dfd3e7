#!/usr/bin/env bash
# test_agent_packages.sh - the starling-agent Debian packages (ctest
# `deploy_agent_packages`, labels deploy and integration).
#
#   test_agent_packages.sh SOURCE_DIR WORK_DIR COORDINATOR STARLING_CLI BUILD_DIR...
#
# For each BUILD_DIR (the native build first, then the cross builds; the
# environment variable SL_AGENT_PACKAGE_BUILDS, directories separated by
# ':', replaces the cross ones) it makes the package with cpack, as
# deploy/package-agent.sh does, into WORK_DIR, and then:
# 1. dpkg-deb --info/--field: name, version, architecture, Depends exactly
#    deploy/packaging/agent-depends.txt, Recommends, maintainer scripts;
#    conffiles; dpkg-deb --contents: exactly the expected files, owners and
#    modes.
# 2. The binary: the package's architecture (readelf), stripped; each NEEDED
#    library belongs (dpkg -S on this host) to a package of Depends, each
#    package of Depends to a NEEDED library; libc6's minimum covers the
#    newest GLIBC_ symbol version; for the host's architecture the list
#    agrees with dpkg-shlibdeps.
# 3. The unit: Restart=always, StateDirectory, the hardening settings;
#    systemd-analyze verify (no complaint) and its offline security score.
# 4. The man page documents every option of the packaged binary's --help,
#    and groff finds nothing to warn about.
# 5. /etc/starling/agent.conf names only options the binary knows and is
#    accepted by it (an unknown key is not: the control case).
# 6. A round: a coordinator (COORDINATOR, HTTPS with a self-signed
#    certificate) on loopback, a task made with STARLING_CLI, and each
#    packaged binary run once (arm64 under qemu-aarch64, armhf under
#    qemu-arm, with the cross build's sysroot) with the packaged agent.conf
#    plus flags: enrolment, check-in, download, training, upload; each run
#    closes one round. --ca-file for one, --ca-file with --pin for the
#    others; a wrong pin and a missing CA are refused (exit status 3).
#
# A missing cross build or qemu-user: everything else is checked, and the
# test then exits 77 (ctest: skipped) naming what was not tested.
set -euo pipefail
# (no `producer | grep -q`: under pipefail, grep -q exiting at its first match can kill the
# producer with SIGPIPE and fail the pipeline; here-strings instead)

if [ $# -lt 5 ]; then
    echo "usage: test_agent_packages.sh SOURCE_DIR WORK_DIR COORDINATOR STARLING_CLI BUILD_DIR..." >&2
    exit 2
fi
src=$(realpath "$1")
work=$(realpath -m "$2")
coordinator=$(realpath "$3")
cli=$(realpath "$4")
shift 4
builds=("$1")
shift
if [ -n "${SL_AGENT_PACKAGE_BUILDS:-}" ]; then
    IFS=: read -r -a cross <<<"$SL_AGENT_PACKAGE_BUILDS"
    builds+=("${cross[@]}")
else
    builds+=("$@")
fi
python=/usr/bin/python3
start=$SECONDS
checks=0
skipped=()

log() { printf 'test_agent_packages: [%4ds] %s\n' $((SECONDS - start)) "$*"; }
ok() {
    checks=$((checks + 1))
    log "ok: $*"
}
fail() {
    printf 'test_agent_packages: [%4ds] FAIL: %s\n' $((SECONDS - start)) "$*" >&2
    exit 1
}
skip() {
    skipped+=("$1")
    log "SKIP: $1"
}

cpack=${SL_CPACK:-cpack}
for prog in "$cpack" dpkg-deb dpkg readelf openssl curl gzip "$python"; do
    command -v "$prog" >/dev/null || fail "needs $prog"
done

rm -rf "$work"
mkdir -p "$work"

# ---- the lists the packages must agree with ---------------------------------------------
depends_list=$(sed -e 's/#.*//' -e 's/[[:space:]]*$//' -e '/^[[:space:]]*$/d' \
    "$src/deploy/packaging/agent-depends.txt")
expected_depends=$(printf '%s\n' "$depends_list" | paste -sd, | sed 's/,/, /g')
depends_pkgs=$(printf '%s\n' "$depends_list" | cut -d' ' -f1 | sort)
libc_min=$(printf '%s\n' "$depends_list" | sed -n 's/^libc6 (>= \(.*\))$/\1/p')
[ -n "$libc_min" ] || fail "agent-depends.txt has no 'libc6 (>= version)'"
host_arch=$(dpkg --print-architecture)
# the host's libraries are in /lib/<multiarch>/ (not the lib32 ones); the
# package names are the same on every architecture
host_multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)

# ---- 0. make the packages -------------------------------------------------------------
declare -A deb_of emu_of
arches=()
for dir in "${builds[@]}"; do
    dir=$(realpath -m "$dir")
    if [ ! -f "$dir/CMakeCache.txt" ]; then
        skip "no build in $dir (deploy/package-agent.sh ARCH makes one)"
        continue
    elif [ ! -f "$dir/CPackConfig.cmake" ]; then
        skip "$dir was configured without the packaging: cmake $dir (or deploy/package-agent.sh ARCH)"
        continue
    fi
    arch=$(sed -n 's/^set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE "\(.*\)")$/\1/p' "$dir/CPackConfig.cmake")
    [ -n "$arch" ] || fail "$dir/CPackConfig.cmake names no architecture"
    if [ ! -x "$dir/device/starling-agent" ]; then
        skip "$arch: $dir/device/starling-agent is not built (deploy/package-agent.sh $arch)"
        continue
    fi
    emulator=""
    if [ "$arch" != "$host_arch" ]; then
        # as deploy/toolchains/*.cmake set CMAKE_CROSSCOMPILING_EMULATOR
        case "$arch" in
        arm64) qemu="qemu-aarch64" ;;
        armhf) qemu="qemu-arm" ;;
        *) fail "$arch: no emulator known for it" ;;
        esac
        sysroot=$(sed -n 's/^SL_SYSROOT:[A-Z]*=\(.*\)$/\1/p' "$dir/CMakeCache.txt")
        [ -d "$sysroot" ] || fail "$arch: no sysroot '$sysroot' (SL_SYSROOT of $dir)"
        if ! command -v "$qemu" >/dev/null; then
            skip "$arch: no $qemu to run the binary (deploy/install-deps.sh $arch)"
            continue
        fi
        emulator="$qemu -L $sysroot"
    fi
    [ -z "${deb_of[$arch]:-}" ] || fail "two builds for $arch"
    out=$work/pkg-$arch
    mkdir -p "$out"
    log "cpack: $dir -> $out"
    if ! "$cpack" --config "$dir/CPackConfig.cmake" -B "$out" >"$out/cpack.log" 2>&1; then
        tail -n 20 "$out/cpack.log" >&2
        fail "cpack failed for $arch (log: $out/cpack.log)"
    fi
    version=$(sed -n 's/^set(CPACK_PACKAGE_VERSION "\(.*\)")$/\1/p' "$dir/CPackConfig.cmake")
    deb=$out/starling-agent_${version}_$arch.deb
    [ -f "$deb" ] || fail "cpack made no $deb: $(ls "$out")"
    deb_of[$arch]=$deb
    emu_of[$arch]=$emulator
    arches+=("$arch")
    ok "$arch: $(basename "$deb") made from $dir"
done
[ "${#arches[@]}" -gt 0 ] || fail "no package could be made"
for want in amd64 arm64 armhf; do
    [ -z "${deb_of[$want]:-}" ] || continue
    grep -q "^$want:" <<<"$(printf '%s\n' "${skipped[@]}")" || skip "$want: no package made"
done

# run_agent ARCH ARGS...: the packaged binary of ARCH (under its emulator)
run_agent() {
    local arch=$1
    shift
    # shellcheck disable=SC2086 # the emulator is a command and its options
    env -i PATH=/usr/bin:/bin ${emu_of[$arch]} "$work/root-$arch/usr/bin/starling-agent" "$@"
}

# ---- 1-5. inspect each package ----------------------------------------------------------
inspect() {
    local arch=$1 deb=$2 root ctl field value
    root=$work/root-$arch
    ctl=$work/control-$arch
    value=$(dpkg-deb --field "$deb" Package)
    [ "$value" = starling-agent ] || fail "$arch: Package is '$value'"
    value=$(dpkg-deb --field "$deb" Architecture)
    [ "$value" = "$arch" ] || fail "$arch: Architecture is '$value'"
    value=$(dpkg-deb --field "$deb" Version)
    [ "$value" = "$version" ] || fail "$arch: Version is '$value', not $version"
    value=$(dpkg-deb --field "$deb" Depends)
    [ "$value" = "$expected_depends" ] ||
        fail "$arch: Depends is '$value', not agent-depends.txt's '$expected_depends'"
    value=$(dpkg-deb --field "$deb" Recommends)
    case ", $value," in *", ca-certificates,"*) ;; *) fail "$arch: Recommends lacks ca-certificates: '$value'" ;; esac
    for field in Maintainer Description Section Priority Installed-Size; do
        [ -n "$(dpkg-deb --field "$deb" "$field")" ] || fail "$arch: no $field"
    done
    dpkg-deb --info "$deb" >"$work/info-$arch.txt"
    ok "$arch: dpkg-deb --info: starling-agent $version, Architecture $arch, Depends as agent-depends.txt"

    rm -rf "$root" "$ctl"
    dpkg-deb --extract "$deb" "$root"
    dpkg-deb --control "$deb" "$ctl"
    [ "$(cat "$ctl/conffiles")" = /etc/starling/agent.conf ] ||
        fail "$arch: conffiles is '$(cat "$ctl/conffiles" 2>/dev/null)'"
    for script in postinst prerm postrm; do
        [ -x "$ctl/$script" ] || fail "$arch: no executable $script"
        sh -n "$ctl/$script" || fail "$arch: $script is not valid sh"
    done
    grep -q 'systemctl disable --now starling-agent.service' "$ctl/prerm" ||
        fail "$arch: prerm does not stop the service"
    ok "$arch: conffiles /etc/starling/agent.conf; postinst, prerm, postrm"

    # files (not directories), their modes and owners
    dpkg-deb --contents "$deb" | awk '$1 !~ /^d/ { print $1, $2, $6 }' | sort >"$work/contents-$arch.txt"
    sort >"$work/expected-$arch.txt" <<EOF
-rw-r--r-- root/root ./etc/starling/agent.conf
-rw-r--r-- root/root ./lib/systemd/system/starling-agent.service
-rw-r--r-- root/root ./usr/share/doc/starling-agent/copyright
-rw-r--r-- root/root ./usr/share/man/man1/starling-agent.1.gz
-rwxr-xr-x root/root ./usr/bin/starling-agent
EOF
    diff -u "$work/expected-$arch.txt" "$work/contents-$arch.txt" >&2 ||
        fail "$arch: dpkg-deb --contents differs from the expected files (above)"
    ok "$arch: dpkg-deb --contents: binary, unit, conffile, man page, copyright; root-owned, modes"

    # 2. the binary
    local bin=$root/usr/bin/starling-agent machine
    machine=$(readelf -h "$bin" | sed -n 's/^ *Machine: *//p')
    case "$arch:$machine" in
    amd64:*X86-64) ;;
    arm64:AArch64) ;;
    armhf:ARM)
        grep -q 'hard-float ABI' <<<"$(readelf -h "$bin")" || fail "armhf: not a hard-float binary"
        ;;
    *) fail "$arch: the binary is for '$machine'" ;;
    esac
    if readelf -S -W "$bin" | grep -Eq '\.symtab|\.debug_'; then
        fail "$arch: the binary is not stripped"
    fi
    local needed soname pkg from_libs=""
    needed=$(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p')
    [ -n "$needed" ] || fail "$arch: no NEEDED libraries?"
    for soname in $needed; do
        pkg=$(dpkg -S "*/$host_multiarch/$soname" 2>/dev/null | grep -v '^diversion' | head -n 1 | cut -d: -f1)
        [ -n "$pkg" ] || fail "$arch: no package of this host holds $soname"
        grep -qx "$pkg" <<<"$depends_pkgs" ||
            fail "$arch: $soname is in $pkg, which Depends does not name"
        from_libs="$from_libs $pkg"
    done
    for pkg in $depends_pkgs; do
        case " $from_libs " in *" $pkg "*) ;; *) fail "$arch: Depends names $pkg, which no NEEDED library needs" ;; esac
    done
    local glibc
    glibc=$(readelf --dyn-syms -W "$bin" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -n 1)
    dpkg --compare-versions "$libc_min" ge "$glibc" ||
        fail "$arch: the binary needs GLIBC_$glibc, Depends allows libc6 $libc_min"
    ok "$arch: $machine, stripped; NEEDED $(echo "$needed" | wc -l) libraries, each from Depends, none extra; GLIBC_$glibc <= libc6 $libc_min"
    if [ "$arch" = "$host_arch" ] && command -v dpkg-shlibdeps >/dev/null; then
        local shl=$work/shlibdeps-$arch derived item name min ours
        mkdir -p "$shl/debian"
        printf 'Source: starling\n\nPackage: starling-agent\nArchitecture: any\n' >"$shl/debian/control"
        derived=$(cd "$shl" && dpkg-shlibdeps -O "$bin" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
        [ -n "$derived" ] || fail "$arch: dpkg-shlibdeps derived nothing"
        [ "$(printf '%s\n' "$derived" | tr ',' '\n' | sed 's/^ *//; s/ .*//' | sort)" = "$depends_pkgs" ] ||
            fail "$arch: dpkg-shlibdeps says '$derived'; agent-depends.txt: '$expected_depends'"
        while IFS= read -r item; do
            name=${item%% *}
            min=$(printf '%s' "$item" | sed -n 's/.*(>= \(.*\))/\1/p')
            ours=$(printf '%s\n' "$depends_list" | sed -n "s/^$name (>= \(.*\))\$/\1/p")
            [ -z "$min" ] || dpkg --compare-versions "$ours" ge "$min" ||
                fail "$arch: $name (>= $ours) is below dpkg-shlibdeps' (>= $min)"
        done < <(printf '%s\n' "$derived" | tr ',' '\n' | sed 's/^ *//')
        ok "$arch: dpkg-shlibdeps agrees: $derived"
    fi

    # 3. the unit
    local unit=$root/lib/systemd/system/starling-agent.service line
    for line in 'ExecStart=/usr/bin/starling-agent --config /etc/starling/agent.conf' \
        Restart=always StateDirectory=starling-agent DynamicUser=yes NoNewPrivileges=yes \
        ProtectSystem=strict ProtectHome=yes PrivateTmp=yes PrivateDevices=yes \
        CapabilityBoundingSet= LoadCredential=enrolment-token:/etc/starling/enrolment-token \
        'Environment=STARLING_ENROLMENT_TOKEN_FILE=%d/enrolment-token' \
        WantedBy=multi-user.target; do
        grep -qxF "$line" "$unit" || fail "$arch: the unit lacks '$line'"
    done
    if command -v systemd-analyze >/dev/null; then
        # verify wants ExecStart's program to exist: point it at the extracted one
        mkdir -p "$work/unit-$arch"
        sed "s#^ExecStart=/usr/bin/starling-agent #ExecStart=$bin #" "$unit" \
            >"$work/unit-$arch/starling-agent.service"
        local complaints score
        complaints=$(systemd-analyze verify --man=no --generators=no \
            "$work/unit-$arch/starling-agent.service" 2>&1) ||
            fail "$arch: systemd-analyze verify: $complaints"
        [ -z "$complaints" ] || fail "$arch: systemd-analyze verify: $complaints"
        score=$(systemd-analyze security --offline=true --threshold=20 --no-pager \
            "$work/unit-$arch/starling-agent.service" 2>&1 | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p') ||
            true
        [ -n "$score" ] || fail "$arch: systemd-analyze security gave no score"
        awk -v s="$score" 'BEGIN { exit !(s <= 2.0) }' ||
            fail "$arch: systemd-analyze security: exposure $score, above 2.0"
        ok "$arch: unit: Restart=always, StateDirectory, DynamicUser, hardening; systemd-analyze verify clean, exposure $score"
    else
        ok "$arch: unit: Restart=always, StateDirectory, DynamicUser, hardening (no systemd-analyze here)"
    fi
    local state_dir
    state_dir=$(sed -n 's/^state_dir *= *//p' "$root/etc/starling/agent.conf")
    [ "$state_dir" = "/var/lib/$(sed -n 's/^StateDirectory=//p' "$unit")" ] ||
        fail "$arch: agent.conf's state_dir '$state_dir' is not the unit's StateDirectory"

    # 4. the man page against the packaged binary's --help
    local help options opt man=$work/man-$arch.1
    help=$(run_agent "$arch" --help) || fail "$arch: the packaged binary does not run: --help failed"
    options=$(printf '%s\n' "$help" | sed -n 's/^  --\([a-z][a-z0-9-]*\) .*/\1/p')
    [ "$(echo "$options" | wc -l)" -ge 30 ] || fail "$arch: --help lists only $(echo "$options" | wc -l) options"
    gzip -dc "$root/usr/share/man/man1/starling-agent.1.gz" >"$man"
    grep -q '^\.TH STARLING\\-AGENT 1 ' "$man" || fail "$arch: the man page has no .TH"
    for opt in $options; do
        grep -qF ".BI \\-\\-${opt//-/\\-} " "$man" || fail "$arch: the man page does not document --$opt"
    done
    [ "$(grep -c '^\.BI \\-\\-[^ ]* "' "$man")" -eq "$(echo "$options" | wc -l)" ] ||
        fail "$arch: the man page documents options the binary does not have"
    if command -v groff >/dev/null; then
        local warnings
        warnings=$(groff -man -Tutf8 -ww -z "$man" 2>&1)
        [ -z "$warnings" ] || fail "$arch: groff warns about the man page: $warnings"
    fi
    ok "$arch: man page documents all $(echo "$options" | wc -l) options of the packaged binary's --help$(command -v groff >/dev/null || echo ' (no groff here: not formatted)')"

    # 5. agent.conf: its keys (set or commented out) are options; the agent reads it
    local conf=$root/etc/starling/agent.conf key keys out rc
    keys=$(sed -n 's/^#\{0,1\}\([a-z_][a-z_0-9]*\) = .*/\1/p' "$conf")
    [ "$(echo "$keys" | wc -l)" -ge 10 ] || fail "$arch: agent.conf names only: $keys"
    for key in $keys; do
        grep -qx "${key//_/-}" <<<"$options" || fail "$arch: agent.conf names '$key', not an option"
    done
    rc=0
    out=$(run_agent "$arch" --config "$conf" 2>&1) || rc=$?
    if [ "$rc" -ne 2 ] || ! grep -q -- '--coordinator and --task are required' <<<"$out"; then
        fail "$arch: the packaged agent.conf: exit $rc: $out"
    fi
    cp "$conf" "$work/bad-$arch.conf"
    echo 'coordinatr = https://typo.example' >>"$work/bad-$arch.conf"
    rc=0
    out=$(run_agent "$arch" --config "$work/bad-$arch.conf" 2>&1) || rc=$?
    if [ "$rc" -ne 2 ] || ! grep -q 'coordinatr' <<<"$out"; then
        fail "$arch: a misspelt key in agent.conf was not refused: exit $rc: $out"
    fi
    ok "$arch: agent.conf: $(echo "$keys" | wc -l) keys, all options; the binary reads it (and refuses a misspelt key)"
}

for arch in "${arches[@]}"; do
    inspect "$arch" "${deb_of[$arch]}"
done

# ---- 6. one round for each packaged binary ------------------------------------------------
data=$work/data
"$python" - "$data" <<'EOF'
# A small Fashion-MNIST look-alike (IDX, gzip): ten classes of stripes.
import gzip, os, random, struct, sys
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = random.Random(7)
for prefix, n in (("train", 240), ("t10k", 60)):
    labels = bytes(i % 10 for i in range(n))
    pixels = bytearray()
    for c in labels:
        for y in range(28):
            for x in range(28):
                pixels.append(min(255, ((x * (c + 1) + y * (10 - c)) % 28) * 9 + rng.randrange(24)))
    with gzip.open(os.path.join(out, prefix + "-images-idx3-ubyte.gz"), "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 28, 28) + bytes(pixels))
    with gzip.open(os.path.join(out, prefix + "-labels-idx1-ubyte.gz"), "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + labels)
EOF

secrets=$work/secrets
mkdir -p "$secrets"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -keyout "$secrets/tls.key" -out "$secrets/tls.crt" -subj /CN=starling-test \
    -addext subjectAltName=IP:127.0.0.1,DNS:localhost >/dev/null 2>&1
# deploy/README.md's pin command
pin=sha256//$(openssl x509 -in "$secrets/tls.crt" -pubkey -noout | openssl pkey -pubin -outform DER |
    openssl dgst -sha256 -binary | openssl enc -base64)
wrong_pin=sha256//$(printf 'not the key' | openssl dgst -sha256 -binary | openssl enc -base64)
openssl rand -hex 32 >"$secrets/admin-token"
openssl rand -hex 32 >"$secrets/enrolment-token"
port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
url=https://127.0.0.1:$port

cpid=""
cleanup() {
    if [ -n "$cpid" ] && kill -0 "$cpid" 2>/dev/null; then
        kill -TERM "$cpid" 2>/dev/null || true
        wait "$cpid" 2>/dev/null || true
    fi
}
trap cleanup EXIT
env -i PATH=/usr/bin:/bin "$coordinator" --listen "127.0.0.1:$port" --data-dir "$work/coord" \
    --tls-cert "$secrets/tls.crt" --tls-key "$secrets/tls.key" \
    --admin-token-file "$secrets/admin-token" --enrolment-token-file "$secrets/enrolment-token" \
    >"$work/coordinator.log" 2>&1 &
cpid=$!
for _ in $(seq 100); do
    kill -0 "$cpid" 2>/dev/null || fail "the coordinator exited: $(tail -n 5 "$work/coordinator.log")"
    curl -fsS --cacert "$secrets/tls.crt" --max-time 5 "$url/healthz" >/dev/null 2>&1 && break
    sleep 0.2
done
curl -fsS --cacert "$secrets/tls.crt" --max-time 5 "$url/healthz" >/dev/null ||
    fail "no /healthz from the coordinator"
admin() { curl -fsS --cacert "$secrets/tls.crt" --max-time 20 -H "Authorization: Bearer $(cat "$secrets/admin-token")" "$url$1"; }
json() { "$python" -c 'import json, sys
d = json.load(sys.stdin)
for k in sys.argv[1:]:
    d = d[int(k)] if isinstance(d, list) else d[k]
print(d)' "$@"; }

cat >"$work/task.json" <<'EOF'
{"config": {"name": "agent-packages", "target": 1, "quorum": 1, "over_selection": 1,
            "selection_window_ms": 300, "report_deadline_ms": 300000,
            "local_epochs": 1, "batch": 32, "local_lr": 0.05},
 "init": {"model": "logreg", "seed": 1}}
EOF
env -i PATH=/usr/bin:/bin "$cli" task create "$work/task.json" --json --url "$url" \
    --token-file "$secrets/admin-token" --ca-file "$secrets/tls.crt" >"$work/task-created.json" ||
    fail "starling task create failed"
task=$(json task_id <"$work/task-created.json")
version=$(admin /v1/status | json tasks 0 model_version)
ok "coordinator on $url (self-signed certificate), task $task (logreg) at model version $version"

# agent ARCH NAME ARGS...: the packaged binary with the packaged agent.conf,
# pointed at this coordinator; exit status in $rc, output in $work/NAME.log
agent() {
    local arch=$1 name=$2
    shift 2
    rc=0
    # shellcheck disable=SC2086 # the emulator is a command and its options
    timeout 600 env -i PATH=/usr/bin:/bin ${emu_of[$arch]} "$work/root-$arch/usr/bin/starling-agent" \
        --config "$work/root-$arch/etc/starling/agent.conf" --coordinator "$url" --task "$task" \
        --state-dir "$work/state-$name" --data "$data" --max-wait 2s --retry-base 200ms \
        "$@" >"$work/$name.log" 2>&1 || rc=$?
}

# refusals first, with the host's binary: they must not enrol anything
first=${arches[0]}
agent "$first" wrong-pin --ca-file "$secrets/tls.crt" --pin "$wrong_pin" \
    --enrolment-token-file "$secrets/enrolment-token" --once
[ "$rc" -eq 3 ] || fail "a wrong --pin: exit $rc, expected 3: $(tail -n 3 "$work/wrong-pin.log")"
agent "$first" no-ca --enrolment-token-file "$secrets/enrolment-token" --once
[ "$rc" -eq 3 ] || fail "no --ca-file for a self-signed certificate: exit $rc, expected 3: $(tail -n 3 "$work/no-ca.log")"
if [ -e "$work/state-wrong-pin/device.id" ] || [ -e "$work/state-no-ca/device.id" ]; then
    fail "a refused coordinator enrolled the device"
fi
ok "$first: a wrong --pin and a missing --ca-file are refused (exit 3), nothing enrolled"
# what the unit hands over without /etc/starling/enrolment-token (SetCredential=)
placeholder=$(sed -n 's/^SetCredential=enrolment-token://p' "$work/root-$first/lib/systemd/system/starling-agent.service")
[ -n "$placeholder" ] || fail "the unit has no SetCredential=enrolment-token: placeholder"
printf '%s\n' "$placeholder" >"$work/placeholder-token"
agent "$first" placeholder --ca-file "$secrets/tls.crt" --enrolment-token-file "$work/placeholder-token" --once
if [ "$rc" -ne 3 ] || ! grep -q 'enrolment refused' "$work/placeholder.log"; then
    fail "the unit's placeholder token: exit $rc, expected 3 and 'enrolment refused': $(tail -n 3 "$work/placeholder.log")"
fi
ok "$first: the unit's placeholder token ('$placeholder') is refused at enrolment (exit 3)"

n=0
for arch in "${arches[@]}"; do
    trust=(--ca-file "$secrets/tls.crt")
    how="--ca-file"
    if [ $((n % 2)) -eq 1 ]; then
        trust+=(--pin "$pin")
        how="--ca-file and --pin"
    fi
    t0=$SECONDS
    agent "$arch" "round-$arch" "${trust[@]}" --enrolment-token-file "$secrets/enrolment-token" --once
    [ "$rc" -eq 0 ] || fail "$arch: the packaged agent exited $rc: $(tail -n 10 "$work/round-$arch.log")"
    grep -q ': 1 participations (1 accepted' "$work/round-$arch.log" ||
        fail "$arch: no accepted participation: $(tail -n 5 "$work/round-$arch.log")"
    [ -s "$work/state-round-$arch/device.id" ] || fail "$arch: no device.id in the state directory"
    new=""
    for _ in $(seq 100); do
        new=$(admin /v1/status | json tasks 0 model_version)
        [ "$new" -gt "$version" ] && break
        sleep 0.2
    done
    [ "$new" -eq $((version + 1)) ] || fail "$arch: model version $new after the round, not $((version + 1))"
    version=$new
    n=$((n + 1))
    ok "$arch: ${emu_of[$arch]:-natively}: enrolled ($how), one round, model version $version ($((SECONDS - t0)) s)"
done
# an enrolled device runs on with the placeholder: the token is not used again
agent "$first" "round-$first" --ca-file "$secrets/tls.crt" --enrolment-token-file "$work/placeholder-token" --once
[ "$rc" -eq 0 ] || fail "$first: an enrolled device with the placeholder token exited $rc: $(tail -n 5 "$work/round-$first.log")"
grep -q 'enrolled as' "$work/round-$first.log" && fail "$first: the enrolled device enrolled again"
for _ in $(seq 100); do
    new=$(admin /v1/status | json tasks 0 model_version)
    [ "$new" -gt "$version" ] && break
    sleep 0.2
done
[ "$new" -eq $((version + 1)) ] || fail "$first: model version $new after the second round, not $((version + 1))"
ok "$first: once enrolled, the device takes part with the placeholder token (model version $new)"
rounds=$(admin "/v1/rounds?task=$task&limit=100")
closed=$(printf '%s' "$rounds" | "$python" -c 'import json, sys
print(sum(1 for r in json.load(sys.stdin)["rounds"] if r["state"] == "closed" and r["reported"] == 1))')
[ "$closed" -eq $((${#arches[@]} + 1)) ] ||
    fail "$closed rounds closed with one report, expected $((${#arches[@]} + 1)): $rounds"
ok "the coordinator closed $closed rounds, one report each"

kill -TERM "$cpid"
crc=0
wait "$cpid" || crc=$?
cpid=""
[ "$crc" -eq 0 ] || fail "the coordinator exited $crc on SIGTERM"

printf '%d passed, 0 failed (%d s)\n' "$checks" $((SECONDS - start))
if [ "${#skipped[@]}" -gt 0 ]; then
    printf 'SKIPPED (not tested): %s\n' "${skipped[@]}"
    exit 77
fi
