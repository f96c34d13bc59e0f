#!/usr/bin/env bash
# `accel launch` (tools/launch/): the real tool starting real processes (small shell
# scripts written here) and what they saw, printed and left behind.
#   check_launch.sh ACCEL_TOOL PORT_HELPER CASE
# CASE: env, output, failure, restart, orphans, port, signal, usage, progress, report, cli, warm, and for --backend
# sim: sim_env, sim_usage, sim_report, sim_trace (sim_rank.sh, beside this script, plays the processes);
# with the examples built: prepare (TRAIN_DIGITS: the real example on simulated GPUs) and examples
# (EXAMPLES: every example binary, colon-separated).
# Every launch names its port (a free one), so the cases can run beside each other and
# beside other tests.
set -uo pipefail
accel=$1
ports=$2
case_name=$3
sim_rank="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/sim_rank.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

fail() { echo "FAIL [$case_name]: $*" >&2; failures=$((failures + 1)); }
ok() { echo "ok   [$case_name]: $*"; }
# has FILE LINE: FILE holds exactly this line
has() { grep -qxF -- "$2" "$1"; }
# contains FILE TEXT: FILE holds this text somewhere
contains() { grep -qF -- "$2" "$1"; }
show() { echo "--- $1:"; cat "$1"; echo "---"; }
now() { echo "${EPOCHREALTIME/,/.}"; }
seconds_since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
less_than() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }
free_port() { "$ports" free; }
# program NAME <<'EOF' ... EOF: an executable script in $tmp
program() { cat > "$tmp/$1"; chmod +x "$tmp/$1"; }

# Runs the launcher: stdout to $tmp/out, stderr to $tmp/err, exit status in $rc.
launch() {
  "$accel" launch "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
}

case_env() {
  program show.sh <<'EOF'
#!/bin/sh
echo "rank=$RANK local=$LOCAL_RANK world=$WORLD_SIZE lws=$LOCAL_WORLD_SIZE group=$GROUP_RANK addr=$MASTER_ADDR port=$MASTER_PORT backend=$ACCEL_BACKEND strategy=$ACCEL_STRATEGY mp=$ACCEL_MIXED_PRECISION offload=$ACCEL_OFFLOAD timeout=$ACCEL_TIMEOUT restart=$ACCEL_RESTART_COUNT te=$TORCHELASTIC_RESTART_COUNT args=$*"
EOF
  local port
  port=$(free_port)
  # stale launcher variables in the environment are replaced; options after PROGRAM are the program's
  RANK=7 WORLD_SIZE=9 MASTER_PORT=1 ACCEL_RESTART_COUNT=5 ACCEL_OFFLOAD=none \
    launch -n 3 --master-port "$port" --backend gloo --strategy ddp --mixed-precision bf16 --offload optimizer \
    --timeout 2.50 "$tmp/show.sh" --foo 3 -n x
  [ "$rc" = 0 ] || { fail "exit status $rc"; show "$tmp/err"; }
  for i in 0 1 2; do
    want="[$i] rank=$i local=$i world=3 lws=3 group=0 addr=127.0.0.1 port=$port backend=gloo strategy=ddp mp=bf16 offload=optimizer timeout=2.5 restart=0 te=0 args=--foo 3 -n x"
    has "$tmp/out" "$want" || { fail "no line '$want'"; show "$tmp/out"; }
  done
  [ "$(wc -l <"$tmp/out")" = 3 ] || { fail "not 3 lines on stdout"; show "$tmp/out"; }
  contains "$tmp/err" "accel launch: 3 processes (node 0 of 1), master 127.0.0.1:$port" || { fail "no start line"; show "$tmp/err"; }
  contains "$tmp/err" "accel launch: all 3 processes exited 0 in " || { fail "no end line"; show "$tmp/err"; }
  ok "3 processes on one node: RANK, LOCAL_RANK, WORLD_SIZE, ..., ACCEL_* (a stale ACCEL_OFFLOAD replaced by --offload) and the program's own options"

  # the second of two nodes (node 1 checks no port: node 0 hosts it); ACCEL_* not given are inherited
  ACCEL_STRATEGY=zero2 ACCEL_TIMEOUT=7 launch -n 2 --nnodes 2 --node-rank 1 --master-addr localhost "$tmp/show.sh"
  [ "$rc" = 0 ] || { fail "node 1: exit status $rc"; show "$tmp/err"; }
  for i in 0 1; do
    r=$((2 + i))
    want="[$r] rank=$r local=$i world=4 lws=2 group=1 addr=localhost port=29500 backend= strategy=zero2 mp= offload= timeout=7 restart=0 te=0 args="
    has "$tmp/out" "$want" || { fail "no line '$want'"; show "$tmp/out"; }
  done
  contains "$tmp/err" "2 processes (node 1 of 2, ranks 2..3 of 4), master localhost:29500" || { fail "node 1: start line"; show "$tmp/err"; }
  ok "--nnodes 2 --node-rank 1: ranks 2 and 3 of 4, the default port 29500, inherited ACCEL_*"
}

case_output() {
  program talk.sh <<'EOF'
#!/bin/sh
echo "out one $RANK"
echo "err one $RANK" >&2
echo "out two $RANK"
echo "" >&2
printf "out tail without newline $RANK"
EOF
  launch -n 2 --master-port 0 --log-dir "$tmp/logs/deeper" "$tmp/talk.sh"
  [ "$rc" = 0 ] || { fail "exit status $rc"; show "$tmp/err"; }
  for i in 0 1; do
    for line in "[$i] out one $i" "[$i] out two $i" "[$i] out tail without newline $i"; do
      has "$tmp/out" "$line" || { fail "stdout lacks '$line'"; show "$tmp/out"; }
    done
    has "$tmp/err" "[$i] err one $i" || { fail "stderr lacks '[$i] err one $i'"; show "$tmp/err"; }
    has "$tmp/err" "[$i]" || { fail "stderr lacks rank $i's empty line"; show "$tmp/err"; }
    # in order within a stream
    [ "$(grep -F "[$i] out" "$tmp/out" | tr '\n' '|')" = "[$i] out one $i|[$i] out two $i|[$i] out tail without newline $i|" ] ||
      { fail "rank $i's stdout lines out of order"; show "$tmp/out"; }
    # the log: the same lines, unprefixed, stdout and stderr together
    log="$tmp/logs/deeper/rank_$i.log"
    if [ -f "$log" ]; then
      want=$(printf '%s\n' "" "err one $i" "out one $i" "out tail without newline $i" "out two $i" | sort)
      [ "$(sort "$log")" = "$want" ] || { fail "$log is not the unprefixed lines"; show "$log"; }
    else
      fail "no $log"
    fi
  done
  if grep -q "err one" "$tmp/out" || grep -q "out one" "$tmp/err"; then fail "stdout and stderr mixed"; fi
  [ "$(grep -c '^\[' "$tmp/out")" = 6 ] || { fail "not 6 prefixed lines on stdout"; show "$tmp/out"; }
  ok "lines prefixed with the rank, stdout and stderr apart, partial last lines flushed, --log-dir files unprefixed"
}

case_failure() {
  # rank 1 fails after 0.5 s; the others sleep (rank 2 ignoring SIGTERM: SIGKILL after the grace period)
  program fail.sh <<'EOF'
#!/bin/bash
case "$RANK" in
  1) sleep 0.5; echo "on stdout, not in the report"; for i in $(seq 1 12); do echo "err line $i" >&2; done
     echo "loss is NaN at step 3" >&2; exit 3 ;;
  2) trap '' TERM; exec sleep 30 ;;
  *) exec sleep 30 ;;
esac
EOF
  local start elapsed
  start=$(now)
  launch -n 3 --master-port 0 --grace-period 1 "$tmp/fail.sh"
  elapsed=$(seconds_since "$start")
  [ "$rc" = 1 ] || fail "exit status $rc, not 1"
  contains "$tmp/err" "FAILED after" || fail "no failure report"
  grep -qE "FAILED after [0-9.]+ s: rank 1 \(pid [0-9]+\) exited with code 3$" "$tmp/err" || fail "the report does not name rank 1, its pid and code 3"
  contains "$tmp/err" "    loss is NaN at step 3" || fail "the report lacks rank 1's last stderr line"
  contains "$tmp/err" "    err line 4" || fail "the report lacks rank 1's 10th-last stderr line"
  if contains "$tmp/err" "    err line 3"; then fail "the report holds more than 10 lines"; fi
  grep -qE "rank 0 \(pid [0-9]+\): stopped by the launcher \(SIGTERM\)" "$tmp/err" || fail "rank 0 not reported stopped by SIGTERM"
  grep -qE "rank 2 \(pid [0-9]+\): killed by the launcher \(SIGKILL" "$tmp/err" || fail "rank 2 not reported killed after the grace period"
  # 0.5 s until the failure, 1 s of grace for rank 2; not the 30 s they would sleep (the upper
  # bound is far from both, so a loaded machine's slowness cannot decide it)
  less_than 1.4 "$elapsed" || fail "done in $elapsed s: rank 2 was not given its 1 s grace period"
  less_than "$elapsed" 20 || fail "took $elapsed s: the sleeping ranks were not stopped"
  [ "$failures" = 0 ] || show "$tmp/err"
  ok "rank 1 exits 3: exit 1 in $elapsed s, the report names it with its last stderr lines, the others stopped"

  program killed.sh <<'EOF'
