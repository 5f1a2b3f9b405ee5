#!/usr/bin/env bash
# Instructions per request, counted by callgrind: hookhost, the reference receiver and
# bare axum, each run under valgrind and sent the same new 1 KiB Stripe events by
# `hookhost-bench --send-to`. A count does not move with the machine's speed, so two
# builds can be compared where timings swing by half (docs/performance.md, section 22).
#
#   cargo build --release -p hookhost -p hookhost-bench
#   bench/instructions.sh [hookhost|reference|ceiling ...]
#
# HOOKHOST names another `hookhost` binary to count (a copy of an earlier build, say),
# so that two builds can be compared.
#
# REQUESTS (default 4000) events are counted twice, after 1000 uncounted ones, over
# CONNECTIONS (default 16) connections; both counts are printed, and for hookhost the
# first count by thread. The callgrind files stay in the directory printed at the end,
# for `callgrind_annotate --inclusive=yes`.
#
# HOOKHOST_LIMIT, when set, makes the script a check: it fails if either of hookhost's
# counts is above that many instructions per request. CI runs it so, with the limit
# in .ci/run, so that a change which adds work to every request is seen where timings
# could not show it.
#
# Under valgrind, hookhost allocates plugin instances on demand (valgrind refuses the
# pool's address space), SHA-256 runs without the CPU's SHA instructions, and the
# kernel's work is not counted: section 22 says what that changes.
set -euo pipefail

cd "$(dirname "$0")/.."
requests=${REQUESTS:-4000}
connections=${CONNECTIONS:-16}
bin=target/release
hookhost=${HOOKHOST:-$bin/hookhost}
for tool in valgrind callgrind_control; do
    command -v "$tool" >/dev/null || { echo "instructions.sh: $tool not found" >&2; exit 1; }
done
for b in "$hookhost" "$bin/hookhost-bench"; do
    [ -x "$b" ] || { echo "instructions.sh: $b missing; cargo build --release -p hookhost -p hookhost-bench" >&2; exit 1; }
done
dir=$(mktemp -d "${TMPDIR:-/tmp}/hookhost-instructions-XXXXXX")
# The receiver under valgrind, if one runs: stopped whichever way the script ends.
running=
trap '[ -z "$running" ] || kill "$running" 2>/dev/null || true' EXIT
# The bench's own secret (bench/src/main.rs, SECRET): its events are signed with it.
printf '%s' 'whsec_hookhost_bench_0123456789abcdef' > "$dir/stripe.secret"

# The port a receiver bound, from its log: each is given port 0 and logs the address
# it got (hookhost "hookhost listening addr=127.0.0.1:PORT", the bench's receivers
# "listening on 127.0.0.1:PORT"), so no other program can take the port between
# choosing it and binding it.
bound_port() {
    [ -f "$1" ] || return 0
    sed -n -E 's/.*listening (addr=|on )127\.0\.0\.1:([0-9]+).*/\2/p' "$1" | head -n 1
}

send() {
    "$bin/hookhost-bench" --send-to "127.0.0.1:$1" --send-count "$2" \
        --send-connections "$connections" >>"$dir/$3.send.log"
}

