#!/usr/bin/env bash
# Real processes end to end: the digits example and a probe of the C ABI's process utilities,
# started by accel launch, by hand with torchrun's variables, by mpirun, and as two "nodes"
# (two launchers; where the machine allows it, in two network namespaces with their own
# addresses). Each section is a test of its own (tests/meson.build).
#   check_processes.sh ACCEL_TOOL TRAIN_DIGITS PROCESS_PROBE SECTION
# SECTION: digits | restart | reshard | nodes | netns | mpirun | by-hand | no-destroy
set -uo pipefail
accel=$1 digits=$2 probe=$3 section=$4
work=$(mktemp -d /tmp/accel-processes-XXXXXX)
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "check_processes ($section): $*" >&2; exit 1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
accuracy() { sed -n 's/^\(\[0\] \)\{0,1\}accuracy: //p' "$1" | tail -1; }
export ACCEL_TIMEOUT=${ACCEL_TIMEOUT:-30}
if ! "$accel" env | grep -q '^- communication backends: .*gloo'; then
  echo "SKIP: this build has no gloo backend (c10d's Gloo headers were not found at configure time)"
  exit 77
fi

case $section in
digits)
  # The README's lines: 2 and 4 real processes (Gloo), then the simulated 4 ranks.
  "$accel" launch -n 2 "$digits" > "$work/two.txt" 2>&1 || { cat "$work/two.txt"; fail "2 processes failed"; }
  "$accel" launch -n 4 "$digits" > "$work/four.txt" 2>&1 || { cat "$work/four.txt"; fail "4 processes failed"; }
  "$digits" > "$work/sim.txt" 2>&1 || { cat "$work/sim.txt"; fail "the simulated run failed"; }
  grep -q '^\[0\] training on 4 processes, strategy zero2, precision bf16' "$work/four.txt" || fail "no banner"
  a2=$(accuracy "$work/two.txt") a4=$(accuracy "$work/four.txt") as=$(accuracy "$work/sim.txt")
  echo "accuracy: 2 processes $a2, 4 processes $a4, 4 simulated ranks $as"
  python3 - "$a2" "$a4" "$as" <<'EOF' || fail "accuracy"
import sys
a2, a4, sim = map(float, sys.argv[1:])
assert a2 >= 0.95 and a4 >= 0.95, (a2, a4)
assert abs(a4 - sim) <= 0.01, f"4 processes {a4} vs 4 simulated ranks {sim}"
EOF
  # every line of a process is prefixed with its rank; only the main process prints
  [ "$(grep -c '^\[[0-9]\] epoch' "$work/four.txt")" = 20 ] || fail "expected 20 epoch lines from the main process"
  ;;

restart)
  # SIGKILL of process 1 in the middle of epoch 4: without restarts the launcher fails
  # naming it; with --max-restarts 1 the group restarts, resumes from the epoch-3 checkpoint
  # and ends with the uninterrupted run's weights.
  "$accel" launch -n 2 "$digits" --epochs 6 --project "$work/a" --save "$work/a.safetensors" > "$work/a.txt" 2>&1 ||
    { cat "$work/a.txt"; fail "the uninterrupted run failed"; }
  if "$accel" launch -n 2 "$digits" --epochs 6 --project "$work/b" --crash-after 3 > "$work/b.txt" 2>&1; then
    cat "$work/b.txt"; fail "a killed process did not fail the launch"
  fi
  grep -q 'rank 1 (pid [0-9]*) was killed by signal 9 (SIGKILL)' "$work/b.txt" || { cat "$work/b.txt"; fail "the report does not name rank 1 and SIGKILL"; }
  "$accel" launch -n 2 --max-restarts 1 "$digits" --epochs 6 --project "$work/c" --crash-after 3 \
    --save "$work/c.safetensors" > "$work/c.txt" 2>&1 || { cat "$work/c.txt"; fail "the restarted run failed"; }
  grep -q 'restarting the group (attempt 1 of 1)' "$work/c.txt" || { cat "$work/c.txt"; fail "no restart"; }
  grep -q '^\[0\] resumed from .*checkpoint_.* at epoch 4' "$work/c.txt" || { cat "$work/c.txt"; fail "no resume at epoch 4"; }
  cmp "$work/a.safetensors" "$work/c.safetensors" || fail "the restarted run's weights differ from the uninterrupted run's"
  echo "restart: killed in epoch 4, restarted, resumed at epoch 4: weights bit-identical to the uninterrupted run"
  ;;