#!/bin/bash
if [ "$RANK" = 1 ]; then sleep 0.3; echo "about to die" >&2; kill -KILL $$; fi
exec sleep 30
EOF
  start=$(now)
  launch -n 2 --master-port 0 "$tmp/killed.sh"
  elapsed=$(seconds_since "$start")
  [ "$rc" = 1 ] || fail "SIGKILL: exit status $rc, not 1"
  grep -qE "FAILED after [0-9.]+ s: rank 1 \(pid [0-9]+\) was killed by signal 9 \(SIGKILL\)$" "$tmp/err" || fail "SIGKILL not reported"
  contains "$tmp/err" "    about to die" || fail "SIGKILL: the report lacks the last stderr line"
  less_than "$elapsed" 20 || fail "SIGKILL: took $elapsed s: the rank sleeping 30 s was not stopped"
  [ "$failures" = 0 ] || show "$tmp/err"
  ok "a rank killed by SIGKILL is reported with the signal's name"

  # ACCEL_LAUNCH_STATUS_DIR: each rank's end, written as the launcher reaps it, where its peers
  # read it (comm/guard.h names a peer that ended with it): rank 0, stopped by the launcher,
  # prints what it finds there for rank 1
  program ends.sh <<'EOF'
#!/bin/bash
if [ "$RANK" = 1 ]; then sleep 0.3; exit 3; fi
trap 'echo "status dir: $ACCEL_LAUNCH_STATUS_DIR"; cat "$ACCEL_LAUNCH_STATUS_DIR/rank-1"; exit 0' TERM
for i in $(seq 1 300); do sleep 0.1; done
EOF
  launch -n 2 --master-port 0 "$tmp/ends.sh"
  [ "$rc" = 1 ] || fail "ends: exit status $rc, not 1"
  has "$tmp/out" "[0] exited with code 3" || { fail "rank 0 did not find rank 1's end in ACCEL_LAUNCH_STATUS_DIR"; show "$tmp/out"; }
  dir=$(sed -n 's/^\[0\] status dir: //p' "$tmp/out")
  [ -n "$dir" ] && [ ! -e "$dir" ] || fail "the status directory '$dir' is left behind"
  ok "ACCEL_LAUNCH_STATUS_DIR: rank 1's end ('exited with code 3') is there for its peers; removed at the end"
}

case_restart() {
  program flaky.sh <<'EOF'
#!/bin/sh
echo "attempt $ACCEL_RESTART_COUNT/$TORCHELASTIC_RESTART_COUNT rank $RANK"
if [ "$RANK" = 1 ] && [ "$ACCEL_RESTART_COUNT" = 0 ]; then echo "first attempt fails" >&2; exit 5; fi
sleep 0.2
EOF
  launch -n 2 --master-port 0 --max-restarts 1 --log-dir "$tmp/logs" "$tmp/flaky.sh"
  [ "$rc" = 0 ] || fail "exit status $rc, not 0"
  contains "$tmp/err" "accel launch: rank 1 failed (exited with code 5); restarting the group (attempt 1 of 1)" || fail "no restart line"
  contains "$tmp/err" "all 2 processes exited 0 in " || fail "no success line"
  contains "$tmp/err" "(after 1 restart)" || fail "the success line does not count the restart"
  has "$tmp/out" "[0] attempt 1/1 rank 0" || fail "rank 0 did not run again with ACCEL_RESTART_COUNT=1"
  has "$tmp/out" "[1] attempt 1/1 rank 1" || fail "rank 1 did not run again with ACCEL_RESTART_COUNT=1"
  log=$tmp/logs/rank_1.log
  [ "$(tr '\n' '|' <"$log")" = "attempt 0/0 rank 1|first attempt fails|=== accel launch: restart 1 of 1 (ACCEL_RESTART_COUNT=1) ===|attempt 1/1 rank 1|" ] ||
    { fail "rank_1.log is not both attempts with a marker"; show "$log"; }
  [ "$failures" = 0 ] || { show "$tmp/out"; show "$tmp/err"; }
  ok "--max-restarts 1, a rank that fails on the first attempt only: exit 0, restarted with ACCEL_RESTART_COUNT=1, logs appended"

  program always.sh <<'EOF'
#!/bin/sh
echo "attempt $ACCEL_RESTART_COUNT rank $RANK"
if [ "$RANK" = 0 ]; then echo "always fails" >&2; exit 4; fi
exec sleep 30
EOF
  launch -n 2 --master-port 0 --max-restarts 1 "$tmp/always.sh"
  [ "$rc" = 1 ] || fail "always failing: exit status $rc, not 1"
  [ "$(grep -c "restarting the group" "$tmp/err")" = 1 ] || fail "not exactly 1 restart"
  grep -qE "FAILED after [0-9.]+ s \(after 1 restart\): rank 0 \(pid [0-9]+\) exited with code 4$" "$tmp/err" || fail "no final report after 1 restart"
  [ "$(grep -c "^\[0\] attempt" "$tmp/out")" = 2 ] || fail "rank 0 did not run exactly twice"
  [ "$failures" = 0 ] || { show "$tmp/out"; show "$tmp/err"; }
  ok "--max-restarts 1, a rank that always fails: exit 1 after 1 restart"
}

# What a rank leaves running when it ends (a shell's background job, and that job's own
# child) is stopped when its attempt ends: nothing it started writes after the launcher has
# moved on (the next attempt, or the launcher's own end).
case_orphans() {
  program leaves.sh <<'EOF'
#!/bin/bash
# rank 0 leaves a job that would write a file in 30 s, with a child of its own that would too;
# each writes its pid first, in a file of this attempt (with one file for both, the second
# attempt's rank 0 could find the first's and end before its own job wrote: the job, killed
# between truncating the file and writing it, left it empty)
if [ "$RANK" = 0 ]; then
  a=$ACCEL_RESTART_COUNT
  ( (A=$a sh -c 'echo $$ > "$MARK.pid.grandchild.$A"; exec sleep 30'; echo grandchild > "$MARK.grandchild") &
    echo $BASHPID > "$MARK.pid.child.$a"; sleep 30; echo child > "$MARK.child" ) &
  for _ in $(seq 1 100); do [ -s "$MARK.pid.child.$a" ] && [ -s "$MARK.pid.grandchild.$a" ] && break; sleep 0.02; done
fi
echo "rank $RANK ends; restart $ACCEL_RESTART_COUNT"
[ "$RANK" = 1 ] && [ "$ACCEL_RESTART_COUNT" = 0 ] && exit 3
exit 0
EOF
  local start
  start=$(now)
  MARK=$tmp/late launch -n 2 --master-port 0 --max-restarts 1 "$tmp/leaves.sh"
  local took
  took=$(seconds_since "$start")
  [ "$rc" = 0 ] || fail "exit status $rc, not 0"
  has "$tmp/out" "[0] rank 0 ends; restart 1" || fail "no second attempt"
  # the jobs would run 30 s: a launcher that waited for them takes that long (the bound is far
  # from it and from the launcher's own second or two, so a loaded machine cannot decide it)
  less_than "$took" 20 || fail "the launcher took $took s: it waited for the jobs instead of stopping them"
  # the last attempt's jobs started (its rank 0 waited for them); the first attempt's may not
  # have (rank 1's failure can end that attempt first); every one that did is gone
  for who in child grandchild; do
    [ -s "$tmp/late.pid.$who.1" ] || fail "the rank's $who did not start"
    for f in "$tmp/late.pid.$who".*; do
      [ -s "$f" ] || continue
      pid=$(cat "$f" 2>/dev/null || echo 0)
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done  # reaped within 5 s
      kill -0 "$pid" 2>/dev/null && fail "the rank's $who (pid $pid, $(basename "$f")) still runs after the launcher ended"
    done
  done
  for f in "$tmp"/late.child "$tmp"/late.grandchild; do [ -e "$f" ] && fail "a job the ranks left wrote $(basename "$f") after the launcher ended"; done
  [ "$failures" = 0 ] || { show "$tmp/out"; show "$tmp/err"; }
  ok "the jobs a rank leaves running are stopped at the end of its attempt: none writes afterwards ($took s)"
}

case_port() {
  program port.sh <<'EOF'
#!/bin/sh
echo "port=$MASTER_PORT"
EOF
  launch -n 2 --master-port 0 "$tmp/port.sh"
  [ "$rc" = 0 ] || { fail "--master-port 0: exit status $rc"; show "$tmp/err"; }
  port=$(sed -n 's/^\[0\] port=//p' "$tmp/out")
  has "$tmp/out" "[1] port=$port" || fail "the ranks saw different ports"
  { [ -n "$port" ] && [ "$port" != 29500 ] && [ "$port" -gt 0 ]; } || fail "--master-port 0 gave port '$port'"
  "$ports" bindable "$port" || fail "the free port $port cannot be bound"
  contains "$tmp/err" "master 127.0.0.1:$port" || fail "the start line does not name port $port"
  ok "--master-port 0: the processes get free port $port (not 29500), bindable"

  program marker.sh <<EOF
#!/bin/sh
touch "$tmp/started"
EOF
  # shellcheck disable=SC2016
  "$ports" hold 0 sh -c '"$1" launch -n 2 --master-port "$HELD_PORT" "$2" >"$3/out" 2>"$3/err"; echo $? >"$3/rc"; echo "$HELD_PORT" >"$3/held"' \
    sh "$accel" "$tmp/marker.sh" "$tmp"
  held=$(cat "$tmp/held")
  [ "$(cat "$tmp/rc")" = 2 ] || fail "busy port: exit status $(cat "$tmp/rc"), not 2"
  has "$tmp/err" "accel launch: port $held on 127.0.0.1 is in use (another run?); pick another with --master-port or 0 for a free one" ||
    { fail "busy port: no clear error"; show "$tmp/err"; }
  [ ! -e "$tmp/started" ] || fail "busy port: processes were started"
  if contains "$tmp/err" "processes (node"; then fail "busy port: the start line was printed"; fi
  ok "a port another socket listens on: a clear error, exit 2, nothing started"

  # a port left in TIME_WAIT by a finished run is no obstacle (the rendezvous server binds with SO_REUSEADDR)
  # shellcheck disable=SC2016
  "$ports" timewait sh -c '"$1" launch -n 1 --master-port "$HELD_PORT" "$2" >"$3/out" 2>"$3/err"' sh "$accel" "$tmp/port.sh" "$tmp"
  twrc=$?
  [ "$twrc" = 0 ] || { fail "a port in TIME_WAIT: exit status $twrc"; show "$tmp/err"; }
  ok "a port in TIME_WAIT (the previous run's) is accepted"
}