# hookhost's count by thread, from a callgrind file: where a change between two builds
# landed.
parts() {
    callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null | awk -v n="$requests" '
        function cost(line) { sub(/^ */, "", line); sub(/ .*/, "", line); gsub(",", "", line); return line / n }
        /threads\.rs:hookhost::plugins::threads::work$|boxed\.rs:hookhost::plugins::threads::work$/ && !("p" in c) { c["p"] = cost($0) }
        /sha256\.rs:sha2::sha256::compress256 \[/ && !("s" in c) { c["s"] = cost($0) }
        /worker\.rs:tokio::runtime::scheduler::multi_thread::worker::Context::run \[/ && !("t" in c) { c["t"] = cost($0) }
        /writer\.rs:hookhost::store::writer::run$/ && !("w" in c) { c["w"] = cost($0) }
        END {
            printf "  plugin threads %.0f (SHA-256, portable code under valgrind: %.0f), tokio workers %.0f, writer %.0f\n", c["p"], c["s"], c["t"], c["w"]
        }'
}

measure() {
    local receiver=$1 port= command pid
    case $receiver in
        hookhost)
            printf 'listen = "127.0.0.1:0"\nstore = "%s/hookhost.db"\n\n[[endpoint]]\nid = "stripe"\nplugin = "stripe"\nsecrets = ["file:stripe.secret"]\n' \
                "$dir" >"$dir/hookhost.toml"
            command=("$hookhost" serve --config "$dir/hookhost.toml") ;;
        reference) command=("$bin/hookhost-bench" --serve-reference 127.0.0.1:0 --db "$dir/reference.db") ;;
        ceiling) command=("$bin/hookhost-bench" --serve-ceiling 127.0.0.1:0) ;;
        *) echo "instructions.sh: $receiver: hookhost, reference or ceiling" >&2; exit 2 ;;
    esac
    # Not instrumented until the warm-up is over: start-up runs at valgrind's plain speed.
    valgrind --tool=callgrind --instr-atstart=no \
        --callgrind-out-file="$dir/$receiver.callgrind.%p" \
        "${command[@]}" >"$dir/$receiver.log" 2>&1 &
    pid=$!
    running=$pid
    for _ in $(seq 600); do
        port=$(bound_port "$dir/$receiver.log")
        [ -n "$port" ] && break
        kill -0 "$pid" 2>/dev/null || { echo "instructions.sh: $receiver exited; see $dir/$receiver.log" >&2; exit 1; }
        sleep 1
    done
    [ -n "$port" ] || { echo "instructions.sh: $receiver did not listen in 600 s; see $dir/$receiver.log" >&2; kill "$pid"; exit 1; }
    send "$port" 1000 "$receiver"
    callgrind_control --instr=on "$pid" >/dev/null 2>&1
    callgrind_control --zero "$pid" >/dev/null 2>&1
    local counts=()
    for dump in 1 2; do
        send "$port" "$requests" "$receiver"
        callgrind_control --dump "$pid" >/dev/null 2>&1
        local file="$dir/$receiver.callgrind.$pid.$dump"
        for _ in $(seq 30); do grep -q '^totals:' "$file" 2>/dev/null && break; sleep 1; done
        counts+=("$(awk -v n="$requests" '/^totals:/ { printf "%.0f", $2 / n }' "$file")")
    done
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    running=
    # A dump taken with instrumentation off reads 0: a count that low counted nothing,
    # and would pass any limit.
    local count
    for count in "${counts[@]}"; do
        if [ -z "$count" ] || [ "$count" -lt 5000 ]; then
            echo "instructions.sh: $receiver counted ${count:-no} instructions per request: too few to have counted the requests (files in $dir)" >&2
            exit 1
        fi
    done
    printf '%-10s %8s requests × 2 over %s connections: %s and %s instructions per request\n' \
        "$receiver" "$requests" "$connections" "${counts[0]}" "${counts[1]}"
    if [ "$receiver" = hookhost ]; then
        parts "$dir/$receiver.callgrind.$pid.1"
        if [ -n "${HOOKHOST_LIMIT:-}" ]; then
            for count in "${counts[@]}"; do
                if [ "$count" -gt "$HOOKHOST_LIMIT" ]; then
                    echo "instructions.sh: hookhost ran $count instructions per request, above HOOKHOST_LIMIT=$HOOKHOST_LIMIT (files in $dir)" >&2
                    exit 1
                fi
            done
            echo "hookhost within HOOKHOST_LIMIT=$HOOKHOST_LIMIT instructions per request"
        fi
    fi
}

for receiver in "${@:-hookhost reference ceiling}"; do
    # shellcheck disable=SC2086 # the default is three words
    for r in $receiver; do measure "$r"; done
done
echo "callgrind files, logs and stores: $dir"
