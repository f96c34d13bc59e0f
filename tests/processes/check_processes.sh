#!/usr/bin/env bash
# Real processes end to end: the digits example and a probe of the C ABI's process utilities,
# started by accel launch, by hand with torchrun's variables, by mpirun, and as two "nodes"
# (two launchers; where the machine allows it, in two network namespaces with their own
# addresses). Each section is a test of its own (tests/processes/meson.build).
#   check_processes.sh ACCEL_TOOL TRAIN_DIGITS PROCESS_PROBE SECTION
# SECTION: digits | restart | reshard | nodes | netns | mpirun | by-hand | no-destroy
#          sim-digits | sim-failures | sim-restart | sim-determinism (accel launch --backend sim:
#          the processes on the simulated NCCL, libaccel-nccl-sim.so; no Gloo needed)
set -uo pipefail
accel=$(readlink -f "$1") digits=$(readlink -f "$2") probe=$(readlink -f "$3") section=$4
work=$(mktemp -d /tmp/accel-processes-XXXXXX)
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "check_processes ($section): $*" >&2; exit 1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
accuracy() { sed -n 's/^\(\[0\] \)\{0,1\}accuracy: //p' "$1" | tail -1; }
export ACCEL_TIMEOUT=${ACCEL_TIMEOUT:-30}
if [[ $section != sim-* ]] && ! "$accel" env | grep -q '^- communication backends: .*gloo'; then
  echo "SKIP: this build has no gloo backend (c10d's Gloo headers were not found at configure time)"
  exit 77
fi

case $section in
digits)
  # The README's lines: 2 and 4 real processes (Gloo), then the simulated 4 ranks.
  "$accel" launch -n 2 "$digits" > "$work/two.txt" 2>&1 || { cat "$work/two.txt"; fail "2 processes failed"; }
  "$accel" launch -n 4 "$digits" > "$work/four.txt" 2>&1 || { cat "$work/four.txt"; fail "4 processes failed"; }
  "$digits" > "$work/sim.txt" 2>&1 || { cat "$work/sim.txt"; fail "the simulated run failed"; }
  grep -q '^\[0\] training on 4 processes, strategy zero2, precision auto' "$work/four.txt" || fail "no banner"
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

sim-digits)
  # The README's line: 8 processes on 8 simulated H100s, against 8 ranks of the in-process
  # simulator: the same weights byte for byte, the same peak memory and predicted time.
  "$accel" launch --backend sim -n 8 --sim-gpu-mem 16GiB --sim-topology 8xH100 --sim-trace "$work/run.json" \
    --sim-report "$work/report.json" "$digits" --epochs 3 --save "$work/p.safetensors" > "$work/p.txt" 2>&1 ||
    { cat "$work/p.txt"; fail "8 simulated processes failed"; }
  OMP_NUM_THREADS=1 "$digits" --ranks 8 --epochs 3 --memory 16GiB --save "$work/s.safetensors" > "$work/s.txt" 2>&1 ||
    { cat "$work/s.txt"; fail "8 in-process ranks failed"; }
  grep -q '^\[0\] training on 8 processes, strategy zero2, precision auto' "$work/p.txt" || { cat "$work/p.txt"; fail "no banner"; }
  cmp "$work/p.safetensors" "$work/s.safetensors" || fail "8 simulated processes and 8 in-process ranks end with different weights"
  grep -q 'accel launch: simulated 8xH100: 8 processes, 16.00 GiB of memory per GPU' "$work/p.txt" || { cat "$work/p.txt"; fail "no report"; }
  [ "$(grep -cE '^ +[0-7] .* ok$' "$work/p.txt")" = 8 ] || { cat "$work/p.txt"; fail "the report does not have 8 ok rows"; }
  per_step=$(sed -n 's/.*, \([0-9.]*\) us per optimizer step.*/\1/p' "$work/s.txt")
  peak=$(sed -n 's/^rank 7 peak device memory \([0-9.]*\) KiB/\1/p' "$work/s.txt")
  python3 - "$work/report.json" "$work/run.json" "$per_step" "$peak" <<'PYEOF' || fail "report or trace"
