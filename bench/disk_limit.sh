#!/usr/bin/env bash
# The disk's own sequential limit, measured with fio: one sequential write (then fsync) and one
# sequential read of a SIZE file in DIRECTORY, O_DIRECT (no page cache), BLOCK-sized requests,
# QD requests in flight, one job, io_uring (libaio where io_uring cannot start). It is the
# ceiling that docs/benchmarks.md sets zero's own disk throughput (checkpoints) against.
#
#   bench/disk_limit.sh DIRECTORY [BLOCK=1M] [SIZE=2G] [QD=8]
#
# Prints (GB = 1e9 bytes, from fio's bw_bytes):
#   fio_version=fio-3.33 engine=io_uring size=2G
#   disk_limit write_GBps=1.234 block=1M qd=8 dir=/x
#   disk_limit read_GBps=2.345 block=1M qd=8 dir=/x
# The test file is removed afterwards. DIRECTORY must be on a file system that takes O_DIRECT;
# tmpfs takes it since Linux 6.6, but there it measures memory, not a disk.
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 4 ]; then
  echo "usage: $0 DIRECTORY [BLOCK=1M] [SIZE=2G] [QD=8]" >&2
  exit 1
fi
dir="$1"
bs="${2:-1M}"
size="${3:-2G}"
qd="${4:-8}"
[ -d "$dir" ] || { echo "disk_limit: $dir is not a directory" >&2; exit 1; }

if ! command -v fio >/dev/null; then
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd=sudo
  $sudo_cmd apt-get install -y -qq fio
fi

file="$dir/disk_limit.$$.fio"
json="$(mktemp)"
trap 'rm -f "$file" "$json"' EXIT

# run_fio ENGINE RW: one fio job, its JSON report in $json.
run_fio() {
  fio --name="disk_limit_$2" --filename="$file" --rw="$2" --bs="$bs" --size="$size" \
    --ioengine="$1" --direct=1 --iodepth="$qd" --numjobs=1 --end_fsync="$([ "$2" = write ] && echo 1 || echo 0)" \
    --output-format=json --output="$json"
}

# bw_gbps RW: that direction's bandwidth from the JSON report, in GB/s.
bw_gbps() {
  python3 -c 'import json, sys; print("%.3f" % (json.load(open(sys.argv[1]))["jobs"][0][sys.argv[2]]["bw_bytes"] / 1e9))' "$json" "$1"
}

engine=io_uring
if ! err="$(run_fio "$engine" write 2>&1)"; then
  echo "disk_limit: io_uring failed, falling back to libaio: $err" >&2
  engine=libaio
  rm -f "$file"
  run_fio "$engine" write
fi
write_gbps="$(bw_gbps write)"
run_fio "$engine" read
read_gbps="$(bw_gbps read)"

echo "fio_version=$(fio --version) engine=$engine size=$size"
echo "disk_limit write_GBps=$write_gbps block=$bs qd=$qd dir=$dir"
echo "disk_limit read_GBps=$read_gbps block=$bs qd=$qd dir=$dir"