case_signal() {
  program trap.sh <<EOF
#!/bin/bash
sleep 30 & pid=\$!
trap 'kill \$pid; echo "rank \$RANK got TERM"; touch "$tmp/term.\$RANK"; exit 0' TERM
echo ready
wait \$pid
EOF
  "$accel" launch -n 2 --master-port 0 "$tmp/trap.sh" >"$tmp/out" 2>"$tmp/err" &
  launcher=$!
  for _ in $(seq 1 200); do
    [ "$(grep -c ready "$tmp/out")" = 2 ] && break
    sleep 0.05
  done
  [ "$(grep -c ready "$tmp/out")" = 2 ] || fail "the processes did not start within 10 s"
  start=$(now)
  kill -TERM "$launcher"
  wait "$launcher"
  rc=$?
  elapsed=$(seconds_since "$start")
  [ "$rc" = 143 ] || fail "exit status $rc, not 143"
  for i in 0 1; do
    [ -e "$tmp/term.$i" ] || fail "rank $i did not get SIGTERM"
    has "$tmp/out" "[$i] rank $i got TERM" || fail "rank $i's last words are missing"
  done
  contains "$tmp/err" "interrupted by SIGTERM" || fail "no interruption report"
  less_than "$elapsed" 20 || fail "took $elapsed s to stop"  # the processes would wait forever
  [ "$failures" = 0 ] || { show "$tmp/out"; show "$tmp/err"; }
  ok "SIGTERM to the launcher reaches every process; exit 143"

  # SIGINT, to processes that ignore it: SIGKILL after the grace period, exit 130 (a background
  # job of a script starts with SIGINT ignored, which the launcher would keep: env restores it)
  program stubborn.sh <<EOF
#!/bin/sh
echo \$\$ > "$tmp/pid.\$RANK"
trap '' INT
exec sleep 30
EOF
  env --default-signal=INT "$accel" launch -n 2 --master-port 0 --grace-period 0.5 "$tmp/stubborn.sh" >"$tmp/out" 2>"$tmp/err" &
  launcher=$!
  for _ in $(seq 1 200); do
    [ -e "$tmp/pid.0" ] && [ -e "$tmp/pid.1" ] && break
    sleep 0.05
  done
  sleep 0.2
  kill -INT "$launcher"
  wait "$launcher"
  rc=$?
  [ "$rc" = 130 ] || fail "SIGINT: exit status $rc, not 130"
  has "$tmp/err" "    ranks 0-1: killed by the launcher (SIGKILL, still running after the 0.5 s grace period)" ||
    { fail "SIGINT: not both killed after the grace period (one line for both)"; show "$tmp/err"; }
  ok "SIGINT to the launcher, ignored by the processes: SIGKILL after the grace period; exit 130"

  # a second signal: SIGKILL at once to the processes and to what they started, whatever the
  # grace period (10 s here: the bound below, 5 s, is half of it, and far from the launcher's own
  # fraction of a second, so a loaded machine cannot decide it)
  rm -f "$tmp"/pid.* "$tmp"/gpid.*
  program deaf.sh <<EOF
#!/bin/bash
# a job that ignores SIGTERM; the rank itself ignores it too (rank 0, unless ALL_END is set),
# or ends on it and leaves the job orphaned
(trap '' TERM; exec sleep 30) & echo \$! > "$tmp/gpid.\$RANK"
if [ "\$RANK" = 0 ] && [ -z "\${ALL_END:-}" ]; then trap '' TERM; else trap 'exit 0' TERM; fi
echo \$\$ > "$tmp/pid.\$RANK"
while :; do sleep 0.1; done
EOF
  # second_signal: SIGTERM, and a second one once the launcher has forwarded the first; sets $rc, $elapsed
  second_signal() {
    rm -f "$tmp"/pid.* "$tmp"/gpid.*
    "$accel" launch -n 2 --master-port 0 --grace-period 10 "$tmp/deaf.sh" >"$tmp/out" 2>"$tmp/err" &
    launcher=$!
    for _ in $(seq 1 200); do
      [ -s "$tmp/pid.0" ] && [ -s "$tmp/pid.1" ] && [ -s "$tmp/gpid.0" ] && [ -s "$tmp/gpid.1" ] && break
      sleep 0.05
    done
    start=$(now)
    kill -TERM "$launcher"
    for _ in $(seq 1 200); do contains "$tmp/err" "received SIGTERM; forwarding" && break; sleep 0.02; done
    sleep 0.5
    kill -TERM "$launcher"
    wait "$launcher"
    rc=$?
    elapsed=$(seconds_since "$start")
  }
  # gone NAME...: the processes whose pids are in $tmp/NAME have ended (within a second)
  gone() {
    local who pid
    for who in "$@"; do
      pid=$(cat "$tmp/$who")
      for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
      if kill -0 "$pid" 2>/dev/null; then fail "$who (pid $pid) still runs"; kill -KILL "$pid"; fi
    done
  }
  second_signal
  [ "$rc" = 143 ] || fail "second signal: exit status $rc, not 143"
  less_than "$elapsed" 5 || fail "second signal: took $elapsed s (the grace period is 10 s): not killed at once"
  has "$tmp/err" "accel launch: received a second signal (SIGTERM): SIGKILL to the processes and everything they started" ||
    fail "second signal: no line saying so"
  grep -qE "^    rank 0 \(pid [0-9]+\): killed by the launcher \(SIGKILL, at a second SIGTERM to the launcher\)$" "$tmp/err" ||
    fail "second signal: rank 0's kill reason is not the second signal"
  grep -qE "^    rank 1 \(pid [0-9]+\): exited 0 after the launcher's SIGTERM$" "$tmp/err" || fail "second signal: rank 1 not reported exiting on SIGTERM"
  if contains "$tmp/err" "grace period"; then fail "second signal: the report speaks of a grace period that never ended"; fi
  gone pid.0 gpid.0 gpid.1
  [ "$failures" = 0 ] || show "$tmp/err"
  ok "a second SIGTERM: SIGKILL at once to the ranks and their jobs ($elapsed s, grace period 10 s); the report says why"

  # the second signal while the launcher gives the ranks' orphaned jobs (which ignore SIGTERM)
  # their grace period: every rank ended on the first
  ALL_END=1 second_signal
  [ "$rc" = 143 ] || fail "orphans, second signal: exit status $rc, not 143"
  less_than "$elapsed" 5 || fail "orphans, second signal: took $elapsed s (the grace period is 10 s): the jobs were not killed at once"
  contains "$tmp/err" "the ranks left running, with SIGKILL at the second signal" || fail "orphans, second signal: no line saying the jobs were killed"
  gone gpid.0 gpid.1
  [ "$failures" = 0 ] || show "$tmp/err"
  ok "a second SIGTERM while the ranks' orphaned jobs have their grace period: SIGKILL at once ($elapsed s)"

  # a launcher killed by SIGKILL leaves no orphans (PR_SET_PDEATHSIG)
  rm -f "$tmp"/pid.*
  program orphan.sh <<EOF
#!/bin/sh
echo \$\$ > "$tmp/pid.\$RANK"
exec sleep 30
EOF
  "$accel" launch -n 2 --master-port 0 "$tmp/orphan.sh" >"$tmp/out" 2>"$tmp/err" &
  launcher=$!
  for _ in $(seq 1 200); do
    [ -e "$tmp/pid.0" ] && [ -e "$tmp/pid.1" ] && break
    sleep 0.05
  done
  kill -KILL "$launcher"
  wait "$launcher" 2>/dev/null
  for i in 0 1; do
    pid=$(cat "$tmp/pid.$i")
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    if kill -0 "$pid" 2>/dev/null; then fail "rank $i (pid $pid) outlived the killed launcher"; kill -KILL "$pid"; fi
  done
  ok "a launcher killed by SIGKILL takes its processes with it"
}

