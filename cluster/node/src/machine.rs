//! The node's size: what it reports as `status.capacity` and `status.allocatable`.
//!
//! ## What a kubelet reports
//!
//! When it registers its Node (`pkg/kubelet/kubelet_node_status.go`, `setters.MachineInfo`)
//! the kubelet reports the machine cAdvisor measured: `cpu` is the number of logical CPUs
//! (`NumCores`), `memory` the machine's total memory (`MemoryCapacity`, from `MemTotal` in
//! `/proc/meminfo`, written as a quantity of `Ki`), `pods` its `--max-pods` (110 by default),
//! `ephemeral-storage` the size of its root filesystem. `allocatable` is the capacity less what
//! `--kube-reserved`, `--system-reserved` and the hard eviction thresholds hold back.
//!
//! ## What the embedded node reports
//!
//! * the **process** node ([`process_capacity`]) runs its pods' commands on this machine, so
//!   it reports this machine: `cpu` is [`std::thread::available_parallelism`] (the CPUs this
//!   process may use, which honours an affinity mask or a cgroup quota, where cAdvisor counts
//!   every online CPU) and `memory` is `MemTotal` of `/proc/meminfo` in `Ki`. Where that
//!   cannot be read (not Linux, no `/proc`) or parsed, `memory` falls back to the simulated
//!   node's `16Gi` (and `cpu` to `1` when the parallelism is unknown), and the fallback is
//!   logged;
//! * the **simulated** node ([`simulated_capacity`]) runs nothing, so any size is as true as
//!   another: it reports a fixed typical worker, 8 CPUs and 16 GiB.
//!
//! Both report `pods: 110` (the kubelet's default `--max-pods`) and a fixed
//! `ephemeral-storage: 100Gi` (not measured), and `allocatable` equal to `capacity`: nothing is
//! reserved for the system and there are no eviction thresholds.

use serde_json::{Value, json};

/// `MemTotal` of the simulated node, and the process node's when `/proc/meminfo` cannot be read.
pub const FALLBACK_MEMORY: &str = "16Gi";

/// The simulated node's fixed size (see the module docs).
pub fn simulated_capacity() -> Value {
    capacity("8", FALLBACK_MEMORY)
}

/// This machine's size, as the process node reports it (see the module docs).
pub fn process_capacity() -> Value {
    let cpus = std::thread::available_parallelism().map_or_else(
        |e| {
            tracing::warn!(error = %e, "the number of CPUs is unknown; the node reports 1");
            1
        },
        std::num::NonZeroUsize::get,
    );
    let memory = match std::fs::read_to_string("/proc/meminfo") {
        Ok(text) => match mem_total_kib(&text) {
            Some(kib) => format!("{kib}Ki"),
            None => {
                tracing::warn!(
                    "/proc/meminfo has no readable MemTotal; the node reports {FALLBACK_MEMORY}"
                );
                FALLBACK_MEMORY.to_owned()
            }
        },
        Err(e) => {
            tracing::warn!(error = %e, "/proc/meminfo cannot be read; the node reports {FALLBACK_MEMORY}");
            FALLBACK_MEMORY.to_owned()
        }
    };
    capacity(&cpus.to_string(), &memory)
}

fn capacity(cpu: &str, memory: &str) -> Value {
    json!({"cpu": cpu, "memory": memory, "pods": "110", "ephemeral-storage": "100Gi"})
}

/// `MemTotal` of a `/proc/meminfo` text, in KiB (`MemTotal:       16318480 kB`); `None` when
/// the line is missing, its number does not parse, or its unit is not `kB`.
pub fn mem_total_kib(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find_map(|l| l.strip_prefix("MemTotal:"))?;
    let mut words = line.split_whitespace();
    let n = words.next()?.parse::<u64>().ok()?;
    match (words.next(), words.next()) {
        (Some("kB"), None) => Some(n),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_total_is_read_in_kib_and_anything_else_is_none() {
        let text = "MemTotal:       16318480 kB\nMemFree:         1234567 kB\n";
        assert_eq!(mem_total_kib(text), Some(16_318_480));
        assert_eq!(mem_total_kib("MemFree: 1 kB\nMemTotal: 42 kB"), Some(42));
        assert_eq!(mem_total_kib("MemFree: 1 kB\n"), None);
        assert_eq!(mem_total_kib("MemTotal: lots kB\n"), None);
        assert_eq!(mem_total_kib("MemTotal: 12 MB\n"), None);
        assert_eq!(mem_total_kib("MemTotal: 12\n"), None);
        assert_eq!(mem_total_kib(""), None);
    }

    #[test]
    fn the_process_node_reports_this_machines_cpus() {
        let cap = process_capacity();
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        assert_eq!(cap["cpu"], cpus.to_string());
        assert_eq!(cap["pods"], "110");
        let memory = cap["memory"].as_str().unwrap_or_default();
        assert!(
            memory.ends_with("Ki") || memory == FALLBACK_MEMORY,
            "{memory}"
        );
    }
}