import json, sys
rep = json.load(open(sys.argv[1])); trace = json.load(open(sys.argv[2]))
per_step_us, peak_kib = float(sys.argv[3]), float(sys.argv[4])
assert rep["topology"] == "8xH100" and rep["world_size"] == 8 and rep["gpu_mem_bytes"] == 16 << 30, rep
assert [r["status"] for r in rep["ranks"]] == ["ok"] * 8, rep["ranks"]
got = rep["predicted_seconds_per_step"] * 1e6
assert abs(got - per_step_us) <= 0.05 + 1e-3 * per_step_us, (got, per_step_us)
assert abs(rep["ranks"][7]["peak_bytes"] / 1024 - peak_kib) <= 0.05, (rep["ranks"][7]["peak_bytes"], peak_kib)
pids = sorted({e["pid"] for e in trace["traceEvents"]})
assert pids == list(range(8)), pids
names = {e["name"] for e in trace["traceEvents"] if e["ph"] == "X"}
assert {"all_gather", "reduce_scatter"} <= names, names
print(f"sim-digits: weights identical; predicted {got:.1f} us/step (in-process {per_step_us}); peak {peak_kib} KiB; trace of 8 ranks")
PYEOF
  # every preset: the processes predict what the in-process simulator predicts
  for topo in 8xA100 8xPCIe 8xH200 2x8xH100-IB; do
    "$accel" launch --backend sim -n 2 --sim-topology "$topo" --sim-report "$work/r-$topo.json" "$digits" --epochs 1 \
      > "$work/p-$topo.txt" 2>&1 || { cat "$work/p-$topo.txt"; fail "$topo failed"; }
    OMP_NUM_THREADS=1 "$digits" --ranks 2 --epochs 1 --topology "$topo" > "$work/s-$topo.txt" 2>&1 || { cat "$work/s-$topo.txt"; fail "$topo in-process"; }
    want=$(sed -n 's/.*, \([0-9.]*\) us per optimizer step.*/\1/p' "$work/s-$topo.txt")
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); g=r['predicted_seconds_per_step']*1e6; w=float(sys.argv[2]); assert r['topology']==sys.argv[3] and abs(g-w)<=0.05+1e-3*w, (g,w); print(sys.argv[3], round(g,1), 'us/step')" \
      "$work/r-$topo.json" "$want" "$topo" || fail "$topo: the prediction differs from the in-process simulator's"
  done
  ;;

sim-failures)
  # A mismatched collective, a stalled (missing) rank, an over-budget allocation, a killed
  # process, the coordinator's process killed: every process fails with a clear message
  # within the timeout, and the launcher's report names the rank.
  run_by_hand() {  # N TAG PROGRAM ARGS...: N processes with torchrun's variables, ACCEL_BACKEND=sim
    local n=$1 tag=$2 port r
    shift 2
    port=$(free_port)
    pids=()
    for ((r = 0; r < n; r++)); do
      RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port ACCEL_BACKEND=sim \
        OMP_NUM_THREADS=1 "$@" > "$work/$tag$r.txt" 2>&1 &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" && fail "$tag: a process succeeded"; done
    cat "$work/$tag"*.txt
  }
  start=$SECONDS
  run_by_hand 2 mm "$probe" --mismatch
  for r in 0 1; do
    grep -q "ACCEL_ERR_INVALID_STATE: accel_reduce: .*mismatched collectives: rank 0 called all_reduce #1(count=1, float64, sum); rank 1 called all_reduce #1(count=2, float64, sum)" \
      "$work/mm$r.txt" || fail "rank $r does not name the mismatched calls"
  done
  ACCEL_TIMEOUT=3 run_by_hand 3 st "$probe" --stall 8
  grep -q "accel_reduce failed after [3-5]\.[0-9] s: ACCEL_ERR_TIMEOUT: .*did not complete within 3000 ms; the simulated ranks: .*rank 1: no operation yet" \
    "$work"/st*.txt || fail "no timeout naming the stalled rank 1"
  for r in 0 2; do grep -q "accel_reduce failed after [0-5]\.[0-9] s" "$work/st$r.txt" || fail "rank $r did not fail within the timeout"; done
  ACCEL_SIM_GPU_MEM=600KiB run_by_hand 2 oom "$digits" --epochs 1
  for r in 0 1; do
    grep -q "ACCEL_ERR_OUT_OF_MEMORY: .*CUDA out of memory\. Tried to allocate .*\. GPU $r has a total capacity of 600\.00 KiB of which .*(simulated: rank $r, peak" \
      "$work/oom$r.txt" || fail "rank $r: no CUDA-shaped out-of-memory error"
  done
  ACCEL_SIM_FAULTS=kill:0@step:3 run_by_hand 3 co "$digits" --epochs 1
  for r in 1 2; do
    grep -q "ACCEL_ERR_COMMUNICATION: .*rank 0 died (its process was killed or crashed)" "$work/co$r.txt" ||
      fail "rank $r does not name rank 0 (the coordinator's process)"
  done
  [ $((SECONDS - start)) -le 60 ] || fail "the failures took $((SECONDS - start)) s"
  # through the launcher: the report names the killed rank and the over-budget ranks
  if "$accel" launch --backend sim -n 4 --sim-faults kill:2@step:5 "$digits" --epochs 1 > "$work/k.txt" 2>&1; then
    cat "$work/k.txt"; fail "a killed process did not fail the launch"
  fi
  cat "$work/k.txt"
  grep -qE '^ +2 .*killed \(SIGKILL\): killed by fault injection \(kill:2@step:5\) at optimizer step 5' "$work/k.txt" ||
    fail "the report does not name rank 2's fault"
  if "$accel" launch --backend sim -n 2 --sim-gpu-mem 600KiB "$digits" --epochs 1 > "$work/o.txt" 2>&1; then
    fail "an over-budget run succeeded"
  fi
  cat "$work/o.txt"
  grep -qE '^ +[01] .*CUDA out of memory\. Tried to allocate' "$work/o.txt" || fail "the report does not name the out-of-memory rank"
  # bad input: more processes than the topology has GPUs is a usage error before anything starts
  "$accel" launch --backend sim -n 9 "$digits" > "$work/u.txt" 2>&1
  [ $? = 2 ] || { cat "$work/u.txt"; fail "9 processes on 8xH100 accepted"; }
  grep -q "8xH100" "$work/u.txt" || { cat "$work/u.txt"; fail "no topology named"; }
  ;;