case_usage() {
  program marker.sh <<EOF
#!/bin/sh
touch "$tmp/started"
EOF
  printf '#!/bin/sh\n' >"$tmp/not_executable.sh"
  # expect STATUS TEXT ARGS...: accel launch ARGS exits STATUS, says TEXT on stderr, starts nothing
  expect() {
    local want_rc=$1 text=$2
    shift 2
    launch "$@"
    [ "$rc" = "$want_rc" ] || fail "accel launch $*: exit status $rc, not $want_rc"
    contains "$tmp/err" "$text" || { fail "accel launch $*: no '$text'"; show "$tmp/err"; }
    [ ! -e "$tmp/started" ] || { fail "accel launch $*: a process was started"; rm -f "$tmp/started"; }
  }
  expect 2 "accel launch: cannot run '$tmp/no-such-program': No such file or directory" -n 2 "$tmp/no-such-program"
  expect 2 "accel launch: cannot run 'no-such-program-in-path': no such program in PATH" -n 2 no-such-program-in-path
  expect 2 "is not executable" -n 1 "$tmp/not_executable.sh"
  expect 2 "-n/--nproc-per-node must be at least 1 (got 0)" -n 0 "$tmp/marker.sh"
  expect 2 "--node-rank 2 is outside 0..1 (--nnodes 2)" -n 1 --nnodes 2 --node-rank 2 "$tmp/marker.sh"
  expect 2 "--nnodes must be at least 1 (got 0)" -n 1 --nnodes 0 "$tmp/marker.sh"
  expect 2 "--master-port 70000 is outside 0..65535" -n 1 --master-port 70000 "$tmp/marker.sh"
  expect 2 "--master-port 0 (a free port) needs --nnodes 1" -n 1 --nnodes 2 --master-port 0 "$tmp/marker.sh"
  expect 2 "--timeout must be a positive, finite number of seconds (got '0')" -n 1 --timeout 0 "$tmp/marker.sh"
  expect 2 "--timeout must be a positive, finite number of seconds (got 'nan')" -n 1 --timeout nan "$tmp/marker.sh"
  expect 2 "--max-restarts must be at least 0 (got -1)" -n 1 --max-restarts -1 "$tmp/marker.sh"
  expect 2 "unknown option --bogus" -n 1 --bogus "$tmp/marker.sh"
  expect 2 "no program given" -n 1 --master-port 0
  expect 2 "--strategy 'zero4' is not one of no, ddp, zero1, zero2, zero3" -n 2 --strategy zero4 "$tmp/marker.sh"
  expect 2 "--backend 'ncl' is not one of auto, gloo, nccl, sim" -n 2 --backend ncl "$tmp/marker.sh"
  expect 2 "--mixed-precision 'fp8' is not one of no, bf16, fp16, auto" -n 2 --mixed-precision fp8 "$tmp/marker.sh"
  expect 2 "--offload 'nvme' is not one of none, optimizer, parameters" -n 2 --offload nvme "$tmp/marker.sh"
  # CLI11's own errors: the tool's status for a usage error, 2
  expect 2 "Could not convert" -n abc "$tmp/marker.sh"
  expect 2 "--nproc-per-node is required" "$tmp/marker.sh"
  if contains "$tmp/err" "processes (node"; then fail "a usage error printed the start line"; fi
  ok "bad options and programs: clear errors naming the option, exit 2, nothing started"
  for args in "--strategy ZeRO3 --backend GLOO --mixed-precision BF16" "--strategy full_shard" "--strategy no --backend auto"; do
    # shellcheck disable=SC2086
    launch -n 1 --master-port 0 $args "$tmp/marker.sh"
    { [ "$rc" = 0 ] && [ -e "$tmp/started" ]; } || { fail "$args: did not run"; show "$tmp/err"; }
    rm -f "$tmp/started"
  done
  ok "--strategy, --backend, --mixed-precision: the runtime's names, in any case, run"
  # `--` before PROGRAM is allowed
  launch -n 1 --master-port 0 -- "$tmp/marker.sh"
  { [ "$rc" = 0 ] && [ -e "$tmp/started" ]; } || { fail "'-- PROGRAM' did not run"; show "$tmp/err"; }
  ok "'accel launch -n 1 -- PROGRAM' runs it"
}

# ---- --backend sim (docs/launch.md, "Simulated GPUs"): sim_rank.sh plays the processes ----

# sim_block FILE: the simulation's report in the launcher's stderr FILE (from its header on)
sim_block() { sed -n '/^accel launch: simulated [^G]/,$p' "$1"; }
# py FILE... <<'EOF' ... EOF: assertions in python3 on the files (sys.argv[1:])
py() { python3 - "$@" || fail "python3 assertions failed on $*"; }

case_sim_env() {
  mkdir -p "$tmp/tmpdir"
  # stale ACCEL_SIM_* in the launcher's environment are replaced by the flags' (or left out)
  ACCEL_SIM_GPU_MEM=1GiB ACCEL_SIM_FAULTS=junk ACCEL_SIM_TRACE=0 ACCEL_SIM_OUT=/nowhere TMPDIR="$tmp/tmpdir" \
    launch -n 3 --master-port 0 --backend sim --sim-gpu-mem 80GiB --sim-topology 8xA100 \
    --sim-faults delay:1:0.5,kill:2@step:7 --sim-trace "$tmp/t.json" --sim-report "$tmp/r.json" "$sim_rank"
  [ "$rc" = 0 ] || { fail "exit status $rc"; show "$tmp/err"; }
  out=$(sed -n 's/^\[0\] .* out=//p' "$tmp/out")
  case "$out" in "$tmp/tmpdir/accel-sim-"?*) ;; *) fail "ACCEL_SIM_OUT '$out' is not a fresh directory in \$TMPDIR" ;; esac
  for i in 0 1 2; do
    want="[$i] rank=$i backend=sim mem=80GiB topology=8xA100 trace=1 faults=delay:1:0.5,kill:2@step:7 restart=0 "
    grep -qF -- "$want" "$tmp/out" || { fail "no line '$want...'"; show "$tmp/out"; }
    grep -F -- "[$i] " "$tmp/out" | grep -qE " out=$out\$" || fail "rank $i got another ACCEL_SIM_OUT"
  done
  [ -z "$(ls -A "$tmp/tmpdir")" ] || { fail "the temporary output directory was not removed"; ls -lA "$tmp/tmpdir"; }
  contains "$tmp/err" "accel launch: simulated GPUs: 8xA100: 3 processes, 80.00 GiB of memory per GPU, faults delay:1:0.5,kill:2@step:7; the processes write to $out" ||
    { fail "no start line for the simulation"; show "$tmp/err"; }
  ok "--backend sim and every --sim-* flag reach the processes (ACCEL_BACKEND=sim, ACCEL_SIM_*), in a fresh ACCEL_SIM_OUT removed at the end"

  ACCEL_SIM_GPU_MEM=1GiB ACCEL_SIM_FAULTS=junk ACCEL_SIM_TRACE=1 ACCEL_SIM_TOPOLOGY=8xPCIe TMPDIR="$tmp/tmpdir" \
    launch -n 2 --master-port 0 --backend SIM "$sim_rank"
  [ "$rc" = 0 ] || { fail "defaults: exit status $rc"; show "$tmp/err"; }
  for i in 0 1; do
    grep -qF "[$i] rank=$i backend=sim mem= topology=8xH100 trace= faults= restart=0 " "$tmp/out" ||
      { fail "defaults: rank $i"; show "$tmp/out"; }
  done
  ok "without the flags: ACCEL_SIM_TOPOLOGY=8xH100, no ACCEL_SIM_GPU_MEM/TRACE/FAULTS (inherited ones removed); --backend SIM is sim"

  # other backends: nothing of the simulation; ACCEL_SIM_* inherited pass through as before
  ACCEL_SIM_OUT=/inherited ACCEL_SIM_GPU_MEM=2GiB launch -n 1 --master-port 0 --backend gloo "$sim_rank"
  has "$tmp/out" "[0] rank=0 backend=gloo mem=2GiB topology= trace= faults= restart=0 stale=0 out=/inherited" ||
    { fail "--backend gloo touched ACCEL_SIM_*"; show "$tmp/out"; }
  if contains "$tmp/err" "simulated"; then fail "--backend gloo printed a simulation report"; show "$tmp/err"; fi
  ok "--backend gloo: no simulation; ACCEL_SIM_* of the environment pass through"

  # --log-dir: ACCEL_SIM_OUT is LOG_DIR/sim, emptied at the start (a file of an earlier run goes) and kept
  mkdir -p "$tmp/logs/sim" && touch "$tmp/logs/sim/rank-7.json"
  launch -n 2 --master-port 0 --backend sim --log-dir "$tmp/logs" "$sim_rank"
  [ "$rc" = 0 ] || { fail "--log-dir: exit status $rc"; show "$tmp/err"; }
  grep -F "[0] " "$tmp/out" | grep -qE " out=$tmp/logs/sim\$" || { fail "--log-dir: ACCEL_SIM_OUT is not $tmp/logs/sim"; show "$tmp/out"; }
  { [ -f "$tmp/logs/sim/rank-0.json" ] && [ -f "$tmp/logs/sim/rank-1.json" ]; } || fail "--log-dir: $tmp/logs/sim/rank-*.json not kept"
  [ ! -e "$tmp/logs/sim/rank-7.json" ] || fail "--log-dir: $tmp/logs/sim was not emptied first"
  ok "--log-dir DIR: ACCEL_SIM_OUT is DIR/sim, emptied at the start, kept at the end"

  # restarts: the directory is emptied before each attempt; the report covers the last one
  FAKE_SIM_FAIL_FIRST=1 TMPDIR="$tmp/tmpdir" launch -n 2 --master-port 0 --backend sim --max-restarts 2 \
    --sim-report "$tmp/r.json" "$sim_rank"
  [ "$rc" = 0 ] || { fail "restart: exit status $rc"; show "$tmp/err"; }
  for i in 0 1; do
    grep -qF "[$i] rank=$i backend=sim mem= topology=8xH100 trace= faults= restart=1 stale=0 " "$tmp/out" ||
      { fail "restart: rank $i did not start again in an empty directory"; show "$tmp/out"; }
  done
  has "$tmp/err" "accel launch: simulated 8xH100: 2 processes, 79.15 GiB of memory per GPU (after 1 restart)" ||
    { fail "restart: the report's header does not count the restart"; show "$tmp/err"; }
  [ "$(sim_block "$tmp/err" | grep -c '  ok$')" = 2 ] || { fail "restart: not 2 ok rows (the last attempt)"; show "$tmp/err"; }
  py "$tmp/r.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["restarts"] == 1 and r["outcome"] == "ok", r
