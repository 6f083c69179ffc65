//! `hostInfo`: operating system, cores and memory, read from /proc where available.

use bson::{doc, DateTime, Document};

use crate::error::CommandResult;
use crate::{CommandRequest, ServerContext};

pub fn run(_context: &ServerContext, _request: &CommandRequest) -> CommandResult<Document> {
    let cores = std::thread::available_parallelism().map(|count| count.get() as i32).unwrap_or(1);
    let memory_size_mb = total_memory_mebibytes().unwrap_or(0);
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").map(|name| name.trim().to_string()).unwrap_or_default();
    Ok(doc! {
        "system": {
            "currentTime": DateTime::now(),
            "hostname": hostname,
            "cpuAddrSize": (usize::BITS as i32),
            "memSizeMB": memory_size_mb,
            "numCores": cores,
            "cpuArch": std::env::consts::ARCH,
            "numaEnabled": false,
        },
        "os": { "type": std::env::consts::OS, "name": std::env::consts::OS },
        "extra": {},
        "ok": 1.0,
    })
}

fn total_memory_mebibytes() -> Option<i64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|line| line.starts_with("MemTotal:"))?;
    let kibibytes: i64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kibibytes / 1024)
}