sim-restart)
  # A fault kills process 1 in epoch 4; with --max-restarts 1 the group restarts (faults fire
  # on the first attempt only), resumes from the epoch-3 checkpoint and ends with the
  # uninterrupted run's weights, byte for byte.
  "$accel" launch --backend sim -n 2 "$digits" --epochs 6 --project "$work/a" --save "$work/a.safetensors" > "$work/a.txt" 2>&1 ||
    { cat "$work/a.txt"; fail "the uninterrupted run failed"; }
  steps=$(sed -n 's/^\[0\] epoch  1\/6 .*steps \([0-9]*\) .*/\1/p' "$work/a.txt")
  [ -n "$steps" ] || { cat "$work/a.txt"; fail "no step count in epoch 1"; }
  at=$((steps * 3 + steps / 2))
  "$accel" launch --backend sim -n 2 --max-restarts 1 --sim-faults "kill:1@step:$at" "$digits" --epochs 6 --project "$work/c" \
    --save "$work/c.safetensors" > "$work/c.txt" 2>&1 || { cat "$work/c.txt"; fail "the restarted run failed"; }
  grep -q 'restarting the group (attempt 1 of 1)' "$work/c.txt" || { cat "$work/c.txt"; fail "no restart"; }
  grep -q '^\[0\] resumed from .*checkpoint_.* at epoch 4' "$work/c.txt" || { cat "$work/c.txt"; fail "no resume at epoch 4"; }
  cmp "$work/a.safetensors" "$work/c.safetensors" || fail "the restarted run's weights differ from the uninterrupted run's"
  echo "sim-restart: kill:1@step:$at, restarted, resumed at epoch 4: weights bit-identical to the uninterrupted run"
  ;;

sim-determinism)
  # The same run 5 times: the same weights, report, trace and printed report, byte for byte
  # (each run in a directory of its own under the same file names; the wall time and the
  # launcher's temporary directory are the only lines left out). Standard output and error
  # are compared apart: how the two pipes' lines interleave is the kernel's scheduling.
  for i in 1 2 3 4 5; do
    mkdir "$work/$i"
    (cd "$work/$i" && "$accel" launch --backend sim -n 4 --sim-trace t.json --sim-report r.json "$digits" --epochs 2 \
      --save w.safetensors > o.txt 2> e.txt) || { cat "$work/$i/o.txt" "$work/$i/e.txt"; fail "run $i failed"; }
    grep -v -e 'exited 0 in' -e 'the processes write to' "$work/$i/o.txt" > "$work/$i/l.txt" || true
    grep -v -e 'exited 0 in' -e 'the processes write to' "$work/$i/e.txt" > "$work/$i/le.txt" || true
  done
  for i in 2 3 4 5; do
    for f in t.json r.json w.safetensors l.txt le.txt; do
      cmp "$work/1/$f" "$work/$i/$f" || { diff "$work/1/$f" "$work/$i/$f" | head -20; fail "run $i: $f differs from run 1's"; }
    done
  done
  echo "sim-determinism: 5 runs, identical weights, report, trace ($(wc -c < "$work/1/t.json") bytes) and output"
  ;;

*) fail "unknown section" ;;
esac
echo "check_processes ($section): ok"