reshard)
  # A checkpoint saved by 4 processes loads on 2 and on 1, and one saved by 1 loads on 4:
  # resumed after its last epoch, each saves the same weights, byte for byte; then training
  # goes on from it on another number of processes.
  "$accel" launch -n 4 "$digits" --epochs 2 --project "$work/p" --save "$work/w4.safetensors" > "$work/4.txt" 2>&1 ||
    { cat "$work/4.txt"; fail "4 processes failed"; }
  cp -r "$work/p" "$work/p-copy"
  "$accel" launch -n 2 "$digits" --epochs 2 --project "$work/p" --save "$work/w2.safetensors" > "$work/2.txt" 2>&1 ||
    { cat "$work/2.txt"; fail "loading on 2 processes failed"; }
  grep -q 'resumed from' "$work/2.txt" || { cat "$work/2.txt"; fail "2 processes did not resume"; }
  cmp "$work/w4.safetensors" "$work/w2.safetensors" || fail "4 -> 2 processes changed the weights"
  "$digits" --ranks 0 --epochs 2 --project "$work/p-copy" --save "$work/w1.safetensors" > "$work/1.txt" 2>&1 ||
    { cat "$work/1.txt"; fail "loading on 1 process failed"; }
  cmp "$work/w4.safetensors" "$work/w1.safetensors" || fail "4 -> 1 process changed the weights"
  "$digits" --ranks 0 --epochs 2 --project "$work/q" --save "$work/v1.safetensors" > "$work/q1.txt" 2>&1 ||
    { cat "$work/q1.txt"; fail "1 process failed"; }
  "$accel" launch -n 4 "$digits" --epochs 2 --project "$work/q" --save "$work/v4.safetensors" > "$work/q4.txt" 2>&1 ||
    { cat "$work/q4.txt"; fail "loading on 4 processes failed"; }
  cmp "$work/v1.safetensors" "$work/v4.safetensors" || fail "1 -> 4 processes changed the weights"
  "$accel" launch -n 2 "$digits" --epochs 4 --project "$work/p" > "$work/more.txt" 2>&1 ||
    { cat "$work/more.txt"; fail "training on from 4 processes' checkpoint on 2 failed"; }
  grep -q '^\[0\] epoch  4/4' "$work/more.txt" || { cat "$work/more.txt"; fail "no epoch 4"; }
  echo "reshard: 4 -> 2, 4 -> 1, 1 -> 4 processes: the same weights, byte for byte; 4 -> 2 trains on"
  ;;

nodes)
  # Two launchers, one per "node", on this machine: a world of 4.
  port=$(free_port)
  "$accel" launch --nnodes 2 --node-rank 1 -n 2 --master-port "$port" "$probe" > "$work/n1.txt" 2>&1 &
  n1=$!
  "$accel" launch --nnodes 2 --node-rank 0 -n 2 --master-port "$port" "$probe" > "$work/n0.txt" 2>&1 ||
    { cat "$work/n0.txt" "$work/n1.txt"; fail "node 0 failed"; }
  wait $n1 || { cat "$work/n1.txt"; fail "node 1 failed"; }
  cat "$work/n0.txt" "$work/n1.txt"
  for r in 0 1; do grep -q "^\[$r\] rank $r of 4 local $r: ok sum 10" "$work/n0.txt" || fail "node 0 rank $r"; done
  for r in 2 3; do grep -q "^\[$r\] rank $r of 4 local $((r - 2)): ok sum 10" "$work/n1.txt" || fail "node 1 rank $r"; done
  ;;

netns)
  # Two network namespaces joined by a veth pair: the nodes have different addresses.
  a=accel-test-a-$$ b=accel-test-b-$$
  if ! ip netns add "$a" 2>/dev/null; then
    echo "SKIP: cannot create network namespaces here (needs root and ip netns): the two-node run on one address (nodes) stands"
    exit 77
  fi
  trap 'ip netns del "$a" 2>/dev/null; ip netns del "$b" 2>/dev/null; cleanup' EXIT
  ip netns add "$b" || fail "ip netns add $b"
  ip link add "va$$" netns "$a" type veth peer name "vb$$" netns "$b" || fail "veth"
  ip -n "$a" addr add 10.231.0.1/24 dev "va$$" && ip -n "$b" addr add 10.231.0.2/24 dev "vb$$" || fail "addresses"
  for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
  ip -n "$a" link set "va$$" up && ip -n "$b" link set "vb$$" up || fail "links"
  ip netns exec "$b" "$accel" launch --nnodes 2 --node-rank 1 -n 1 --master-addr 10.231.0.1 --master-port 29511 \
    "$probe" > "$work/b.txt" 2>&1 &
  nb=$!
  ip netns exec "$a" "$accel" launch --nnodes 2 --node-rank 0 -n 1 --master-addr 10.231.0.1 --master-port 29511 \
    "$probe" > "$work/a.txt" 2>&1 || { cat "$work/a.txt" "$work/b.txt"; fail "node 0 (10.231.0.1) failed"; }
  wait $nb || { cat "$work/b.txt"; fail "node 1 (10.231.0.2) failed"; }
  cat "$work/a.txt" "$work/b.txt"
  grep -q '^\[0\] rank 0 of 2 local 0: ok sum 3' "$work/a.txt" || fail "node 0"
  grep -q '^\[1\] rank 1 of 2 local 0: ok sum 3' "$work/b.txt" || fail "node 1"
  ;;