assert [x["status"] for x in r["ranks"]] == ["ok", "ok"], r
EOF
  ok "--max-restarts: ACCEL_SIM_OUT emptied before the restart; the report covers the last attempt and says 1 restart"
}

case_sim_usage() {
  mkdir -p "$tmp/tmpdir"
  program marker.sh <<EOF
#!/bin/sh
touch "$tmp/started"
EOF
  # expect TEXT ARGS...: accel launch ARGS exits 2, says TEXT on stderr, starts nothing, makes no directory
  expect() {
    local text=$1
    shift
    TMPDIR="$tmp/tmpdir" launch "$@"
    [ "$rc" = 2 ] || fail "accel launch $*: exit status $rc, not 2"
    contains "$tmp/err" "$text" || { fail "accel launch $*: no '$text'"; show "$tmp/err"; }
    [ ! -e "$tmp/started" ] || { fail "accel launch $*: a process was started"; rm -f "$tmp/started"; }
    [ -z "$(ls -A "$tmp/tmpdir")" ] || { fail "accel launch $*: a directory was made"; rm -rf "${tmp:?}/tmpdir/"*; }
  }
  local m=$tmp/marker.sh
  expect "accel launch: --sim-gpu-mem '12XB' has an unknown unit 'XB'" -n 2 --backend sim --sim-gpu-mem 12XB "$m"
  expect "--sim-gpu-mem 'lots' is not a size" -n 2 --backend sim --sim-gpu-mem lots "$m"
  expect "--sim-gpu-mem '0GiB' is zero" -n 2 --backend sim --sim-gpu-mem 0GiB "$m"
  expect "--sim-topology: unknown topology '8xV100'; presets: 8xH100 8xA100 8xPCIe Nx8xH100-IB" \
    -n 2 --backend sim --sim-topology 8xV100 "$m"
  expect "-n/--nproc-per-node times --nnodes must be in [1, 8] (the GPUs of --sim-topology '8xH100'; e.g. \"4x8xH100-IB\" has 32), got 9" \
    -n 9 --backend sim "$m"
  expect "must be in [1, 16] (the GPUs of --sim-topology '2x8xH100-IB'; e.g. \"4x8xH100-IB\" has 32), got 17" \
    -n 17 --backend sim --sim-topology 2x8xH100-IB "$m"
  expect "--sim-faults: 'kill:9@step:1' names rank 9 of a 8-rank world" -n 8 --backend sim --sim-faults delay:0:1,kill:9@step:1 "$m"
  expect "--sim-faults: cannot read 'explode:1'" -n 8 --backend sim --sim-faults explode:1 "$m"
  # the grammar (docs/simulator.md, "Faults"): spaces after a comma are fine, an empty item is not
  expect "--sim-faults: 'kill:0@collective:1,,': item 2 is empty (two commas in a row, or a comma at an end)" \
    -n 2 --backend sim --sim-faults "kill:0@collective:1,," "$m"
  expect "--sim-faults: 'delay:0:1, ,kill:1@step:2': item 2 is empty" -n 2 --backend sim --sim-faults "delay:0:1, ,kill:1@step:2" "$m"
  expect "--sim-faults: ',delay:0:1': item 1 is empty" -n 2 --backend sim --sim-faults ",delay:0:1" "$m"
  expect "--sim-faults: cannot read 'kill: 1@step:2'" -n 2 --backend sim --sim-faults "kill: 1@step:2" "$m"
  expect "--sim-faults: 'delay:0:-1': SECONDS must be finite and >= 0, got -1" -n 2 --backend sim --sim-faults "delay:0:-1" "$m"
  expect "--sim-faults: cannot read 'delay:0: 1'" -n 2 --backend sim --sim-faults "delay:0: 1" "$m"
  expect "--sim-faults: 'kill:1@stpe:2': kill at 'collective' or 'step'" -n 2 --backend sim --sim-faults "kill:1@stpe:2" "$m"
  expect "--sim-faults: 'kill:1@collective:0': K must be >= 1" -n 2 --backend sim --sim-faults "kill:1@collective:0" "$m"
  expect "--backend sim runs on one node only" -n 2 --nnodes 2 --backend sim "$m"
  expect "--nnodes 2 is not supported" -n 2 --nnodes 2 --node-rank 1 --backend sim "$m"
  expect "--sim-report $tmp/nodir/r.json: the directory $tmp/nodir does not exist" -n 2 --backend sim --sim-report "$tmp/nodir/r.json" "$m"
  expect "--sim-trace $tmp is a directory" -n 2 --backend sim --sim-trace "$tmp" "$m"
  expect "--sim-topology: the value is empty" -n 2 --backend sim --sim-topology "" "$m"
  for flag in --sim-gpu-mem=1GiB --sim-topology=8xH100 --sim-trace="$tmp/t.json" --sim-faults=delay:0:1 --sim-report="$tmp/r.json"; do
    expect "${flag%%=*} needs --backend sim" -n 2 "$flag" "$m"
    expect "${flag%%=*} needs --backend sim (got --backend nccl)" -n 2 --backend nccl "$flag" "$m"
  done
  expect "--sim-faults needs --backend sim" -n 2 --sim-faults "" "$m"
  ok "bad --sim-* values, a sim flag without --backend sim, --nnodes 2: exit 2 naming the flag and the value, nothing started"
  # the largest world a preset holds is accepted
  TMPDIR="$tmp/tmpdir" launch -n 16 --master-port 0 --backend sim --sim-topology 2x8xH100-IB --sim-gpu-mem 1.5GiB "$m"
  { [ "$rc" = 0 ] && [ -e "$tmp/started" ]; } || { fail "-n 16 on 2x8xH100-IB did not run"; show "$tmp/err"; }
  ok "-n 16 --sim-topology 2x8xH100-IB runs"
  rm -f "$tmp/started"
  TMPDIR="$tmp/tmpdir" launch -n 2 --master-port 0 --backend sim --sim-faults "delay:0:1, kill:1@step:2 ,delay:1:0.5" "$m"
  { [ "$rc" = 0 ] && [ -e "$tmp/started" ]; } || { fail "--sim-faults with spaces around the items did not run"; show "$tmp/err"; }
  ok "--sim-faults 'delay:0:1, kill:1@step:2 ,delay:1:0.5': spaces around the items are accepted"
  # the preset's GPU memory by default, none with "unlimited"
  rm -f "$tmp/started"
  TMPDIR="$tmp/tmpdir" launch -n 2 --master-port 0 --backend sim --sim-topology 8xA100-40GB "$m"
  { [ "$rc" = 0 ] && grep -qF "8xA100-40GB: 2 processes, 39.39 GiB of memory per GPU" "$tmp/err"; } ||
    { fail "8xA100-40GB without --sim-gpu-mem: not its 39.39 GiB"; show "$tmp/err"; }
  TMPDIR="$tmp/tmpdir" launch -n 2 --master-port 0 --backend sim --sim-gpu-mem Unlimited "$m"
  { [ "$rc" = 0 ] && grep -qF "8xH100: 2 processes, unlimited memory per GPU" "$tmp/err"; } ||
    { fail "--sim-gpu-mem Unlimited: not unlimited"; show "$tmp/err"; }
  ok "--backend sim: the preset's GPU memory by default (39.39 GiB on 8xA100-40GB), --sim-gpu-mem unlimited for none"
}

