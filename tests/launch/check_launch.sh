#!/usr/bin/env bash
# `accel launch` (tools/launch.cpp): the real tool starting real processes (small shell
# scripts written here) and what they saw, printed and left behind.
#   check_launch.sh ACCEL_TOOL PORT_HELPER CASE
# CASE: env, output, failure, restart, port, signal, usage. Every launch names its port
# (a free one), so the cases can run beside each other and beside other tests.
set -uo pipefail
accel=$1
ports=$2
case_name=$3
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
echo "rank=$RANK local=$LOCAL_RANK world=$WORLD_SIZE lws=$LOCAL_WORLD_SIZE group=$GROUP_RANK addr=$MASTER_ADDR port=$MASTER_PORT backend=$ACCEL_BACKEND strategy=$ACCEL_STRATEGY mp=$ACCEL_MIXED_PRECISION timeout=$ACCEL_TIMEOUT restart=$ACCEL_RESTART_COUNT te=$TORCHELASTIC_RESTART_COUNT args=$*"
EOF
  local port
  port=$(free_port)
  # stale launcher variables in the environment are replaced; options after PROGRAM are the program's
  RANK=7 WORLD_SIZE=9 MASTER_PORT=1 ACCEL_RESTART_COUNT=5 \
    launch -n 3 --master-port "$port" --backend gloo --strategy ddp --mixed-precision bf16 --timeout 2.50 \
    "$tmp/show.sh" --foo 3 -n x
  [ "$rc" = 0 ] || { fail "exit status $rc"; show "$tmp/err"; }
  for i in 0 1 2; do
    want="[$i] rank=$i local=$i world=3 lws=3 group=0 addr=127.0.0.1 port=$port backend=gloo strategy=ddp mp=bf16 timeout=2.5 restart=0 te=0 args=--foo 3 -n x"
    has "$tmp/out" "$want" || { fail "no line '$want'"; show "$tmp/out"; }
  done
  [ "$(wc -l <"$tmp/out")" = 3 ] || { fail "not 3 lines on stdout"; show "$tmp/out"; }
  contains "$tmp/err" "accel launch: 3 processes (node 0 of 1), master 127.0.0.1:$port" || { fail "no start line"; show "$tmp/err"; }
  contains "$tmp/err" "accel launch: all 3 processes exited 0 in " || { fail "no end line"; show "$tmp/err"; }
  ok "3 processes on one node: RANK, LOCAL_RANK, WORLD_SIZE, ..., ACCEL_* and the program's own options"

  # the second of two nodes (node 1 checks no port: node 0 hosts it); ACCEL_* not given are inherited
  ACCEL_STRATEGY=zero2 ACCEL_TIMEOUT=7 launch -n 2 --nnodes 2 --node-rank 1 --master-addr localhost "$tmp/show.sh"
  [ "$rc" = 0 ] || { fail "node 1: exit status $rc"; show "$tmp/err"; }
  for i in 0 1; do
    r=$((2 + i))
    want="[$r] rank=$r local=$i world=4 lws=2 group=1 addr=localhost port=29500 backend= strategy=zero2 mp= timeout=7 restart=0 te=0 args="
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
  # 0.5 s until the failure, 1 s of grace for rank 2; not the 30 s they would sleep
  less_than 1.4 "$elapsed" || fail "done in $elapsed s: rank 2 was not given its 1 s grace period"
  less_than "$elapsed" 6 || fail "took $elapsed s: the sleeping ranks were not stopped"
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
  less_than "$elapsed" 4 || fail "SIGKILL: took $elapsed s"
  [ "$failures" = 0 ] || show "$tmp/err"
  ok "a rank killed by SIGKILL is reported with the signal's name"
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
  less_than "$elapsed" 3 || fail "took $elapsed s to stop"
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
  [ "$(grep -c "killed by the launcher (SIGKILL" "$tmp/err")" = 2 ] || { fail "SIGINT: not both killed after the grace period"; show "$tmp/err"; }
  ok "SIGINT to the launcher, ignored by the processes: SIGKILL after the grace period; exit 130"

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
  ok "bad options and programs: clear errors naming the option, exit 2, nothing started"
  # `--` before PROGRAM is allowed
  launch -n 1 --master-port 0 -- "$tmp/marker.sh"
  { [ "$rc" = 0 ] && [ -e "$tmp/started" ]; } || { fail "'-- PROGRAM' did not run"; show "$tmp/err"; }
  ok "'accel launch -n 1 -- PROGRAM' runs it"
}

"case_$case_name"
if [ "$failures" != 0 ]; then
  echo "check_launch $case_name: $failures failure(s)" >&2
  exit 1
fi
echo "check_launch $case_name: all passed"
