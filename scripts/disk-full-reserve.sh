#!/usr/bin/env bash
# Fills a 96 MiB tmpfs through one node with `diskSpaceReserveBytes=RESERVE` (bytes) and reports
# whether RocksDB ever saw the disk full (docs/design-storage.md, "A full disk"): four writers of
# 32 KiB documents (half j:true) insert until each is refused 20 times in a row. Needs root (mount).
# Usage: scripts/disk-full-reserve.sh RESERVE_BYTES [MYRIAD_BIN]
set -uo pipefail
reserve=${1:?reserve in bytes}
binary=${2:-${MYRIAD_BIN:-target/debug/myriad}}
mountpoint=$(mktemp -d /tmp/myriad-disk-full-XXXX)
mount -t tmpfs -o size=96m tmpfs "$mountpoint" || { echo "cannot mount a tmpfs here"; rmdir "$mountpoint"; exit 2; }
mkdir "$mountpoint/db"
log=$(mktemp)
"$binary" --dbpath "$mountpoint/db" --port 0 --bind_ip 127.0.0.1 --setParameter "diskSpaceReserveBytes=$reserve" \
    --setParameter diskSpaceBallastBytes=0 >"$log" 2>&1 &
server=$!
for _ in $(seq 100); do grep -q "Waiting for connections" "$log" && break; sleep 0.1; done
port=$(grep "Waiting for connections" "$log" | grep -o '"port":[0-9]*' | cut -d: -f2)
python3 - "$port" <<'PYTHON'
import os, sys, threading, time
import pymongo
from bson import Binary
client = pymongo.MongoClient(f"mongodb://127.0.0.1:{sys.argv[1]}/?directConnection=true", serverSelectionTimeoutMS=5000)
lowest_free, refused, other = [1 << 62], [0], []
def writer(number):
    collection = client.fill.get_collection("data", write_concern=pymongo.WriteConcern(w=1, j=number % 2 == 0))
    payload, streak = Binary(os.urandom(32 << 10)), 0
    for index in range(4000):
        if streak == 20:
            return
        try:
            collection.insert_one({"payload": payload})
            streak = 0
        except pymongo.errors.OperationFailure as error:
            if error.code != 14031:
                other.append(str(error)[:200]); return
            refused[0] += 1; streak += 1; time.sleep(0.05)
        except Exception as error:
            other.append(repr(error)[:200]); return
        if index % 10 == 0:
            lowest_free[0] = min(lowest_free[0], client.admin.command("serverStatus")["myriad"]["diskSpace"]["availableBytes"])
threads = [threading.Thread(target=writer, args=(number,)) for number in range(4)]
[thread.start() for thread in threads]; [thread.join() for thread in threads]
print(f"documents {client.fill.data.estimated_document_count()}, refused {refused[0]}, lowest free sampled {lowest_free[0]}, other errors {other[:2]}")
PYTHON
if kill -0 "$server" 2>/dev/null; then echo "server alive"; kill "$server"; wait "$server"; else wait "$server"; echo "SERVER EXITED with status $?"; fi
echo "RocksDB I/O errors in its LOG: $(grep -c "No space left" "$mountpoint"/db/LOG 2>/dev/null)"
grep "No space left" "$mountpoint"/db/LOG 2>/dev/null | head -3 | cut -c1-300
umount "$mountpoint"; rmdir "$mountpoint"; rm -f "$log"