case_sim_report() {
  # rank 0 ok, 1 fails (exit 3), 2 killed by a fault (SIGKILL), 3 dies before writing, 4 writes garbage
  FAKE_SIM_SYNC=1 FAKE_SIM_FAIL=1 FAKE_SIM_KILLED=2 FAKE_SIM_VANISH=3 FAKE_SIM_GARBAGE=4 \
    launch -n 5 --master-port 0 --backend sim --sim-gpu-mem 80GiB --sim-report "$tmp/r.json" "$sim_rank"
  [ "$rc" = 1 ] || fail "exit status $rc, not 1"
  sim_block "$tmp/err" >"$tmp/report"
  for line in \
    "accel launch: simulated 8xH100: 5 processes, 80.00 GiB of memory per GPU" \
    "  rank  peak memory  virtual s  steps    s/step  status" \
    "     0     1.50 MiB   1.500000     10  0.150000  ok" \
    "     1     3.00 MiB   2.500000     10  0.250000  failed (exit 3): loss is NaN at step 3" \
    "     2     4.50 MiB   3.500000     10  0.350000  killed (SIGKILL): fault kill:2@step:5" \
    "     3            -          -      -         -  no report (SIGKILL): no rank-3.json" \
    "     4            -          -      -         -  no report: rank-4.json is not a JSON object" \
    "accel launch: predicted 0.350000 s per optimizer step on 5 GPUs of 8xH100 (the slowest rank, 2: 3.500000 virtual s over 10 steps); the run did not finish: from what the ranks reported" \
    "accel launch: the report is in $tmp/r.json"; do
    has "$tmp/report" "$line" || fail "the report lacks '$line'"
  done
  [ "$(wc -l <"$tmp/report")" = 9 ] || fail "the report is not 9 lines"
  [ "$failures" = 0 ] || show "$tmp/err"
  ok "the report's rows: ok, failed with its error and exit code, killed by a fault with SIGKILL, no report file, a malformed one"
  py "$tmp/r.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
assert list(r) == ["topology", "world_size", "gpu_mem_bytes", "restarts", "outcome", "ranks",
                   "predicted_seconds_per_step", "slowest_rank"], list(r)
assert (r["topology"], r["world_size"], r["gpu_mem_bytes"], r["restarts"], r["outcome"]) == ("8xH100", 5, 80 << 30, 0, "failed"), r
ranks = r["ranks"]
assert [x["rank"] for x in ranks] == [0, 1, 2, 3, 4]
assert [x["status"] for x in ranks] == ["ok", "failed", "killed", "no report", "no report"], ranks
assert [x["exit"] for x in ranks] == ["exit 0", "exit 3", "SIGKILL", "SIGKILL", "exit 0"], ranks
assert [x["error"] for x in ranks] == ["", "loss is NaN at step 3", "fault kill:2@step:5", "no rank-3.json",
                                       "rank-4.json is not a JSON object"], ranks
assert ranks[0]["peak_bytes"] == 1572864 and ranks[0]["virtual_seconds"] == 1.5 and ranks[0]["steps"] == 10, ranks[0]
assert ranks[0]["seconds_per_step"] == 0.15 and ranks[0]["collectives"] == 40 and ranks[0]["bytes_sent"] == 1000, ranks[0]
assert ranks[3]["seconds_per_step"] is None and ranks[3]["peak_bytes"] == 0, ranks[3]
for x in ranks:
    assert list(x)[:8] == ["rank", "status", "error", "exit", "peak_bytes", "virtual_seconds", "steps", "seconds_per_step"], x
assert r["predicted_seconds_per_step"] == 0.35 and r["slowest_rank"] == 2, r
EOF
  ok "--sim-report: the same as JSON (topology, world_size, gpu_mem_bytes, restarts, ranks with status, error, exit, ...)"

  # the launcher stops the other ranks: their rows say so
  FAKE_SIM_FAIL=0 FAKE_SIM_SLEEP=1 launch -n 2 --master-port 0 --backend sim --grace-period 2 "$sim_rank"
  [ "$rc" = 1 ] || fail "stopped: exit status $rc, not 1"
  has "$tmp/err" "     1            -          -      -         -  stopped (SIGTERM): stopped by the launcher after rank 0 failed; no rank-1.json" ||
    { fail "stopped: no row for rank 1 stopped by the launcher"; show "$tmp/err"; }
  has "$tmp/err" "accel launch: predicted 0.150000 s per optimizer step on 2 GPUs of 8xH100 (the slowest rank, 0: 1.500000 virtual s over 10 steps); the run did not finish: from what the ranks reported" ||
    { fail "stopped: no prediction line"; show "$tmp/err"; }
  ok "a rank the launcher stopped after another failed: 'stopped (SIGTERM): stopped by the launcher after rank 0 failed'"

  # interrupted: the report still comes
  FAKE_SIM_SLEEP="0 1" "$accel" launch -n 2 --master-port 0 --backend sim --sim-report "$tmp/r.json" "$sim_rank" >"$tmp/out" 2>"$tmp/err" &
  launcher=$!
  for _ in $(seq 1 200); do
    [ "$(grep -c 'rank=' "$tmp/out")" = 2 ] && break
    sleep 0.05
  done
  sleep 0.1
  kill -TERM "$launcher"
  wait "$launcher"
  rc=$?
  [ "$rc" = 143 ] || fail "interrupted: exit status $rc, not 143"
  for i in 0 1; do
    grep -qE "^ +$i .*  stopped \(SIGTERM\): stopped by the launcher \(SIGTERM to the launcher\); no rank-$i.json$" "$tmp/err" ||
      { fail "interrupted: no row for rank $i"; show "$tmp/err"; }
  done
  has "$tmp/err" "accel launch: no prediction per optimizer step: no rank wrote a report" || fail "interrupted: no 'no prediction' line"
  py "$tmp/r.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["outcome"] == "interrupted" and r["predicted_seconds_per_step"] is None, r
assert [(x["status"], x["exit"]) for x in r["ranks"]] == [("stopped", "SIGTERM")] * 2, r
EOF
  ok "interrupted by SIGTERM: the report and --sim-report still come, the ranks stopped by the launcher"

  # a rank with no optimizer step: '-' per step, no prediction when it is the slowest
  FAKE_SIM_NOSTEPS=1 launch -n 2 --master-port 0 --backend sim "$sim_rank"
  [ "$rc" = 0 ] || { fail "no steps: exit status $rc"; show "$tmp/err"; }
  has "$tmp/err" "     1     3.00 MiB   2.500000      0         -  ok" || { fail "no steps: no row with '-'"; show "$tmp/err"; }
  has "$tmp/err" "accel launch: no prediction per optimizer step: the slowest rank (1) reported no optimizer step" ||
    { fail "no steps: no 'no prediction' line"; show "$tmp/err"; }
  ok "a rank with 0 optimizer steps: '-' per step"

  # a rank whose simulator report says ok but whose program failed on its own (accel_prepare's
  # error): the row says failed with the program's last words, not "a report that says ok"
  FAKE_SIM_SYNC=1 FAKE_SIM_OWN_ERROR=1 launch -n 2 --master-port 0 --backend sim --grace-period 2 \
    --sim-report "$tmp/r.json" "$sim_rank"
  [ "$rc" = 1 ] || fail "own error: exit status $rc, not 1"
  has "$tmp/err" "     1     3.00 MiB   2.500000     10  0.250000  failed (exit 1): train: accel_prepare: the processes disagree; process 0 has loader batch_size 32, this process (1) has batch_size 33" ||
    { fail "own error: no row with the program's error"; show "$tmp/err"; }
  if contains "$tmp/err" "says ok"; then fail "own error: the row speaks of a report that says ok"; show "$tmp/err"; fi
  py "$tmp/r.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
x = r["ranks"][1]
assert (x["status"], x["exit"]) == ("failed", "exit 1"), x
assert x["error"].startswith("train: accel_prepare: the processes disagree"), x
EOF
  ok "a program's own failure after an ok simulator report: 'failed (exit 1): ' and its last stderr line"
}

case_sim_trace() {
  # rank 2 dies before writing anything: its events are missing, the others' are merged in rank order
  FAKE_SIM_SYNC=1 FAKE_SIM_VANISH=2 launch -n 4 --master-port 0 --backend sim --sim-trace "$tmp/t.json" "$sim_rank"
  [ "$rc" = 1 ] || fail "exit status $rc, not 1"
  has "$tmp/err" "accel launch: the trace is in $tmp/t.json (9 events; no trace from rank 2)" || { fail "no trace line"; show "$tmp/err"; }
  python3 -m json.tool "$tmp/t.json" >/dev/null || fail "$tmp/t.json is not JSON"
  py "$tmp/t.json" <<'EOF'
import json, sys
t = json.load(open(sys.argv[1]))
assert list(t) == ["traceEvents", "displayTimeUnit"] and t["displayTimeUnit"] == "ms", list(t)
ev = t["traceEvents"]
assert [e["pid"] for e in ev] == [0, 0, 0, 1, 1, 1, 3, 3, 3], [e["pid"] for e in ev]
assert [e["name"] for e in ev[:3]] == ["process_name", "forward", "all_reduce"], ev[:3]
for e in ev:
    assert {"name", "ph", "pid", "tid", "ts", "args"} <= set(e), e
assert ev[1]["dur"] == 1000.5 and ev[2]["args"] == {"bytes": 4096, "algorithm": "ring"}, ev[1:3]
EOF
  ok "--sim-trace: one valid Chrome trace, every rank's events in rank order, a rank without a trace left out and named"

  # two identical runs: byte-identical --sim-report, --sim-trace and report on stderr
  for run in 1 2; do
    FAKE_SIM_SYNC=1 FAKE_SIM_FAIL=3 launch -n 4 --master-port 0 --backend sim --sim-topology 4x8xH100-IB \
      --sim-gpu-mem 16GB --sim-trace "$tmp/t$run.json" --sim-report "$tmp/r$run.json" "$sim_rank"
    [ "$rc" = 1 ] || fail "run $run: exit status $rc, not 1"
    sim_block "$tmp/err" | sed "s|$tmp/[tr]$run.json|FILE|" >"$tmp/report$run"
  done
  cmp -s "$tmp/r1.json" "$tmp/r2.json" || { fail "--sim-report differs between two runs"; diff "$tmp/r1.json" "$tmp/r2.json"; }
  cmp -s "$tmp/t1.json" "$tmp/t2.json" || fail "--sim-trace differs between two runs"
  cmp -s "$tmp/report1" "$tmp/report2" || { fail "the report on stderr differs between two runs"; diff "$tmp/report1" "$tmp/report2"; }
  [ "$(wc -l <"$tmp/report1")" = 9 ] || { fail "the report is not 9 lines"; show "$tmp/report1"; }
  python3 -m json.tool "$tmp/t1.json" >/dev/null || fail "$tmp/t1.json is not JSON"
  ok "two identical runs: byte-identical --sim-report, --sim-trace and report"
}