mpirun)
  if ! command -v mpirun > /dev/null; then
    echo "SKIP: no mpirun (Debian: apt-get install openmpi-bin; scripts/setup installs it)"
    exit 77
  fi
  port=$(free_port)
  root=()
  [ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
  mpirun "${root[@]}" --oversubscribe -n 3 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT="$port" -x ACCEL_TIMEOUT \
    "$probe" > "$work/mpi.txt" 2>&1 || { cat "$work/mpi.txt"; fail "mpirun -n 3 failed"; }
  cat "$work/mpi.txt"
  for r in 0 1 2; do grep -q "^rank $r of 3 local $r: ok sum 6" "$work/mpi.txt" || fail "rank $r"; done
  # without a master address, a clear error
  if mpirun "${root[@]}" --oversubscribe -n 2 "$probe" > "$work/nomaster.txt" 2>&1; then fail "no MASTER_ADDR was accepted"; fi
  grep -q "MASTER_ADDR" "$work/nomaster.txt" || { cat "$work/nomaster.txt"; fail "the error does not say to set MASTER_ADDR"; }
  ;;

by-hand)
  # torchrun's variables set by hand, no launcher
  port=$(free_port)
  pids=()
  for r in 0 1 2; do
    RANK=$r WORLD_SIZE=3 LOCAL_RANK=$r LOCAL_WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "$probe" > "$work/h$r.txt" 2>&1 &
    pids+=($!)
  done
  for r in 0 1 2; do wait "${pids[$r]}" || { cat "$work/h$r.txt"; fail "rank $r failed"; }; done
  for r in 0 1 2; do grep -q "^rank $r of 3 local $r: ok sum 6" "$work/h$r.txt" || fail "rank $r"; done
  # two processes claiming rank 1: one is told so, and rank 0 names the rank that never came
  port=$(free_port)
  pids=()
  for r in 0 1 1; do
    RANK=$r WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port ACCEL_TIMEOUT=3 "$probe" > "$work/d${#pids[@]}.txt" 2>&1 &
    pids+=($!)
  done
  start=$SECONDS
  for p in "${pids[@]}"; do wait "$p" && fail "a process of a world with a duplicated rank succeeded"; done
  [ $((SECONDS - start)) -le 20 ] || fail "the failures took $((SECONDS - start)) s with a 3 s timeout"
  cat "$work"/d*.txt
  grep -q "ACCEL_ERR_INVALID_ARGUMENT: accel_init: rank 1 is claimed by two processes" "$work"/d*.txt || fail "no duplicate-rank error"
  grep -q "ACCEL_ERR_TIMEOUT: accel_init: rank(s) 2 of 3 did not join within 3000 ms" "$work/d0.txt" || fail "rank 0 does not name rank 2"
  # a process that stalls longer than the timeout: the others fail with ACCEL_ERR_TIMEOUT
  port=$(free_port)
  pids=()
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port ACCEL_TIMEOUT=2 "$probe" --stall 6 > "$work/s$r.txt" 2>&1 &
    pids+=($!)
  done
  wait "${pids[0]}" && fail "rank 0 did not fail while rank 1 stalled"
  wait "${pids[1]}"
  cat "$work/s0.txt"
  grep -q "accel_reduce failed after [2-4]\.[0-9] s: ACCEL_ERR_TIMEOUT" "$work/s0.txt" || fail "no timeout within 2-5 s"
  # the nccl backend where this build has it but the machine has no GPU: a clear error
  if "$accel" env | grep -q '^- communication backends: .*nccl' && ! nvidia-smi -L > /dev/null 2>&1; then
    RANK=0 WORLD_SIZE=1 ACCEL_BACKEND=nccl "$probe" > "$work/nccl.txt" 2>&1 && fail "nccl without a GPU was accepted"
    cat "$work/nccl.txt"
    grep -q "ACCEL_ERR_UNSUPPORTED: accel_init: nccl: this process sees no CUDA device" "$work/nccl.txt" ||
      fail "no clear error for nccl without a CUDA device"
  fi
  # RANK >= WORLD_SIZE
  RANK=3 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 "$probe" > "$work/bad.txt" 2>&1 && fail "RANK=3 of 2 was accepted"
  grep -q "ACCEL_ERR_INVALID_ARGUMENT: .*RANK" "$work/bad.txt" || { cat "$work/bad.txt"; fail "RANK >= WORLD_SIZE not named"; }
  ;;

no-destroy)
  # processes that exit without accel_destroy: no hang, no crash, every process exits 0
  start=$SECONDS
  "$accel" launch -n 3 "$probe" --no-destroy > "$work/nd.txt" 2>&1 || { cat "$work/nd.txt"; fail "exit without accel_destroy failed"; }
  [ $((SECONDS - start)) -le 20 ] || fail "took $((SECONDS - start)) s"
  for r in 0 1 2; do grep -q "^\[$r\] rank $r of 3 local $r: ok sum 6" "$work/nd.txt" || { cat "$work/nd.txt"; fail "rank $r"; }; done
  ;;

*) fail "unknown section" ;;
esac
echo "check_processes ($section): ok"
