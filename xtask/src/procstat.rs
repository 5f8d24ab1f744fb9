//! What Linux's /proc says of one process: its CPU time and memory. The
//! benchmark's load generator and `lab perf` both read the server's cost
//! from here, so both count the same thing.

use std::process::Command;

/// The process's CPU time so far (user + system, all its threads, exited
/// ones included) from /proc/PID/stat, in clock ticks.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold
    // spaces: state is the first, utime the 12th, stime the 13th.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// Clock ticks per second for /proc times (`getconf CLK_TCK`; 100 on Linux).
pub fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// The process's CPU seconds so far.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    cpu_ticks(pid).map(|t| t as f64 / clock_ticks())
}

/// A memory line of /proc/PID/status (`VmRSS:`, `VmHWM:`) in KiB; 0 when
/// the process is gone.
pub fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}
