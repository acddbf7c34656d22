#!/usr/bin/env bash
# Every figure of docs/performance.md, from scratch:  bash benchmarks/publish.sh [members]
# Starts its own redis-server on a free loopback port for the Redis run and stops it afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1000000}
out=benchmarks/results
mkdir -p "$out"
tmp=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" --daemonize no >"$tmp/redis.log" &
redis_pid=$!
trap 'kill $redis_pid 2>/dev/null; rm -rf "$tmp"' EXIT
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.1; done

mdss bench --store memory:// --members "$n" --json "$out/memory.json" | tee "$out/memory.txt"
mdss bench --store "sqlite:///$tmp/bench.db" --members "$n" --json "$out/sqlite.json" | tee "$out/sqlite.txt"
mdss bench --store "redis://127.0.0.1:$port/0" --members "$n" --json "$out/redis.json" | tee "$out/redis.txt"
python benchmarks/growth.py --json "$out/growth.json" --plot docs/performance-growth.png | tee "$out/growth.txt"
python benchmarks/writers.py --json "$out/writers.json" | tee "$out/writers.txt"
python benchmarks/update_batch.py --store "redis://127.0.0.1:$port/0" --json "$out/update_batch.json" | tee "$out/update_batch.txt"
python benchmarks/update_gc.py | tee "$out/update_gc.txt"
python benchmarks/port_throughput.py --json "$out/port.json" | tee "$out/port.txt"