case_progress() {
  # a process drawing a bar (updates ended by carriage returns), then a line
  program bar.sh <<'EOF'
#!/bin/sh
echo "progress=${ACCEL_PROGRESS:-unset}"
if [ "$RANK" = 0 ]; then printf 'step 1/3\rstep 2/3\rstep 3/3\r'; fi
echo "done $RANK"
EOF
  # not a terminal: ACCEL_PROGRESS is left alone, and carriage returns pass through in lines
  launch -n 2 --master-port 0 --log-dir "$tmp/logs" "$tmp/bar.sh"
  [ "$rc" = 0 ] || { fail "exit status $rc"; show "$tmp/err"; }
  has "$tmp/out" "[0] progress=unset" || { fail "ACCEL_PROGRESS set without a terminal"; show "$tmp/out"; }
  has "$tmp/out" "$(printf '[0] step 1/3\rstep 2/3\rstep 3/3\rdone 0')" || { fail "not the plain relay"; show "$tmp/out"; }
  ACCEL_PROGRESS=plain launch -n 1 --master-port 0 "$tmp/bar.sh"
  has "$tmp/out" "[0] progress=plain" || { fail "the user's ACCEL_PROGRESS was not kept"; show "$tmp/out"; }
  # a terminal (script(1) gives the launcher a pseudo-terminal): the processes are told to
  # draw bars, and each update is redrawn in place under its rank; the log keeps lines only
  if ! command -v script >/dev/null; then ok "no script(1): the terminal half skipped"; return; fi
  script -qec "$accel launch -n 2 --master-port 0 --log-dir $tmp/tlogs $tmp/bar.sh" /dev/null >"$tmp/tty" 2>&1
  tr -d '\n' <"$tmp/tty" >"$tmp/tty1"
  contains "$tmp/tty" "[0] progress=bar" || { fail "ACCEL_PROGRESS=bar not set on a terminal"; show "$tmp/tty"; }
  for k in 1 2 3; do
    contains "$tmp/tty1" "$(printf '\r[0] step %s/3\033[K' "$k")" || { fail "update $k not redrawn in place"; cat -A "$tmp/tty"; }
  done
  contains "$tmp/tty1" "$(printf '\r\033[K[0] done 0')" || { fail "the line after the bar does not replace it"; cat -A "$tmp/tty"; }
  if grep -q "step" "$tmp/tlogs/rank_0.log"; then fail "bar updates in the log"; show "$tmp/tlogs/rank_0.log"; fi
  has "$tmp/tlogs/rank_0.log" "done 0" || { fail "the log lacks the line"; show "$tmp/tlogs/rank_0.log"; }
  ok "bars redrawn in place under their rank on a terminal (ACCEL_PROGRESS=bar), plain lines elsewhere, logs without updates"
}

# The report of a large group under a low descriptor limit: the launcher cannot start every
# process (pipe: Too many open files), stops the others, and says so in a few lines, the
# ranks in the same state grouped ("ranks 30-99999: not started"), not one line per rank.
case_report() {
  local start elapsed
  start=$(now)
  (ulimit -n 64 && exec "$accel" launch -n 100000 --master-port 0 /bin/true >"$tmp/out" 2>"$tmp/err")
  rc=$?
  elapsed=$(seconds_since "$start")
  [ "$rc" = 1 ] || fail "exit status $rc, not 1"
  grep -qE "^accel launch: FAILED after [0-9.]+ s: cannot start rank [0-9]+: pipe: Too many open files$" "$tmp/err" ||
    fail "no failure line naming the rank that could not start"
  grep -qE "^    ranks [0-9]+-99999: not started$" "$tmp/err" || fail "no grouped 'not started' line"
  lines=$(wc -l <"$tmp/err")
  [ "$lines" -le 12 ] || fail "the report is $lines lines long"
  if grep -qE "^    rank [0-9]+: not started$" "$tmp/err"; then fail "a 'not started' rank on a line of its own"; fi
  # every rank is in exactly one line: the ranges add up to 100000
  python3 - "$tmp/err" <<'EOF' || fail "the report's ranks do not add up to 0..99999 once each"
import re, sys
seen, total = [], 0
for line in open(sys.argv[1]):
    m = re.match(r"    ranks? ([0-9, -]+?)(, \.\.\. \(([0-9]+) ranks\))?(?: \(pid [0-9]+\))?: ", line)
    if not m:
        continue
    ranks = []
    for part in m.group(1).split(", "):
        a, _, b = part.partition("-")
        ranks.extend(range(int(a), int(b or a) + 1))
    seen.extend(ranks)
    total += int(m.group(3)) if m.group(3) else len(ranks)
assert total == 100000 and len(set(seen)) == len(seen) and 99999 in seen, (total, len(seen))
EOF
  [ "$failures" = 0 ] || show "$tmp/err"
  ok "-n 100000 under ulimit -n 64: exit 1 in $elapsed s, a $lines-line report, ranks in the same state grouped"

  # a group of 4 that fails: states of one rank keep their pid, groups list their ranks
  program mixed.sh <<'EOF'
#!/bin/sh
case "$RANK" in
  3) sleep 0.3; exit 4 ;;
  *) exec sleep 30 ;;
esac
EOF
  launch -n 5 --master-port 0 "$tmp/mixed.sh"
  [ "$rc" = 1 ] || fail "mixed: exit status $rc, not 1"
  for re in "^    ranks 0-2, 4: stopped by the launcher \(SIGTERM\)$" "^    rank 3 \(pid [0-9]+\): exited with code 4$"; do
    grep -qE "$re" "$tmp/err" || { fail "mixed: no line matching '$re'"; show "$tmp/err"; }
  done
  ok "ranks 0-2 and 4 stopped, rank 3 failed: 'ranks 0-2, 4: stopped by the launcher (SIGTERM)', 'rank 3 (pid P): exited with code 4'"
}

# The tool's command line: --version, a mistyped command, CLI11's range errors in words, and
# every usage error exits 2 (CLI11's own codes are 100 and up).
case_cli() {
  # tool ARGS...: accel ARGS, stdout in $tmp/out, stderr in $tmp/err, status in $rc
  tool() { "$accel" "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?; }
  tool --version
  [ "$rc" = 0 ] || fail "--version: exit status $rc"
  grep -qE "^accel [0-9]+\.[0-9]+\.[0-9]+ \(library [0-9]+\)$" "$tmp/out" || { fail "--version: no version line"; show "$tmp/out"; }
  tool version
  cmp -s "$tmp/out" <("$accel" --version) || fail "'accel version' and 'accel --version' differ"
  ok "accel --version: $(cat "$tmp/out")"

  tool lanuch -n 2 /bin/true
  [ "$rc" = 2 ] || fail "lanuch: exit status $rc, not 2"
  contains "$tmp/err" "accel: 'lanuch' is not an accel command; did you mean 'launch'?" || { fail "lanuch: no suggestion"; show "$tmp/err"; }
  tool sim bnech
  [ "$rc" = 2 ] || fail "sim bnech: exit status $rc, not 2"
  contains "$tmp/err" "'bnech' is not an accel sim command; did you mean 'bench'?" || { fail "sim bnech: no suggestion"; show "$tmp/err"; }
  tool estimate
  contains "$tmp/err" "did you mean 'estimate-memory'?" || { fail "estimate: no suggestion"; show "$tmp/err"; }
  tool frobnicate
  [ "$rc" = 2 ] || fail "frobnicate: exit status $rc, not 2"
  contains "$tmp/err" "'frobnicate' is not an accel command (accel --help lists them: " || { fail "frobnicate: no list"; show "$tmp/err"; }
  if contains "$tmp/err" "did you mean"; then fail "frobnicate: a far-fetched suggestion"; show "$tmp/err"; fi
  ok "a mistyped command: the closest one named ('lanuch': 'launch'), exit 2"

  for args in "estimate-memory gpt2 -n 0" "sim bench --iters 0" "estimate-memory gpt2 --batch -3"; do
    # shellcheck disable=SC2086
    tool $args
    [ "$rc" = 2 ] || fail "$args: exit status $rc, not 2"
    grep -qE "must be at least 1 \(got -?[0-9]+\)" "$tmp/err" || { fail "$args: the range not in words"; show "$tmp/err"; }
    if grep -qE "[0-9]{20}" "$tmp/err"; then fail "$args: a huge number"; show "$tmp/err"; fi
  done
  tool sim bench --warmup -1
  contains "$tmp/err" "must be at least 0 (got -1)" || { fail "--warmup -1: the range not in words"; show "$tmp/err"; }
  tool launch -n 0 /bin/true
  { [ "$rc" = 2 ] && contains "$tmp/err" "-n/--nproc-per-node must be at least 1 (got 0)"; } || { fail "launch -n 0"; show "$tmp/err"; }
  ok "-n 0, --iters 0, --batch -3, --warmup -1: 'must be at least N (got V)', exit 2"

  for args in "" "sim" "launch" "launch -n x /bin/true" "estimate-memory" "merge-weights onlyone" "--bogus" "env extra"; do
    # shellcheck disable=SC2086
    tool $args
    [ "$rc" = 2 ] || { fail "accel $args: exit status $rc, not 2"; show "$tmp/err"; }
  done
  for args in "--help" "launch --help" "sim bench --help" "estimate-memory --help"; do
    # shellcheck disable=SC2086
    tool $args
    [ "$rc" = 0 ] || fail "accel $args: exit status $rc, not 0"
    contains "$tmp/out" "Usage:" || fail "accel $args: no usage on stdout"
  done
  ok "usage errors exit 2 (CLI11's own codes mapped), --help exits 0"
}

# The digits example on 2 simulated GPUs whose ranks disagree on the batch size: accel_prepare
# fails on both; its message carries its name once, and the simulation's report shows the
# failure as the program's own.
case_prepare() {
  [ -n "${TRAIN_DIGITS:-}" ] || { echo "SKIP: no TRAIN_DIGITS"; exit 77; }
  program disagree.sh <<EOF
#!/bin/sh
exec "$TRAIN_DIGITS" --epochs 1 --batch \$((32 + RANK))
EOF
  # (the example returns from main at its first error without freeing its handles: under
  # LeakSanitizer that exit would be a leak report and SIGABRT, not the failure tested here)
  ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" ACCEL_TIMEOUT=60 \
    launch -n 2 --master-port 0 --backend sim --grace-period 10 --sim-report "$tmp/r.json" "$tmp/disagree.sh"
  [ "$rc" = 1 ] || fail "exit status $rc, not 1"
  contains "$tmp/err" "accel_prepare: the processes disagree; process" || { fail "no disagreement message"; show "$tmp/err"; }
  if contains "$tmp/err" "accel_prepare: accel_prepare:"; then fail "the message repeats its prefix"; fi
  if contains "$tmp/err" "says ok"; then fail "the report speaks of a report that says ok"; fi
  sim_block "$tmp/err" | grep -qE "  failed \(exit 1\): .*accel_prepare: the processes disagree; process" ||
    { fail "no 'failed (exit 1): ... accel_prepare: the processes disagree' row"; show "$tmp/err"; }
  [ "$failures" = 0 ] || show "$tmp/err"
  ok "ranks disagreeing at accel_prepare: 'accel_prepare: the processes disagree' once, the row 'failed (exit 1)' with it"
}

# --warm-start: the processes forked from one start of the program after its libraries loaded
# (WARM_HELPER: a program whose library's constructor notes the process it ran in), each with
# its rank's environment, output and exit status, the launcher's children; a program that
# cannot be (a thread before main, a script) starts each process on its own; the digits example
# on simulated GPUs ends with the same accuracy either way.
case_warm() {
  [ -n "${WARM_HELPER:-}" ] || { echo "SKIP: no WARM_HELPER"; exit 77; }
  WARM_HELPER_FAIL_RANK=2 launch -n 3 --master-port "$(free_port)" --warm-start "$WARM_HELPER"
  [ "$rc" = 1 ] || { fail "exit status $rc, not 1"; show "$tmp/err"; }
  for i in 0 1 2; do
    has "$tmp/out" "[$i] rank=$i local=$i lib=elsewhere preload=unset" || { fail "rank $i: no 'lib=elsewhere' line"; show "$tmp/out"; }
  done
  contains "$tmp/err" "accel launch: --warm-start: 3 processes forked from one start of $WARM_HELPER after its libraries loaded (" ||
    { fail "no warm-start line"; show "$tmp/err"; }
  grep -qE "rank 2 \(pid [0-9]+\): exited with code 3" "$tmp/err" || { fail "rank 2's exit status not reported"; show "$tmp/err"; }
  ok "3 processes forked from one start: each its RANK and LOCAL_RANK, the library loaded elsewhere (once), rank 2's exit code 3 reported"

  launch -n 2 --master-port "$(free_port)" "$WARM_HELPER"
  { [ "$rc" = 0 ] && has "$tmp/out" "[1] rank=1 local=1 lib=here preload=unset"; } ||
    { fail "without --warm-start: not 'lib=here'"; show "$tmp/out"; }
  # (an instrumented launcher would refuse to run with a library preloaded before its sanitizer's runtime)
  ASAN_OPTIONS="${ASAN_OPTIONS:-}:verify_asan_link_order=0" LD_PRELOAD=libm.so.6 \
    launch -n 2 --master-port "$(free_port)" --warm-start "$WARM_HELPER"
  { [ "$rc" = 0 ] && has "$tmp/out" "[1] rank=1 local=1 lib=elsewhere preload=libm.so.6"; } ||
    { fail "the user's LD_PRELOAD did not reach the processes as it was"; show "$tmp/out"; show "$tmp/err"; }
  ok "without --warm-start each process loads the library itself; the user's LD_PRELOAD reaches the processes unchanged"

  WARM_HELPER_THREAD=1 launch -n 2 --master-port "$(free_port)" --warm-start "$WARM_HELPER"
  [ "$rc" = 0 ] || { fail "a thread before main: exit status $rc"; show "$tmp/err"; }
  contains "$tmp/err" "accel launch: --warm-start: 2 threads were running before main (a fork keeps only one); starting each process on its own" ||
    { fail "no refusal for the thread"; show "$tmp/err"; }
  has "$tmp/out" "[1] rank=1 local=1 lib=here preload=unset" || { fail "not started on its own after the refusal"; show "$tmp/out"; }
  printf '#!/bin/sh\necho "hello from $RANK"\n' >"$tmp/hello.sh"
  chmod +x "$tmp/hello.sh"
  launch -n 2 --master-port "$(free_port)" --warm-start "$tmp/hello.sh"
  { [ "$rc" = 0 ] && has "$tmp/out" "[0] hello from 0" && has "$tmp/out" "[1] hello from 1"; } ||
    { fail "a script under --warm-start"; show "$tmp/out"; }
  contains "$tmp/err" "accel launch: --warm-start: $tmp/hello.sh is not an ELF executable (a script?); starting each process on its own" ||
    { fail "no refusal for the script"; show "$tmp/err"; }
  ok "a thread before main and a script: refused, said why, each process started on its own"

  # SIGTERM to the launcher reaches the processes forked from the template (its children)
  local start pid i
  start=$(now)
  "$accel" launch -n 2 --master-port "$(free_port)" --warm-start /bin/sh -c \
    'trap "echo term \$RANK; exit 0" TERM; echo up; while :; do sleep 0.05; done' >"$tmp/out" 2>"$tmp/err" &
  pid=$!
  for i in $(seq 100); do [ "$(grep -c up "$tmp/out")" = 2 ] && break; sleep 0.05; done
  kill -TERM "$pid"
  wait "$pid"
  { has "$tmp/out" "[0] term 0" && has "$tmp/out" "[1] term 1"; } || { fail "SIGTERM did not reach both"; show "$tmp/out"; show "$tmp/err"; }
  less_than "$(seconds_since "$start")" 4 || fail "SIGTERM: the group took $(seconds_since "$start") s to stop"
  ok "SIGTERM to the launcher: forwarded to the forked processes, which stopped"

  if [ -n "${TRAIN_DIGITS:-}" ]; then
    local warm cold
    ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" launch -n 2 --master-port 0 --backend sim --warm-start "$TRAIN_DIGITS" --epochs 2
    [ "$rc" = 0 ] || { fail "digits, --warm-start: exit status $rc"; show "$tmp/err"; }
    warm=$(grep -a "^\[0\] accuracy: " "$tmp/out")
    # started warm, or refused for a sanitizer's runtime in an instrumented build
    { contains "$tmp/err" "accel launch: --warm-start: 2 processes forked from one start of" ||
      contains "$tmp/err" "is built with a sanitizer"; } || { fail "digits: neither forked nor refused"; show "$tmp/err"; }
    ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" launch -n 2 --master-port 0 --backend sim "$TRAIN_DIGITS" --epochs 2
    cold=$(grep -a "^\[0\] accuracy: " "$tmp/out")
    { [ -n "$warm" ] && [ "$warm" = "$cold" ]; } || fail "digits: '$warm' with --warm-start, '$cold' without"
    ok "the digits example on 2 simulated processes: '$warm' with and without --warm-start"
  fi
}

# Every example answers --help with its usage on stdout and exit 0 (and nothing else: no file
# named --help, no training).
case_examples() {
  [ -n "${EXAMPLES:-}" ] || { echo "SKIP: no EXAMPLES"; exit 77; }
  local n=0 ex
  IFS=: read -ra list <<<"$EXAMPLES"
  mkdir -p "$tmp/cwd"
  for ex in "${list[@]}"; do
    (cd "$tmp/cwd" && timeout 60 "$ex" --help >"$tmp/out" 2>"$tmp/err")
    rc=$?
    [ "$rc" = 0 ] || { fail "$(basename "$ex") --help: exit status $rc, not 0"; show "$tmp/err"; }
    grep -q "usage: " "$tmp/out" || { fail "$(basename "$ex") --help: no usage on stdout"; show "$tmp/out"; }
    [ -z "$(ls -A "$tmp/cwd")" ] || { fail "$(basename "$ex") --help wrote $(ls -A "$tmp/cwd")"; rm -rf "${tmp:?}/cwd/"*; }
    n=$((n + 1))
  done
  ok "$n examples: --help prints the usage, exit 0"
}

"case_$case_name"
if [ "$failures" != 0 ]; then
  echo "check_launch $case_name: $failures failure(s)" >&2
  exit 1
fi
echo "check_launch $case_name: all passed"
